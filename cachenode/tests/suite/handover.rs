//! Restarts and upgrades with no gap: a real `shoal-node` reloaded (SIGHUP) and
//! upgraded (`--upgrade`) under concurrent ranged readers hands its listening
//! socket and disk tier to the new process; one that cannot read the disk tier
//! refuses and the old one goes on.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;

const MIB: usize = 1 << 20;
const SIZE: usize = 24 * MIB;
const KEY: &str = "handed";

fn write_config(dir: &Path, origin: &shoal_testorigin::Origin) -> PathBuf {
    let toml = without_auth(&node_toml(
        origin,
        "shutdown_timeout = \"10s\"",
        &format!(
            "[cache]\nram_size = \"32MiB\"\ndisk_size = \"256MiB\"\ndata_dir = \"{}\"",
            dir.join("data").display()
        ),
    ));
    let path = dir.join("node.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
    bytes: AtomicU64,
}

/// `n` readers issuing random ranged GETs of KEY at `addr`, each answer's bytes
/// checked, until `stop`.
fn readers(
    n: usize,
    addr: String,
    body: bytes::Bytes,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|i| {
            let (addr, body, stop, tally) =
                (addr.clone(), body.clone(), stop.clone(), tally.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (i as u64 + 1);
                while !stop.load(Relaxed) {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let a = (seed % SIZE as u64) as usize;
                    let len = 1 + ((seed >> 32) % (3 * MIB as u64)) as usize;
                    let b = (a + len).min(SIZE);
                    let got = http
                        .get(format!("http://{addr}/{BUCKET}/{KEY}"))
                        .header("range", format!("bytes={a}-{}", b - 1))
                        .send()
                        .await;
                    let resp = match got {
                        Ok(r) => r,
                        Err(e) => {
                            if refused(&e) {
                                tally.refused.fetch_add(1, Relaxed);
                            } else {
                                eprintln!("reader {i}: {e:?}");
                                tally.failed.fetch_add(1, Relaxed);
                            }
                            continue;
                        }
                    };
                    let status = resp.status();
                    match resp.bytes().await {
                        Ok(bytes) if status == 206 && bytes == body.slice(a..b) => {
                            tally.ok.fetch_add(1, Relaxed);
                            tally.bytes.fetch_add(bytes.len() as u64, Relaxed);
                        }
                        Ok(bytes) => {
                            eprintln!(
                                "reader {i}: {status}, {} bytes of {a}..{b} not the object's",
                                bytes.len()
                            );
                            tally.failed.fetch_add(1, Relaxed);
                        }
                        Err(e) => {
                            eprintln!("reader {i}: body: {e:?}");
                            tally.failed.fetch_add(1, Relaxed);
                        }
                    }
                }
            })
        })
        .collect()
}

fn refused(e: &reqwest::Error) -> bool {
    let mut src: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        src = s.source();
    }
    false
}

pub fn alive(pid: u32) -> bool {
    // A zombie has no cmdline left to read; a live process has one.
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty())
}

