//! Analytics over Parquet through a mount: DuckDB and pyarrow query files the test
//! writes, through a cold mount and its cold node, and get the answers they get
//! from the same files on local disk, at an origin cost near what the query read
//! there (its `rchar`). Column projection, row-group pruning and the footer read
//! first are how these tools read: read-ahead must follow them, not run ahead
//! into column chunks they never ask for.
//!
//! Needs `python3` with `duckdb` and `pyarrow` (scripts/test.sh installs them).

use std::path::Path;

use crate::common::*;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/suite/analytics/parquet.py"
);

/// Files per dataset, row groups per file and rows per row group: 4 MB files
/// whose column chunks (128 KiB for a number, 576 KiB for the text) are smaller
/// than a block.
const FILES: usize = 3;
const GROUPS: usize = 4;
const ROWS: usize = 16384;

/// What a query may cost the origin beyond its bound: one node page (64 KiB,
/// the page of a file read in ranges) per file, for its footer: a footer of a
/// few KiB is a large part of what a query of a file this small reads, and its
/// page is fetched whole.
fn allowance(files: usize) -> u64 {
    files as u64 * (64 << 10)
}

#[derive(Clone, Copy)]
struct Query {
    engine: &'static str,
    what: &'static str,
    /// Origin bytes per byte the query read locally.
    bound: f64,
}

const QUERIES: [Query; 6] = [
    Query {
        engine: "duckdb",
        what: "rows",
        bound: 1.5,
    },
    Query {
        engine: "duckdb",
        what: "columns",
        bound: 1.5,
    },
    Query {
        engine: "duckdb",
        what: "full",
        bound: 1.1,
    },
    Query {
        engine: "pyarrow",
        what: "rows",
        bound: 1.5,
    },
    Query {
        engine: "pyarrow",
        what: "columns",
        bound: 1.5,
    },
    Query {
        engine: "pyarrow",
        what: "full",
        bound: 1.1,
    },
];

