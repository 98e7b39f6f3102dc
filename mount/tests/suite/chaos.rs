//! Chaos: a real mount over 4 real nodes and the real origin, readers checking every
//! byte, while nodes are killed and restarted, paused and resumed, cut off the
//! network (each node lives in its own network namespace behind a veth pair; a cut
//! takes its end of the link down, so packets vanish instead of being refused), the
//! origin throttles, cuts bodies and stalls, and objects are rewritten. Prints the figures;
//! asserts no wrong byte, no failed read that the origin or a rewrite does not
//! explain, and a bounded worst wait.
//!
//! CI runs it for `SHOAL_CHAOS_SECONDS` (default 20) with 3 readers; run longer by
//! hand: `SHOAL_CHAOS_SECONDS=600 cargo test -p shoal-mount --test chaos -- --nocapture`.
//! `SHOAL_CHAOS_REWRITES=0` leaves object rewrites out of the mix.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use bytes::Bytes;
use shoal_testorigin::FaultSettings;

const MIB: usize = 1 << 20;
const FILES: usize = 5;

#[derive(Default)]
struct Figures {
    reads: AtomicU64,
    failed: AtomicU64,
    /// Failed reads as (file, start, end, error), judged once the run is over and
    /// every fault and rewrite is on record.
    failures: Mutex<Vec<(usize, Instant, Instant, String)>>,
    wrong: AtomicU64,
    waits_us: Mutex<Vec<u64>>,
    kills: AtomicU64,
    pauses: AtomicU64,
    cuts: AtomicU64,
    origin_faults: AtomicU64,
    rewrites: AtomicU64,
}

/// Times at which something outside shoal could fail a read: origin faults and
/// object rewrites.
#[derive(Default)]
struct Excuses {
    origin: Vec<(Instant, Instant)>,
    rewrites: HashMap<usize, Vec<Instant>>,
}

impl Excuses {
    fn covers(&self, file: usize, start: Instant, end: Instant) -> bool {
        let grace = Duration::from_secs(4);
        self.origin
            .iter()
            .any(|(a, b)| *a <= end && start <= *b + grace)
            || self
                .rewrites
                .get(&file)
                .is_some_and(|ts| ts.iter().any(|t| *t <= end && start <= *t + grace))
    }
}

fn free_port() -> u16 {
    // Only the mount's metrics port: nodes listen on their own addresses.
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn ip(args: &str) -> bool {
    std::process::Command::new("ip")
        .args(args.split_whitespace())
        .status()
        .is_ok_and(|s| s.success())
}

/// A node's host: a network namespace joined to this one by a veth pair.
struct Host {
    ns: String,
    /// The namespace's end of the pair; down = the host is cut off.
    peer: String,
    /// This side's address, where the node finds the origin.
    near: String,
    /// The node's address.
    addr: String,
}

impl Host {
    fn create(i: usize) -> Host {
        let pid = std::process::id();
        let net = 200 + pid % 50;
        let ns = format!("shoalc-{pid}-{i}");
        let (near_if, peer) = (
            format!("shc{}h{i}", pid % 100_000),
            format!("shc{}n{i}", pid % 100_000),
        );
        let (near, far) = (format!("10.{net}.{i}.1"), format!("10.{net}.{i}.2"));
        let ok = ip(&format!("netns add {ns}"))
            && ip(&format!("link add {near_if} type veth peer name {peer}"))
            && ip(&format!("link set {peer} netns {ns}"))
            && ip(&format!("addr add {near}/24 dev {near_if}"))
            && ip(&format!("link set {near_if} up"))
            && ip(&format!("-n {ns} addr add {far}/24 dev {peer}"))
            && ip(&format!("-n {ns} link set {peer} up"))
            && ip(&format!("-n {ns} link set lo up"));
        assert!(
            ok,
            "cannot build network namespace {ns} (the chaos test runs as root, with iproute2)"
        );
        Host {
            ns,
            peer,
            near,
            addr: format!("{far}:9000"),
        }
    }

    fn link(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        assert!(ip(&format!(
            "-n {} link set {} {state}",
            self.ns, self.peer
        )));
    }

    /// Namespaces left by a run that died before cleaning up.
    fn remove_stale() {
        let out = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let ns = line.split_whitespace().next().unwrap_or("");
            let Some(pid) = ns.strip_prefix("shoalc-").and_then(|r| r.split('-').next()) else {
                continue;
            };
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(format!(
                        "ip netns pids {ns} | xargs -r kill -9; ip netns del {ns}"
                    ))
                    .status();
            }
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Deleting the namespace removes both ends of the pair once its processes are gone.
        let _ = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ip netns pids {0} | xargs -r kill -9; ip netns del {0}",
                self.ns
            ))
            .status();
    }
}

