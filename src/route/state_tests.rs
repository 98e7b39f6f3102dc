//! Live routing state with a stepped clock.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::*;
use crate::config::{Config, ProcessEnv};
use crate::route::membership::Refresh;
use crate::route::Resolver;

fn cluster(extra: &str, n: usize) -> ClusterConfig {
    let nodes: Vec<String> = (0..n)
        .map(|i| format!("\"10.0.0.{}:9000\"", i + 1))
        .collect();
    let text = format!("[cluster]\nnodes = [{}]\n{extra}", nodes.join(", "));
    Config::parse(&text, "t.toml", &ProcessEnv)
        .unwrap()
        .cluster()
        .unwrap()
        .clone()
}

fn router(extra: &str, n: usize) -> (Router, Arc<TestClock>) {
    let cfg = cluster(extra, n);
    let clock = Arc::new(TestClock::default());
    (
        Router::new(&cfg, Membership::from_config(&cfg), clock.clone()),
        clock,
    )
}

fn block(index: u64) -> BlockId<'static> {
    BlockId {
        bucket: "b",
        key: "k",
        index,
    }
}

#[test]
fn owner_first_then_rank_order() {
    let (r, _) = router("", 5);
    let set = r.membership().current();
    let ranked = set.rank_ids(&block(3));
    let p = r.pick(&block(3)).unwrap();
    assert_eq!(p.node.id(), ranked[0]);
    assert!(!p.spilled);
    let alts: Vec<&str> = p.alternates.iter().map(|n| n.id()).collect();
    assert_eq!(alts, ranked[1..].to_vec());
}

#[test]
fn bounded_load_spills_in_rank_order() {
    let (r, _) = router("load_limit = 2\n", 4);
    let ranked: Vec<String> = r
        .membership()
        .current()
        .rank_ids(&block(9))
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut guards = Vec::new();
    let mut chosen = Vec::new();
    for _ in 0..8 {
        let p = r.pick(&block(9)).unwrap();
        chosen.push(p.node.id().to_owned());
        guards.push(r.begin(&p.node));
    }
    // Two each, in rank order: owner, second, third, fourth.
    let want: Vec<String> = ranked
        .iter()
        .flat_map(|id| [id.clone(), id.clone()])
        .collect();
    assert_eq!(chosen, want);
    assert_eq!(r.counters.spills.load(Relaxed), 6);
    // All at the limit: the owner anyway.
    assert_eq!(r.pick(&block(9)).unwrap().node.id(), ranked[0]);
    // Load drains: the owner again, no spill.
    drop(guards);
    let p = r.pick(&block(9)).unwrap();
    assert_eq!(p.node.id(), ranked[0]);
    assert!(!p.spilled);
}

#[test]
fn relative_load_factor_bounds_against_the_mean() {
    let (r, _) = router("load_factor = 1.25\n", 4);
    let owner = r.pick(&block(1)).unwrap().node;
    // With nothing in flight the bound is ceil(1.25 * 1/4) = 1: one request fits.
    let _g = r.begin(&owner);
    let p = r.pick(&block(1)).unwrap();
    assert_ne!(p.node.id(), owner.id());
    assert!(p.spilled);
}

#[test]
fn down_nodes_are_skipped_until_down_for_passes() {
    let (r, clock) = router("down_for = \"5s\"\n", 3);
    let ranked: Vec<String> = r
        .membership()
        .current()
        .rank_ids(&block(0))
        .into_iter()
        .map(str::to_owned)
        .collect();
    let owner = r.node(&ranked[0]);
    r.mark_down(&owner);
    assert!(r.is_down(&owner));
    assert_eq!(r.pick(&block(0)).unwrap().node.id(), ranked[1]);
    clock.advance(Duration::from_millis(4900));
    assert_eq!(r.pick(&block(0)).unwrap().node.id(), ranked[1]);
    clock.advance(Duration::from_millis(200));
    assert!(!r.is_down(&owner));
    assert_eq!(r.pick(&block(0)).unwrap().node.id(), ranked[0]);
    assert_eq!(r.counters.marked_down.load(Relaxed), 1);

    for id in &ranked {
        r.mark_down(&r.node(id));
    }
    assert_eq!(r.pick(&block(0)).unwrap_err(), NoNode::AllDown);
}

