//! Mounts that outlive the process serving them. Eight readers read for 30 s
//! through a real mount of a real node (open files kept open throughout, half of
//! them with O_DIRECT so that every read reaches the daemon, plus lookups and
//! listings), checking every byte, while the server is handed over on purpose
//! (SIGHUP, `shoal-mount --restart`) or killed with SIGKILL. Prints the figures;
//! asserts no wrong byte, no `ENOTCONN`, no call over 5 s, and no failed call at
//! all for a handover (for a kill, at most the calls in flight at each).
//!
//! `SHOAL_HANDOVER_SECONDS` (default 30) sets how long each run reads.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use bytes::Bytes;

const MIB: usize = 1 << 20;
const READERS: usize = 8;
const FILES: usize = 8;
const FILE_SIZE: usize = 6 * MIB + 4099;
/// A call slower than this counts as hung.
const HUNG: Duration = Duration::from_secs(5);

fn seconds() -> Duration {
    Duration::from_secs(
        std::env::var("SHOAL_HANDOVER_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    )
}

#[derive(Default)]
struct Figures {
    calls: AtomicU64,
    failed: AtomicU64,
    enotconn: AtomicU64,
    wrong: AtomicU64,
    slowest_us: AtomicU64,
    errors: Mutex<Vec<String>>,
}

impl Figures {
    /// Times one call; counts it, and its failure if it failed.
    fn call<T>(&self, what: &str, f: impl FnOnce() -> std::io::Result<T>) -> Option<T> {
        let t0 = Instant::now();
        let r = f();
        self.slowest_us
            .fetch_max(t0.elapsed().as_micros() as u64, Relaxed);
        self.calls.fetch_add(1, Relaxed);
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.failed.fetch_add(1, Relaxed);
                if e.raw_os_error() == Some(libc::ENOTCONN) {
                    self.enotconn.fetch_add(1, Relaxed);
                }
                let mut errs = self.errors.lock().unwrap();
                if errs.len() < 20 {
                    errs.push(format!("{what}: {e}"));
                }
                None
            }
        }
    }
}

/// A mount of `BUCKET` over one node, with `FILES` files of `FILE_SIZE` bytes.
fn setup(o: &Origin, dir: &std::path::Path) -> (NodeProcess, Mount, Vec<Bytes>) {
    let bodies: Vec<Bytes> = (0..FILES)
        .map(|i| {
            let b = data(FILE_SIZE, 500 + i as u64);
            o.put(BUCKET, &format!("h/f{i}"), b.clone());
            b
        })
        .collect();
    let node = start_node(o, dir, "n");
    // A small RAM tier: readers keep going to the node, and through the daemon.
    let toml = mount_toml(o, &[&node], "[cache]\nram_size = \"8MiB\"\n");
    let m = Mount::start(&toml, BUCKET, &[]);
    (node, m, bodies)
}

/// `READERS` readers over the mount until `stop`: each keeps one file open for
/// the whole run and reads it in 256 KiB steps round and round (even readers
/// with O_DIRECT), and every few steps looks a file up, lists the directory, and
/// opens, reads and closes another file.
fn readers(
    m: &Mount,
    bodies: &[Bytes],
    stop: &Arc<AtomicBool>,
    fig: &Arc<Figures>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..READERS)
        .map(|r| {
            let (dir, bodies) = (m.path("h"), bodies.to_vec());
            let (stop, fig) = (stop.clone(), fig.clone());
            std::thread::spawn(move || {
                let i = r % FILES;
                let mut opts = std::fs::OpenOptions::new();
                opts.read(true);
                if r % 2 == 0 {
                    opts.custom_flags(libc::O_DIRECT);
                }
                let path = dir.join(format!("f{i}"));
                let Some(mut f) = fig.call("open", || opts.open(&path)) else {
                    return;
                };
                // O_DIRECT wants aligned buffers and offsets.
                let mut buf = AlignedBuf::new(256 << 10);
                let mut at = 0usize;
                let mut step = 0u64;
                while !stop.load(Relaxed) {
                    let n = fig.call("read", || {
                        f.seek(SeekFrom::Start(at as u64))?;
                        f.read(buf.as_mut())
                    });
                    if let Some(n) = n {
                        if buf.as_mut()[..n] != bodies[i][at..at + n] {
                            fig.wrong.fetch_add(1, Relaxed);
                        }
                        at = if n == 0 || at + n >= FILE_SIZE {
                            0
                        } else {
                            at + n
                        };
                    }
                    step += 1;
                    if step.is_multiple_of(8) {
                        let other = (i + 1 + step as usize) % FILES;
                        let p = dir.join(format!("f{other}"));
                        fig.call("stat", || std::fs::metadata(&p));
                        fig.call("readdir", || std::fs::read_dir(&dir).map(|d| d.count()));
                        if let Some(got) = fig.call("read file", || std::fs::read(&p)) {
                            if got != bodies[other] {
                                fig.wrong.fetch_add(1, Relaxed);
                            }
                        }
                    }
                }
            })
        })
        .collect()
}

