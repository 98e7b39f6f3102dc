//! The plugin's `/metrics` (`--metrics-addr`): its own families, on the page
//! from the start with their labels at 0, and every mount's own, labelled with
//! its volume and mount. A mount that cannot start fails its publish with its
//! own words, which kubelet puts in the pod's events.

use tonic::Code;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_serves_its_metrics_and_every_mounts() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let n = NodeProcess::start(dir.path(), "n0", &node_toml(&o, "", ""));
    let cfg = dir.path().join("mount.toml");
    std::fs::write(&cfg, zoned_mount_toml(&o, &[(&n, ZONE)], "")).unwrap();
    let addr = free_addr();
    let plugin = Plugin::start(dir.path(), &cfg, &[&format!("--metrics-addr={addr}")], &[]);
    let (_, mut node) = plugin.clients().await;

    let page = scrape(&addr).await;
    for series in [
        "shoal_csi_volumes",
        "shoal_csi_mounts",
        "shoal_csi_shares",
        "shoal_csi_binds{kind=\"stage\"}",
        "shoal_csi_launches_total{result=\"failed\"}",
        "shoal_csi_failures_total{call=\"publish\",reason=\"mount\"}",
        "shoal_csi_failures_total{call=\"stats\",reason=\"not_found\"}",
        "shoal_csi_handovers_total{result=\"done\"}",
        "shoal_csi_mounts_behind",
    ] {
        assert_eq!(metric(&page, series), 0.0, "{series}");
    }
    let driver = shoal_mount::build::digest_of(&bin("shoal-mount")).unwrap();
    let driver_line = page
        .lines()
        .find(|l| l.starts_with("shoal_csi_driver_version{"))
        .unwrap_or_else(|| panic!("no driver version in {page}"));
    assert!(
        driver_line.contains(&format!("+{driver}\"}} 1")),
        "{driver_line}"
    );

    // A mount of its own (an inline volume) and a share with its stage and a publish.
    let body = data(500_000, 61);
    o.put(BUCKET, "m/f.bin", body.clone());
    let attrs = [("bucket", BUCKET), ("prefix", "m")];
    let own = pod_volume_dir(dir.path(), "pod-m1", "pv-m1");
    node.node_publish_volume(publish("vol-m1", &own, &attrs, &[]))
        .await
        .unwrap();
    let staging = staging_dir(dir.path(), "pv-m2");
    let bound = pod_volume_dir(dir.path(), "pod-m2", "pv-m2");
    node.node_stage_volume(stage("vol-m2", &staging, &attrs, &[]))
        .await
        .unwrap();
    node.node_publish_volume(publish_staged("vol-m2", &staging, &bound, &attrs, &[]))
        .await
        .unwrap();
    for t in [&own, &bound] {
        assert_eq!(std::fs::read(t.join("f.bin")).unwrap(), body);
    }
    let page = scrape(&addr).await;
    assert_eq!(metric(&page, "shoal_csi_volumes"), 2.0);
    assert_eq!(metric(&page, "shoal_csi_mounts"), 2.0);
    assert_eq!(metric(&page, "shoal_csi_shares"), 1.0);
    assert_eq!(metric(&page, "shoal_csi_binds{kind=\"stage\"}"), 1.0);
    assert_eq!(metric(&page, "shoal_csi_binds{kind=\"publish\"}"), 1.0);
    assert_eq!(
        metric(&page, "shoal_csi_launches_total{result=\"started\"}"),
        2.0
    );
    // Each mount's own metrics, labelled with its volume and where it is.
    let own_label = format!("volume=\"vol-m1\",mount=\"{}\"", own.display());
    let reads = metric(
        &page,
        &format!("shoal_mount_read_bytes_total{{{own_label}}}"),
    );
    assert!(reads >= body.len() as f64, "{reads}");
    let shared = page
        .lines()
        .find(|l| l.starts_with("shoal_mount_read_bytes_total{volume=\"vol-m2\""))
        .unwrap_or_else(|| panic!("the share's reads in {page}"));
    assert!(
        shared.contains(&plugin.state.join("shares").display().to_string()),
        "{shared}"
    );
    assert!(
        page.contains(&format!("shoal_mount_build_info{{{own_label},version=")),
        "{page}"
    );
    // Each family once: one # TYPE for the series of both mounts.
    assert_eq!(
        page.matches("# TYPE shoal_mount_read_bytes_total counter")
            .count(),
        1
    );
    for (volume, path) in [
        ("vol-m1", own.display().to_string()),
        ("vol-m2", String::new()),
    ] {
        let line = page
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "shoal_csi_mount_version{{volume=\"{volume}\",mount=\"{path}"
                ))
            })
            .unwrap_or_else(|| panic!("{volume}'s version in {page}"));
        assert!(line.ends_with(&format!("+{driver}\"}} 1")), "{line}");
    }
    // Prometheus asks for OpenMetrics: one page, ended once.
    let open = reqwest::Client::new()
        .get(format!("http://{addr}/metrics"))
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(open.ends_with("# EOF\n") && open.matches("# EOF").count() == 1);
    assert!(open.contains("# TYPE shoal_mount_read_bytes counter"));

    // A mount that cannot start: the bucket does not exist.
    let bad = pod_volume_dir(dir.path(), "pod-bad", "pv-bad");
    let (code, msg) = refused(
        node.node_publish_volume(publish(
            "vol-bad",
            &bad,
            &[("bucket", "no-such-bucket-here")],
            &[],
        ))
        .await,
    );
    eprintln!("what kubelet is told: {msg}");
    assert_eq!(code, Code::Internal, "{msg}");
    assert!(msg.contains("no-such-bucket-here"), "{msg}");
    assert!(
        msg.contains("NoSuchBucket") || msg.contains("does not exist"),
        "{msg}"
    );
    assert!(
        msg.len() < 1024,
        "{} bytes: kubelet's event keeps it whole",
        msg.len()
    );
    assert!(!bad.exists());
    let page = scrape(&addr).await;
    assert_eq!(
        metric(&page, "shoal_csi_launches_total{result=\"failed\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &page,
            "shoal_csi_failures_total{call=\"publish\",reason=\"mount\"}"
        ),
        1.0
    );
    // Bad input is counted as such.
    let (code, _) = refused(
        node.node_publish_volume(publish("vol-bad", &bad, &[("bucket", BUCKET)], &["nope"]))
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    let page = scrape(&addr).await;
    assert_eq!(
        metric(
            &page,
            "shoal_csi_failures_total{call=\"publish\",reason=\"invalid\"}"
        ),
        1.0
    );

    node.node_unpublish_volume(unpublish("vol-m1", &own))
        .await
        .unwrap();
    node.node_unpublish_volume(unpublish("vol-m2", &bound))
        .await
        .unwrap();
    node.node_unstage_volume(unstage("vol-m2", &staging))
        .await
        .unwrap();
    let page = scrape(&addr).await;
    assert_eq!(metric(&page, "shoal_csi_mounts"), 0.0);
    assert!(!page.contains("shoal_mount_read_bytes_total{"), "{page}");
}
