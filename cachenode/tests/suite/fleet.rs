//! The fleet changing under its readers: a block that moved to a new owner (a
//! node joined) is fetched once from its previous owner with
//! `Cache-Control: only-if-cached`, not again from the origin; a node asked that
//! way answers from RAM or disk or 504, and never asks the origin. Each node has
//! an origin of its own, so every origin byte is counted where it went.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal::cluster::{ClusterReader, ReaderOptions};
use shoal::store::{ByteRange, ExtraHeaders, GetObject, ObjectStore, StoreError};

use crate::common::*;

const MIB: u64 = 1 << 20;
const KEYS: [&str; 2] = ["fleet/a.bin", "fleet/b.bin"];

/// A node of the fleet: its own origin, a disk tier, an access log, the
/// cluster `nodes`.
fn fleet_node(dir: &Path, i: usize, origin: &Origin, listen: &str, nodes: &[&str]) -> NodeProcess {
    let cache = format!(
        "ram_size = \"256MiB\"\ndisk_size = \"256MiB\"\ndata_dir = \"{}\"",
        dir.join(format!("disk{i}")).display()
    );
    node_of_fleet(dir, i, origin, listen, nodes, &cache)
}

/// A node of a fleet found at `listen`, with its own origin, an access log,
/// the cluster `nodes` and `cache` (the lines of its `[cache]` section).
pub fn node_of_fleet(
    dir: &Path,
    i: usize,
    origin: &Origin,
    listen: &str,
    nodes: &[&str],
    cache: &str,
) -> NodeProcess {
    node_of_cluster(dir, i, origin, listen, &cluster_toml(nodes, ""), cache)
}

/// [`node_of_fleet`] with `cluster` as its `[cluster]` section, every `[node]`
/// setting but its address and access log at its default.
pub fn node_of_cluster(
    dir: &Path,
    i: usize,
    origin: &Origin,
    listen: &str,
    cluster: &str,
    cache: &str,
) -> NodeProcess {
    let toml = node_toml(
        origin,
        &format!(
            "access_log = \"{}\"",
            dir.join(format!("access{i}.log")).display()
        ),
        &format!("[cache]\n{cache}\n{cluster}"),
    )
    .replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"{listen}\""),
    );
    NodeProcess::start(dir, &format!("n{i}"), &toml)
}

/// A reader of the cluster `cluster` (its config section) with `ram_bytes` of
/// its own, falling back to `fallback` (counted like the nodes' origins).
pub fn fleet_reader(
    fallback: &Origin,
    cluster: &str,
    ram_bytes: u64,
) -> std::sync::Arc<ClusterReader> {
    let cfg = parse(&format!("{}{cluster}", origin_toml(fallback)));
    ClusterReader::new(
        origin_client(fallback),
        cfg.cluster(),
        ReaderOptions {
            ram_bytes,
            ..Default::default()
        },
    )
}

/// Every object read whole through a fresh reader of the cluster `nodes` (its
/// origin `fallback`, counted like the nodes'), each byte checked.
async fn read_through(fallback: &Origin, nodes: &[&str], bodies: &[Bytes]) {
    let reader = fleet_reader(fallback, &cluster_toml(nodes, ""), 64 << 20);
    for (key, body) in KEYS.iter().zip(bodies) {
        let h = reader.open(BUCKET, key, None).await.unwrap();
        let got = h.read(0, body.len() as u64).await.unwrap();
        assert!(got == *body, "{key}: the bytes read differ");
    }
}