#[test]
fn breaker_opens_after_consecutive_failures_for_its_cooldown() {
    let (r, clock) = router(
        "down_for = \"1s\"\nbreaker_failures = 3\nbreaker_cooldown = \"10s\"\n",
        3,
    );
    let n = r.node("10.0.0.1:9000");
    r.failure(&n);
    r.failure(&n);
    // A success in between starts the count over.
    r.success(&n);
    r.failure(&n);
    r.failure(&n);
    assert!(!r.is_down(&n));
    assert_eq!(r.counters.breaker_trips.load(Relaxed), 0);
    r.failure(&n);
    assert!(r.is_down(&n));
    assert_eq!(r.counters.breaker_trips.load(Relaxed), 1);
    // A short down mark inside the cooldown does not shorten it.
    r.mark_down(&n);
    clock.advance(Duration::from_millis(9900));
    assert!(r.is_down(&n));
    clock.advance(Duration::from_millis(200));
    assert!(!r.is_down(&n));
}

#[test]
fn no_nodes_is_its_own_answer() {
    let cfg = cluster("", 1);
    let r = Router::new(&cfg, Membership::fixed(&[]), Arc::new(TestClock::default()));
    assert_eq!(r.pick(&block(0)).unwrap_err(), NoNode::Empty);
}

#[test]
fn hedge_delay_follows_the_estimate_with_a_floor() {
    let (r, _) = router("hedge_factor = 3.0\nhedge_floor = \"20ms\"\n", 2);
    let n = r.node("10.0.0.1:9000");
    assert_eq!(r.hedge_delay(&n), UNKNOWN_LATENCY_HEDGE);
    r.observe(&n, Duration::from_millis(50));
    assert_eq!(r.hedge_delay(&n), Duration::from_millis(150));
    // Fast node: the floor.
    let m = r.node("10.0.0.2:9000");
    r.observe(&m, Duration::from_millis(1));
    assert_eq!(r.hedge_delay(&m), Duration::from_millis(20));
    // EWMA moves an eighth of the way toward a new sample.
    r.observe(&n, Duration::from_millis(130));
    let est = n.latency().unwrap().as_secs_f64();
    assert!((est - 0.060).abs() < 1e-9, "{est}");
}

#[test]
fn hedges_stay_within_the_budget() {
    let (r, clock) = router("hedge_budget = 0.1\n", 3);
    // Nothing seen yet: no budget.
    assert!(!r.allow_hedge());
    for i in 0..100 {
        r.pick(&block(i)).unwrap();
    }
    let allowed = (0..50).filter(|_| r.allow_hedge()).count();
    assert_eq!(allowed, 10, "10% of 100 requests");
    // Two windows later the old requests no longer pay for hedges.
    clock.advance(Duration::from_secs(25));
    assert!(!r.allow_hedge());
    for i in 0..20 {
        r.pick(&block(i)).unwrap();
    }
    assert_eq!((0..10).filter(|_| r.allow_hedge()).count(), 2);
}

struct FakeDns(Mutex<Vec<SocketAddr>>);

impl Resolver for FakeDns {
    fn resolve<'a>(
        &'a self,
        _: &'a str,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        let v = self
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|a| SocketAddr::new(a.ip(), port))
            .collect();
        Box::pin(async move { Ok(v) })
    }
}

fn addrs(n: usize) -> Vec<SocketAddr> {
    (0..n)
        .map(|i| SocketAddr::from(([10, 9, 0, i as u8 + 1], 0)))
        .collect()
}

