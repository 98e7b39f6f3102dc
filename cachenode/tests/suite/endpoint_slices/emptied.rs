//! A Service left with no node, as the API server says it: every endpoint not
//! ready, then its last pod gone (the controller's placeholder slice, sent as
//! `"endpoints": null, "ports": null`). Reads then go to the origin alone, and
//! a pod that comes back serves again.

use shoal::cluster::metrics::{Fallback, NODE, ORIGIN};
use std::sync::Arc;

use shoal::cluster::ClusterReader;

use super::fleet::*;
use crate::common::*;

/// Reads 1 MiB at each of `pieces` through `r`, every byte checked.
async fn read(f: &Fleet, r: &Arc<ClusterReader>, pieces: std::ops::Range<u64>) {
    for i in pieces {
        let k = (i as usize) % KEYS.len();
        let at = (i / KEYS.len() as u64 * MIB) % f.bodies[k].len() as u64;
        let h = r.open(BUCKET, KEYS[k], None).await.unwrap();
        let got = h.read(at, MIB).await.unwrap();
        assert!(
            got == f.bodies[k].slice(at as usize..(at + MIB) as usize),
            "{} at {at}: the bytes differ",
            KEYS[k]
        );
    }
}

/// What the reader and the nodes have done so far.
#[derive(Debug, PartialEq)]
struct Counts {
    /// Body bytes each node served.
    served: Vec<f64>,
    /// Blocks the reader had from nodes and from the origin, and the origin
    /// reads it made because it ranked no node.
    from_nodes: u64,
    from_origin: u64,
    no_nodes: u64,
}

async fn counts(f: &Fleet, r: &Arc<ClusterReader>) -> Counts {
    let mut served = Vec::new();
    for i in 0..f.nodes.len() {
        served.push(f.served(i).await);
    }
    // One statement each: a series' guard holds its family's lock.
    let m = &r.metrics;
    let from_nodes = m.blocks.get_or_create(&NODE).get();
    let from_origin = m.blocks.get_or_create(&ORIGIN).get();
    let no_nodes = m.fallbacks.get_or_create(&Fallback::NoNodes.label()).get();
    Counts {
        served,
        from_nodes,
        from_origin,
        no_nodes,
    }
}

/// Reads `pieces` with no node ranked: every block from the origin because of
/// that, and not a byte from any node.
async fn origin_alone(f: &Fleet, r: &Arc<ClusterReader>, pieces: std::ops::Range<u64>, what: &str) {
    let n = pieces.end - pieces.start;
    let before = counts(f, r).await;
    let sent = f.origin.stats.snapshot().body_bytes_sent;
    read(f, r, pieces).await;
    let after = counts(f, r).await;
    assert_eq!(after.served, before.served, "{what}: a node served a read");
    assert_eq!(after.from_nodes, before.from_nodes, "{what}: {after:?}");
    // (A read may fetch the next block ahead: at least one block a read.)
    let from_origin = after.from_origin - before.from_origin;
    assert!(from_origin >= n, "{what}: {after:?}");
    assert_eq!(
        after.no_nodes - before.no_nodes,
        from_origin,
        "{what}: {after:?}"
    );
    let origin = f.origin.stats.snapshot().body_bytes_sent - sent;
    assert!(origin >= n * MIB, "{what}: the origin sent {origin} bytes");
    eprintln!(
        "{what}: {n} reads of 1 MiB, {from_origin} blocks from the origin ({origin} bytes), none from a node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_whose_last_pod_goes_reads_from_the_origin() {
    let mut f = Fleet::new(2).await;
    f.slice("shoal-node-x1", &[(0, true, "zone-a"), (1, true, "zone-a")]);
    f.start(0, "zone-a");
    f.start(1, "zone-a");
    let r = f.reader(None);
    r.membership_ready().await;
    ranks(&r, &[f.id(0), f.id(1)]).await;
    let before = counts(&f, &r).await;
    read(&f, &r, 0..16).await;
    let after = counts(&f, &r).await;
    assert!(after.from_nodes - before.from_nodes >= 16, "{after:?}");
    assert_eq!(after.from_origin, before.from_origin, "{after:?}");
    assert!(after.served.iter().all(|s| *s > 0.0), "{after:?}");

    // Every endpoint not ready (the pods fail their probes): no node.
    f.slice(
        "shoal-node-x1",
        &[(0, false, "zone-a"), (1, false, "zone-a")],
    );
    ranks(&r, &[]).await;
    origin_alone(&f, &r, 16..24, "no ready endpoint").await;

    // The last pods go: the controller writes its placeholder over the slice.
    f.slice("shoal-node-x1", &[(0, true, "zone-a")]);
    ranks(&r, &[f.id(0)]).await;
    let t = std::time::Instant::now();
    f.api.placeholder(NS, SVC, "shoal-node-x1");
    ranks(&r, &[]).await;
    eprintln!(
        "the placeholder (endpoints null) emptied the ranking after {:?}",
        t.elapsed()
    );
    origin_alone(&f, &r, 24..32, "no endpoint at all").await;
    // A reader started now lists the placeholder and ranks no node either.
    let late = f.reader(None);
    late.membership_ready().await;
    assert_eq!(members(&late), Vec::<String>::new());
    origin_alone(&f, &late, 32..36, "a reader that listed the placeholder").await;

    // A pod comes back: it serves again.
    f.slice("shoal-node-x1", &[(1, true, "zone-a")]);
    ranks(&r, &[f.id(1)]).await;
    ranks(&late, &[f.id(1)]).await;
    // (Node 1 asks no stale peer for what it does not own.)
    f.node_sees(1, 1).await;
    let before = counts(&f, &r).await;
    read(&f, &r, 36..44).await;
    let after = counts(&f, &r).await;
    assert!(after.from_nodes - before.from_nodes >= 8, "{after:?}");
    assert_eq!(after.from_origin, before.from_origin, "{after:?}");
    assert_eq!(after.no_nodes, before.no_nodes, "{after:?}");
    assert!(after.served[1] > before.served[1], "{after:?}");
    assert_eq!(after.served[0], before.served[0], "{after:?}");
}