fn origin_bytes(origins: &[Origin]) -> u64 {
    origins
        .iter()
        .map(|o| o.stats.snapshot().body_bytes_sent)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_fills_from_previous_owners_not_the_origin() {
    let dir = tempfile::tempdir().unwrap();
    // Four nodes' origins and the reader's own, each holding the same objects
    // (the same bytes: the same ETags).
    let mut origins = Vec::new();
    for _ in 0..5 {
        origins.push(origin().await);
    }
    let bodies: Vec<Bytes> = (0..KEYS.len())
        .map(|i| data(16 * MIB as usize, 380 + i as u64))
        .collect();
    for o in &origins {
        for (k, b) in KEYS.iter().zip(&bodies) {
            o.put(BUCKET, k, b.clone());
        }
    }
    let addrs: Vec<String> = (0..4).map(|_| free_addr()).collect();
    let ids: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let mut nodes: Vec<NodeProcess> = (0..3)
        .map(|i| fleet_node(dir.path(), i, &origins[i], ids[i], &ids[..3]))
        .collect();
    let (reader_origin, node_origins) = origins.split_last().unwrap();
    read_through(reader_origin, &ids[..3], &bodies).await;
    let total: u64 = bodies.iter().map(|b| b.len() as u64).sum();
    let first = origin_bytes(&origins);
    assert!(first >= total, "the cold read fetched {first} of {total}");

    // A fourth node joins. The three keep their 3-node lists: only the new node
    // and the readers need the new one, the old owners only answer.
    for o in &origins {
        o.stats.reset();
    }
    nodes.push(fleet_node(dir.path(), 3, &node_origins[3], ids[3], &ids));
    read_through(reader_origin, &ids, &bodies).await;
    let again = origin_bytes(&origins);
    let ratio = again as f64 / total as f64;
    let text = scrape(&addrs[3]).await;
    let hits = metric(&text, "shoal_node_peer_fills_total{result=\"hit\"}");
    let others: f64 = ["miss", "timeout", "error"]
        .iter()
        .map(|r| {
            metric(
                &text,
                &format!("shoal_node_peer_fills_total{{result=\"{r}\"}}"),
            )
        })
        .sum();
    eprintln!(
        "join: origin bytes {again} for {total} read again ({ratio:.3}x); new node's peer fills: {hits} hit, {others} other"
    );
    assert!(
        ratio <= 0.02,
        "a join cost the origins {ratio:.3}x the data read again"
    );
    assert!(
        hits >= 1.0,
        "the new node filled nothing from peers:\n{text}"
    );
    assert_eq!(
        others, 0.0,
        "every block the new node owns was on its previous owner"
    );
    assert_eq!(
        metric(&text, "shoal_node_peer_fill_bytes_total"),
        hits * MIB as f64,
        "whole 1 MiB blocks"
    );
    // The fill is on the access log's line of the request it was made for.
    let log = dir.path().join("access3.log");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text
            .lines()
            .any(|l| l.contains("\"peer_fill\":{\"hit\":1,"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no peer fill in the access log:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two nodes in process, each with its own origin, that know each other
/// (eventual mode: each fetches its own misses).
async fn pair() -> (Vec<Origin>, Vec<TestNode>) {
    let mut origins = Vec::new();
    for _ in 0..2 {
        origins.push(origin().await);
    }
    let mut listeners = Vec::new();
    for _ in 0..2 {
        listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let ids: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut nodes = Vec::new();
    for (o, l) in origins.iter().zip(listeners) {
        let toml = node_toml(o, "", &cluster_toml(&ids, "mode = \"eventual\""));
        nodes.push(start_node_on(&parse(&toml), l).await);
    }
    (origins, nodes)
}

/// Which of two nodes owns block 0 of `key`, and which is its runner-up.
fn ranked(nodes: &[TestNode], key: &str) -> (usize, usize) {
    let ids: Vec<String> = nodes.iter().map(|n| n.addr.to_string()).collect();
    let set = shoal::route::Membership::fixed(&ids).current();
    let top = set.top_k(
        &shoal::route::BlockId {
            bucket: BUCKET,
            key,
            index: 0,
        },
        2,
    );
    let owner = ids
        .iter()
        .position(|i| *i == set.nodes()[top[0]].id)
        .unwrap();
    (owner, 1 - owner)
}

fn block0(etag: &str) -> GetObject {
    GetObject::new(BUCKET, "")
        .if_match(etag)
        .range(ByteRange::span(0, MIB))
}

async fn get(node: &TestNode, key: &str, etag: &str) -> Result<Bytes, StoreError> {
    let mut req = block0(etag);
    req.key = key.to_owned();
    client(node.addr).get_bytes(&req).await.map(|(_, b)| b)
}

fn peer_fills(node: &TestNode, result: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &node.app.registry).unwrap();
    metric(
        &text,
        &format!("shoal_node_peer_fills_total{{result=\"{result}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_if_cached_answers_504_and_never_asks_the_origin() {
    let (origins, nodes) = pair().await;
    let body = data(3 * MIB as usize, 381);
    let etag = origins[0].put(BUCKET, "oic", body.clone());
    origins[0].stats.reset();
    for (i, head) in [(0, false), (1, true)] {
        let c = client(nodes[0].addr);
        let mut req = block0(&etag);
        req.key = "oic".into();
        req.set_header("cache-control", Some("max-age=0, only-if-cached".into()));
        let e = if head {
            c.head(&req).await.unwrap_err()
        } else {
            c.get_bytes(&req).await.unwrap_err()
        };
        assert!(
            matches!(e.cause(), StoreError::Server { status: 504, code, .. } if code == "ShoalNotCached")
                || (head && matches!(e.cause(), StoreError::Server { status: 504, .. })),
            "ask {i}: {e:?}"
        );
    }
    let seen = origins[0].stats.snapshot();
    assert_eq!(seen.count("GET") + seen.count("HEAD"), 0, "{seen:?}");
    // Held: served from the cache, still nothing asked of the origin.
    get(&nodes[0], "oic", &etag).await.unwrap();
    origins[0].stats.reset();
    let mut req = block0(&etag);
    req.key = "oic".into();
    req.set_header("cache-control", Some("only-if-cached".into()));
    let (_, got) = client(nodes[0].addr).get_bytes(&req).await.unwrap();
    assert!(got == body.slice(0..MIB as usize));
    // Block 1 is not held: 504, and no fetch of it.
    req.range = Some(ByteRange::span(MIB, 2 * MIB));
    let e = client(nodes[0].addr).get_bytes(&req).await.unwrap_err();
    assert!(
        matches!(e.cause(), StoreError::Server { status: 504, .. }),
        "{e:?}"
    );
    let seen = origins[0].stats.snapshot();
    assert_eq!(seen.count("GET") + seen.count("HEAD"), 0, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_ups_copy_is_taken_only_for_the_version_asked() {
    let (origins, nodes) = pair().await;
    let key = "versions";
    let (owner, runner_up) = ranked(&nodes, key);
    let v1 = data(2 * MIB as usize, 382);
    let v2 = data(2 * MIB as usize, 383);
    let e1 = origins
        .iter()
        .map(|o| o.put(BUCKET, key, v1.clone()))
        .last()
        .unwrap();
    // The runner-up holds version 1's block 0 (its owner fill had the owner
    // fetch it, and the owner drops its copy); the owner, asked for it, takes
    // it from there.
    get(&nodes[runner_up], key, &e1).await.unwrap();
    // The owner answers as its fetch arrives and keeps the block once the
    // fetch ends, which may be after the runner-up has every byte: the copy
    // is dropped once it is there, or it would land after the purge.
    let node = &nodes[owner].app.node;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = match node.known_version_aged(BUCKET, key, &e1) {
            Some((meta, _)) => node.cached(BUCKET, key, &meta, 0, MIB).await,
            None => false,
        };
        if held {
            break;
        }
        assert!(Instant::now() < deadline, "the owner never kept its fetch");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    node.purge_object(BUCKET, key).await;
    for o in &origins {
        o.stats.reset();
    }
    let got = get(&nodes[owner], key, &e1).await.unwrap();
    assert!(got == v1.slice(0..MIB as usize));
    assert_eq!(origins[owner].stats.snapshot().body_bytes_sent, 0);
    assert_eq!(peer_fills(&nodes[owner], "hit"), 1.0);
    // Version 2: the runner-up holds only version 1's block, which is never
    // taken; the owner fetches version 2 from its origin.
    let e2 = origins
        .iter()
        .map(|o| o.put(BUCKET, key, v2.clone()))
        .last()
        .unwrap();
    assert_ne!(e1, e2);
    for o in &origins {
        o.stats.reset();
    }
    let got = get(&nodes[owner], key, &e2).await.unwrap();
    assert!(
        got == v2.slice(0..MIB as usize),
        "version 1's bytes served for version 2"
    );
    assert_eq!(peer_fills(&nodes[owner], "hit"), 1.0);
    assert!(peer_fills(&nodes[owner], "miss") >= 1.0);
    // The runner-up was asked only from its cache: its origin saw nothing.
    let seen = origins[runner_up].stats.snapshot();
    assert_eq!(seen.count("GET") + seen.count("HEAD"), 0, "{seen:?}");
}

/// Names in `/etc/hosts` for the test's life: a cluster found by DNS, as a
/// StatefulSet's headless Service gives it, on loopback addresses.
struct Hosts {
    lines: Vec<String>,
}

impl Hosts {
    /// `None` when `/etc/hosts` cannot be written (not root): the test is
    /// skipped, saying so.
    fn new() -> Option<Hosts> {
        let probe = std::fs::OpenOptions::new().append(true).open("/etc/hosts");
        if let Err(e) = probe {
            // CI runs as root: there a skip would pass without testing.
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "/etc/hosts is not writable under CI ({e})"
            );
            eprintln!("skipped: /etc/hosts is not writable ({e})");
            return None;
        }
        Some(Hosts { lines: Vec::new() })
    }

    fn add(&mut self, ip: &str, name: &str) {
        use std::io::Write;
        let line = format!("{ip} {name}");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open("/etc/hosts")
            .unwrap();
        writeln!(f, "{line}").unwrap();
        self.lines.push(line);
    }

    fn remove(&mut self, ip: &str) {
        let gone: Vec<String> = self
            .lines
            .iter()
            .filter(|l| l.starts_with(&format!("{ip} ")))
            .cloned()
            .collect();
        let text = std::fs::read_to_string("/etc/hosts").unwrap();
        let kept: String = text
            .lines()
            .filter(|l| !gone.iter().any(|g| g == l))
            .map(|l| format!("{l}\n"))
            .collect();
        // In place: /etc/hosts may be a bind mount, which a rename would not
        // replace.
        std::fs::write("/etc/hosts", kept).unwrap();
        self.lines.retain(|l| !gone.contains(l));
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ip in self
            .lines
            .iter()
            .filter_map(|l| l.split(' ').next())
            .map(str::to_owned)
            .collect::<Vec<_>>()
        {
            self.remove(&ip);
        }
    }
}

/// A fleet found by one DNS name: node `i` listens on `127.0.0.(base+i):port`.
struct DnsFleet {
    dir: tempfile::TempDir,
    name: String,
    port: u16,
    base: u8,
    hosts: Hosts,
    origins: Vec<Origin>,
    /// The readers' own origin (their fallback), counted with the nodes'.
    reader_origin: Origin,
    nodes: Vec<Option<NodeProcess>>,
    bodies: Vec<Bytes>,
}

impl DnsFleet {
    async fn new(n: usize, base: u8, seed: u64) -> Option<DnsFleet> {
        let hosts = Hosts::new()?;
        // One port free on every address the fleet may use.
        let port = loop {
            let p = free_addr()
                .rsplit(':')
                .next()
                .unwrap()
                .parse::<u16>()
                .unwrap();
            if (0..6)
                .all(|i| std::net::TcpListener::bind((format!("127.0.0.{}", base + i), p)).is_ok())
            {
                break p;
            }
        };
        let bodies: Vec<Bytes> = (0..KEYS.len())
            .map(|i| data(16 * MIB as usize, seed + i as u64))
            .collect();
        let mut fleet = DnsFleet {
            dir: tempfile::tempdir().unwrap(),
            name: format!("fleet{}-{base}.shoal.test", std::process::id()),
            port,
            base,
            hosts,
            origins: Vec::new(),
            reader_origin: origin().await,
            nodes: Vec::new(),
            bodies,
        };
        for (k, b) in KEYS.iter().zip(&fleet.bodies) {
            fleet.reader_origin.put(BUCKET, k, b.clone());
        }
        for _ in 0..n {
            fleet.add().await;
        }
        Some(fleet)
    }

    fn ip(&self, i: usize) -> String {
        format!("127.0.0.{}", self.base + i as u8)
    }

    fn id(&self, i: usize) -> String {
        format!("{}:{}", self.ip(i), self.port)
    }

    fn cluster(&self) -> String {
        cluster_toml(&[], "").replace(
            "nodes = []",
            &format!(
                "dns = \"{}:{}\"\nrefresh = \"500ms\"\ndown_for = \"1s\"",
                self.name, self.port
            ),
        )
    }

    fn config(&self, i: usize) -> std::path::PathBuf {
        self.dir.path().join(format!("n{i}.toml"))
    }

    /// A new node with an origin of its own, in DNS once it listens.
    async fn add(&mut self) {
        let i = self.nodes.len();
        let o = origin().await;
        for (k, b) in KEYS.iter().zip(&self.bodies) {
            o.put(BUCKET, k, b.clone());
        }
        let dir = self.dir.path();
        let toml = node_toml(
            &o,
            &format!(
                "peer_fill_timeout = \"150ms\"\nshutdown_timeout = \"5s\"\naccess_log = \"{}\"",
                dir.join(format!("access{i}.log")).display()
            ),
            &format!(
                "[cache]\nram_size = \"256MiB\"\ndisk_size = \"256MiB\"\ndata_dir = \"{}\"\n{}",
                dir.join(format!("disk{i}")).display(),
                self.cluster()
            ),
        )
        .replace(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"{}\"", self.id(i)),
        );
        std::fs::write(self.config(i), toml).unwrap();
        self.origins.push(o);
        self.nodes.push(Some(NodeProcess::spawn(&self.config(i))));
        let (ip, name) = (self.ip(i), self.name.clone());
        self.hosts.add(&ip, &name);
        self.members(self.nodes.len()).await;
    }

    /// Waits until every running node routes by `n` members (its
    /// `shoal_client_nodes`; each refreshes the name twice a second).
    async fn members(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for node in self.nodes.iter().flatten() {
            loop {
                let seen = metric(&scrape(&node.addr).await, "shoal_client_nodes");
                if seen == n as f64 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{} routes by {seen} nodes, not {n}",
                    node.addr
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// SIGTERM, and the exit waited for.
    fn stop(&mut self, i: usize) {
        let mut n = self.nodes[i].take().expect("running");
        signal(n.pid(), "-TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        while n.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "node {i} did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        for l in n.log_lines("stopping") {
            eprintln!("node {i}: {l}");
        }
    }

    fn start(&mut self, i: usize) -> Duration {
        let t = Instant::now();
        self.nodes[i] = Some(NodeProcess::spawn(&self.config(i)));
        t.elapsed()
    }

    fn origin_bytes(&self) -> u64 {
        origin_bytes(&self.origins) + self.reader_origin.stats.snapshot().body_bytes_sent
    }

    fn reset(&self) {
        for o in self.origins.iter().chain([&self.reader_origin]) {
            o.stats.reset();
        }
    }

    fn total(&self) -> u64 {
        self.bodies.iter().map(|b| b.len() as u64).sum()
    }

    fn reader(&self, ram_bytes: u64) -> std::sync::Arc<ClusterReader> {
        fleet_reader(&self.reader_origin, &self.cluster(), ram_bytes)
    }

    /// Every object read whole by a fresh reader, each byte checked.
    async fn read_all(&self) {
        let reader = self.reader(64 << 20);
        reader.router().membership().refresh().await.unwrap();
        for (key, body) in KEYS.iter().zip(&self.bodies) {
            let h = reader.open(BUCKET, key, None).await.unwrap();
            let got = h.read(0, body.len() as u64).await.unwrap();
            assert!(got == *body, "{key}: the bytes read differ");
        }
    }

    async fn disk_bytes(&self, i: usize) -> u64 {
        let n = self.nodes[i].as_ref().unwrap();
        metric(
            &scrape(&n.addr).await,
            "shoal_node_cache_bytes{tier=\"disk\"}",
        ) as u64
    }
}

/// Readers reading 4 MiB pieces of the objects in turn until stopped, every
/// byte checked: how many reads they made and how many failed.
struct Readers {
    clients: Vec<std::sync::Arc<ClusterReader>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
    failed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Readers {
    fn start(fleet: &DnsFleet, n: usize) -> Readers {
        use std::sync::atomic::Ordering::Relaxed;
        let mut r = Readers {
            clients: Vec::new(),
            stop: Default::default(),
            reads: Default::default(),
            failed: Default::default(),
            tasks: Vec::new(),
        };
        let mut tasks = Vec::new();
        for t in 0..n {
            // No RAM of their own: every read goes to the nodes.
            let reader = fleet.reader(0);
            r.clients.push(reader.clone());
            let bodies = fleet.bodies.clone();
            let (stop, reads, failed) = (r.stop.clone(), r.reads.clone(), r.failed.clone());
            tasks.push(tokio::spawn(async move {
                // Reads start once the nodes are known: none goes to the
                // origin for want of a node.
                reader.router().membership().refresh().await.unwrap();
                let piece = 4 * MIB;
                let mut i = t as u64;
                while !stop.load(Relaxed) {
                    let k = (i as usize) % KEYS.len();
                    let body = &bodies[k];
                    let at = (i * piece) % body.len() as u64;
                    i += 1;
                    let ok = match reader.open(BUCKET, KEYS[k], None).await {
                        Ok(h) => match h.read(at, piece).await {
                            Ok(got) => got == body.slice(at as usize..(at + piece) as usize),
                            Err(e) => {
                                eprintln!("read failed: {e}");
                                false
                            }
                        },
                        Err(e) => {
                            eprintln!("open failed: {e}");
                            false
                        }
                    };
                    reads.fetch_add(1, Relaxed);
                    if !ok {
                        failed.fetch_add(1, Relaxed);
                    }
                }
            }));
        }
        Readers { tasks, ..r }
    }

    /// Waits until the readers have made `n` more reads.
    async fn progress(&self, n: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let until = self.reads.load(Relaxed) + n;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.reads.load(Relaxed) < until {
            assert!(Instant::now() < deadline, "readers stalled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until no reader has node `id` marked down: they ask it again.
    async fn up(&self, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let down = self.clients.iter().any(|c| {
                let r = c.router();
                r.nodes().iter().any(|n| n.id() == id && r.is_down(n))
            });
            if !down {
                return;
            }
            assert!(Instant::now() < deadline, "{id} stays marked down");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Times any reader marked a node down (a connection it could not make).
    fn marked_down(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        self.clients
            .iter()
            .map(|c| c.router().counters.marked_down.load(Relaxed))
            .sum()
    }

    async fn finish(self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.stop.store(true, Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        (self.reads.load(Relaxed), self.failed.load(Relaxed))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_stopped_and_started_in_turn_cost_the_origin_only_while_away() {
    let Some(mut fleet) = DnsFleet::new(3, 10, 390).await else {
        return;
    };
    fleet.read_all().await;
    let total = fleet.total();
    assert!(fleet.origin_bytes() >= total);
    let readers = Readers::start(&fleet, 2);
    readers.progress(8).await;
    let mut rows = Vec::new();
    for i in 0..3 {
        let held = fleet.disk_bytes(i).await;
        fleet.reset();
        fleet.stop(i);
        // Long enough for the readers to pass over every block of the node.
        readers.progress(16).await;
        let away = fleet.origin_bytes();
        let took = fleet.start(i);
        // The readers try it again once their down mark (1 s) is over.
        readers.up(&fleet.id(i)).await;
        fleet.reset();
        readers.progress(16).await;
        let back = fleet.origin_bytes();
        eprintln!(
            "node {i} stopped: origin bytes {away} while away (it held {held}), {back} once back; started in {took:?}"
        );
        rows.push((i, held, away, back));
    }
    let (reads, failed) = readers.finish().await;
    eprintln!("readers: {reads} reads, {failed} failed");
    assert_eq!(failed, 0, "reads failed while nodes restarted");
    for (i, held, away, back) in &rows {
        assert!(away <= held, "node {i}: away cost {away}, it held {held}");
        assert_eq!(*back, 0, "node {i}: once back the origins sent {back}");
    }
    // Everything once more: each node serves its blocks from its disk.
    fleet.reset();
    fleet.read_all().await;
    let again = fleet.origin_bytes();
    eprintln!("after the restarts: origin bytes {again} for {total} read again");
    assert_eq!(again, 0, "a restarted node fetched again what it held");

    // All three stopped and started again with nothing read since: what they
    // know of their blocks comes from their disks alone. A fourth node joins
    // them and fills from the blocks' previous owners, which answer its
    // only-if-cached asks from those disks.
    for i in 0..3 {
        fleet.stop(i);
        fleet.start(i);
    }
    fleet.reset();
    fleet.add().await;
    fleet.read_all().await;
    let joined = fleet.origin_bytes();
    let text = scrape(&fleet.id(3)).await;
    let hits = metric(&text, "shoal_node_peer_fills_total{result=\"hit\"}");
    let misses = metric(&text, "shoal_node_peer_fills_total{result=\"miss\"}");
    let ratio = joined as f64 / total as f64;
    eprintln!(
        "join after restarts: origin bytes {joined} for {total} ({ratio:.3}x); peer fills {hits} hit, {misses} miss"
    );
    assert!(
        ratio <= 0.02,
        "a join after restarts cost the origins {ratio:.3}x: restarted owners answered {misses} asks 504"
    );
}

impl DnsFleet {
    /// `systemctl reload` of node `i` (SIGHUP to the process serving now), and
    /// the old process's exit waited for: the pid of the one that took over.
    async fn reload(&mut self, i: usize, pid: u32) -> u32 {
        let n = self.nodes[i].as_mut().expect("running");
        let handed = n.log_lines("handed over to pid").len();
        signal(pid, "-HUP");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // The new process writes to the same log: its successor's line is
            // the next "handed over" one.
            let lines = n.log_lines("handed over to pid");
            if lines.len() > handed && !crate::handover::alive(pid) {
                let line = &lines[handed];
                return line
                    .split("handed over to pid ")
                    .nth(1)
                    .and_then(|r| r.split(';').next())
                    .and_then(|p| p.trim().parse().ok())
                    .unwrap_or_else(|| panic!("{line}"));
            }
            assert!(Instant::now() < deadline, "node {i} did not hand over");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_reloaded_in_turn_under_readers_refuse_nothing_and_cost_the_origin_nothing() {
    let Some(mut fleet) = DnsFleet::new(3, 30, 400).await else {
        return;
    };
    fleet.read_all().await;
    let total = fleet.total();
    assert!(fleet.origin_bytes() >= total);
    fleet.reset();
    let readers = Readers::start(&fleet, 2);
    readers.progress(8).await;
    let mut guards = Vec::new();
    for i in 0..3 {
        let before = readers.reads.load(std::sync::atomic::Ordering::Relaxed);
        let pid = fleet.nodes[i].as_ref().unwrap().pid();
        let t = Instant::now();
        let next = fleet.reload(i, pid).await;
        guards.push(crate::handover::Pid(next));
        eprintln!(
            "node {i}: pid {pid} handed over to {next} in {:?}; readers made {} reads meanwhile",
            t.elapsed(),
            readers.reads.load(std::sync::atomic::Ordering::Relaxed) - before
        );
        // The new process serves: the readers read on through it.
        readers.progress(16).await;
    }
    let marked = readers.marked_down();
    let (reads, failed) = readers.finish().await;
    let during = fleet.origin_bytes();
    fleet.read_all().await;
    let after = fleet.origin_bytes() - during;
    let ratio = during as f64 / total as f64;
    eprintln!(
        "reloaded in turn: {reads} reads, {failed} failed, {marked} connections failed (nodes marked down); origin bytes {during} during ({ratio:.3}x), {after} for all read again"
    );
    assert_eq!(failed, 0, "reads failed while nodes reloaded");
    assert_eq!(marked, 0, "a reader could not connect to a reloading node");
    assert!(
        ratio <= 0.02,
        "reloads cost the origins {ratio:.3}x the data"
    );
    assert_eq!(after, 0, "a reloaded node fetched again what it held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_hands_its_blocks_back_before_it_goes() {
    let Some(mut fleet) = DnsFleet::new(3, 20, 395).await else {
        return;
    };
    fleet.read_all().await;
    let total = fleet.total();
    assert!(fleet.origin_bytes() >= total);
    // Node 1 leaves: its blocks go to their runner-ups, from it.
    let leaving = 1;
    let held = fleet.disk_bytes(leaving).await;
    let mut on_disk = Vec::new();
    for i in 0..3 {
        on_disk.push(fleet.disk_bytes(i).await);
    }
    eprintln!(
        "cold read: origin bytes {} for {total}; on the nodes' disks {on_disk:?}",
        fleet.origin_bytes()
    );
    fleet.reset();
    let cli = fleet.dir.path().join("cli.toml");
    std::fs::write(
        &cli,
        format!("{}{}", origin_toml(&fleet.reader_origin), fleet.cluster()),
    )
    .unwrap();
    let out = std::process::Command::new(bin("shoal"))
        .arg("--config")
        .arg(&cli)
        .args([
            "drain",
            &fleet.id(leaving),
            "--bucket",
            BUCKET,
            "--batch",
            "8",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    eprintln!("{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "shoal drain failed");
    assert!(said.contains("it can be removed now"), "{said}");
    let handed = fleet.origin_bytes();
    assert_eq!(
        handed, 0,
        "the hand-back asked the origins for {handed} bytes"
    );
    // Removed from DNS, then stopped.
    let ip = fleet.ip(leaving);
    fleet.hosts.remove(&ip);
    fleet.members(2).await;
    fleet.stop(leaving);
    fleet.read_all().await;
    let again = fleet.origin_bytes();
    let ratio = again as f64 / total as f64;
    eprintln!(
        "drain and removal: the leaving node held {held} bytes on disk; origin bytes {again} for {total} read again ({ratio:.3}x)"
    );
    assert!(
        ratio <= 0.02,
        "removing a drained node cost the origins {ratio:.3}x the data read again"
    );

    // Bad input is refused clearly, and asks nothing of anyone.
    let bad = std::process::Command::new(bin("shoal"))
        .arg("--config")
        .arg(&cli)
        .args(["drain", "127.0.0.99:1", "--bucket", BUCKET])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(err.contains("is not a node of the cluster"), "{err}");
}
