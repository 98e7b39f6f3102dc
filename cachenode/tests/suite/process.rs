//! The real `shoal-node` binary: restart with a warm disk tier, corrupt block files,
//! graceful stop, and clear errors on bad use.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use shoal::store::{ByteRange, GetObject};

const MIB: u64 = 1 << 20;

fn write_config(dir: &Path, origin: &shoal_testorigin::Origin) -> std::path::PathBuf {
    let toml = node_toml(
        origin,
        "",
        &format!(
            "[cache]\nram_size = \"32MiB\"\ndisk_size = \"256MiB\"\ndata_dir = \"{}\"",
            dir.join("data").display()
        ),
    );
    let path = dir.join("node.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

fn block_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(dir).unwrap() {
        for f in std::fs::read_dir(sub.unwrap().path()).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_restarts_warm_and_never_serves_a_corrupt_block() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &origin);
    let body = data(12 * MIB as usize, 11);
    origin.put(BUCKET, "warm", body.clone());

    let mut node = NodeProcess::spawn(&cfg);
    let addr = node.socket_addr();
    let child = &mut node.child;
    let ranges = [(0, 5 * MIB), (6 * MIB + 17, 12 * MIB)];
    for (a, b) in ranges {
        let (_, got) = client(addr)
            .get_bytes(&GetObject::new(BUCKET, "warm").range(ByteRange::span(a, b)))
            .await
            .unwrap();
        assert!(got == body.slice(a as usize..b as usize));
    }
    let gets = origin.stats.snapshot().gets_of(BUCKET, "warm");
    assert_eq!(gets, 11, "blocks 0-4 and 6-11");
    // A block is written to disk as its last bytes go out: wait for all 11.
    wait_for("11 blocks on disk", Duration::from_secs(10), || async {
        let disk = metric(&scrape(addr).await, "shoal_node_cache_bytes{tier=\"disk\"}");
        disk >= (11 * MIB) as f64
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();

    let mut node = NodeProcess::spawn(&cfg);
    let addr = node.socket_addr();
    let child = &mut node.child;
    for (a, b) in ranges {
        let (_, got) = client(addr)
            .get_bytes(&GetObject::new(BUCKET, "warm").range(ByteRange::span(a, b)))
            .await
            .unwrap();
        assert!(got == body.slice(a as usize..b as usize));
    }
    assert_eq!(
        origin.stats.snapshot().gets_of(BUCKET, "warm"),
        gets,
        "restart served from disk"
    );

    // Corrupt every block file: the node must refetch, never serve them.
    child.kill().unwrap();
    child.wait().unwrap();
    let files = block_files(&dir.path().join("data/blocks"));
    assert_eq!(files.len(), 11);
    for f in &files {
        let mut raw = std::fs::read(f).unwrap();
        let n = raw.len();
        raw[n / 2] ^= 0x5a;
        std::fs::write(f, raw).unwrap();
    }
    let mut node = NodeProcess::spawn(&cfg);
    let addr = node.socket_addr();
    let child = &mut node.child;
    let (_, got) = client(addr)
        .get_bytes(&GetObject::new(BUCKET, "warm").range(ByteRange::span(0, 2 * MIB)))
        .await
        .unwrap();
    assert!(got == body.slice(0..2 * MIB as usize));
    let text = scrape(addr).await;
    assert_eq!(
        metric(&text, "shoal_node_checksum_failures_total"),
        2.0,
        "{text}"
    );
    assert_eq!(origin.stats.snapshot().gets_of(BUCKET, "warm"), gets + 2);

    // SIGTERM: a clean exit.
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit after SIGTERM: {status}");
            break;
        }
        assert!(Instant::now() < deadline, "node did not stop after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn bad_use_gets_a_clear_error() {
    let out = run_node(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--config") && help.contains("--listen") && help.contains("--data-dir"),
        "{help}"
    );
    let out = run_node(&["--version"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[node]\nlisen = \"0.0.0.0:1\"\n").unwrap();
    let out = run_node_with(&bad);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml") && err.contains("node.lisen") && err.contains("unknown field"),
        "{err}"
    );

    let out = run_node_with(&dir.path().join("missing.toml"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read config file"));

    // A config without [origin] says so.
    std::fs::write(&bad, "[node]\n[auth]\nmode = \"none\"\n").unwrap();
    let out = run_node_with(&bad);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[origin]"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_https_with_the_configured_certificate() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "openssl could not make a certificate");
    let toml = node_toml(
        &origin,
        "",
        &format!(
            "[tls]\ncert = \"{}\"\nkey = \"{}\"",
            cert.display(),
            key.display()
        ),
    );
    let path = dir.path().join("tls.toml");
    std::fs::write(&path, toml).unwrap();
    let mut child = Command::new(bin("shoal-node"))
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut addr = None;
    for line in std::io::BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        if let Some(a) = line.split("listening on https://").nth(1) {
            addr = Some(a.trim().to_owned());
            break;
        }
    }
    let addr = addr.expect("node announced an https address");
    let out = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&cert)
        .arg(format!("https://{addr}/healthz"))
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A missing key file is a clear start-up error.
    std::fs::write(
        &path,
        node_toml(
            &origin,
            "",
            "[tls]\ncert = \"/nonexistent/c.pem\"\nkey = \"/nonexistent/k.pem\"",
        ),
    )
    .unwrap();
    let out = run_node_with(&path);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tls.cert /nonexistent/c.pem"));
}
