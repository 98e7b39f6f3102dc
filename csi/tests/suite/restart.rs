//! The plugin's own restart breaks no mount: eight readers read a published
//! volume for 30 s while the plugin's whole process group is SIGKILLed (what a
//! container restart does to its processes) and started again, and while a
//! mount's keeper is killed (the plugin, holding a copy of the connection, starts
//! another on it). The restarted plugin finds what it published, and unpublishes
//! it. `SHOAL_HANDOVER_SECONDS` (default 30) sets how long the readers read.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;

const READERS: usize = 8;
const HUNG: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_mounts_go_on_serving_through_restarts_of_the_plugin() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(dir.path(), "n", &node_toml(&o, "", ""));
    let bodies: Vec<bytes::Bytes> = (0..4)
        .map(|i| {
            let b = data(4 << 20, 90 + i);
            o.put(BUCKET, &format!("r/f{i}"), b.clone());
            b
        })
        .collect();
    let cfg = dir.path().join("mount.toml");
    std::fs::write(
        &cfg,
        zoned_mount_toml(&o, &[(&node, ZONE)], "[cache]\nram_size = \"8MiB\"\n"),
    )
    .unwrap();
    let mut plugin = Plugin::start(dir.path(), &cfg, &[], &[]);
    let (_, mut client) = plugin.clients().await;
    let target = pod_volume_dir(dir.path(), "pod-r", "pv-r");
    client
        .node_publish_volume(publish(
            "vol-r",
            &target,
            &[("bucket", BUCKET), ("prefix", "r")],
            &[],
        ))
        .await
        .unwrap();
    let secs = Duration::from_secs(
        std::env::var("SHOAL_HANDOVER_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failed, wrong, slowest) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    // Every call over a second, by when it began (ms from the start) and how
    // long it took: which event a slow call waited on.
    let slow = Arc::new(std::sync::Mutex::new(Vec::<(u128, u128)>::new()));
    let t0 = Instant::now();
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (t, bodies, stop) = (target.clone(), bodies.clone(), stop.clone());
            let (calls, failed, wrong, slowest, slow) = (
                calls.clone(),
                failed.clone(),
                wrong.clone(),
                slowest.clone(),
                slow.clone(),
            );
            std::thread::spawn(move || {
                use std::io::{Read, Seek, SeekFrom};
                let i = r % bodies.len();
                let mut f = std::fs::File::open(t.join(format!("f{i}"))).unwrap();
                let mut buf = vec![0u8; 128 << 10];
                let mut at = 0usize;
                let mut step = 0;
                while !stop.load(Relaxed) {
                    let began = Instant::now();
                    let r = f
                        .seek(SeekFrom::Start(at as u64))
                        .and_then(|_| f.read(&mut buf));
                    // Also a fresh open now and then: new inodes and handles.
                    let r2 = (step % 16 == 0)
                        .then(|| std::fs::read(t.join(format!("f{}", (i + 1) % bodies.len()))));
                    let took = began.elapsed();
                    slowest.fetch_max(took.as_micros() as u64, Relaxed);
                    if took > Duration::from_secs(1) {
                        let from = began.duration_since(t0).as_millis();
                        slow.lock().unwrap().push((from, took.as_millis()));
                    }
                    calls.fetch_add(1 + r2.is_some() as u64, Relaxed);
                    match r {
                        Ok(n) => {
                            if buf[..n] != bodies[i][at..at + n] {
                                wrong.fetch_add(1, Relaxed);
                            }
                            at = if n == 0 || at + n >= bodies[i].len() {
                                0
                            } else {
                                at + n
                            };
                        }
                        Err(e) => {
                            eprintln!("read failed: {e}");
                            failed.fetch_add(1, Relaxed);
                        }
                    }
                    match r2 {
                        Some(Ok(b)) if b != bodies[(i + 1) % bodies.len()] => {
                            wrong.fetch_add(1, Relaxed);
                        }
                        Some(Err(e)) => {
                            eprintln!("read of another file failed: {e}");
                            failed.fetch_add(1, Relaxed);
                        }
                        _ => {}
                    }
                    step += 1;
                }
            })
        })
        .collect();
    let at = |f: u32| secs * f / 4;
    // Each step comes once its time has come and the readers have read on since
    // the last one: a mount that stopped answering fails here, within HUNG.
    let step = |what: &'static str, at: Duration| {
        let (calls, before) = (calls.clone(), calls.load(Relaxed));
        async move {
            wait_for(what, at.saturating_sub(t0.elapsed()) + HUNG, || {
                let ok = t0.elapsed() >= at && calls.load(Relaxed) > before;
                async move { ok }
            })
            .await
        }
    };
    let mut events = Vec::new();
    // A quarter in: the plugin killed with its process group, and started again.
    step("the readers read a quarter in", at(1)).await;
    plugin.kill_and_restart();
    events.push(("plugin restarted", t0.elapsed().as_millis()));
    // Halfway: the mount's keeper killed; the plugin keeps it again.
    step("the readers read on to halfway", at(2)).await;
    let control = std::fs::read_dir(plugin.state.join("volumes"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("control.sock"))
        .next()
        .unwrap();
    let status: serde_json::Value =
        serde_json::from_str(&shoal_mount::keeper::ask(&control, "status").unwrap()).unwrap();
    let keeper = status["keeper"].as_u64().unwrap() as i32;
    // SAFETY: a signal to a process this test's plugin started.
    unsafe { libc::kill(keeper, libc::SIGKILL) };
    events.push(("keeper killed", t0.elapsed().as_millis()));
    // Three quarters in: the plugin restarted once more.
    step("the readers read on to three quarters", at(3)).await;
    plugin.kill_and_restart();
    events.push(("plugin restarted", t0.elapsed().as_millis()));
    step("the readers read on to the end", secs).await;
    stop.store(true, Relaxed);
    wait_for(
        "every reader back from its call (a hung call)",
        HUNG,
        || {
            let done = readers.iter().all(|r| r.is_finished());
            async move { done }
        },
    )
    .await;
    for r in readers {
        r.join().unwrap();
    }
    let after: serde_json::Value =
        serde_json::from_str(&shoal_mount::keeper::ask(&control, "status").unwrap()).unwrap();
    println!(
        "{} calls by {READERS} readers over {secs:?} (events at ms: {events:?}): {} failed, {} wrong, slowest {:.3} s; keeper {} then {}; calls over 1 s (began at ms, took ms): {:?}",
        calls.load(Relaxed),
        failed.load(Relaxed),
        wrong.load(Relaxed),
        slowest.load(Relaxed) as f64 / 1e6,
        keeper,
        after["keeper"],
        slow.lock().unwrap(),
    );
    if Duration::from_micros(slowest.load(Relaxed)) >= HUNG {
        println!("the plugin's log:\n{}", plugin.log_text());
        let mount_log = control.with_file_name("mount.log");
        println!(
            "the mount's log:\n{}",
            std::fs::read_to_string(mount_log).unwrap_or_default()
        );
    }
    assert_eq!(wrong.load(Relaxed), 0, "every byte right");
    assert_eq!(failed.load(Relaxed), 0, "no call failed");
    assert!(
        Duration::from_micros(slowest.load(Relaxed)) < HUNG,
        "no call hung"
    );
    assert_ne!(
        after["keeper"].as_u64(),
        Some(keeper as u64),
        "a new keeper"
    );
    assert!(calls.load(Relaxed) > 1000);
    // The restarted plugin knows the volume: it unpublishes it.
    let (_, mut client) = plugin.clients().await;
    client
        .node_unpublish_volume(unpublish("vol-r", &target))
        .await
        .unwrap();
    assert!(!is_mounted(&target) && !target.exists());
}
