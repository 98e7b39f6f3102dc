//! Objects in GLACIER or DEEP_ARCHIVE that are not restored: opening one fails
//! with "Permission denied" and one log line naming the key and what to do; a
//! restored one reads; a directory walk fetches files ahead across an archived
//! one and never fetches the archived one.

use crate::common::*;
use shoal_testorigin::ObjectAttrs;

fn archived(restored: bool) -> ObjectAttrs {
    ObjectAttrs {
        storage_class: Some("GLACIER".into()),
        restored,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrestored_archived_object_is_permission_denied_and_logged_once() {
    let o = origin().await;
    let body = data(200_000, 1);
    // In listing order: five plain files, the frozen one, four more, a thawed one.
    let plain: Vec<String> = (0..10)
        .filter(|i| *i != 5)
        .map(|i| format!("p{i:02}"))
        .collect();
    for name in &plain {
        o.put(BUCKET, &format!("cold/{name}"), body.clone());
    }
    o.put_with(BUCKET, "cold/p05-frozen", body.clone(), archived(false));
    o.put_with(BUCKET, "cold/q-thawed", body.clone(), archived(true));
    let toml = mount_toml(&o, &[], "");
    let metrics = free_addr();
    let addr = metrics.clone();
    let m = tokio::task::spawn_blocking(move || {
        Mount::start_logged(&toml, BUCKET, &["--metrics-addr", &addr])
    })
    .await
    .unwrap();
    let mnt = m.mnt.clone();
    let walk: Vec<String> = plain.iter().cloned().chain(["q-thawed".into()]).collect();
    let (cat1, cat2, walked) = tokio::task::spawn_blocking(move || {
        let cat = || sh_blocking(&format!("cat {}", q(&mnt.join("cold/p05-frozen"))));
        let first = cat();
        let second = cat();
        // A walk in listing order, as `cp -r` or `tar` does it (the directory
        // listed, then its files opened in order), stepping over the frozen file:
        // read-ahead runs across it and must leave it alone.
        assert_eq!(std::fs::read_dir(mnt.join("cold")).unwrap().count(), 11);
        let walked: Vec<Vec<u8>> = walk
            .iter()
            .map(|name| std::fs::read(mnt.join("cold").join(name)).unwrap())
            .collect();
        (first, second, walked)
    })
    .await
    .unwrap();
    for c in [&cat1, &cat2] {
        assert!(!c.status.success());
        let err = String::from_utf8_lossy(&c.stderr);
        assert!(err.contains("Permission denied"), "{err}");
    }
    for w in &walked {
        assert!(*w == body, "the readable ones read byte-exact");
    }
    let text = scrape(&metrics).await;
    let ahead = metric_required(&text, "shoal_mount_prefetched_files_total");
    assert!(
        ahead >= 6.0,
        "the walk fetched files ahead, across the frozen one: {ahead}"
    );
    let log = m.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cold/p05-frozen"))
        .collect();
    assert_eq!(lines.len(), 1, "one line for two tries: {log}");
    assert!(
        lines[0].contains("GLACIER") && lines[0].contains("restore"),
        "{}",
        lines[0]
    );
    assert_eq!(
        o.stats.snapshot().gets_of(BUCKET, "cold/p05-frozen"),
        0,
        "nobody asked the origin for the frozen object's bytes"
    );
    tokio::task::spawn_blocking(move || drop(m)).await.unwrap();
}

fn sh_blocking(cmd: &str) -> std::process::Output {
    std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .unwrap()
}
