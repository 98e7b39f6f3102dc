//! A selective workload read twice, the second time from another host, costs
//! the origin nothing the second time: DuckDB's point, projection and
//! full-column queries over Parquet through a cold mount on cold nodes, then
//! the same queries through a second mount (another process with its own empty
//! RAM tier, as another host would be) on the same nodes. Whatever the first
//! mount's reads did (small reads deep in a page, reads given up half way),
//! every block a node fetched for them is kept whole.
//!
//! Needs `python3` with `duckdb` and `pyarrow` (scripts/test.sh installs them).

use std::path::Path;

use crate::common::*;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/suite/analytics/parquet.py"
);

const QUERIES: [&str; 3] = ["rows", "columns", "full"];

/// Runs DuckDB's query `what` over the files of `dir`: its answer (JSON).
async fn run(what: &str, dir: &Path) -> serde_json::Value {
    let out = sh_ok(&format!("python3 {SCRIPT} query duckdb {what} {}", q(dir))).await;
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("duckdb {what}: not one JSON line ({e}): {out}"));
    v["answer"].clone()
}

/// The origin's GETs of objects (not listings), each with its range.
fn object_gets(o: &Origin) -> Vec<String> {
    o.stats
        .snapshot()
        .requests
        .iter()
        .filter(|r| r.kind.method == "GET" && !r.kind.key.is_empty())
        .map(|r| format!("{} {:?} x{}", r.kind.key, r.kind.range, r.count))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_mount_on_warm_nodes_costs_the_origin_no_get() {
    need_duckdb().await;
    let o = origin().await;
    // As S3 is: tens of ms to the first byte, a per-connection pace.
    o.faults.set(shoal_testorigin::FaultSettings {
        first_byte_delay_ms: 20,
        bandwidth_bytes_per_sec: 100_000_000,
        ..Default::default()
    });
    let local = tempfile::tempdir().unwrap();
    // Row groups of 131,072 rows of 64-byte text, as writers make them: column
    // chunks of several blocks, read by DuckDB's two threads side by side.
    sh_ok(&format!(
        "python3 {SCRIPT} write {} 2 131072 2 11 64",
        q(local.path())
    ))
    .await;
    let mut total = 0;
    for f in 0..2 {
        let file = format!("part-{f}.parquet");
        let body = std::fs::read(local.path().join(&file)).unwrap();
        total += body.len();
        o.put(BUCKET, &format!("pq/{file}"), body);
    }
    let ndir = tempfile::tempdir().unwrap();
    let nodes: Vec<NodeProcess> = (0..3)
        .map(|i| start_node(&o, ndir.path(), &format!("n{i}")))
        .collect();
    let nodes: Vec<&NodeProcess> = nodes.iter().collect();
    let toml = mount_toml(&o, &nodes, "");

    let first = Mount::start(&toml, BUCKET, &[]);
    let mut want = Vec::new();
    for what in QUERIES {
        let local_answer = run(what, local.path()).await;
        assert_eq!(
            run(what, &first.path("pq")).await,
            local_answer,
            "{what}: the first mount's answer differs"
        );
        want.push(local_answer);
    }
    let cold = o.stats.snapshot();
    eprintln!(
        "cold: {} object GETs, {} body bytes for {total} bytes of Parquet",
        cold.object_gets(),
        cold.body_bytes_sent
    );
    assert!(
        cold.object_gets() > 0,
        "the cold queries asked the origin nothing"
    );

    o.stats.reset();
    let second = Mount::start(&toml, BUCKET, &[]);
    for (what, want) in QUERIES.iter().zip(&want) {
        assert_eq!(
            run(what, &second.path("pq")).await,
            *want,
            "{what}: the second mount's answer differs"
        );
    }
    let warm = o.stats.snapshot();
    let gets = object_gets(&o);
    eprintln!(
        "warm: {} object GETs, {} body bytes, {} HEADs, {} listings",
        warm.object_gets(),
        warm.body_bytes_sent,
        warm.object_heads(),
        warm.lists()
    );
    assert!(
        gets.is_empty(),
        "the second mount's queries cost the origin {} GETs ({} bytes): {gets:#?}",
        warm.object_gets(),
        warm.body_bytes_sent
    );
}
