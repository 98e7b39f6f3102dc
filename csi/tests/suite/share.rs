//! Staged volumes: one mount per (volume, options, identity) on a host, each
//! publish a read-only bind of it, the mount gone with its last user.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::common::*;
use crate::node::{origin_fetches, rig, sh};

/// The distinct control sockets of the `shoal-mount` processes running on
/// `state`'s files: one per keeper, however many processes it runs.
fn keepers(state: &Path) -> Vec<String> {
    let state = state.display().to_string();
    let mut out: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter_map(|c| {
            let args: Vec<String> = c
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let i = args.iter().position(|a| a == "--control-socket")?;
            let sock = args.get(i + 1)?;
            sock.starts_with(&state).then(|| sock.clone())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_publishes_of_a_staged_volume_share_one_mount_until_the_last_goes() {
    let r = rig().await;
    let (_, mut node) = r.plugin.clients().await;
    let attrs = [("bucket", BUCKET), ("prefix", "data")];
    let flags = ["metadata-ttl=30s"];
    let staging = staging_dir(r.dir.path(), "pv-shared");
    node.node_stage_volume(stage("vol-s", &staging, &attrs, &flags))
        .await
        .unwrap();
    // Staging twice is one stage.
    node.node_stage_volume(stage("vol-s", &staging, &attrs, &flags))
        .await
        .unwrap();
    assert!(is_mounted(&staging), "the stage mounts the volume");
    let targets: Vec<PathBuf> = (0..16)
        .map(|i| pod_volume_dir(r.dir.path(), &format!("pod{i}"), "pv-shared"))
        .collect();
    for t in &targets {
        node.node_publish_volume(publish_staged("vol-s", &staging, t, &attrs, &flags))
            .await
            .unwrap();
    }
    assert_eq!(
        keepers(&r.plugin.state).len(),
        1,
        "one keeper for 16 publishes"
    );
    assert_eq!(entries(&r.plugin.state.join("shares")), 1);
    // One FUSE connection behind every target: one device, so one inode per
    // file and one copy of it in the page cache.
    let devs: std::collections::BTreeSet<u64> = targets
        .iter()
        .chain([&staging])
        .map(|t| std::fs::metadata(t.join("a.bin")).unwrap().dev())
        .collect();
    assert_eq!(devs.len(), 1, "targets on devices {devs:?}");
    // Read-only, whatever the share is.
    let w = sh(&format!("echo x > {}/new", q(&targets[3])));
    assert!(
        String::from_utf8_lossy(&w.stderr).contains("Read-only"),
        "a write through a bind fails"
    );
    // Every target reads byte for byte; the nodes fetched each block once,
    // and the origin sent nothing else (the mount read through the nodes).
    let before: f64 = {
        let mut n = 0.0;
        for x in &r.nodes {
            n += origin_fetches(x).await;
        }
        n
    };
    let gets = r.origin.stats.snapshot().object_gets() as f64;
    let a = &r.files[0];
    for t in &targets {
        assert!(
            std::fs::read(t.join("a.bin")).unwrap() == a.1,
            "{}",
            t.display()
        );
    }
    let mut fetched = -before;
    for x in &r.nodes {
        fetched += origin_fetches(x).await;
    }
    let blocks = a.1.len().div_ceil(1 << 20) as f64;
    // Both bounds: fewer is a mount that read the origin itself, more a
    // block fetched twice.
    assert_eq!(
        fetched, blocks,
        "blocks the nodes fetched for a file of {blocks} read through 16 targets"
    );
    assert_eq!(
        r.origin.stats.snapshot().object_gets() as f64 - gets,
        fetched,
        "origin GETs beside the nodes' fetches: the mount asked the origin itself"
    );

    // 15 unpublishes while a reader goes on in the 16th.
    let last = targets[15].clone();
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let reader = {
        let (stop, reads, failed) = (stop.clone(), reads.clone(), failed.clone());
        let files: Vec<(String, bytes::Bytes)> = r
            .files
            .iter()
            .filter(|(k, _)| k.starts_with("data/"))
            .cloned()
            .collect();
        let last = last.clone();
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                for (k, b) in &files {
                    match std::fs::read(last.join(k.strip_prefix("data/").unwrap())) {
                        Ok(got) if got == *b => reads.fetch_add(1, Relaxed),
                        _ => failed.fetch_add(1, Relaxed),
                    };
                }
            }
        })
    };
    for t in &targets[..15] {
        node.node_unpublish_volume(unpublish("vol-s", t))
            .await
            .unwrap();
        assert!(!t.exists(), "{} is removed", t.display());
    }
    // The reader reads on after the last of them.
    let after = reads.load(Relaxed);
    wait_until(
        "the reader reads on",
        std::time::Duration::from_secs(20),
        || reads.load(Relaxed) > after + 3,
    );
    stop.store(true, Relaxed);
    reader.join().unwrap();
    assert_eq!(failed.load(Relaxed), 0, "failed reads in the 16th target");
    assert_eq!(keepers(&r.plugin.state).len(), 1);

    // The stage and the last publish go: so does the mount.
    node.node_unstage_volume(unstage("vol-s", &staging))
        .await
        .unwrap();
    assert!(!is_mounted(&staging));
    assert!(staging.is_dir(), "the staging directory is kubelet's");
    assert_eq!(
        keepers(&r.plugin.state).len(),
        1,
        "the last publish holds it"
    );
    node.node_unpublish_volume(unpublish("vol-s", &last))
        .await
        .unwrap();
    wait_until(
        "the keeper ends",
        std::time::Duration::from_secs(10),
        || keepers(&r.plugin.state).is_empty(),
    );
    for d in ["shares", "volumes", "binds"] {
        assert_eq!(entries(&r.plugin.state.join(d)), 0, "left in {d}");
    }
    // Unstaging again is fine.
    node.node_unstage_volume(unstage("vol-s", &staging))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_options_get_a_mount_of_their_own_and_shares_survive_a_plugin_restart() {
    let mut r = rig().await;
    let (_, mut node) = r.plugin.clients().await;
    let attrs = [("bucket", BUCKET), ("prefix", "data")];
    let staging = staging_dir(r.dir.path(), "pv-two");
    node.node_stage_volume(stage("vol-t", &staging, &attrs, &[]))
        .await
        .unwrap();
    let plain = pod_volume_dir(r.dir.path(), "pa", "pv-two");
    node.node_publish_volume(publish_staged("vol-t", &staging, &plain, &attrs, &[]))
        .await
        .unwrap();
    // Other mount options: another keeper.
    let other = pod_volume_dir(r.dir.path(), "pb", "pv-two");
    node.node_publish_volume(publish_staged(
        "vol-t",
        &staging,
        &other,
        &attrs,
        &["uid=1000"],
    ))
    .await
    .unwrap();
    assert_eq!(keepers(&r.plugin.state).len(), 2);
    let listed = sh(&format!("ls -ln {}", q(&other)));
    assert!(String::from_utf8_lossy(&listed.stdout).contains(" 1000 "));
    // The same target with other options: ALREADY_EXISTS, nothing changed.
    let (code, msg) = refused(
        node.node_publish_volume(publish_staged(
            "vol-t",
            &staging,
            &plain,
            &attrs,
            &["uid=7"],
        ))
        .await,
    );
    assert_eq!(code, tonic::Code::AlreadyExists, "{msg}");
    // Bad input at a stage: INVALID_ARGUMENT, nothing mounted.
    let bad = staging_dir(r.dir.path(), "pv-bad");
    let (code, msg) = refused(
        node.node_stage_volume(stage("vol-b", &bad, &[("bucket", "")], &[]))
            .await,
    );
    assert_eq!(code, tonic::Code::InvalidArgument, "{msg}");
    let (code, msg) = refused(
        node.node_stage_volume(stage("vol-b", Path::new("relative/path"), &attrs, &[]))
            .await,
    );
    assert_eq!(code, tonic::Code::InvalidArgument, "{msg}");
    assert!(!is_mounted(&bad));

    // A restart of the plugin (SIGKILL): the shares serve on, and the plugin
    // still knows who uses them.
    r.plugin.kill_and_restart();
    let (_, mut node) = r.plugin.clients().await;
    assert!(std::fs::read(plain.join("small.txt")).unwrap() == r.files[1].1);
    node.node_unpublish_volume(unpublish("vol-t", &other))
        .await
        .unwrap();
    wait_until(
        "the other keeper ends",
        std::time::Duration::from_secs(10),
        || keepers(&r.plugin.state).len() == 1,
    );
    node.node_unstage_volume(unstage("vol-t", &staging))
        .await
        .unwrap();
    assert!(std::fs::read(plain.join("small.txt")).unwrap() == r.files[1].1);
    node.node_unpublish_volume(unpublish("vol-t", &plain))
        .await
        .unwrap();
    wait_until(
        "the last keeper ends",
        std::time::Duration::from_secs(10),
        || keepers(&r.plugin.state).is_empty(),
    );
}