/// Runs `what` with `engine` over the files of `dir`: its answer (JSON) and the
/// bytes the query's process read.
async fn run(engine: &str, what: &str, dir: &Path) -> (serde_json::Value, u64) {
    let out = sh_ok(&format!(
        "python3 {SCRIPT} query {engine} {what} {}",
        q(dir)
    ))
    .await;
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("{engine} {what}: not one JSON line ({e}): {out}"));
    (v["answer"].clone(), v["rchar"].as_u64().expect("rchar"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_queries_cost_the_origin_about_what_they_read() {
    query_costs(FILES, ROWS, GROUPS, 32, &QUERIES).await;
}

/// Column chunks of several blocks (row groups of 131,072 rows, as writers
/// make them by default, of 64-byte strings: 8.9 MB): a chunk read whole in
/// one `pread` brings little past its end, where the kernel's read-ahead
/// through the page cache would bring megabytes of the next row group's
/// columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn column_chunks_of_several_blocks_cost_what_they_read() {
    // pyarrow reads each chunk alone, in the kernel's pieces one after
    // another: the block fetched ahead of its last piece is about one block
    // past each chunk (11% of one), where DuckDB's two threads interleave theirs.
    let queries = [
        QUERIES[2],
        Query {
            bound: 1.15,
            ..QUERIES[5]
        },
    ];
    query_costs(1, 131072, 3, 64, &queries).await;
}

/// Runs each query over a cold dataset of its own (`files` files of `groups`
/// row groups of `rows` rows, the text `width` characters) through a cold
/// mount and node: the answer must be the one from local files, the origin
/// bytes within the query's bound of what it read locally.
async fn query_costs(files: usize, rows: usize, groups: usize, width: usize, queries: &[Query]) {
    need_duckdb().await;
    let o = origin().await;
    let local = tempfile::tempdir().unwrap();
    // One dataset per query, so that each one's cost is a cold read's.
    for qy in queries {
        let name = format!("{}-{}", qy.engine, qy.what);
        let dir = local.path().join(&name);
        sh_ok(&format!(
            "python3 {SCRIPT} write {} {files} {rows} {groups} 7 {width}",
            q(&dir)
        ))
        .await;
        for f in 0..files {
            let file = format!("part-{f}.parquet");
            let body = std::fs::read(dir.join(&file)).unwrap();
            o.put(BUCKET, &format!("{name}/{file}"), body);
        }
    }
    let ndir = tempfile::tempdir().unwrap();
    let node = start_node(&o, ndir.path(), "n");
    let m = Mount::start(&mount_toml(&o, &[&node], ""), BUCKET, &[]);
    let mut table = String::from("query            local rchar  origin bytes  ratio  bound\n");
    let mut over = Vec::new();
    for qy in queries {
        let name = format!("{}-{}", qy.engine, qy.what);
        let (want, read) = run(qy.engine, qy.what, &local.path().join(&name)).await;
        let before = o.stats.snapshot().body_bytes_sent;
        let (got, _) = run(qy.engine, qy.what, &m.path(&name)).await;
        let cost = o.stats.snapshot().body_bytes_sent - before;
        assert_eq!(got, want, "{name}: the answer through the mount differs");
        let ratio = cost as f64 / read as f64;
        table.push_str(&format!(
            "{name:<16} {read:>11}  {cost:>12}  {ratio:>5.2}  {}\n",
            qy.bound
        ));
        if cost as f64 > qy.bound * read as f64 + allowance(files) as f64 {
            over.push(name);
        }
    }
    eprintln!("{table}");
    assert!(
        over.is_empty(),
        "queries that cost the origin past their bound: {over:?}\n{table}"
    );
}

/// A random reader's reads of a few KiB (SQLite, HDF5, zarr, a shuffled data
/// loader), some across a block boundary, in one open file: each costs about
/// its own bytes from the nodes, never a block fetched ahead or two whole
/// blocks around a boundary; one 12 KiB past another continues it (a format's
/// padding) and so costs at most one block ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_few_kib_anywhere_cost_at_most_a_block_from_the_nodes() {
    use std::os::unix::fs::FileExt;
    let o = origin().await;
    let mb = 1u64 << 20;
    let body = data(16 << 20, 41);
    o.put(BUCKET, "random.bin", body.clone());
    let ndir = tempfile::tempdir().unwrap();
    let node = start_node(&o, ndir.path(), "n");
    let addr = free_addr();
    // Copied through buffers, so every byte from a node is counted here.
    let m = Mount::start(
        &mount_toml(&o, &[&node], "[mount]\nsplice_reads = false\n"),
        BUCKET,
        &["--metrics-addr", &addr],
    );
    let from_nodes = || async {
        metric(
            &scrape(&addr).await,
            "shoal_client_bytes_total{source=\"node\"}",
        ) as u64
    };
    let f = std::sync::Arc::new(std::fs::File::open(m.path("random.bin")).unwrap());
    // Where, and what each read may cost: a page or two of the kernel's.
    let small = 16 << 10;
    let reads = [
        (5 * mb + 100, small),
        (6 * mb - 2048, small),
        (9 * mb + 7, small),
        (12 * mb - 1000, small),
        (3 * mb + 4096, small),
        (3 * mb + 20480, small + mb),
        (14 * mb - 4096, small),
        (mb - 100, small),
    ];
    let mut costs = Vec::new();
    for (at, bound) in reads {
        let before = from_nodes().await;
        let (f, want) = (f.clone(), body.slice(at as usize..at as usize + 4096));
        tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; 4096];
            f.read_exact_at(&mut buf, at).unwrap();
            assert!(buf[..] == want[..], "at {at}");
        })
        .await
        .unwrap();
        // Blocks fetched ahead are counted once they have come.
        let cost = settled_bytes(&addr, &node.addr).await.0 - before;
        costs.push((at, cost, bound));
    }
    assert!(
        costs.iter().all(|&(_, cost, bound)| cost <= bound),
        "4 KiB reads (at, bytes from the nodes, bound): {costs:?}"
    );
}
