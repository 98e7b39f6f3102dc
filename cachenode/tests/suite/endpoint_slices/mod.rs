//! Nodes and readers that learn the cluster from a Service's EndpointSlices, as
//! they do on Kubernetes: a stand-in API server lists and watches the slices
//! (resourceVersion, bookmarks, 410 after a restart), real node processes and
//! readers in this process watch them, and the slices change under readers:
//! a node joins, one goes not-ready, the API forgets its history. Node `i`
//! listens on `127.0.0.(BASE+i)` at one port, as pods share a container port.

mod emptied;
mod fleet;
mod split;

use std::time::{Duration, Instant};

use crate::common::*;
use fleet::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_follow_the_services_endpoint_slices_under_readers() {
    let mut f = Fleet::new(4).await;
    // Zone a: nodes 0 and 1; zone b: node 2, and node 3 once it joins.
    f.slice("shoal-node-a", &[(0, true, "zone-a"), (1, true, "zone-a")]);
    f.slice("shoal-node-b", &[(2, true, "zone-b")]);
    for (i, zone) in [(0, "zone-a"), (1, "zone-a"), (2, "zone-b"), (3, "zone-b")] {
        f.start(i, zone);
    }
    let anywhere = [f.reader(None), f.reader(None)];
    let zone_a = f.reader(Some("zone-a"));
    for r in &anywhere {
        r.membership_ready().await;
        ranks(r, &[f.id(0), f.id(1), f.id(2)]).await;
    }
    zone_a.membership_ready().await;
    ranks(&zone_a, &[f.id(0), f.id(1)]).await;
    // The nodes watch too: each ranks the nodes of its own zone.
    f.node_sees(0, 2).await;
    f.node_sees(2, 1).await;

    let all = Readers::start(&anywhere, &f.bodies);
    let in_a = Readers::start(std::slice::from_ref(&zone_a), &f.bodies);
    all.progress(40).await;
    in_a.progress(10).await;

    // Node 3 joins zone b: the readers rank it within the watch, and it serves.
    assert_eq!(f.served(3).await, 0.0, "node 3 served before it joined");
    let t = Instant::now();
    f.slice("shoal-node-b", &[(2, true, "zone-b"), (3, true, "zone-b")]);
    let joined = ranks(&anywhere[0], &[f.id(0), f.id(1), f.id(2), f.id(3)]).await;
    ranks(&anywhere[1], &[f.id(0), f.id(1), f.id(2), f.id(3)]).await;
    let used = loop {
        if f.served(3).await > 0.0 {
            break t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "node 3 never served a read"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    f.node_sees(2, 2).await;
    assert_eq!(
        members(&zone_a),
        [f.id(0), f.id(1)],
        "zone a's reader ranks zone b"
    );
    eprintln!("node 3 joined: ranked after {joined:?}, served its first bytes after {used:?}");

    // Node 1 goes not ready (its probe fails): it leaves every ranking, and the
    // readers ask it nothing more.
    f.slice("shoal-node-a", &[(0, true, "zone-a"), (1, false, "zone-a")]);
    let left = ranks(&anywhere[0], &[f.id(0), f.id(2), f.id(3)]).await;
    ranks(&anywhere[1], &[f.id(0), f.id(2), f.id(3)]).await;
    ranks(&zone_a, &[f.id(0)]).await;
    f.node_sees(0, 1).await;
    eprintln!("node 1 not ready: left the ranking after {left:?}");
    // What was in flight to it when it left may still land.
    all.progress(20).await;
    in_a.progress(5).await;
    let before = f.served(1).await;
    all.progress(40).await;
    in_a.progress(10).await;
    assert_eq!(
        f.served(1).await,
        before,
        "a not-ready node was still read from"
    );

    // Zone a's reader alone: zone b's nodes serve it nothing.
    let (reads, failed) = all.finish().await;
    assert_eq!(failed, 0, "{failed} of {reads} reads failed (any zone)");
    let b_before = (f.served(2).await, f.served(3).await);
    in_a.progress(40).await;
    assert_eq!(
        (f.served(2).await, f.served(3).await),
        b_before,
        "zone a's reader read from zone b"
    );
    assert!(f.served(0).await > 0.0);

    // The API server restarts and forgets its history: the watches get 410,
    // list again, and see what changed meanwhile.
    let lists = f.api.lists();
    f.api.expire();
    f.slice("shoal-node-a", &[(0, true, "zone-a"), (1, true, "zone-a")]);
    let back = ranks(&zone_a, &[f.id(0), f.id(1)]).await;
    ranks(&anywhere[0], &[f.id(0), f.id(1), f.id(2), f.id(3)]).await;
    f.node_sees(0, 2).await;
    assert!(
        f.api.lists() > lists,
        "nobody listed again after the expiry"
    );
    in_a.progress(20).await;
    eprintln!("after the API's restart: node 1 ranked again after {back:?}");

    let (reads, failed) = in_a.finish().await;
    assert_eq!(failed, 0, "{failed} of {reads} reads failed (zone a)");

    // A purge sent to a zone-a node reaches the zone-b nodes it knows from
    // the slices, and they serve the new version.
    let old = data(MIB as usize, 801);
    f.origin.put(BUCKET, "slices/p", old.clone());
    for i in [2, 3] {
        assert_eq!(get_from(&f.nodes[i], "slices/p").await, old);
    }
    let new = data(MIB as usize, 802);
    f.origin.put(BUCKET, "slices/p", new.clone());
    let t = Instant::now();
    shoal::node_proto::purge::purge(
        &client(f.nodes[0].socket_addr()),
        BUCKET,
        &shoal::node_proto::Purge::Key("slices/p".into()),
        false,
    )
    .await
    .unwrap();
    for i in [2, 3] {
        loop {
            if get_from(&f.nodes[i], "slices/p").await == new {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "zone b's node {i} still serves the purged version"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    eprintln!(
        "a purge at zone a's node 0 reached zone b's nodes in {:?}",
        t.elapsed()
    );
}
