//! Identity and Node services as csi-sanity's node cases hold them (kubernetes-csi
//! csi-test `pkg/sanity`: identity.go and node.go, for a node-only plugin), and
//! the publish and unpublish paths kubelet takes, with real mounts read by
//! ordinary tools.

use tonic::Code;

use crate::common::*;
use shoal_csi::proto;

/// The cluster, the origin with a small tree, a mount config, and the plugin.
pub(crate) struct Rig {
    pub origin: Origin,
    pub nodes: Vec<NodeProcess>,
    pub dir: tempfile::TempDir,
    pub plugin: Plugin,
    pub files: Vec<(String, bytes::Bytes)>,
}

/// Two nodes in the plugin's zone.
pub(crate) async fn rig() -> Rig {
    rig_in(&[ZONE, ZONE], &[]).await
}

/// A node in each of `zones`, listed with its zone in the mount config, and the
/// plugin started with `plugin_args`.
async fn rig_in(zones: &[&str], plugin_args: &[&str]) -> Rig {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<NodeProcess> = (0..zones.len())
        .map(|i| NodeProcess::start(dir.path(), &format!("n{i}"), &node_toml(&o, "", "")))
        .collect();
    let files: Vec<(String, bytes::Bytes)> = [
        ("data/a.bin", 3 << 20),
        ("data/small.txt", 1000),
        ("data/sub/b.bin", 700_000),
        ("other/c.txt", 10),
    ]
    .iter()
    .enumerate()
    .map(|(i, (k, n))| (k.to_string(), data(*n, 40 + i as u64)))
    .collect();
    for (k, b) in &files {
        o.put(BUCKET, k, b.clone());
    }
    let cfg = dir.path().join("mount.toml");
    let zoned: Vec<(&NodeProcess, &str)> = nodes.iter().zip(zones.iter().copied()).collect();
    std::fs::write(&cfg, zoned_mount_toml(&o, &zoned, "")).unwrap();
    let plugin = Plugin::start(dir.path(), &cfg, plugin_args, &[]);
    Rig {
        origin: o,
        nodes,
        dir,
        plugin,
        files,
    }
}