#[tokio::test]
async fn dns_refresh_keeps_the_set_on_an_empty_answer() {
    let cfg = Config::parse(
        "[cluster]\ndns = \"nodes.test:9100\"\n",
        "t.toml",
        &ProcessEnv,
    )
    .unwrap()
    .cluster()
    .unwrap()
    .clone();
    let dns = Arc::new(FakeDns(Mutex::new(addrs(3))));
    let m = Membership::with_resolver(&cfg, dns.clone());
    assert!(m.current().is_empty());
    assert_eq!(m.refresh().await.unwrap(), Refresh::Changed { nodes: 3 });
    assert_eq!(m.current().nodes()[0].id, "10.9.0.1:9100");
    assert_eq!(m.refresh().await.unwrap(), Refresh::Unchanged);
    dns.0.lock().unwrap().clear();
    assert_eq!(m.refresh().await.unwrap(), Refresh::KeptOnEmpty);
    assert_eq!(m.current().len(), 3);
}

#[tokio::test]
async fn dns_adding_a_node_moves_about_one_in_n_blocks() {
    let cfg = Config::parse(
        "[cluster]\ndns = \"nodes.test:9100\"\n",
        "t.toml",
        &ProcessEnv,
    )
    .unwrap()
    .cluster()
    .unwrap()
    .clone();
    let dns = Arc::new(FakeDns(Mutex::new(addrs(9))));
    let m = Membership::with_resolver(&cfg, dns.clone());
    m.refresh().await.unwrap();
    let before = m.current();
    *dns.0.lock().unwrap() = addrs(10);
    assert_eq!(m.refresh().await.unwrap(), Refresh::Changed { nodes: 10 });
    let after = m.current();
    let blocks = 20_000u64;
    let owner = |set: &NodeSet, i: u64| set.nodes()[set.top_k(&block(i), 1)[0]].id.clone();
    let moved = (0..blocks)
        .filter(|i| owner(&before, *i) != owner(&after, *i))
        .count();
    let share = moved as f64 / blocks as f64;
    assert!(
        (share - 0.1).abs() < 0.01,
        "moved {share:.4} of blocks, want about 1/10"
    );
}

#[test]
fn a_zone_ranks_its_own_nodes_and_a_zone_without_nodes_ranks_every_node() {
    let parse = |text: &str| {
        Config::parse(text, "t.toml", &ProcessEnv)
            .unwrap()
            .cluster()
            .unwrap()
            .clone()
    };
    let ids = |m: &Membership| -> Vec<String> {
        m.current().nodes().iter().map(|n| n.id.clone()).collect()
    };
    let nodes = "nodes = [{ id = \"10.0.0.1:9000\", zone = \"a\" }, { id = \"10.0.0.2:9000\", zone = \"b\" }, \"10.0.0.3:9000\"]\n";
    // Its zone has a node: that node only, and the gauge says so.
    let m = Membership::from_config(&parse(&format!("[cluster]\nzone = \"a\"\n{nodes}")));
    assert_eq!(ids(&m), ["10.0.0.1:9000"]);
    assert_eq!(m.zone_nodes(), 1);
    // No node is in zone c: every node, never an empty set.
    let m = Membership::from_config(&parse(&format!("[cluster]\nzone = \"c\"\n{nodes}")));
    assert_eq!(m.current().len(), 3);
    assert_eq!(m.zone_nodes(), 0);
    // Nodes that name no zone, and a client that names one (as the CSI driver's
    // --zone does): every node.
    let m = Membership::from_config(&parse(
        "[cluster]\nzone = \"zone-a\"\nnodes = [\"10.0.0.1:9000\", \"10.0.0.2:9000\"]\n",
    ));
    assert_eq!(m.current().len(), 2);
    // No zone: every node, none of them "in zone".
    let m = Membership::from_config(&parse(&format!("[cluster]\n{nodes}")));
    assert_eq!(m.current().len(), 3);
    assert_eq!(m.zone_nodes(), 0);
}
