//! The fleet the EndpointSlice tests read through: a stand-in API server, real
//! node processes each on its own loopback address at one port (as pods share
//! a container port), readers in this process, and what they served.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal::cluster::ClusterReader;

use crate::common::*;
use crate::fleet::fleet_reader;

pub const MIB: u64 = 1 << 20;
pub const BASE: u8 = 60;
pub const NS: &str = "shoal";
pub const SVC: &str = "shoal-node";
/// 64 blocks of 1 MiB (the cluster's block), every one read in turn: a node
/// that joins owns none of them with a chance of (3/4)^64.
pub const KEYS: [&str; 8] = [
    "slices/a", "slices/b", "slices/c", "slices/d", "slices/e", "slices/f", "slices/g", "slices/h",
];

pub struct Fleet {
    pub dir: tempfile::TempDir,
    pub api: EndpointSlicesApi,
    pub port: u16,
    pub origin: Origin,
    pub nodes: Vec<NodeProcess>,
    pub bodies: Vec<Bytes>,
}

impl Fleet {
    pub async fn new(n: usize) -> Fleet {
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

    pub fn id(&self, i: usize) -> String {
        format!("127.0.0.{}:{}", BASE + i as u8, self.port)
    }

    /// The `[cluster]` naming the Service, with `extra` keys.
    pub fn cluster(&self, extra: &str) -> String {
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
    pub fn start(&mut self, i: usize, zone: &str) {
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
    pub fn slice(&self, name: &str, members: &[(usize, bool, &str)]) {
        let endpoints: Vec<SliceEndpoint> = members
            .iter()
            .map(|&(i, ready, zone)| {
                SliceEndpoint::pod(&format!("127.0.0.{}", BASE + i as u8), ready, Some(zone))
            })
            .collect();
        self.api
            .set_slice(NS, SVC, name, "s3", self.port, &endpoints);
    }

    pub fn reader(&self, zone: Option<&str>) -> Arc<ClusterReader> {
        let extra = zone.map_or(String::new(), |z| format!("zone = \"{z}\""));
        fleet_reader(&self.origin, &self.cluster(&extra), 0)
    }

    /// Body bytes node `i` served, over its tiers (each on the page from the
    /// start).
    pub async fn served(&self, i: usize) -> f64 {
        let text = scrape(&self.nodes[i].addr).await;
        metric(&text, "shoal_node_bytes_served_total{tier=\"ram\"}");
        metric_sum(&text, "shoal_node_bytes_served_total")
    }

    /// Waits until node `i` routes by `n` nodes (its own watch of the slices).
    pub async fn node_sees(&self, i: usize, n: usize) {
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
pub fn members(r: &ClusterReader) -> Vec<String> {
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
pub async fn ranks(r: &ClusterReader, want: &[String]) -> Duration {
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
pub struct Readers {
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Readers {
    pub fn start(readers: &[Arc<ClusterReader>], bodies: &[Bytes]) -> Readers {
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

    pub async fn progress(&self, n: u64) {
        let until = self.reads.load(Relaxed) + n;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.reads.load(Relaxed) < until {
            assert!(Instant::now() < deadline, "readers stalled");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn finish(self) -> (u64, u64) {
        self.stop.store(true, Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        (self.reads.load(Relaxed), self.failed.load(Relaxed))
    }
}

pub async fn get_from(n: &NodeProcess, key: &str) -> Bytes {
    let req = shoal::store::GetObject::new(BUCKET, key);
    client(n.socket_addr()).get_bytes(&req).await.unwrap().1
}
