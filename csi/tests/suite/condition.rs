//! NodeGetVolumeStats' condition from a look at the mount: healthy while it
//! serves, abnormal with a message once its server is gone and none can start
//! (its calls fail with EIO), and once it is unmounted underneath the plugin.

use std::path::Path;
use std::time::{Duration, Instant};

use shoal_csi::proto;
use shoal_csi::proto::node_client::NodeClient;
use tonic::transport::Channel;

use crate::common::*;

async fn condition(
    node: &mut NodeClient<Channel>,
    volume: &str,
    target: &Path,
) -> proto::VolumeCondition {
    // The plugin's look is bounded (a stat, a keeper's answer): a call that
    // waits on anything else (a keeper busy starting servers) hangs kubelet.
    let call = node.node_get_volume_stats(proto::NodeGetVolumeStatsRequest {
        volume_id: volume.into(),
        volume_path: target.display().to_string(),
        staging_target_path: String::new(),
    });
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("NodeGetVolumeStats answers within 10 s")
        .unwrap()
        .into_inner()
        .volume_condition
        .expect("a condition")
}

/// The condition once `ok` holds of it, within `limit`; panics with the last.
async fn condition_until(
    node: &mut NodeClient<Channel>,
    volume: &str,
    target: &Path,
    limit: Duration,
    ok: impl Fn(&proto::VolumeCondition) -> bool,
) -> proto::VolumeCondition {
    let deadline = Instant::now() + limit;
    loop {
        let c = condition(node, volume, target).await;
        if ok(&c) {
            return c;
        }
        assert!(Instant::now() < deadline, "within {limit:?}, last: {c:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_stats_see_a_mount_unserved_or_gone() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let n = NodeProcess::start(dir.path(), "n0", &node_toml(&o, "", ""));
    o.put(BUCKET, "s/f.txt", data(1000, 3));
    let cfg = dir.path().join("mount.toml");
    std::fs::write(&cfg, zoned_mount_toml(&o, &[(&n, ZONE)], "")).unwrap();
    let plugin = Plugin::start(dir.path(), &cfg, &[], &[]);
    let (_, mut node) = plugin.clients().await;
    let target = pod_volume_dir(dir.path(), "p1", "pv1");
    let attrs = [("bucket", BUCKET), ("prefix", "s")];
    node.node_publish_volume(publish("vol-a", &target, &attrs, &[]))
        .await
        .unwrap();

    let c = condition(&mut node, "vol-a", &target).await;
    assert!(!c.abnormal, "a mount that serves is healthy: {c:?}");

    // Its server killed, and its config broken so that none can start again:
    // the keeper answers the mount's calls with EIO.
    let vdir = std::fs::read_dir(plugin.state.join("volumes"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .next()
        .expect("the volume's directory");
    let copy = vdir.join("mount.toml");
    let good = std::fs::read(&copy).unwrap();
    std::fs::write(&copy, "this is [not a config").unwrap();
    let status = shoal_mount::keeper::ask(&vdir.join("control.sock"), "status").unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    signal(status["server"].as_u64().unwrap() as u32, "-KILL");
    let c = condition_until(&mut node, "vol-a", &target, Duration::from_secs(20), |c| {
        c.abnormal
    })
    .await;
    println!("unserved: {}", c.message);
    assert!(!c.message.is_empty(), "it says why");
    // Wait for the EIO itself, past the keeper's tries.
    let c = condition_until(&mut node, "vol-a", &target, Duration::from_secs(20), |c| {
        c.message.contains("Input/output error")
    })
    .await;
    assert!(c.abnormal, "{c:?}");

    // A config that works again: a server starts, and the volume is healthy.
    std::fs::write(&copy, good).unwrap();
    condition_until(&mut node, "vol-a", &target, Duration::from_secs(40), |c| {
        !c.abnormal
    })
    .await;
    assert_eq!(std::fs::read(target.join("f.txt")).unwrap(), data(1000, 3));

    // Unmounted underneath the plugin.
    let out = std::process::Command::new("umount")
        .arg("-l")
        .arg(&target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = condition(&mut node, "vol-a", &target).await;
    assert!(c.abnormal, "a mount gone is abnormal: {c:?}");
    assert!(c.message.contains("is not mounted"), "{}", c.message);

    node.node_unpublish_volume(unpublish("vol-a", &target))
        .await
        .unwrap();
}
