//! Real processes: `shoal-node`, `shoal-mount`, shell commands.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The workspace binary `name` (`shoal-node`, `shoal-mount`, `shoal`), built beside
/// the test (as `cargo test --workspace` does).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo build --workspace --bins` (cargo test --workspace does)",
        p.display()
    );
    p
}

/// Sends `sig` (like "-STOP") to process `pid`.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {sig} {pid} failed");
}

/// A `shoal-node` process; killed (resumed first, if paused) when dropped.
pub struct NodeProcess {
    pub child: Child,
    /// `host:port` it listens on.
    pub addr: String,
    /// Its log (stderr), line by line, as it comes.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl NodeProcess {
    /// Starts `shoal-node --config config` and waits for its "listening on" line.
    pub fn spawn(config: &Path) -> NodeProcess {
        Self::spawn_under(&[], config)
    }

    /// [`spawn`](Self::spawn) run by `wrapper` (like `setpriv ... --`), if not empty.
    pub fn spawn_under(wrapper: &[&str], config: &Path) -> NodeProcess {
        Self::spawn_full(wrapper, &[], config)
    }

    /// [`spawn`](Self::spawn) with `env` added to its environment.
    pub fn spawn_with_env(config: &Path, env: &[(String, String)]) -> NodeProcess {
        Self::spawn_full(&[], env, config)
    }

