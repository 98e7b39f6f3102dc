//! Objects in GLACIER or DEEP_ARCHIVE that are not restored: opening one fails
//! with "Permission denied" and one log line naming the key and what to do; a
//! restored one reads; a directory walk never fetches the archived ones ahead.

mod common;

use common::*;
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
    o.put(BUCKET, "cold/a-plain", body.clone());
    o.put_with(BUCKET, "cold/b-frozen", body.clone(), archived(false));
    o.put_with(BUCKET, "cold/c-thawed", body.clone(), archived(true));
    o.put(BUCKET, "cold/d-plain", body.clone());
    let toml = mount_toml(&o, &[], "");
    let m = tokio::task::spawn_blocking(move || Mount::start_logged(&toml, BUCKET, &[]))
        .await
        .unwrap();
    let mnt = m.mnt.clone();
    let (cat1, cat2, walked) = tokio::task::spawn_blocking(move || {
        let cat = || sh_blocking(&format!("cat {}", q(&mnt.join("cold/b-frozen"))));
        let first = cat();
        let second = cat();
        // A walk in listing order: the frozen file is skipped by read-ahead.
        let mut walked = Vec::new();
        for name in ["a-plain", "c-thawed", "d-plain"] {
            walked.push(std::fs::read(mnt.join("cold").join(name)).unwrap());
        }
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
    let log = m.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cold/b-frozen"))
        .collect();
    assert_eq!(lines.len(), 1, "one line for two tries: {log}");
    assert!(
        lines[0].contains("GLACIER") && lines[0].contains("restore"),
        "{}",
        lines[0]
    );
    assert_eq!(
        o.stats.snapshot().gets_of(BUCKET, "cold/b-frozen"),
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