/// The node processes, killed whatever way the test ends.
struct Nodes(Mutex<Vec<std::process::Child>>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for n in self.0.lock().unwrap_or_else(|e| e.into_inner()).iter_mut() {
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &n.id().to_string()])
                .status();
            let _ = n.kill();
            let _ = n.wait();
        }
    }
}

fn rng(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_stay_correct_through_chaos() {
    let seconds: u64 = std::env::var("SHOAL_CHAOS_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let readers: usize = std::env::var("SHOAL_CHAOS_READERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let rewrites = std::env::var("SHOAL_CHAOS_REWRITES").map_or(true, |v| v != "0");
    // The origin listens on every address, so nodes reach it from their namespaces.
    let o = Arc::new(
        shoal_testorigin::Origin::start(shoal_testorigin::OriginOptions {
            listen: std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
            ..Default::default()
        })
        .await
        .unwrap(),
    );
    let origin_port = o.addr.port();
    let dir = tempfile::tempdir().unwrap();

    Host::remove_stale();
    let hosts: Vec<Host> = (0..4).map(Host::create).collect();
    let node_cfgs: Vec<std::path::PathBuf> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let cfg = dir.path().join(format!("n{i}.toml"));
            let origin = origin_toml(&o).replace(
                &o.endpoint(),
                &format!("http://{}:{origin_port}", h.near),
            );
            std::fs::write(
                &cfg,
                format!(
                    "{origin}[node]\nlisten = \"{}\"\n[cache]\nram_size = \"64MiB\"\n[auth]\n[[auth.keys]]\naccess_key_id = \"{NODE_KEY}\"\nsecret_access_key = \"{NODE_SECRET}\"\n",
                    h.addr
                ),
            )
            .unwrap();
            cfg
        })
        .collect();
    let spawn_node = |i: usize| {
        std::process::Command::new("ip")
            .args(["netns", "exec", &hosts[i].ns])
            .arg(bin("shoal-node"))
            .arg("--config")
            .arg(&node_cfgs[i])
            .env("RUST_LOG", "off")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let nodes = Arc::new(Nodes(Mutex::new((0..4).map(spawn_node).collect())));
    for h in &hosts {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&h.addr).is_err() {
            assert!(Instant::now() < deadline, "node {} did not start", h.addr);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    // Objects, and every version each has had.
    let versions: Arc<Mutex<Vec<Vec<Bytes>>>> = Arc::new(Mutex::new(Vec::new()));
    for i in 0..FILES {
        let b = data(8 * MIB + i * 4099, 1000 + i as u64);
        o.put(BUCKET, &format!("chaos/f{i}"), b.clone());
        versions.lock().unwrap().push(vec![b]);
    }
    let ids: Vec<String> = hosts.iter().map(|h| format!("\"{}\"", h.addr)).collect();
    let mount_origin =
        origin_toml(&o).replace(&o.endpoint(), &format!("http://127.0.0.1:{origin_port}"));
    let toml = format!(
        "{}[cluster]\nnodes = [{}]\nconnect_timeout = \"300ms\"\nfirst_byte_timeout = \"1s\"\nstall_timeout = \"1s\"\ndown_for = \"1s\"\n\
         [cluster.credentials]\naccess_key_id = \"{NODE_KEY}\"\nsecret_access_key = \"{NODE_SECRET}\"\n[cache]\nram_size = \"8MiB\"\n",
        mount_origin,
        ids.join(", ")
    );
    let metrics_port = free_port();
    let m = Mount::start(
        &toml,
        BUCKET,
        &[
            "--metadata-ttl",
            "1s",
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
        ],
    );

    let figures = Arc::new(Figures::default());
    let excuses = Arc::new(Mutex::new(Excuses::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(seconds);

    // Readers: whole-file reads and random preads, every byte checked.
    let mut reader_threads = Vec::new();
    for r in 0..readers {
        let (figures, versions, stop) = (figures.clone(), versions.clone(), stop.clone());
        let root = m.mnt.join("chaos");
        reader_threads.push(std::thread::spawn(move || {
            let mut x = 0x9E37_79B9_7F4A_7C15 ^ (r as u64 + 1);
            while !stop.load(Relaxed) {
                let file = (rng(&mut x) % FILES as u64) as usize;
                let path = root.join(format!("f{file}"));
                let start = Instant::now();
                let outcome: std::io::Result<bool> = (|| {
                    // Most opens bypass the page cache (which would otherwise answer
                    // nearly every read after the first pass and keep the nodes idle).
                    let mut opts = std::fs::OpenOptions::new();
                    opts.read(true);
                    if !rng(&mut x).is_multiple_of(4) {
                        use std::os::unix::fs::OpenOptionsExt;
                        opts.custom_flags(libc::O_DIRECT);
                    }
                    let mut f = opts.open(&path)?;
                    if rng(&mut x).is_multiple_of(2) {
                        let mut all = Vec::new();
                        let t = Instant::now();
                        f.read_to_end(&mut all)?;
                        figures.waits_us.lock().unwrap().push(t.elapsed().as_micros() as u64 / (all.len() / MIB + 1) as u64);
                        let vs = versions.lock().unwrap()[file].clone();
                        let ok = vs.iter().any(|v| v[..] == all[..]);
                        if !ok {
                            for (vi, v) in vs.iter().enumerate() {
                                let first_diff = v.iter().zip(all.iter()).position(|(a, b)| a != b);
                                eprintln!("whole read of f{file}: len {} vs v{vi} len {}, first diff {first_diff:?}", all.len(), v.len());
                            }
                        }
                        Ok(ok)
                    } else {
                        // Every slice read through one handle must come from one version.
                        let candidates: Vec<Bytes> = versions.lock().unwrap()[file].clone();
                        let mut alive: Vec<bool> = vec![true; candidates.len()];
                        let len = candidates.iter().map(|v| v.len()).min().unwrap();
                        for _ in 0..16 {
                            let off = rng(&mut x) as usize % (len - 65536);
                            let mut buf = vec![0u8; 65536];
                            let t = Instant::now();
                            f.seek(SeekFrom::Start(off as u64))?;
                            f.read_exact(&mut buf)?;
                            figures.waits_us.lock().unwrap().push(t.elapsed().as_micros() as u64);
                            for (i, c) in candidates.iter().enumerate() {
                                alive[i] &= c.len() >= off + 65536 && c[off..off + 65536] == buf[..];
                            }
                        }
                        if !alive.iter().any(|a| *a) {
                            eprintln!("random reads of f{file}: no single version matches ({} candidates)", candidates.len());
                        }
                        Ok(alive.iter().any(|a| *a))
                    }
                })();
                figures.reads.fetch_add(1, Relaxed);
                match outcome {
                    Ok(true) => {}
                    Ok(false) => {
                        figures.wrong.fetch_add(1, Relaxed);
                        eprintln!("WRONG BYTES in chaos/f{file}");
                    }
                    Err(e) => {
                        figures.failed.fetch_add(1, Relaxed);
                        figures.failures.lock().unwrap().push((file, start, Instant::now(), e.to_string()));
                    }
                }
            }
        }));
    }

    // The scheduler.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    // Fault kinds take turns (kill, pause, cut, origin fault, rewrite, calm), so even
    // a short run sees each; victims and timings are random.
    let mut step = 0u64;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200 + rng(&mut x) % 400)).await;
        let victim = (rng(&mut x) % 4) as usize;
        step += 1;
        match step % 6 {
            0 => {
                {
                    let mut n = nodes.0.lock().unwrap();
                    let _ = n[victim].kill();
                    let _ = n[victim].wait();
                }
                figures.kills.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(300 + rng(&mut x) % 700)).await;
                nodes.0.lock().unwrap()[victim] = spawn_node(victim);
            }
            1 => {
                let pid = nodes.0.lock().unwrap()[victim].id().to_string();
                std::process::Command::new("kill")
                    .args(["-STOP", &pid])
                    .status()
                    .unwrap();
                figures.pauses.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(300 + rng(&mut x) % 1200)).await;
                std::process::Command::new("kill")
                    .args(["-CONT", &pid])
                    .status()
                    .unwrap();
            }
            2 => {
                hosts[victim].link(false);
                figures.cuts.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(500 + rng(&mut x) % 1500)).await;
                hosts[victim].link(true);
            }
            3 => {
                let s = match rng(&mut x) % 3 {
                    0 => FaultSettings {
                        slowdown_per_mille: 200,
                        ..Default::default()
                    },
                    1 => FaultSettings {
                        reset_per_mille: 200,
                        ..Default::default()
                    },
                    _ => FaultSettings {
                        first_byte_delay_ms: 300,
                        ..Default::default()
                    },
                };
                let t0 = Instant::now();
                o.faults.set(s);
                figures.origin_faults.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(1000)).await;
                o.faults.clear();
                excuses.lock().unwrap().origin.push((t0, Instant::now()));
            }
            4 if rewrites => {
                let file = victim % FILES;
                let b = data(8 * MIB + file * 4099, rng(&mut x));
                excuses
                    .lock()
                    .unwrap()
                    .rewrites
                    .entry(file)
                    .or_default()
                    .push(Instant::now());
                versions.lock().unwrap()[file].push(b.clone());
                o.put(BUCKET, &format!("chaos/f{file}"), b);
                figures.rewrites.fetch_add(1, Relaxed);
            }
            _ => {}
        }
    }
    stop.store(true, Relaxed);
    o.faults.clear();
    for n in nodes.0.lock().unwrap().iter() {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &n.id().to_string()])
            .status();
    }
    for h in &hosts {
        h.link(true);
    }
    for t in reader_threads {
        tokio::task::spawn_blocking(move || t.join().unwrap())
            .await
            .unwrap();
    }
    let metrics = sh_ok(&format!("curl -s http://127.0.0.1:{metrics_port}/metrics")).await;
    let f = &*figures;
    let mut waits = f.waits_us.lock().unwrap().clone();
    waits.sort_unstable();
    let pct = |p: f64| {
        waits
            .get(((waits.len() as f64 * p) as usize).min(waits.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let fallbacks: Vec<String> = metrics
        .lines()
        .filter(|l| l.starts_with("shoal_client_fallbacks_total{"))
        .map(|l| {
            l.trim_start_matches("shoal_client_fallbacks_total")
                .to_owned()
        })
        .collect();
    let hedges = metrics
        .lines()
        .find(|l| l.starts_with("shoal_client_hedges_sent_total "))
        .unwrap_or("hedges: none");
    let failed = f.failed.load(Relaxed);
    let excused = {
        let ex = excuses.lock().unwrap();
        let mut n = 0;
        for (file, start, end, e) in f.failures.lock().unwrap().iter() {
            if ex.covers(*file, *start, *end) {
                n += 1;
            } else {
                eprintln!("read of chaos/f{file} failed with no excuse: {e}");
            }
        }
        n
    };
    eprintln!(
        "chaos {seconds}s, {readers} readers: reads {} failed {failed} (origin or rewrite {excused}, ours {}) wrong {}; \
         wait max {:.1} ms p99.9 {:.1} ms; kills {} pauses {} cuts {} origin faults {} rewrites {}; fallbacks {} ; {hedges}",
        f.reads.load(Relaxed),
        failed - excused,
        f.wrong.load(Relaxed),
        *waits.last().unwrap_or(&0) as f64 / 1e3,
        pct(0.999) as f64 / 1e3,
        f.kills.load(Relaxed),
        f.pauses.load(Relaxed),
        f.cuts.load(Relaxed),
        f.origin_faults.load(Relaxed),
        f.rewrites.load(Relaxed),
        fallbacks.join(" "),
    );
    assert!(f.reads.load(Relaxed) > 0);
    assert_eq!(f.wrong.load(Relaxed), 0, "wrong bytes were read");
    assert_eq!(
        failed - excused,
        0,
        "reads failed with no origin fault or rewrite to explain them"
    );
    // Deadline budget: owner and next node first-byte deadlines, then the origin
    // with its retries under throttling.
    assert!(
        *waits.last().unwrap_or(&0) < 15_000_000,
        "a read waited {} ms",
        waits.last().unwrap() / 1000
    );
    drop(m);
}