    fn spawn_full(wrapper: &[&str], env: &[(String, String)], config: &Path) -> NodeProcess {
        let node = bin("shoal-node");
        let mut cmd = match wrapper.split_first() {
            None => Command::new(&node),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&node);
                c
            }
        };
        let mut child = cmd
            .arg("--config")
            .arg(config)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start shoal-node");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // "listening on http://ADDR" or "https://ADDR"
                if let Some(rest) = line.split("listening on http").nth(1) {
                    let addr = rest.trim_start_matches('s').trim_start_matches("://");
                    let _ = tx.send(addr.trim().to_owned());
                }
                kept.lock().unwrap().push(line);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("node did not start");
        NodeProcess { child, addr, log }
    }

    /// Writes `toml` to `dir/name.toml` and starts a node with it.
    pub fn start(dir: &Path, name: &str, toml: &str) -> NodeProcess {
        let cfg = dir.join(format!("{name}.toml"));
        std::fs::write(&cfg, toml).expect("write node config");
        Self::spawn(&cfg)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn socket_addr(&self) -> std::net::SocketAddr {
        self.addr.parse().expect("node address")
    }

    /// Lines of its log so far that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|l| l.contains(needle)).cloned().collect()
    }

    /// Lines of its log that contain `needle`, once there are at least `n` of
    /// them (or after 10 s, whatever there are): its stderr is read by a thread
    /// of its own, so a line the node has written may not be here yet.
    pub fn wait_log_lines(&self, needle: &str, n: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lines = self.log_lines(needle);
            if lines.len() >= n || Instant::now() > deadline {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `p` is a mount point now.
pub fn is_mounted(p: &Path) -> bool {
    Command::new("mountpoint")
        .arg("-q")
        .arg(p)
        .status()
        .is_ok_and(|s| s.success())
}

/// A foreground `shoal-mount` on a fresh directory; stopped and unmounted on drop.
pub struct Mount {
    pub dir: tempfile::TempDir,
    pub mnt: PathBuf,
    pub child: Option<Child>,
}

impl Mount {
    /// Mounts `source` with config `toml` and extra `args`, and waits until it is live.
    pub fn start(toml: &str, source: &str, args: &[&str]) -> Mount {
        Self::start_with_env(toml, source, args, &[])
    }

    /// [`start`](Self::start) with `env` added to the mount's environment.
    pub fn start_with_env(
        toml: &str,
        source: &str,
        args: &[&str],
        env: &[(String, String)],
    ) -> Mount {
        Self::launch(toml, source, args, env, false, None)
    }

    /// [`start`](Self::start) with its log (stderr, at `info`) kept in
    /// [`log`](Self::log).
    pub fn start_logged(toml: &str, source: &str, args: &[&str]) -> Mount {
        Self::launch(toml, source, args, &[], true, None)
    }

    /// [`start_logged`](Self::start_logged) with the keeper, and so its
    /// servers, in memory cgroup `cgroup` from their start.
    pub fn start_in(cgroup: &crate::MemCgroup, toml: &str, source: &str, args: &[&str]) -> Mount {
        Self::launch(toml, source, args, &[], true, Some(cgroup))
    }

    /// What a [`start_logged`](Self::start_logged) mount has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mount.log")).unwrap_or_default()
    }

    fn launch(
        toml: &str,
        source: &str,
        args: &[&str],
        env: &[(String, String)],
        logged: bool,
        cgroup: Option<&crate::MemCgroup>,
    ) -> Mount {
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mountpoint");
        let cfg = dir.path().join("mount.toml");
        std::fs::write(&cfg, toml).expect("write mount config");
        let mut cmd = Command::new(bin("shoal-mount"));
        cmd.arg("--config")
            .arg(&cfg)
            .arg("--foreground")
            .args(args)
            .arg(source)
            .arg(&mnt)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null());
        if logged {
            let log = std::fs::File::create(dir.path().join("mount.log")).expect("log file");
            cmd.stderr(log).env("RUST_LOG", "info");
        }
        if let Some(c) = cgroup {
            c.join_on_exec(&mut cmd);
        }
        let child = cmd.spawn().expect("start shoal-mount");
        let mut m = Mount {
            dir,
            mnt,
            child: Some(child),
        };
        crate::wait::wait_until("the mount came up", Duration::from_secs(20), || {
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("shoal-mount exited before mounting: {status}");
            }
            m.is_mounted()
        });
        m
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// The keeper: the process this test started, which holds the connection.
    pub fn keeper_pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// What the keeper says of the mount (`shoal-mount --status`): its keeper
    /// and server processes, restarts and handovers.
    pub fn status(&self) -> serde_json::Value {
        let out = Command::new(bin("shoal-mount"))
            .arg("--status")
            .arg(&self.mnt)
            .output()
            .expect("shoal-mount --status");
        assert!(
            out.status.success(),
            "shoal-mount --status: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status is JSON")
    }

    /// The status once `ok` holds of it (within 30 s).
    pub fn wait_status(&self, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let mut last = serde_json::Value::Null;
        crate::wait::wait_until(
            "the mount's status came to hold",
            Duration::from_secs(30),
            || {
                last = self.status();
                ok(&last)
            },
        );
        last
    }

    /// The process serving the mount now (not the keeper).
    pub fn server_pid(&self) -> u32 {
        let s = self.wait_status(|s| s["server"].is_u64());
        s["server"].as_u64().unwrap() as u32
    }

    pub fn is_mounted(&self) -> bool {
        is_mounted(&self.mnt)
    }

    /// SIGTERM, then wait for the process to exit (up to `limit`).
    pub fn stop(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        signal(child.id(), "-TERM");
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("shoal-mount did not exit within {limit:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.stop(Duration::from_secs(10))
            }));
        }
        if self.is_mounted() {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.mnt)
                .status();
        }
    }
}

/// Runs a shell command off the async runtime (the origin serves on it meanwhile).
pub async fn sh(cmd: &str) -> Output {
    let cmd = cmd.to_owned();
    tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg("-c")
            .arg(&cmd)
            .output()
            .expect("bash")
    })
    .await
    .expect("shell task")
}

/// Like [`sh`], asserting success; returns stdout.
pub async fn sh_ok(cmd: &str) -> String {
    let out = sh(cmd).await;
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `p` quoted for a shell command line.
pub fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// A free loopback address (for a mount's `--metrics-addr`), for a process
/// to bind a moment later. Taken below the kernel's ephemeral range (32768 and
/// up): a port from that range, free now, may be handed to the next
/// connection or `:0` bind of any test before its process binds it.
pub fn free_addr() -> String {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Test binaries of one run take turns; each starts elsewhere in the span.
    let start = std::process::id().wrapping_mul(7_919) % SPAN;
    for _ in 0..SPAN {
        let port = FIRST + (start + NEXT.fetch_add(1, Relaxed)) % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return format!("127.0.0.1:{port}");
        }
    }
    panic!("no free loopback port in {FIRST}..{}", FIRST + SPAN)
}
