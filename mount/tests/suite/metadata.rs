//! Metadata through the cluster: mounts list directories and look up files
//! through the nodes, so a second mount's walk costs the origin nothing; what
//! a purge or a gateway write changes reaches every mount within its stated
//! bound; a node lost mid-walk, or every node, loses nothing.

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use shoal::node_proto::purge::purge;
use shoal::node_proto::Purge;

const DIRS: usize = 24;
const PER_DIR: usize = 6;

/// `DIRS` directories of `PER_DIR` files, plus keys that are hard to list.
fn tree() -> Vec<(String, Bytes)> {
    let mut v = Vec::new();
    for d in 0..DIRS {
        for f in 0..PER_DIR {
            v.push((
                format!("d{d:02}/f{f}.bin"),
                data(100 + d * 7 + f, (d * 10 + f) as u64),
            ));
        }
    }
    for (k, n) in [
        ("odd/with space/and+plus%25.bin", 5),
        ("odd/ünïcødé/ファイル.bin", 6),
        ("odd/xml <&>'\".txt", 7),
        ("odd/deep/a/b/c/d", 8),
    ] {
        v.push((k.to_owned(), data(n, n as u64)));
    }
    v
}

fn seed_tree(o: &Origin, local: &Path) {
    let t = tree();
    let files: Vec<(&str, Bytes)> = t.iter().map(|(k, b)| (k.as_str(), b.clone())).collect();
    seed(o, "", local, &files);
}

/// Every path under `root` with its type and size, sorted: what `find` and
/// `stat` show of a tree.
async fn walk(root: &Path) -> String {
    sh_ok(&format!(
        "cd {} && find . -printf '%y %s %p\\n' | grep -v '^d' | sort; \
         cd {} && find . -type d | sort",
        q(root),
        q(root)
    ))
    .await
}

async fn listings(metrics: &str, source: &str) -> f64 {
    metric(
        &scrape(metrics).await,
        &format!("shoal_client_metadata_requests_total{{op=\"list\",source=\"{source}\"}}"),
    )
}

