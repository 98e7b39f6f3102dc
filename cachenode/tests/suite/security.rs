//! Security checks: expired and forged presigned URLs, keys that try to leave the
//! bucket or the data directory, and secrets that must never reach the logs.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use shoal::store::{ByteRange, GetObject};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presigned_urls_expire_and_cannot_be_forged() {
    let origin = origin().await;
    let node = node_for(&origin, "", "").await;
    origin.put(BUCKET, "p", data(100, 1));
    let c = client(node.addr);
    let http = reqwest::Client::new();
    let url = c
        .presign_get(BUCKET, "p", Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);
    // By design Range is outside the signature: any range of the signed object.
    let r = http
        .get(&url)
        .header("range", "bytes=90-99")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    // ...but never another object: the key is signed.
    let other = url.replacen("/p?", "/q?", 1);
    assert_eq!(http.get(&other).send().await.unwrap().status(), 403);
    // A tampered signature.
    let flipped = if url.ends_with('0') { '1' } else { '0' };
    let forged = format!("{}{flipped}", &url[..url.len() - 1]);
    assert_eq!(http.get(&forged).send().await.unwrap().status(), 403);
    // Expired: refused once its second is over (polled, with a deadline).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = http.get(&url).send().await.unwrap().status();
        if status == 403 {
            break;
        }
        assert_eq!(status, 200);
        assert!(
            std::time::Instant::now() < deadline,
            "an expired URL still worked"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_writes_outside_the_data_dir() {
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let node = node_for(
        &origin,
        "",
        &format!(
            "[cache]\ndisk_size = \"64MiB\"\ndata_dir = \"{}\"",
            data_dir.display()
        ),
    )
    .await;
    let c = client(node.addr);
    let keys = [
        "..%2F..%2Fescape",
        "a/../../../../tmp/shoal-escape",
        "/etc/passwd",
        "..\\..\\win",
        "x/./y",
    ];
    let mut served = 0;
    for k in keys {
        origin.put(BUCKET, k, data(10, 2));
        // Either refused (dot segments) or served, but any file is under data_dir.
        let got = c
            .get_bytes(&GetObject::new(BUCKET, k).range(ByteRange::span(0, 10)))
            .await;
        served += usize::from(got.is_ok());
    }
    // Keys that were only refused would leave no file to check.
    assert!(served > 0, "none of {keys:?} was served");
    let all_files = || {
        let mut files = Vec::new();
        let mut stack = vec![dir.path().to_path_buf()];
        while let Some(p) = stack.pop() {
            for e in std::fs::read_dir(&p).unwrap().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else {
                    files.push(e.path());
                }
            }
        }
        files
    };
    let blocks = |files: &[std::path::PathBuf]| {
        files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "blk"))
            .count()
    };
    // Blocks reach the disk after their answer has gone: wait for every key
    // served to have its one block file, and for no write to be under way.
    wait_for(
        "a block file for every key served",
        Duration::from_secs(10),
        || async {
            let files = all_files();
            let tmp = |f: &std::path::PathBuf| {
                f.extension()
                    .is_some_and(|e| e.to_string_lossy().ends_with("tmp"))
            };
            blocks(&files) == served && !files.iter().any(tmp)
        },
    )
    .await;
    let files = all_files();
    assert_eq!(blocks(&files), served, "block files, one per key served");
    // The versions the tier knows have a fixed name; every other file is a block.
    for f in files
        .iter()
        .filter(|f| **f != data_dir.join("versions.log"))
    {
        assert!(
            f.starts_with(data_dir.join("blocks")),
            "{} is outside the data dir",
            f.display()
        );
        assert!(f.extension().is_some_and(|e| e == "blk"), "{}", f.display());
    }
    assert!(!std::path::Path::new("/tmp/shoal-escape").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_appear_in_logs_or_metrics() {
    let origin = origin().await;
    origin.put(BUCKET, "s", data(3 << 20, 3));
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, node_toml(&origin, "", "")).unwrap();
    let mut child = Command::new(bin("shoal-node"))
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "debug")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    let addr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("node did not start");
        let found = line
            .split("listening on http://")
            .nth(1)
            .map(|a| a.trim().to_owned());
        log.push(line);
        if let Some(a) = found {
            break a;
        }
    };
    let good = node_s3_client(&addr, NODE_KEY, NODE_SECRET);
    good.get_bytes(&GetObject::new(BUCKET, "s")).await.unwrap();
    let _ = node_s3_client(&addr, NODE_KEY, "a-wrong-secret-value")
        .get_bytes(&GetObject::new(BUCKET, "s"))
        .await;
    let _ = good.get_bytes(&GetObject::new(BUCKET, "missing")).await;
    let metrics = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(500)) {
        log.push(l);
    }
    let text = log.join("\n");
    assert!(
        text.len() > 1000,
        "debug logging produced too little to judge: {text}"
    );
    for secret in [
        NODE_SECRET,
        origin.options.secret_key.as_str(),
        "a-wrong-secret-value",
    ] {
        assert!(!text.contains(secret), "a secret is in the logs");
        assert!(!metrics.contains(secret), "a secret is in the metrics");
    }
}