pub(crate) fn sh(cmd: &str) -> std::process::Output {
    std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_and_node_answer_as_csi_sanity_expects() {
    let r = rig().await;
    let (mut id, mut node) = r.plugin.clients().await;

    let info = id
        .get_plugin_info(proto::GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "csi.shoal");
    let name_ok = info.name.len() <= 63
        && info.name.starts_with(|c: char| c.is_ascii_alphabetic())
        && info.name.ends_with(|c: char| c.is_ascii_alphabetic())
        && info
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
    assert!(name_ok, "{:?} breaks the name rule", info.name);
    assert!(!info.vendor_version.is_empty());
    let caps = id
        .get_plugin_capabilities(proto::GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    for c in &caps {
        let Some(proto::plugin_capability::Type::Service(s)) = &c.r#type else {
            panic!("a capability without a type: {c:?}");
        };
        assert_ne!(s.r#type, 0, "UNKNOWN is not a capability");
    }
    let probe = id.probe(proto::ProbeRequest {}).await.unwrap().into_inner();
    assert_eq!(probe.ready, Some(true), "ready: it can mount");

    let ncaps = node
        .node_get_capabilities(proto::NodeGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    assert!(!ncaps.is_empty());
    assert!(
        ncaps.iter().all(|c| c.r#type.is_some()),
        "every one has its rpc"
    );
    use proto::node_service_capability::{rpc::Type, Rpc, Type as Cap};
    assert!(
        ncaps.iter().any(|c| matches!(&c.r#type,
            Some(Cap::Rpc(Rpc { r#type })) if *r#type == Type::StageUnstageVolume as i32)),
        "kubelet stages a volume once per node before its publishes: {ncaps:?}"
    );
    let ninfo = node
        .node_get_info(proto::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ninfo.node_id, "node-1");
    assert!(ninfo.max_volumes_per_node >= 0);
    let topo = ninfo.accessible_topology.expect("a zone, so a topology");
    assert_eq!(
        topo.segments
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("zone-a")
    );

    // The argument checks, each before anything is made on the node.
    let target = pod_volume_dir(r.dir.path(), "p0", "pv0");
    let no_id = proto::NodePublishVolumeRequest::default();
    assert_eq!(
        refused(node.node_publish_volume(no_id).await).0,
        Code::InvalidArgument
    );
    let no_target = proto::NodePublishVolumeRequest {
        volume_id: "fake-vol-id-1".into(),
        ..Default::default()
    };
    assert_eq!(
        refused(node.node_publish_volume(no_target).await).0,
        Code::InvalidArgument
    );
    let mut no_cap = publish("fake-vol-id-1", &target, &[], &[]);
    no_cap.volume_capability = None;
    assert_eq!(
        refused(node.node_publish_volume(no_cap).await).0,
        Code::InvalidArgument
    );
    assert_eq!(
        refused(
            node.node_unpublish_volume(proto::NodeUnpublishVolumeRequest::default())
                .await
        )
        .0,
        Code::InvalidArgument
    );
    let no_path = proto::NodeUnpublishVolumeRequest {
        volume_id: "fake-vol-id-1".into(),
        target_path: String::new(),
    };
    assert_eq!(
        refused(node.node_unpublish_volume(no_path).await).0,
        Code::InvalidArgument
    );
    let stats = |id: &str, path: &str| proto::NodeGetVolumeStatsRequest {
        volume_id: id.into(),
        volume_path: path.into(),
        staging_target_path: String::new(),
    };
    assert_eq!(
        refused(node.node_get_volume_stats(stats("", "some/path")).await).0,
        Code::InvalidArgument
    );
    assert_eq!(
        refused(node.node_get_volume_stats(stats("fake-vol-id-1", "")).await).0,
        Code::InvalidArgument
    );
    assert_eq!(
        refused(
            node.node_get_volume_stats(stats("fake-vol-id-1", "some/path"))
                .await
        )
        .0,
        Code::NotFound
    );
    assert!(!target.exists(), "no argument check left the target behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_reads_byte_exact_is_idempotent_and_unpublish_cleans_up() {
    let r = rig().await;
    let (_, mut node) = r.plugin.clients().await;
    let target = pod_volume_dir(r.dir.path(), "p1", "pv1");
    let attrs = [("bucket", BUCKET), ("prefix", "data")];
    let flags = [
        "metadata-ttl=30s",
        "uid=1000",
        "allow-other",
        "cache-size=64MiB",
    ];
    node.node_publish_volume(publish("vol-1", &target, &attrs, &flags))
        .await
        .unwrap();
    assert!(is_mounted(&target));
    // Byte for byte, with the tools people use.
    let mirror = r.dir.path().join("mirror");
    for (k, b) in &r.files {
        let p = mirror.join(k);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b).unwrap();
    }
    let out = sh(&format!(
        "diff -r {} {} && md5sum {}/a.bin && cat {}/sub/b.bin | wc -c",
        q(&mirror.join("data")),
        q(&target),
        q(&target),
        q(&target)
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = sh(&format!("ls -ln {}", q(&target)));
    let ls = String::from_utf8_lossy(&listed.stdout);
    assert!(ls.contains(" 1000 "), "uid=1000 shows: {ls}");
    // Read-only whatever it asks.
    let w = sh(&format!("echo x > {}/new", q(&target)));
    assert!(
        String::from_utf8_lossy(&w.stderr).contains("Read-only"),
        "writes fail"
    );

    // The same publish again: OK, nothing new.
    node.node_publish_volume(publish("vol-1", &target, &attrs, &flags))
        .await
        .unwrap();
    // Another volume, or other attributes, on a published target: ALREADY_EXISTS.
    let (code, msg) = refused(
        node.node_publish_volume(publish(
            "vol-1",
            &target,
            &[("bucket", BUCKET), ("prefix", "other")],
            &flags,
        ))
        .await,
    );
    assert_eq!(code, Code::AlreadyExists, "{msg}");
    let (code, _) = refused(
        node.node_publish_volume(publish("vol-2", &target, &attrs, &flags))
            .await,
    );
    assert_eq!(code, Code::AlreadyExists);

    // Stats of a published volume.
    let st = node
        .node_get_volume_stats(proto::NodeGetVolumeStatsRequest {
            volume_id: "vol-1".into(),
            volume_path: target.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!st.usage.is_empty());
    assert!(!st.volume_condition.unwrap().abnormal);

    // The same volume at a second target (a second pod): a mount of its own.
    let second = pod_volume_dir(r.dir.path(), "p2", "pv1");
    node.node_publish_volume(publish("vol-1", &second, &attrs, &[]))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(second.join("small.txt")).unwrap(),
        r.files[1].1
    );

    for t in [&target, &second] {
        node.node_unpublish_volume(unpublish("vol-1", t))
            .await
            .unwrap();
        assert!(!is_mounted(t));
        assert!(!t.exists(), "the target is removed");
        // Unpublishing again is fine.
        node.node_unpublish_volume(unpublish("vol-1", t))
            .await
            .unwrap();
    }
    let left: Vec<_> = std::fs::read_dir(r.plugin.state.join("volumes"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "nothing is left of the volumes: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_attributes_and_options_are_invalid_and_a_failing_mount_is_internal() {
    let r = rig().await;
    let (_, mut node) = r.plugin.clients().await;
    let target = pod_volume_dir(r.dir.path(), "p3", "pv3");
    let ok = [("bucket", BUCKET)];
    // (attributes, mount options, what the refusal must name)
    type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<&'a str>, &'a str);
    let cases: Vec<Case> = vec![
        (vec![], vec![], "bucket"),
        (vec![("prefix", "data")], vec![], "bucket"),
        (vec![("bucket", "Not_A_Bucket")], vec![], "bucket"),
        (
            vec![("bucket", BUCKET), ("colour", "blue")],
            vec![],
            "colour",
        ),
        (
            vec![("bucket", BUCKET), ("config", "/no/such/file.toml")],
            vec![],
            "config",
        ),
        (
            vec![("bucket", BUCKET), ("authenticationSource", "magic")],
            vec![],
            "authenticationSource",
        ),
        (
            vec![("bucket", BUCKET), ("memoryLimit", "lots")],
            vec![],
            "memoryLimit",
        ),
        (
            vec![("bucket", BUCKET), ("memoryLimit", "1MiB")],
            vec![],
            "memoryLimit",
        ),
        (
            vec![("bucket", BUCKET), ("cache", "tmpfs")],
            vec![],
            "cache",
        ),
        (
            vec![
                ("bucket", BUCKET),
                ("cache", "emptyDir"),
                ("cacheSize", "huge"),
            ],
            vec![],
            "cacheSize",
        ),
        (
            vec![("bucket", BUCKET), ("authenticationSource", "pod")],
            vec![],
            "podInfoOnMount",
        ),
        (ok.to_vec(), vec!["bogus=1"], "bogus"),
        (ok.to_vec(), vec!["metadata-ttl=soon"], "metadata-ttl"),
        (ok.to_vec(), vec!["disk-cache=/etc"], "disk-cache"),
    ];
    for (attrs, flags, names) in cases {
        let (code, msg) = refused(
            node.node_publish_volume(publish("vol-3", &target, &attrs, &flags))
                .await,
        );
        assert_eq!(code, Code::InvalidArgument, "{attrs:?} {flags:?}: {msg}");
        assert!(
            msg.contains(names),
            "{attrs:?} {flags:?}: {msg} should name {names}"
        );
        assert!(!target.exists(), "{attrs:?} {flags:?}: nothing made");
    }
    let mut block = publish("vol-3", &target, &ok, &[]);
    block.volume_capability = Some(proto::VolumeCapability {
        access_mode: mount_capability(&[]).access_mode,
        access_type: Some(proto::volume_capability::AccessType::Block(
            proto::volume_capability::BlockVolume {},
        )),
    });
    assert_eq!(
        refused(node.node_publish_volume(block).await).0,
        Code::InvalidArgument
    );

    // A mount that fails: INTERNAL, with the mount's own error; nothing left.
    let (code, msg) = refused(
        node.node_publish_volume(publish(
            "vol-3",
            &target,
            &[("bucket", "no-such-bucket")],
            &[],
        ))
        .await,
    );
    assert_eq!(code, Code::Internal, "{msg}");
    assert!(
        msg.contains("does not exist"),
        "the mount's own words: {msg}"
    );
    assert!(!target.exists() && !is_mounted(&target));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_volume_and_one_with_an_emptydir_disk_tier() {
    let r = rig().await;
    let (_, mut node) = r.plugin.clients().await;
    // An ephemeral inline volume: the pod spec names the attributes; kubelet adds
    // its own keys.
    let inline = pod_volume_dir(r.dir.path(), "p4", "inline");
    let attrs = [
        ("bucket", BUCKET),
        ("prefix", "data/sub"),
        ("csi.storage.k8s.io/ephemeral", "true"),
        ("csi.storage.k8s.io/pod.name", "reader"),
        ("csi.storage.k8s.io/pod.namespace", "default"),
        ("csi.storage.k8s.io/pod.uid", "p4"),
        ("csi.storage.k8s.io/serviceAccount.name", "default"),
    ];
    node.node_publish_volume(publish("csi-inline-p4", &inline, &attrs, &[]))
        .await
        .unwrap();
    assert_eq!(std::fs::read(inline.join("b.bin")).unwrap(), r.files[2].1);
    node.node_unpublish_volume(unpublish("csi-inline-p4", &inline))
        .await
        .unwrap();
    assert!(!inline.exists());

    // cache: emptyDir: a disk tier that lives and dies with the volume.
    let cached = pod_volume_dir(r.dir.path(), "p5", "pv5");
    node.node_publish_volume(publish(
        "vol-5",
        &cached,
        &[
            ("bucket", BUCKET),
            ("prefix", "data"),
            ("cache", "emptyDir"),
            ("cacheSize", "64MiB"),
        ],
        &[],
    ))
    .await
    .unwrap();
    for _ in 0..2 {
        assert_eq!(std::fs::read(cached.join("a.bin")).unwrap(), r.files[0].1);
    }
    let tiers: Vec<_> = std::fs::read_dir(r.plugin.state.join("volumes"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("cache"))
        .filter(|c| c.is_dir())
        .collect();
    assert_eq!(tiers.len(), 1, "the volume's disk tier");
    let tier = tiers[0].clone();
    wait_until(
        "the disk tier fills",
        std::time::Duration::from_secs(10),
        || dir_bytes(&tier) >= 3 << 20,
    );
    node.node_unpublish_volume(unpublish("vol-5", &cached))
        .await
        .unwrap();
    assert!(!tier.exists(), "the disk tier goes with the volume");
}

fn dir_bytes(p: &std::path::Path) -> u64 {
    let out = std::process::Command::new("du")
        .args(["-sb"])
        .arg(p)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Requests a node sent to the origin for blocks and ranges (what it fetched to
/// serve reads): series on the page from the start.
pub(crate) async fn origin_fetches(node: &NodeProcess) -> f64 {
    let page = scrape(&node.addr).await;
    ["block", "range", "object"]
        .iter()
        .map(|k| {
            metric(
                &page,
                &format!("shoal_node_origin_requests_total{{kind=\"{k}\"}}"),
            )
        })
        .sum()
}

/// Block lookups a node answered from its RAM or disk tier.
async fn node_hits(node: &NodeProcess) -> f64 {
    let page = scrape(&node.addr).await;
    metric(&page, "shoal_node_hits_total{tier=\"ram\"}")
        + metric(&page, "shoal_node_hits_total{tier=\"disk\"}")
}

/// Publishes `data/` at a fresh target of pod `pod`, reads every file of it
/// byte for byte, and returns the target (still published).
async fn publish_and_read_all(r: &Rig, pod: &str) -> std::path::PathBuf {
    let (_, mut node) = r.plugin.clients().await;
    let target = pod_volume_dir(r.dir.path(), pod, "pv-zone");
    node.node_publish_volume(publish(
        "vol-zone",
        &target,
        &[("bucket", BUCKET), ("prefix", "data")],
        &[],
    ))
    .await
    .unwrap();
    for (k, b) in r.files.iter().filter(|(k, _)| k.starts_with("data/")) {
        let got = std::fs::read(target.join(k.strip_prefix("data/").unwrap())).unwrap();
        assert!(got == *b, "{k} read byte for byte");
    }
    target
}

/// Blocks of the files under `data/` (1 MiB blocks): what reading them all
/// asks of the cluster at least.
fn data_blocks(r: &Rig) -> f64 {
    r.files
        .iter()
        .filter(|(k, _)| k.starts_with("data/"))
        .map(|(_, b)| b.len().div_ceil(1 << 20) as f64)
        .sum()
}

/// The log of the one mount under the plugin's state.
fn mount_log(r: &Rig) -> String {
    std::fs::read_dir(r.plugin.state.join("volumes"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path().join("mount.log")).unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_volume_is_read_through_the_nodes_of_the_drivers_zone() {
    // Two nodes in the driver's zone, one in another.
    let r = rig_in(&[ZONE, ZONE, "zone-b"], &[]).await;
    let (mine, other) = (&r.nodes[..2], &r.nodes[2]);
    let target = publish_and_read_all(&r, "pz1").await;
    let mut fetched = 0.0;
    for n in mine {
        fetched += origin_fetches(n).await;
    }
    // Every object GET the origin saw was a node filling a block: the mount
    // itself asked the origin for none.
    let gets = r.origin.stats.snapshot().object_gets() as f64;
    assert!(
        fetched >= data_blocks(&r),
        "the nodes of zone {ZONE} fetched {fetched} blocks of {}",
        data_blocks(&r)
    );
    assert_eq!(gets, fetched, "origin GETs against the nodes' fills");
    assert_eq!(origin_fetches(other).await, 0.0, "the node of zone-b");
    assert!(
        mount_log(&r).contains("ranking the nodes of this client's zone"),
        "{}",
        mount_log(&r)
    );

    // A second pod's mount of it finds the blocks held by the nodes: hits, and
    // nothing more from the origin.
    let mut hits = 0.0;
    for n in mine {
        hits += node_hits(n).await;
    }
    let second = publish_and_read_all(&r, "pz2").await;
    let mut hits_after = 0.0;
    for n in mine {
        hits_after += node_hits(n).await;
    }
    assert!(
        hits_after - hits >= data_blocks(&r),
        "node hits {hits} -> {hits_after}"
    );
    assert_eq!(
        r.origin.stats.snapshot().object_gets() as f64,
        gets,
        "the second read reached no origin"
    );
    assert_eq!(node_hits(other).await, 0.0, "the node of zone-b");
    let (_, mut node) = r.plugin.clients().await;
    for t in [&target, &second] {
        node.node_unpublish_volume(unpublish("vol-zone", t))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_whose_zone_has_no_node_reads_through_every_node() {
    // The driver is in ZONE; no node is.
    let r = rig_in(&["zone-b", "zone-c"], &[]).await;
    let target = publish_and_read_all(&r, "pz3").await;
    let mut fetched = 0.0;
    for n in &r.nodes {
        fetched += origin_fetches(n).await;
    }
    assert!(
        fetched >= data_blocks(&r),
        "the nodes fetched {fetched} blocks of {}",
        data_blocks(&r)
    );
    assert_eq!(
        r.origin.stats.snapshot().object_gets() as f64,
        fetched,
        "origin GETs against the nodes' fills: none from the mount"
    );
    assert!(
        mount_log(&r).contains("ranking every node"),
        "the mount says it: {}",
        mount_log(&r)
    );
    let (_, mut node) = r.plugin.clients().await;
    node.node_unpublish_volume(unpublish("vol-zone", &target))
        .await
        .unwrap();
}

/// `--zone-from-node` against the Kubernetes API mock, its token in `dir`.
fn zone_from_node_args(kube: &KubeApi, dir: &std::path::Path, token: &str) -> Vec<String> {
    let token_file = dir.join("kube-token");
    std::fs::write(&token_file, token).unwrap();
    vec![
        "--zone-from-node".to_owned(),
        format!("--kube-api={}", kube.url()),
        format!("--kube-token-file={}", token_file.display()),
    ]
}

async fn reported_zone(plugin: &Plugin) -> Option<String> {
    let (_, mut node) = plugin.clients().await;
    let info = node
        .node_get_info(proto::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    info.accessible_topology
        .and_then(|t| t.segments.get(shoal_csi::ZONE_KEY).cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zone_comes_from_the_nodes_label_and_its_mounts_prefer_it() {
    let kube = KubeApi::start().await;
    kube.node(
        "node-1",
        &[
            (shoal_csi::ZONE_KEY, "zone-b"),
            ("kubernetes.io/os", "linux"),
        ],
    );
    let tokens = tempfile::tempdir().unwrap();
    let args = zone_from_node_args(&kube, tokens.path(), &kube.token);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // A node in zone-a, one in zone-b: the label's zone, not the default one.
    let r = rig_in(&[ZONE, "zone-b"], &args).await;
    assert_eq!(kube.node_reads(), 1, "{}", r.plugin.log_text());
    assert_eq!(reported_zone(&r.plugin).await.as_deref(), Some("zone-b"));
    let target = publish_and_read_all(&r, "pz4").await;
    let fetched = origin_fetches(&r.nodes[1]).await;
    assert!(
        fetched >= data_blocks(&r),
        "the node of zone-b fetched {fetched} blocks of {}",
        data_blocks(&r)
    );
    assert_eq!(origin_fetches(&r.nodes[0]).await, 0.0, "the node of zone-a");
    assert_eq!(
        r.origin.stats.snapshot().object_gets() as f64,
        fetched,
        "origin GETs against the node's fills"
    );
    let (_, mut node) = r.plugin.clients().await;
    node.node_unpublish_volume(unpublish("vol-zone", &target))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_that_cannot_be_read_leaves_the_plugin_serving_with_none() {
    let kube = KubeApi::start().await;
    kube.node("node-1", &[("kubernetes.io/os", "linux")]);
    let dir = tempfile::tempdir().unwrap();
    let unreachable = format!("http://{}", free_addr());
    // (why, the token it shows, the API it asks, what its log must say)
    let cases = [
        (
            "no zone label",
            kube.token.as_str(),
            kube.url(),
            "has no topology.kubernetes.io/zone label",
        ),
        ("refused", "not-the-token", kube.url(), "401"),
        (
            "unreachable",
            kube.token.as_str(),
            unreachable,
            "cannot read node node-1's",
        ),
    ];
    for (i, (why, token, url, says)) in cases.into_iter().enumerate() {
        let d = dir.path().join(format!("case{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let mut args = zone_from_node_args(&kube, &d, token);
        args[1] = format!("--kube-api={url}");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let plugin = Plugin::start(&d, &d.join("none.toml"), &args, &[]);
        assert_eq!(reported_zone(&plugin).await, None, "{why}");
        let log = plugin.log_text();
        assert!(log.contains(says), "{why}: the log says {says:?}: {log}");
        assert!(
            log.contains("running with no zone"),
            "{why}: the log says what the plugin does: {log}"
        );
    }
    assert_eq!(kube.node_reads(), 1, "only the right token's read counts");
}
