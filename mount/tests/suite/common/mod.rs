//! The mount's own test harness, on the shared test kit (the real origin, real
//! `shoal-node` processes, the real `shoal-mount` binary).
#![allow(dead_code)]

use std::path::Path;

use bytes::Bytes;

pub use shoal_testkit::*;

pub const MOUNT: &str = env!("CARGO_BIN_EXE_shoal-mount");

/// Fails the test unless `python3` has DuckDB and pyarrow (scripts/test.sh
/// installs them): the queries run in a Python process.
pub async fn need_duckdb() {
    let have = sh("python3 -c 'import duckdb, pyarrow'").await;
    assert!(
        have.status.success(),
        "this test needs python3 -m pip install duckdb pyarrow: {}",
        String::from_utf8_lossy(&have.stderr)
    );
}

/// A node process with a 256 MiB RAM tier.
pub fn start_node(o: &Origin, dir: &Path, name: &str) -> NodeProcess {
    start_node_with(o, dir, name, "[cache]\nram_size = \"256MiB\"\n")
}

/// A node process with `extra` (its `[cache]` section, say) in its config.
pub fn start_node_with(o: &Origin, dir: &Path, name: &str, extra: &str) -> NodeProcess {
    NodeProcess::start(dir, name, &node_toml(o, "", extra))
}

/// Puts `files` in the origin under `prefix` and in `local` (a mirror to compare with).
pub fn seed(o: &Origin, prefix: &str, local: &Path, files: &[(&str, Bytes)]) {
    for (k, b) in files {
        o.put(BUCKET, &format!("{prefix}{k}"), b.clone());
        let p = local.join(k);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b).unwrap();
    }
}

/// What the mount at `mount` has received from the node at `node` (its only
/// one) and what the node says it served, once neither moves: the node took
/// every request the mount sent and no byte count changes between two looks
/// (blocks fetched ahead are counted once they have come).
pub async fn settled_bytes(mount: &str, node: &str) -> (u64, u64) {
    let look = || async {
        let (m, n) = (scrape(mount).await, scrape(node).await);
        (
            metric_sum(&m, "shoal_client_node_requests_total"),
            metric_sum(&n, "shoal_node_key_requests_total"),
            metric(&m, "shoal_client_bytes_total{source=\"node\"}"),
            metric_sum(&n, "shoal_node_bytes_served_total"),
        )
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut last = look().await;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let now = look().await;
        if now.0 == now.1 && now == last {
            return (now.2 as u64, now.3 as u64);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the mount's reads from the node did not settle: {now:?}"
        );
        last = now;
    }
}
