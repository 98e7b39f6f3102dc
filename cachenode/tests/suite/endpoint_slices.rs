//! Nodes and readers that learn the cluster from a Service's EndpointSlices, as
//! they do on Kubernetes: a stand-in API server lists and watches the slices
//! (resourceVersion, bookmarks, 410 after a restart), real node processes and
//! readers in this process watch them, and the slices change under readers:
//! a node joins, one goes not-ready, the API forgets its history. Node `i`
//! listens on `127.0.0.(BASE+i)` at one port, as pods share a container port.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal::cluster::ClusterReader;

use crate::common::*;
use crate::fleet::fleet_reader;

const MIB: u64 = 1 << 20;
const BASE: u8 = 60;
const NS: &str = "shoal";
const SVC: &str = "shoal-node";
/// 64 blocks of 1 MiB (the cluster's block), every one read in turn: a node
/// that joins owns none of them with a chance of (3/4)^64.
const KEYS: [&str; 8] = [
    "slices/a", "slices/b", "slices/c", "slices/d", "slices/e", "slices/f", "slices/g", "slices/h",
];

struct Fleet {
    dir: tempfile::TempDir,
    api: EndpointSlicesApi,
    port: u16,
    origin: Origin,
    nodes: Vec<NodeProcess>,
    bodies: Vec<Bytes>,
}

impl Fleet {
    async fn new(n: usize) -> Fleet {
        let port = loop {
            let p: u16 = free_addr().rsplit(':').next().unwrap().parse().unwrap();
            if (0..n as u8)
                .all(|i| std::net::TcpListener::bind((format!("127.0.0.{}", BASE + i), p)).is_ok())
            {
                break p;
            }
        };
        let f = Fleet {
            dir: tempfile::tempdir().unwrap(),
            api: EndpointSlicesApi::start().await,
            port,
            origin: origin().await,
            nodes: Vec::new(),
            bodies: (0..KEYS.len())
                .map(|i| data(8 * MIB as usize, 700 + i as u64))
                .collect(),
        };
        std::fs::write(f.dir.path().join("token"), format!("{}\n", f.api.token)).unwrap();
        for (k, b) in KEYS.iter().zip(&f.bodies) {
            f.origin.put(BUCKET, k, b.clone());
        }
        f
    }

    fn id(&self, i: usize) -> String {
        format!("127.0.0.{}:{}", BASE + i as u8, self.port)
    }

    /// The `[cluster]` naming the Service, with `extra` keys.
    fn cluster(&self, extra: &str) -> String {
        cluster_toml(&[], extra).replace(
            "nodes = []",
            &format!(
                "kubernetes = \"{NS}/{SVC}\"\nkubernetes_port = \"s3\"\nkubernetes_api = \"{}\"\n\
                 kubernetes_token_file = \"{}\"\ndown_for = \"1s\"",
                self.api.url(),
                self.dir.path().join("token").display()
            ),
        )
    }