/// Kills a process this test did not start itself (the node a SIGHUP started).
pub struct Pid(pub u32);
impl Drop for Pid {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

async fn until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Readers' calls past `n`: they read on after a change.
async fn reads_past(tally: &Tally, n: u64) {
    until("readers read on", Duration::from_secs(30), || {
        tally.ok.load(Relaxed) + tally.failed.load(Relaxed) + tally.refused.load(Relaxed) >= n + 20
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reload_and_upgrade_under_readers_refuse_nothing_and_fetch_no_block_twice() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &origin);
    let body = data(SIZE, 38);
    origin.put(BUCKET, KEY, body.clone());
    let mut old = NodeProcess::spawn(&cfg);
    let addr = old.addr.clone();

    // Half the object is fetched before the reload, the rest by the readers
    // across both hand-overs.
    let http = reqwest::Client::new();
    let warm = http
        .get(format!("http://{addr}/{BUCKET}/{KEY}"))
        .header("range", format!("bytes=0-{}", SIZE / 2 - 1))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(warm == body.slice(..SIZE / 2));
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let tasks = readers(4, addr.clone(), body.clone(), stop.clone(), tally.clone());
    reads_past(&tally, 0).await;

    // systemctl reload: SIGHUP.
    let before = tally.ok.load(Relaxed);
    signal(old.pid(), "-HUP");
    until(
        "the old node exits after SIGHUP",
        Duration::from_secs(60),
        || old.child.try_wait().unwrap().is_some(),
    )
    .await;
    let status = old.child.try_wait().unwrap().unwrap();
    assert!(status.success(), "old node after SIGHUP: {status}");
    let line = old.wait_log_lines("handed over to pid", 1);
    assert_eq!(line.len(), 1, "{line:?}");
    let reloaded: u32 = line[0]
        .split("handed over to pid ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}", line[0]));
    let _reloaded_guard = Pid(reloaded);
    assert!(alive(reloaded), "the reloaded node runs");
    reads_past(&tally, before).await;

    // shoal-node --upgrade, naming the running node by its config's data_dir.
    let before = tally.ok.load(Relaxed);
    let upgraded = NodeProcess::spawn_under(&["sh", "-c", "exec \"$0\" \"$@\" --upgrade"], &cfg);
    assert_eq!(upgraded.addr, addr, "the same listening socket");
    until(
        "the reloaded node exits after --upgrade",
        Duration::from_secs(60),
        || !alive(reloaded),
    )
    .await;
    reads_past(&tally, before).await;
    stop.store(true, Relaxed);
    for t in tasks {
        t.await.unwrap();
    }

    // Every block once more, from the node that runs now.
    let all = http
        .get(format!("http://{addr}/{BUCKET}/{KEY}"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(all == body);
    let gets = origin.stats.snapshot().gets_of(BUCKET, KEY);
    let (ok, failed, refused) = (
        tally.ok.load(Relaxed),
        tally.failed.load(Relaxed),
        tally.refused.load(Relaxed),
    );
    eprintln!(
        "readers: {ok} ranged GETs ({} MiB) checked, {failed} failed, {refused} refused; origin GETs {gets} for {} blocks",
        tally.bytes.load(Relaxed) >> 20,
        SIZE / MIB
    );
    assert_eq!((failed, refused), (0, 0), "no reader sees the hand-overs");
    assert!(ok > 100, "readers read throughout: {ok}");
    assert_eq!(
        gets,
        (SIZE / MIB) as u64,
        "each block fetched from the origin once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_that_cannot_read_the_disk_tier_refuses_and_the_old_node_goes_on() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &origin);
    let body = data(4 * MIB, 39);
    origin.put(BUCKET, KEY, body.clone());
    let mut old = NodeProcess::spawn(&cfg);
    let url = format!("http://{}/{BUCKET}/{KEY}", old.addr);
    let http = reqwest::Client::new();
    assert!(http.get(&url).send().await.unwrap().bytes().await.unwrap() == body);
    let blocks = dir.path().join("data/blocks");
    until("a block on disk", Duration::from_secs(10), || {
        std::fs::read_dir(&blocks).is_ok_and(|mut d| d.next().is_some())
    })
    .await;
    // A tier written by another version: a block file of format 99.
    let sub = std::fs::read_dir(&blocks)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let file = std::fs::read_dir(&sub)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut raw = std::fs::read(&file).unwrap();
    raw[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::create_dir_all(blocks.join("zz")).unwrap();
    std::fs::write(blocks.join("zz/other.blk"), &raw).unwrap();

    let out = std::process::Command::new(bin("shoal-node"))
        .arg("--config")
        .arg(&cfg)
        .arg("--upgrade")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("refusing to take over") && err.contains("version 99"),
        "{err}"
    );

    // SIGHUP: the new process refuses the same way; the old one serves on.
    signal(old.pid(), "-HUP");
    let mut seen = Vec::new();
    until(
        "the old node logs the refusal",
        Duration::from_secs(30),
        || {
            seen = old.log_lines("refused to take over");
            seen.len() >= 2
        },
    )
    .await;
    assert!(old.child.try_wait().unwrap().is_none(), "the old node runs");
    for _ in 0..3 {
        assert!(http.get(&url).send().await.unwrap().bytes().await.unwrap() == body);
    }
    assert_eq!(
        origin.stats.snapshot().gets_of(BUCKET, KEY),
        4,
        "served from its tiers"
    );
    assert!(
        blocks.join("zz/other.blk").exists(),
        "nothing of the tier was dropped"
    );
}