fn mount_with_metrics(toml: &str, args: &[&str]) -> (Mount, String) {
    let metrics = free_addr();
    let mut a = vec!["--metrics-addr", metrics.as_str()];
    a.extend_from_slice(args);
    (Mount::start(toml, BUCKET, &a), metrics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_mount_walks_the_tree_without_asking_the_origin() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    seed_tree(&o, &local);
    let n1 = start_node(&o, dir.path(), "n1");
    let n2 = start_node(&o, dir.path(), "n2");
    let toml = mount_toml(&o, &[&n1, &n2], "");
    let (a, a_metrics) = mount_with_metrics(&toml, &[]);
    let (b, b_metrics) = mount_with_metrics(&toml, &[]);
    let (off, _) = mount_with_metrics(&toml, &["--metadata", "origin"]);
    let want = walk(&local).await;

    let before = o.stats.snapshot();
    assert_eq!(
        walk(&a.mnt).await,
        want,
        "the first walk sees the origin's tree"
    );
    let first = o.stats.snapshot();
    let first_lists = first.lists() - before.lists();
    assert!(
        first_lists >= (DIRS + 1) as u64,
        "every directory was listed once: {first_lists}"
    );
    assert_eq!(walk(&b.mnt).await, want, "so does the second");
    let second = o.stats.snapshot();
    assert_eq!(
        second.lists() - first.lists(),
        0,
        "the second walk was answered by the nodes"
    );
    assert_eq!(second.object_heads() - first.object_heads(), 0);
    assert!(listings(&a_metrics, "node").await >= first_lists as f64);
    assert!(listings(&b_metrics, "node").await >= first_lists as f64);
    assert_eq!(listings(&b_metrics, "origin").await, 0.0);
    // The nodes say what they did: the second walk's pages were hits.
    let mut hits = 0.0;
    for n in [&n1, &n2] {
        hits += metric(
            &scrape(&n.addr).await,
            "shoal_node_metadata_requests_total{op=\"list\",result=\"hit\"}",
        );
    }
    assert!(hits >= first_lists as f64, "{hits} hits");
    // Turned off, a mount lists the origin itself, as before.
    assert_eq!(walk(&off.mnt).await, want);
    assert!(o.stats.snapshot().lists() - second.lists() >= first_lists);
    // Contents read through the same mounts are the origin's.
    sh_ok(&format!(
        "diff -r {} {} && diff -r {} {}",
        q(&b.mnt),
        q(&local),
        q(&off.mnt),
        q(&local)
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_and_gateway_writes_reach_every_mount_within_their_bounds() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    o.put(BUCKET, "d/a", data(3, 1));
    let n1 = start_node(&o, dir.path(), "n1");
    let n2 = start_node(&o, dir.path(), "n2");
    let gateway = NodeProcess::start(
        dir.path(),
        "gw",
        &node_toml(
            &o,
            "",
            &format!(
                "{}[gateway]\nwrites = true\n",
                cluster_toml(&[&n1.addr, &n2.addr], "")
            ),
        ),
    );
    let gw = node_s3_client(&gateway.addr, NODE_KEY, NODE_SECRET);
    let toml = mount_toml(&o, &[&n1, &n2], "");
    // A mount that keeps its own metadata long, one that keeps it 1 s.
    let long = Mount::start(&toml, BUCKET, &["--metadata-ttl", "5m"]);
    let short = Mount::start(&toml, BUCKET, &["--metadata-ttl", "1s"]);
    let names = |m: &Mount| {
        let mut v: Vec<String> = std::fs::read_dir(m.path("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&long), ["a"]);
    assert_eq!(names(&short), ["a"]);

    // Written behind the cluster's back: a fresh mount still gets the listing the
    // owner keeps (the cache is what answers)...
    o.put(BUCKET, "d/b", data(3, 2));
    let fresh = Mount::start(&toml, BUCKET, &["--metadata-ttl", "5m"]);
    assert_eq!(names(&fresh), ["a"]);
    drop(fresh);
    // ...until the prefix is purged: then a fresh mount sees it at once, and the
    // short-lived mount within its metadata_ttl.
    purge(&gw, BUCKET, &Purge::Prefix("d/".into()), false)
        .await
        .unwrap();
    let fresh = Mount::start(&toml, BUCKET, &["--metadata-ttl", "5m"]);
    assert_eq!(names(&fresh), ["a", "b"]);
    drop(fresh);
    wait_until("the 1 s mount sees d/b", Duration::from_secs(10), || {
        names(&short) == ["a", "b"]
    });

    // A PUT through the gateway drops the parent's listing on its owner.
    gw.put_object(BUCKET, "d/c", Bytes::from_static(b"new"))
        .await
        .unwrap();
    let fresh = Mount::start(&toml, BUCKET, &["--metadata-ttl", "5m"]);
    assert_eq!(names(&fresh), ["a", "b", "c"]);
    assert_eq!(std::fs::read(fresh.path("d/c")).unwrap(), b"new");
    drop(fresh);
    wait_until("the 1 s mount sees d/c", Duration::from_secs(10), || {
        names(&short) == ["a", "b", "c"]
    });
    // So does a DELETE, and a key looked up while missing is found once written.
    assert!(!short.path("d/later").exists());
    gw.delete_object(BUCKET, "d/a").await.unwrap();
    gw.put_object(BUCKET, "d/later", Bytes::from_static(b"late"))
        .await
        .unwrap();
    let fresh = Mount::start(&toml, BUCKET, &["--metadata-ttl", "5m"]);
    assert_eq!(names(&fresh), ["b", "c", "later"]);
    assert_eq!(std::fs::read(fresh.path("d/later")).unwrap(), b"late");
    wait_until(
        "the 1 s mount sees the delete",
        Duration::from_secs(10),
        || names(&short) == ["b", "c", "later"] && short.path("d/later").exists(),
    );
    // The long-lived mount is held to its own metadata_ttl: its listing stands.
    assert_eq!(names(&long), ["a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_completes_when_a_node_dies_midway_and_when_all_are_down() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    seed_tree(&o, &local);
    let n1 = start_node(&o, dir.path(), "n1");
    let mut n2 = start_node(&o, dir.path(), "n2");
    let toml = mount_toml(&o, &[&n1, &n2], "");
    let (m, metrics) = mount_with_metrics(&toml, &[]);
    // Half the directories, then n2 is killed, then the rest and the whole tree.
    let half = |d: &Path| format!("cd {} && find d0* -type f -printf '%s %p\\n' | sort", q(d));
    assert_eq!(sh_ok(&half(&m.mnt)).await, sh_ok(&half(&local)).await);
    n2.child.kill().unwrap();
    n2.child.wait().unwrap();
    let want = walk(&local).await;
    assert_eq!(
        walk(&m.mnt).await,
        want,
        "the walk went on past the dead node"
    );
    sh_ok(&format!("diff -r {} {}", q(&m.mnt), q(&local))).await;
    assert!(listings(&metrics, "node").await > 0.0);

    // Every node down: a new mount (nothing kept) lists the origin itself.
    drop(n1);
    let (m2, metrics2) = mount_with_metrics(&toml, &[]);
    let before = o.stats.snapshot().lists();
    assert_eq!(walk(&m2.mnt).await, want, "the walk lists the origin");
    assert!(o.stats.snapshot().lists() - before >= (DIRS + 1) as u64);
    let text = scrape(&metrics2).await;
    let fallbacks: f64 = text
        .lines()
        .filter(|l| l.starts_with("shoal_client_metadata_fallbacks_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(fallbacks >= (DIRS + 1) as f64, "{fallbacks} fallbacks");
    assert!(listings(&metrics2, "origin").await >= (DIRS + 1) as f64);
}

/// Directories walked by the kernel-cache test, each with more names than one
/// READDIRPLUS answer holds, so each is read in several.
const WALKED_DIRS: usize = 3;
const WALKED_FILES: usize = 250;

/// How many requests of kind `op` a mount has had from the kernel.
async fn ops(metrics: &str, op: &str) -> f64 {
    metric(
        &scrape(metrics).await,
        &format!("shoal_mount_ops_total{{op=\"{op}\"}}"),
    )
}

/// `find . -type f | xargs stat` over `root`: the size and path of every file.
async fn find_stat(root: &Path) -> std::collections::BTreeSet<String> {
    sh_ok(&format!(
        "cd {} && find . -type f | xargs -d '\\n' stat -c '%s %n'",
        q(root)
    ))
    .await
    .lines()
    .map(str::to_owned)
    .collect()
}

/// A walk costs the mount one READDIRPLUS per page of names and nothing per
/// name: the kernel keeps each entry and its attributes for what is left of
/// the listing's `metadata_ttl` (a listing a node kept for a while has that
/// much less), so `stat` after `find` sends no LOOKUP or GETATTR, and a
/// changed object is seen once the listing it came in has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_after_readdirplus_asks_the_mount_nothing_per_name_within_metadata_ttl() {
    const TTL: Duration = Duration::from_secs(10);
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let mut want = std::collections::BTreeSet::new();
    for d in 0..WALKED_DIRS {
        for f in 0..WALKED_FILES {
            o.put(
                BUCKET,
                &format!("w/d{d}/file-{f:05}.dat"),
                data(f % 97, f as u64),
            );
            want.insert(format!("{} ./w/d{d}/file-{f:05}.dat", f % 97));
        }
    }
    let n1 = start_node(&o, dir.path(), "n1");
    let toml = mount_toml(&o, &[&n1], "");
    let per_name = ["lookup", "getattr"];

    let t0 = std::time::Instant::now();
    let (a, a_metrics) = mount_with_metrics(&toml, &["--metadata-ttl", "10s"]);
    std::fs::metadata(&a.mnt).unwrap();
    let mut before = Vec::new();
    for op in per_name {
        before.push(ops(&a_metrics, op).await);
    }
    assert_eq!(find_stat(&a.mnt).await, want, "the walk sees the tree");
    assert_eq!(find_stat(&a.mnt).await, want, "and so does a second");
    assert!(
        t0.elapsed() < TTL,
        "two walks took {:?}, longer than the metadata_ttl this test needs them within",
        t0.elapsed()
    );
    for (op, was) in per_name.iter().zip(&before) {
        let n = ops(&a_metrics, op).await - was;
        assert_eq!(n, 0.0, "{n} {op} requests for names given with READDIRPLUS");
    }
    assert!(ops(&a_metrics, "readdirplus").await >= (2 * (WALKED_DIRS + 2)) as f64);

    // A second mount halfway through the ttl gets the node's listings, half
    // as fresh: its kernel keeps them only for the half left.
    tokio::time::sleep((TTL / 2).saturating_sub(t0.elapsed())).await;
    let (b, b_metrics) = mount_with_metrics(&toml, &["--metadata-ttl", "10s"]);
    std::fs::metadata(&b.mnt).unwrap();
    let lookups = ops(&b_metrics, "lookup").await;
    assert_eq!(find_stat(&b.mnt).await, want);
    assert_eq!(ops(&b_metrics, "lookup").await - lookups, 0.0);

    let changed = "w/d1/file-00007.dat";
    o.put(BUCKET, changed, data(5000, 1));
    let size = |m: &Mount| std::fs::metadata(m.path(changed)).unwrap().len();
    let grace = Duration::from_secs(3);
    wait_until("the second mount sees the new size", TTL + grace, || {
        size(&b) == 5000
    });
    assert!(
        t0.elapsed() < TTL + grace,
        "seen {:?} after the listing was made: its kernel kept it past the listing's ttl",
        t0.elapsed()
    );
    wait_until("the first mount sees it too", grace, || size(&a) == 5000);
}
