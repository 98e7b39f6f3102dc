//! Bad use of `shoal-mount`: a clear message, a non-zero exit, nothing mounted.

use std::process::Command;

use crate::common::*;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(MOUNT)
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_use_is_refused_clearly() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let cfg = dir.path().join("m.toml");
    std::fs::write(&cfg, mount_toml(&o, &[], "")).unwrap();
    let (c, m) = (cfg.to_str().unwrap(), mnt.to_str().unwrap());

    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--config", c, "no-such-bucket", m],
            "bucket \"no-such-bucket\" does not exist",
        ),
        (
            vec!["--config", c, BUCKET, "/nonexistent/mountpoint"],
            "/nonexistent/mountpoint",
        ),
        (
            vec!["--config", c, "Bad_Bucket!", m],
            "is not a bucket name",
        ),
        (vec!["--config", c, BUCKET], "no MOUNTPOINT given"),
        (
            vec!["--config", c, "-o", "bogus=1", BUCKET, m],
            "unknown mount option \"bogus\"",
        ),
        (
            vec!["--config", c, "--cache-size", "lots", BUCKET, m],
            "--cache-size",
        ),
        (
            vec!["--config", c, "--memory-limit", "lots", BUCKET, m],
            "--memory-limit",
        ),
        (
            vec!["--config", c, "-o", "memory_limit=1MiB", BUCKET, m],
            "--memory-limit: a memory limit of 1048576 bytes is below the least a mount runs in (160 MiB)",
        ),
        (
            vec!["--config", c, "--prefetch-files", "5000", BUCKET, m],
            "--prefetch-files: 5000 is out of range 0..=4096",
        ),
        (
            vec!["--config", c, "--read-window", "2000", BUCKET, m],
            "--read-window: 2000 is out of range 1..=1024",
        ),
        (
            vec!["--config", c, "--read-window", "0", BUCKET, m],
            "--read-window: 0 is out of range 1..=1024",
        ),
        (
            vec!["--config", c, "-o", "read_window=5000", BUCKET, m],
            "--read-window: 5000 is out of range",
        ),
        (
            vec!["--config", c, "-o", "prefetch_files=many", BUCKET, m],
            "-o prefetch_files= takes a number",
        ),
    ];
    for (args, want) in cases {
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let (code, err) = tokio::task::spawn_blocking(move || {
            run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .await
        .unwrap();
        assert_ne!(code, 0, "accepted: {err}");
        assert!(err.contains(want), "wanted {want:?} in {err:?}");
        assert!(!is_mounted(&mnt));
    }

    // Bad credentials.
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        mount_toml(&o, &[], "").replace(&o.options.secret_key, "wrong"),
    )
    .unwrap();
    let (code, err) = run(&["--config", bad.to_str().unwrap(), BUCKET, m]);
    assert_ne!(code, 0);
    assert!(err.contains("access denied"), "{err}");

    // An unknown config key names the file and the key.
    std::fs::write(
        &bad,
        format!(
            "{}[mount]\nmetadata_tll = \"1s\"\n",
            mount_toml(&o, &[], "")
        ),
    )
    .unwrap();
    let (code, err) = run(&["--config", bad.to_str().unwrap(), BUCKET, m]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.toml") && err.contains("mount.metadata_tll"),
        "{err}"
    );

    // Not empty, and busy.
    std::fs::write(mnt.join("x"), b"x").unwrap();
    let (code, err) = run(&["--config", c, BUCKET, m]);
    assert_ne!(code, 0);
    assert!(err.contains("is not empty"), "{err}");
    std::fs::remove_file(mnt.join("x")).unwrap();

    // Daemon mode: returns 0 once live; a second mount on it is refused as busy.
    let (code, err) = tokio::task::spawn_blocking({
        let (c, m) = (c.to_owned(), m.to_owned());
        move || run(&["--config", &c, BUCKET, &m])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(is_mounted(&mnt));
    let (code, err) = run(&["--config", c, BUCKET, m]);
    assert_ne!(code, 0);
    assert!(err.contains("busy"), "{err}");
    unmount(&mnt);
    // The daemon notices the unmount and exits on its own (its keeper kills a
    // server that has not exited 3 s after it; the bound is wide for a machine
    // loaded by the rest of the suite, where one run took longer than 10 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while Command::new("pgrep")
        .args(["-f", &format!("shoal-mount --config {c}")])
        .output()
        .unwrap()
        .status
        .success()
    {
        if std::time::Instant::now() > deadline {
            let ps = Command::new("ps")
                .args(["-eo", "pid,ppid,stat,etime,args"])
                .output()
                .unwrap();
            let ps = String::from_utf8_lossy(&ps.stdout);
            let left: Vec<&str> = ps.lines().filter(|l| l.contains(c)).collect();
            panic!("daemon still running 30 s after unmount: {left:#?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_as_a_mount_helper_with_fstab_options() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let cfg = dir.path().join("m.toml");
    std::fs::write(&cfg, mount_toml(&o, &[], "")).unwrap();
    o.put(
        BUCKET,
        "data/file.txt",
        bytes::Bytes::from_static(b"via helper\n"),
    );
    let helper = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/mount.fuse.shoal");
    let path = format!(
        "{}:{}",
        std::path::Path::new(MOUNT).parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    // As mount(8) calls it for: BUCKET/data MNT fuse.shoal _netdev,allow_other,config=FILE
    let (cfg_s, mnt_s) = (cfg.display().to_string(), mnt.display().to_string());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(helper)
            .args([
                &format!("{BUCKET}/data"),
                &mnt_s,
                "-n",
                "-o",
                &format!("rw,_netdev,allow_other,config={cfg_s}"),
            ])
            .env("PATH", path)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_mounted(&mnt));
    let got = tokio::task::spawn_blocking({
        let f = mnt.join("file.txt");
        move || std::fs::read_to_string(f).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(got, "via helper\n");
    unmount(&mnt);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_reports_reads() {
    let o = origin().await;
    o.put(BUCKET, "m.bin", crate::common::data(3 << 20, 5));
    let addr = free_addr();
    let m = Mount::start(&mount_toml(&o, &[], ""), BUCKET, &["--metrics-addr", &addr]);
    let f = m.path("m.bin");
    let n = tokio::task::spawn_blocking(move || std::fs::read(f).unwrap().len())
        .await
        .unwrap();
    assert_eq!(n, 3 << 20);
    let text = scrape(&addr).await;
    let value = |name: &str| metric_required(&text, name);
    assert!(value("shoal_mount_read_bytes_total") >= (3 << 20) as f64);
    assert!(value("shoal_client_fallbacks_total{cause=\"no_nodes\"}") >= 3.0);
    assert!(
        text.contains("shoal_mount_op_seconds_bucket{le="),
        "op latencies exported"
    );
}

#[test]
fn help_tells_the_truth() {
    let out = Command::new(MOUNT).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--foreground",
        "--allow-other",
        "--uid",
        "--gid",
        "--file-mode",
        "--dir-mode",
        "--metadata-ttl",
        "--cache-size",
        "--read-window",
        "--prefetch-files",
        "--metrics-addr",
        "-o <OPTIONS>",
        "--config",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

/// `fusermount3 -u`, retried for a while: another test of this binary may be
/// starting a process at this moment, and a child between fork and exec holds a
/// copy of every descriptor the test process had open, so the mount can be busy
/// for that instant.
fn unmount(mnt: &std::path::Path) {
    let unmounted = (0..50).any(|_| {
        let ok = Command::new("fusermount3")
            .arg("-u")
            .arg(mnt)
            .status()
            .unwrap()
            .success();
        if !ok {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        ok
    });
    assert!(unmounted, "{} still busy after 5 s", mnt.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernel_reads_ahead_as_far_as_the_reader_does() {
    let o = origin().await;
    // A cluster of 2 MiB blocks (its node is down: reads come from the origin) and a
    // read window from the command line.
    let toml = mount_toml(
        &o,
        &[],
        "[cluster]\nnodes = [\"127.0.0.1:1\"]\nblock_size = \"2MiB\"\nread_window = 8\n",
    );
    let m = Mount::start(&toml, BUCKET, &["--read-window", "3"]);
    let dev = sh_ok(&format!("mountpoint -d {}", q(&m.mnt))).await;
    let kb = sh_ok(&format!("cat /sys/class/bdi/{}/read_ahead_kb", dev.trim())).await;
    assert_eq!(kb.trim(), "6144", "3 blocks of 2 MiB");
}