/// A buffer aligned for O_DIRECT.
struct AlignedBuf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let v = vec![0u8; len + 4096];
        let off = (4096 - (v.as_ptr() as usize % 4096)) % 4096;
        AlignedBuf { v, off, len }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// Runs the readers for the test's duration, calling `disrupt(k)` at even steps
/// `k` of `times`; returns the figures.
fn under_load(
    m: &Mount,
    bodies: &[Bytes],
    times: usize,
    mut disrupt: impl FnMut(usize),
) -> Arc<Figures> {
    let (stop, fig) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(Figures::default()),
    );
    let threads = readers(m, bodies, &stop, &fig);
    let total = seconds();
    let t0 = Instant::now();
    // Each step comes once its time has come and the readers have read on since
    // the last one: a mount that stopped answering fails here, within HUNG.
    let step = |what: &str, at: Duration| {
        let before = fig.calls.load(Relaxed);
        wait_until(what, at.saturating_sub(t0.elapsed()) + HUNG, || {
            t0.elapsed() >= at && fig.calls.load(Relaxed) > before
        });
    };
    for k in 0..times {
        step(
            "the readers read on to the next disruption",
            total * (k as u32 + 1) / (times as u32 + 1),
        );
        disrupt(k);
    }
    step("the readers read on to the end", total);
    stop.store(true, Relaxed);
    // A reader stuck in a call never comes back: that is a hang, and the test
    // says so rather than wait for it.
    wait_until(
        "every reader back from its call (a hung call)",
        HUNG,
        || threads.iter().all(|t| t.is_finished()),
    );
    for t in threads {
        t.join().unwrap();
    }
    fig
}

fn report(what: &str, fig: &Figures) {
    println!(
        "{what}: {} calls by {READERS} readers over {:?}, {} failed, {} ENOTCONN, {} wrong, slowest {:.3} s; errors: {:?}",
        fig.calls.load(Relaxed),
        seconds(),
        fig.failed.load(Relaxed),
        fig.enotconn.load(Relaxed),
        fig.wrong.load(Relaxed),
        fig.slowest_us.load(Relaxed) as f64 / 1e6,
        fig.errors.lock().unwrap()
    );
    assert_eq!(
        fig.wrong.load(Relaxed),
        0,
        "{what}: every byte read is right"
    );
    assert_eq!(fig.enotconn.load(Relaxed), 0, "{what}: never ENOTCONN");
    assert!(
        Duration::from_micros(fig.slowest_us.load(Relaxed)) < HUNG,
        "{what}: no call hung"
    );
    assert!(fig.calls.load(Relaxed) > 1000, "{what}: the readers read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_restart_fails_no_call_and_keeps_open_files_reading() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let (_node, m, bodies) = setup(&o, dir.path());
    let before = m.status();
    let (fig, after) = tokio::task::spawn_blocking(move || {
        let fig = under_load(&m, &bodies, 4, |k| {
            if k % 2 == 0 {
                let out = std::process::Command::new(MOUNT)
                    .arg("--restart")
                    .arg(&m.mnt)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "--restart: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            } else {
                signal(m.keeper_pid(), "-HUP");
            }
        });
        let after = m.wait_status(|s| s["handovers"] == 4);
        (fig, after)
    })
    .await
    .unwrap();
    report("four planned restarts", &fig);
    assert_eq!(fig.failed.load(Relaxed), 0, "a handover fails no call");
    assert_ne!(before["server"], after["server"], "another process serves");
    assert_eq!(after["restarts"], 0, "no crash");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_replaced_on_the_same_connection() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let (_node, m, bodies) = setup(&o, dir.path());
    let (fig, after) = tokio::task::spawn_blocking(move || {
        let mut killed = Vec::new();
        let fig = under_load(&m, &bodies, 5, |k| {
            // The server that serves now: the previous kill's successor.
            let s = m.wait_status(|s| s["restarts"] == k && !s["server"].is_null());
            let pid = s["server"].as_u64().unwrap() as u32;
            signal(pid, "-KILL");
            killed.push(pid);
        });
        let after = m.wait_status(|s| s["restarts"] == 5);
        (fig, after)
    })
    .await
    .unwrap();
    report("five SIGKILLs of the server", &fig);
    // Each kill may fail the calls the dead server had taken, and no others; on a
    // kernel that sends them again (6.9 and later), none.
    assert!(
        fig.failed.load(Relaxed) <= 5 * READERS as u64,
        "at most the calls in flight at each kill failed"
    );
    assert!(!after["server"].is_null());
}
