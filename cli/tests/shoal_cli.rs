//! The `shoal` admin CLI against real node processes and the real origin.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use shoal::cluster::{ClusterReader, ReaderOptions};
use shoal_testkit::*;

const MIB: usize = 1 << 20;

fn shoal_bin() -> &'static str {
    env!("CARGO_BIN_EXE_shoal")
}

struct Nodes(Vec<NodeProcess>);

fn shoal_toml(o: &Origin, nodes: &Nodes) -> String {
    let ids: Vec<&str> = nodes.0.iter().map(|n| n.addr.as_str()).collect();
    format!("{}{}", origin_toml(o), cluster_toml(&ids, ""))
}

async fn shoal(cfg: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(shoal_bin());
    cmd.arg("--config").arg(cfg).args(args);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

async fn setup(n: usize) -> (Origin, Nodes, tempfile::TempDir, PathBuf) {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let nodes = Nodes(
        (0..n)
            .map(|i| NodeProcess::start(dir.path(), &format!("n{i}"), &node_toml(&o, "", "")))
            .collect(),
    );
    let cfg = dir.path().join("shoal.toml");
    std::fs::write(&cfg, shoal_toml(&o, &nodes)).unwrap();
    (o, nodes, dir, cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_makes_the_cluster_hot() {
    let (o, _nodes, _dir, cfg) = setup(3).await;
    let sizes = [0usize, 1, MIB, 3 * MIB + 7, 5 * MIB];
    let total: usize = sizes.iter().sum();
    for (i, s) in sizes.iter().enumerate() {
        o.put(BUCKET, &format!("ds/f{i}"), data(*s, i as u64));
    }
    o.put(BUCKET, "other/not-warmed", data(MIB, 99));
    // Unreadable until restored: warm leaves it alone and says so.
    o.put_with(
        BUCKET,
        "ds/zz-archived",
        data(MIB, 98),
        shoal_testorigin::ObjectAttrs {
            storage_class: Some("DEEP_ARCHIVE".into()),
            ..Default::default()
        },
    );

    let dry = shoal(&cfg, &["warm", &format!("s3://{BUCKET}/ds/"), "--dry-run"]).await;
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains("would warm 5 objects"),
        "{dry:?}"
    );
    assert_eq!(
        o.stats.snapshot().object_gets(),
        0,
        "a dry run fetches nothing"
    );

    let out = shoal(
        &cfg,
        &["warm", &format!("s3://{BUCKET}/ds/"), "--parallel", "4"],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("skipped 1 archived"), "{stdout}");
    assert_eq!(o.stats.snapshot().gets_of(BUCKET, "ds/zz-archived"), 0);
    assert!(
        stdout.contains(&format!("warmed: 5 of 5 objects, {total} bytes")),
        "{stdout}"
    );
    assert!(
        stdout.contains("0 already warm, 11 fetched from the origin, 0 failed"),
        "{stdout}"
    );
    assert!(
        !stdout.contains('\x1b'),
        "escape codes in non-terminal output: {stdout:?}"
    );

    // A full read now costs the origin nothing.
    o.stats.reset();
    let c = parse(&shoal_toml(&o, &_nodes));
    let reader = ClusterReader::new(
        (c.origin().unwrap()).client().unwrap(),
        c.cluster(),
        ReaderOptions::default(),
    );
    for (i, s) in sizes.iter().enumerate() {
        let h = reader
            .open(BUCKET, &format!("ds/f{i}"), None)
            .await
            .unwrap();
        assert!(h.read(0, *s as u64).await.unwrap() == data(*s, i as u64));
    }
    assert_eq!(
        o.stats.snapshot().object_gets(),
        0,
        "{:?}",
        o.stats.snapshot().requests
    );

    // Warming again finds everything warm.
    let again = shoal(&cfg, &["warm", &format!("s3://{BUCKET}/ds/")]).await;
    assert!(String::from_utf8_lossy(&again.stdout).contains("11 already warm, 0 fetched"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_listings_fills_the_trees_metadata_without_its_bytes() {
    let (o, _nodes, _dir, cfg) = setup(2).await;
    let keys = ["t/a", "t/d1/b", "t/d1/d2/c", "t/d3/e", "t/d3/f", "other/g"];
    for (i, k) in keys.iter().enumerate() {
        o.put(BUCKET, k, data(1000 + i, i as u64));
    }
    let before = o.stats.snapshot();
    // "t" and "t/" name the same tree, as a mount of BUCKET/t lists it.
    let out = shoal(&cfg, &["warm", &format!("s3://{BUCKET}/t"), "--listings"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("listed 4 directories (4 pages, 0 already kept by their owners, 5 objects)"),
        "{text}"
    );
    let after = o.stats.snapshot();
    assert_eq!(after.lists() - before.lists(), 4);
    assert_eq!(
        after.object_gets() - before.object_gets(),
        0,
        "no bytes read"
    );
    // Again: every page is already kept.
    let again = shoal(&cfg, &["warm", &format!("s3://{BUCKET}/t/"), "--listings"]).await;
    assert!(String::from_utf8_lossy(&again.stdout).contains("4 pages, 4 already kept"));
    assert_eq!(o.stats.snapshot().lists(), after.lists());
    // A mount's walk asks for the same pages: the owners answer them.
    let config = parse(&std::fs::read_to_string(&cfg).unwrap());
    let reader = ClusterReader::new(
        config.origin().unwrap().client().unwrap(),
        config.cluster(),
        ReaderOptions::default(),
    );
    reader.membership_ready().await;
    let store = reader.metadata(config.mount.metadata_ttl);
    for dir in ["t/", "t/d1/", "t/d1/d2/", "t/d3/"] {
        let page = store
            .list_page(&shoal::store::ListRequest {
                bucket: BUCKET.into(),
                prefix: dir.into(),
                delimiter: Some("/".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(page.age.is_some(), "{dir} came from its owner's cache");
    }
    assert_eq!(o.stats.snapshot().lists(), after.lists());
    // --listings and --dry-run do not go together.
    let both = shoal(
        &cfg,
        &[
            "warm",
            &format!("s3://{BUCKET}/t"),
            "--listings",
            "--dry-run",
        ],
    )
    .await;
    assert!(!both.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_agrees_with_where_the_block_landed() {
    let (o, nodes, _dir, cfg) = setup(3).await;
    o.put(BUCKET, "one/block", data(100_000, 7));
    let out = shoal(
        &cfg,
        &[
            "route",
            &format!("s3://{BUCKET}/one/block"),
            "--offset",
            "5",
        ],
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("block 0"), "{text}");
    let owner = text
        .lines()
        .find(|l| l.trim_end().ends_with("owner"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no owner line in {text}"))
        .to_owned();
    let warm = shoal(&cfg, &["warm", &format!("s3://{BUCKET}/one/")]).await;
    assert!(warm.status.success());
    for addr in nodes.0.iter().map(|n| &n.addr) {
        let fetched = metric(
            &scrape(addr).await,
            "shoal_node_origin_requests_total{kind=\"block\"}",
        );
        let want = if *addr == owner { 1.0 } else { 0.0 };
        assert_eq!(fetched, want, "node {addr} (owner {owner})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_a_stopped_node_as_down() {
    let (o, mut nodes, _dir, cfg) = setup(2).await;
    o.put(BUCKET, "s", data(10, 1));
    let out = shoal(&cfg, &["status", "--json"]).await;
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["down"], 0);
    assert_eq!(v["nodes"][0]["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["nodes"][0]["ram_capacity_bytes"].as_f64().unwrap() > 0.0);

    let stopped = nodes.0.remove(1).addr.clone();
    let out = shoal(&cfg, &["status", "--json"]).await;
    assert_eq!(out.status.code(), Some(1), "a down node makes status fail");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["down"], 1);
    let row = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node"] == stopped)
        .unwrap();
    assert_eq!(row["reachable"], false);
    // The table form says so too, without escape codes.
    let table = shoal(&cfg, &["status"]).await;
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("DOWN") && !text.contains('\x1b'), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_reaches_every_node() {
    let (o, _nodes, _dir, cfg) = setup(2).await;
    o.put(BUCKET, "p/x", data(3 * MIB, 3));
    assert!(shoal(&cfg, &["warm", &format!("s3://{BUCKET}/p/")])
        .await
        .status
        .success());
    let out = shoal(&cfg, &["purge", &format!("s3://{BUCKET}/p/")]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains(" ok ")).count(),
        2,
        "{text}"
    );
    let again = shoal(&cfg, &["warm", &format!("s3://{BUCKET}/p/")]).await;
    assert!(String::from_utf8_lossy(&again.stdout).contains("0 already warm, 3 fetched"));
}

#[test]
fn completions_and_bad_input() {
    let out = Command::new(shoal_bin())
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("_shoal"));
    let out = Command::new(shoal_bin())
        .args(["route", "not-a-url"])
        .env_remove("SHOAL_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(shoal_bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for sub in ["warm", "status", "route", "purge", "completions"] {
        assert!(help.contains(sub), "{help}");
    }
}