    /// Starts node `i` of zone `zone`, in eventual mode (as the manifests run them).
    fn start(&mut self, i: usize, zone: &str) {
        let toml = node_toml(
            &self.origin,
            // Changes reach a node by invalidation only, not by revalidating.
            &format!("zone = \"{zone}\"\npeer_fill_timeout = \"150ms\"\nrevalidate_after = \"1h\""),
            &format!(
                "[cache]\nram_size = \"128MiB\"\n{}",
                self.cluster("mode = \"eventual\"")
            ),
        )
        .replace(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"{}\"", self.id(i)),
        );
        let n = NodeProcess::start(self.dir.path(), &format!("n{i}"), &toml);
        self.nodes.push(n);
    }

    /// Slice `name` holding nodes `members` (index, ready, zone).
    fn slice(&self, name: &str, members: &[(usize, bool, &str)]) {
        let endpoints: Vec<SliceEndpoint> = members
            .iter()
            .map(|&(i, ready, zone)| SliceEndpoint {
                address: format!("127.0.0.{}", BASE + i as u8),
                ready,
                zone: Some(zone.to_owned()),
            })
            .collect();
        self.api
            .set_slice(NS, SVC, name, "s3", self.port, &endpoints);
    }

    fn reader(&self, zone: Option<&str>) -> Arc<ClusterReader> {
        let extra = zone.map_or(String::new(), |z| format!("zone = \"{z}\""));
        fleet_reader(&self.origin, &self.cluster(&extra), 0)
    }

    /// Body bytes node `i` served, over its tiers (a family not on the page
    /// until its first count: the page itself is checked by its build info).
    async fn served(&self, i: usize) -> f64 {
        let text = scrape(&self.nodes[i].addr).await;
        metric_required(&text, "shoal_node_build_info{version=\"0.1.0\"}");
        text.lines()
            .filter(|l| l.starts_with("shoal_node_bytes_served_total{"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }

    /// Waits until node `i` routes by `n` nodes (its own watch of the slices).
    async fn node_sees(&self, i: usize, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let seen = metric_required(&scrape(&self.nodes[i].addr).await, "shoal_client_nodes");
            if seen == n as f64 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {i} routes by {seen} nodes, not {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The ids a reader ranks now, sorted.
fn members(r: &ClusterReader) -> Vec<String> {
    let mut ids: Vec<String> = r
        .router()
        .membership()
        .current()
        .nodes()
        .iter()
        .map(|n| n.id.clone())
        .collect();
    ids.sort();
    ids
}

/// Waits until `r` ranks exactly `want`; how long that took.
async fn ranks(r: &ClusterReader, want: &[String]) -> Duration {
    let t = Instant::now();
    let mut want = want.to_vec();
    want.sort();
    loop {
        if members(r) == want {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the reader ranks {:?}, not {want:?}",
            members(r)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Readers reading 1 MiB pieces of the objects in turn until stopped, every
/// byte checked.
struct Readers {
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Readers {
    fn start(readers: &[Arc<ClusterReader>], bodies: &[Bytes]) -> Readers {
        let r = Readers {
            stop: Default::default(),
            reads: Default::default(),
            failed: Default::default(),
            tasks: Vec::new(),
        };
        let tasks = readers
            .iter()
            .enumerate()
            .map(|(t, reader)| {
                let (reader, bodies) = (reader.clone(), bodies.to_vec());
                let (stop, reads, failed) = (r.stop.clone(), r.reads.clone(), r.failed.clone());
                tokio::spawn(async move {
                    let mut i = t as u64 * 7;
                    while !stop.load(Relaxed) {
                        let k = (i as usize) % KEYS.len();
                        let body = &bodies[k];
                        let at = (i / KEYS.len() as u64 * MIB) % body.len() as u64;
                        i += 1;
                        let got = match reader.open(BUCKET, KEYS[k], None).await {
                            Ok(h) => h.read(at, MIB).await.map_err(|e| e.to_string()),
                            Err(e) => Err(e.to_string()),
                        };
                        let ok = match got {
                            Ok(b) => b == body.slice(at as usize..(at + MIB) as usize),
                            Err(e) => {
                                eprintln!("read failed: {e}");
                                false
                            }
                        };
                        reads.fetch_add(1, Relaxed);
                        if !ok {
                            failed.fetch_add(1, Relaxed);
                        }
                    }
                })
            })
            .collect();
        Readers { tasks, ..r }
    }

    async fn progress(&self, n: u64) {
        let until = self.reads.load(Relaxed) + n;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.reads.load(Relaxed) < until {
            assert!(Instant::now() < deadline, "readers stalled");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn finish(self) -> (u64, u64) {
        self.stop.store(true, Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        (self.reads.load(Relaxed), self.failed.load(Relaxed))
    }
}

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

async fn get_from(n: &NodeProcess, key: &str) -> Bytes {
    let req = shoal::store::GetObject::new(BUCKET, key);
    client(n.socket_addr()).get_bytes(&req).await.unwrap().1
}
