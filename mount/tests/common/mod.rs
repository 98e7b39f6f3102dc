//! Harness for real FUSE mounts: the real origin in process, real `shoal-node`
//! processes, and the real `shoal-mount` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_testorigin::{Origin, OriginOptions};

pub const MOUNT: &str = env!("CARGO_BIN_EXE_shoal-mount");
pub const BUCKET: &str = "shoal-test";
pub const NODE_KEY: &str = "mount-test-node";
pub const NODE_SECRET: &str = "mount-test-node-secret";

/// The `shoal-node` binary beside ours (built by `cargo test --workspace`).
pub fn node_bin() -> PathBuf {
    let p = Path::new(MOUNT).with_file_name("shoal-node");
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo build -p shoal-node`",
        p.display()
    );
    p
}

pub async fn origin() -> Origin {
    Origin::start(OriginOptions::default()).await.unwrap()
}

pub fn origin_toml(o: &Origin) -> String {
    format!(
        "[origin]\nendpoint = \"{}\"\nretry_base = \"5ms\"\n[origin.credentials]\naccess_key_id = \"{}\"\nsecret_access_key = \"{}\"\n",
        o.endpoint(),
        o.options.access_key,
        o.options.secret_key
    )
}

pub struct Node {
    pub child: Child,
    pub addr: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_node(o: &Origin, dir: &Path, name: &str) -> Node {
    start_node_with(o, dir, name, "[cache]\nram_size = \"256MiB\"\n")
}

/// A node with `extra` (its `[cache]` section, say) in its config.
pub fn start_node_with(o: &Origin, dir: &Path, name: &str, extra: &str) -> Node {
    use std::io::{BufRead, BufReader};
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "{}[node]\nlisten = \"127.0.0.1:0\"\n{extra}[auth]\n[[auth.keys]]\naccess_key_id = \"{NODE_KEY}\"\nsecret_access_key = \"{NODE_SECRET}\"\n",
            origin_toml(o)
        ),
    )
    .unwrap();
    let mut child = Command::new(node_bin())
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let _ = tx.send(rest.trim().to_owned());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("node did not start");
    Node { child, addr }
}

/// A config with the origin and, if any, these nodes as the cluster.
pub fn mount_toml(o: &Origin, nodes: &[&Node], extra: &str) -> String {
    let mut t = origin_toml(o);
    if !nodes.is_empty() {
        let ids: Vec<String> = nodes.iter().map(|n| format!("\"{}\"", n.addr)).collect();
        t.push_str(&format!(
            "[cluster]\nnodes = [{}]\nconnect_timeout = \"300ms\"\nfirst_byte_timeout = \"1s\"\nstall_timeout = \"1s\"\n[cluster.credentials]\naccess_key_id = \"{NODE_KEY}\"\nsecret_access_key = \"{NODE_SECRET}\"\n",
            ids.join(", ")
        ));
    }
    t.push_str(extra);
    t
}

pub fn is_mounted(p: &Path) -> bool {
    shoal_mount::is_mounted(&std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned()))
}

/// A foreground `shoal-mount` on a fresh directory; unmounted on drop.
pub struct Mount {
    pub dir: tempfile::TempDir,
    pub mnt: PathBuf,
    pub child: Option<Child>,
}

impl Mount {
    pub fn start(toml: &str, source: &str, args: &[&str]) -> Mount {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let cfg = dir.path().join("mount.toml");
        std::fs::write(&cfg, toml).unwrap();
        let child = Command::new(MOUNT)
            .arg("--config")
            .arg(&cfg)
            .arg("--foreground")
            .args(args)
            .arg(source)
            .arg(&mnt)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut m = Mount {
            dir,
            mnt,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(&m.mnt) {
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("shoal-mount exited before mounting: {status}");
            }
            assert!(Instant::now() < deadline, "mount did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// SIGTERM, then wait for the process to exit (up to `limit`).
    pub fn stop(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
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
        if is_mounted(&self.mnt) {
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
    tokio::task::spawn_blocking(move || Command::new("bash").arg("-c").arg(&cmd).output().unwrap())
        .await
        .unwrap()
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

pub fn data(len: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v.into()
}

/// Puts `files` in the origin under `prefix` and in `local` (a mirror to compare with).
pub fn seed(o: &Origin, prefix: &str, local: &Path, files: &[(&str, Bytes)]) {
    for (k, b) in files {
        o.put(BUCKET, &format!("{prefix}{k}"), b.clone());
        let p = local.join(k);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b).unwrap();
    }
}

pub fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// A free loopback address for a mount's `--metrics-addr`.
pub fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// A mount's metrics page, read from `addr`.
pub async fn metrics_text(addr: &str) -> String {
    sh_ok(&format!("curl -sS http://{addr}/metrics")).await
}

/// The value of the sample `name` (labels included, then a space) in `text`.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
}
