//! A Service's endpoints over several slices, as the EndpointSlice controller
//! keeps them (at most 100 endpoints a slice by default): the members are
//! every slice's ready endpoints, and a change to one slice changes only its
//! own. Membership only: the endpoints are addresses no node listens on.

use shoal::cluster::ClusterReader;

use super::fleet::*;
use crate::common::*;

/// Endpoint `i` of the Service.
fn address(i: usize) -> String {
    format!("10.1.{}.{}", i / 200, i % 200 + 1)
}

fn endpoints(range: std::ops::Range<usize>, not_ready: &[usize]) -> Vec<SliceEndpoint> {
    range
        .map(|i| SliceEndpoint::pod(&address(i), !not_ready.contains(&i), Some("zone-a")))
        .collect()
}

/// Waits until `r` ranks endpoints `ranges`, as node ids.
async fn ranks_endpoints(f: &Fleet, r: &ClusterReader, ranges: &[std::ops::Range<usize>]) {
    let ids: Vec<String> = ranges
        .iter()
        .flat_map(|r| r.clone())
        .map(|i| format!("{}:{}", address(i), f.port))
        .collect();
    ranks(r, &ids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_over_several_slices_changes_one_at_a_time() {
    let f = Fleet::new(0).await;
    let set = |name: &str, eps: Vec<SliceEndpoint>| {
        f.api.set_slice(NS, SVC, name, "s3", f.port, &eps);
    };
    set("shoal-node-1", endpoints(0..100, &[]));
    set("shoal-node-2", endpoints(100..200, &[]));
    set("shoal-node-3", endpoints(200..250, &[]));
    let r = f.reader(None);
    r.membership_ready().await;
    ranks_endpoints(&f, &r, std::slice::from_ref(&(0..250))).await;

    // One slice changes: ten of its pods go, five are not ready.
    set(
        "shoal-node-2",
        endpoints(100..190, &[100, 101, 102, 103, 104]),
    );
    ranks_endpoints(&f, &r, &[0..100, 105..190, 200..250]).await;

    // A pod replaced: its successor fills the slice with room before the old
    // one leaves its own, so for a moment it is in both (ranked once).
    let mut moved = endpoints(200..250, &[]);
    moved.push(SliceEndpoint::pod(&address(250), true, Some("zone-a")));
    set("shoal-node-3", moved);
    ranks_endpoints(&f, &r, &[0..100, 105..190, 200..251]).await;
    set("shoal-node-1", endpoints(1..100, &[]));
    ranks_endpoints(&f, &r, &[1..100, 105..190, 200..251]).await;
    // The same endpoint in two slices, ready in one: it is ranked.
    set(
        "shoal-node-2",
        endpoints(100..190, &[100, 101, 102, 103, 104, 150]),
    );
    set("shoal-node-3", {
        let mut e = endpoints(200..251, &[]);
        e.push(SliceEndpoint::pod(&address(150), true, Some("zone-a")));
        e
    });
    ranks_endpoints(&f, &r, &[1..100, 105..190, 200..251]).await;

    // A slice deleted: only its endpoints leave.
    f.api.delete_slice(NS, "shoal-node-1");
    ranks_endpoints(&f, &r, &[105..190, 200..251]).await;
    // A reader that starts now lists what the watch built up.
    let late = f.reader(None);
    late.membership_ready().await;
    ranks_endpoints(&f, &late, &[105..190, 200..251]).await;

    // The controller empties the Service: one slice deleted, the last one
    // turned into its placeholder. No member is left.
    f.api.delete_slice(NS, "shoal-node-3");
    ranks_endpoints(&f, &r, &[105..150, 151..190]).await;
    f.api.placeholder(NS, SVC, "shoal-node-2");
    ranks_endpoints(&f, &r, &[]).await;
    ranks_endpoints(&f, &late, &[]).await;
}
