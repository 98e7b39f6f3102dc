//! Every metric the mount exports, named in one place (prefix `shoal_mount_`;
//! counters end in `_total` when exposed), and the optional `/metrics` endpoint,
//! which also carries the cluster reader's (`shoal_client_`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use shoal::cluster::metrics::catch_up;

use crate::fs::Fs;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    pub op: &'static str,
}

/// The FUSE operations the filesystem runs on its runtime, timed.
const TIMED_OPS: [&str; 5] = ["lookup", "getattr", "open", "read", "opendir"];
/// Those it answers at once, counted only.
const OTHER_OPS: [&str; 11] = [
    "forget",
    "batch_forget",
    "release",
    "readdir",
    "readdirplus",
    "releasedir",
    "statfs",
    "flush",
    "getxattr",
    "listxattr",
    "access",
];

pub struct MountMetrics {
    /// FUSE operation latency in seconds, by operation.
    pub op_seconds: Family<OpLabel, Histogram>,
    /// FUSE requests received, by operation (every kind, including those
    /// answered at once): what a workload costs in kernel round trips.
    pub ops: Family<OpLabel, Counter>,
    /// The filesystem's own counts, brought up to date before each scrape.
    pub reads: Counter,
    pub read_bytes: Counter,
    pub readahead_blocks: Counter,
    pub spliced_reads: Counter,
    pub spliced_bytes: Counter,
    pub prefetched_files: Counter,
    pub prefetched_listings: Counter,
    pub skipped_names: Counter,
    pub listings: Counter,
    pub stale_reads: Counter,
    pub open_files: Gauge,
    /// Origin credentials fetched from the AWS chain (the first, then each
    /// refresh), and refreshes forced by an expired-token answer.
    pub credential_fetches: Counter,
    pub expired_token_retries: Counter,
    /// Opens handed to the kernel with a backing file from the disk tier.
    pub passthrough_opens: Counter,
}

impl Default for MountMetrics {
    fn default() -> Self {
        Self {
            op_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 4.0, 10))
            }),
            ops: Default::default(),
            reads: Default::default(),
            read_bytes: Default::default(),
            readahead_blocks: Default::default(),
            spliced_reads: Default::default(),
            spliced_bytes: Default::default(),
            prefetched_files: Default::default(),
            prefetched_listings: Default::default(),
            skipped_names: Default::default(),
            listings: Default::default(),
            stale_reads: Default::default(),
            open_files: Default::default(),
            credential_fetches: Default::default(),
            expired_token_retries: Default::default(),
            passthrough_opens: Default::default(),
        }
    }
}

impl MountMetrics {
    pub fn count_op(&self, op: &'static str) {
        debug_assert!(TIMED_OPS.contains(&op) || OTHER_OPS.contains(&op), "{op}");
        self.ops.get_or_create(&OpLabel { op }).inc();
    }

    pub fn observe_op(&self, op: &'static str, took: Duration) {
        debug_assert!(TIMED_OPS.contains(&op), "{op}");
        self.op_seconds
            .get_or_create(&OpLabel { op })
            .observe(took.as_secs_f64());
    }

    fn register(&self, r: &mut Registry) {
        // Every operation a series from the start.
        let ops = |o: &[&'static str]| o.iter().map(|&op| OpLabel { op }).collect::<Vec<_>>();
        shoal::exposition::zeroed(&self.op_seconds, ops(&TIMED_OPS));
        shoal::exposition::zeroed(&self.ops, ops(&TIMED_OPS));
        shoal::exposition::zeroed(&self.ops, ops(&OTHER_OPS));
        let p = r.sub_registry_with_prefix("shoal_mount");
        let me = crate::build::this();
        p.register(
            "build",
            "This shoal-mount's version, and the digest of its executable",
            Info::new(vec![
                ("version", crate::build::VERSION.to_owned()),
                ("build", me.to_owned()),
            ]),
        );
        shoal::register_metrics!(p,
            "op_seconds" => self.op_seconds, "FUSE operation latency, by operation";
            "ops" => self.ops, "FUSE requests received, by operation";
            "reads" => self.reads, "FUSE reads served";
            "read_bytes" => self.read_bytes, "Bytes returned to FUSE reads";
            "readahead_blocks" => self.readahead_blocks, "Blocks fetched ahead of sequential reads (or, for spliced reads, asked of their nodes ahead)";
            "spliced_reads" => self.spliced_reads, "FUSE reads answered by splicing a node's body to the kernel";
            "spliced_bytes" => self.spliced_bytes, "Bytes spliced from nodes to the kernel, never copied into the mount";
            "prefetched_files" => self.prefetched_files, "Files whose first block was fetched ahead of a directory walk";
            "prefetched_listings" => self.prefetched_listings, "Directory listings fetched ahead of a directory walk";
            "skipped_names" => self.skipped_names, "Keys skipped for not being valid file names";
            "listings" => self.listings, "ListObjectsV2 pages read";
            "stale_reads" => self.stale_reads, "Reads refused because the object changed while open";
            "open_files" => self.open_files, "Open file handles";
            "credential_fetches" => self.credential_fetches, "Origin credentials fetched from the AWS chain (first and refreshes)";
            "expired_token_retries" => self.expired_token_retries, "Requests sent again after the origin said the token expired";
            "passthrough_opens" => self.passthrough_opens, "Opens read by the kernel from a disk-tier file (FUSE passthrough)";
        );
    }

    fn refresh(&self, fs: &Fs) {
        let s = &fs.stats;
        let count = |c: &Counter, n: &AtomicU64| catch_up(c, n.load(Relaxed));
        count(&self.reads, &s.reads);
        count(&self.read_bytes, &s.read_bytes);
        count(&self.readahead_blocks, &s.readahead_blocks);
        count(&self.spliced_reads, &s.spliced_reads);
        count(&self.spliced_bytes, &s.spliced_bytes);
        count(&self.prefetched_files, &s.prefetched_files);
        count(&self.prefetched_listings, &s.prefetched_listings);
        count(&self.skipped_names, &s.skipped_names);
        count(&self.listings, &s.listings);
        count(&self.stale_reads, &s.stale_reads);
        self.open_files.set(fs.open_files() as i64);
        let c = shoal::aws::credentials::stats();
        catch_up(&self.credential_fetches, c.fetches);
        catch_up(&self.expired_token_retries, c.forced);
        fs.reader().refresh_gauges();
    }
}

/// Where `/metrics` is served: a TCP address (`--metrics-addr`), or a Unix
/// socket (`--metrics-socket`, what a CSI driver gathers its mounts' from).
#[derive(Clone, Debug)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(a) => write!(f, "{a}"),
            Listen::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// Serves `/metrics` (mount and cluster reader) on `on` until the runtime stops.
pub async fn serve(on: &Listen, fs: Arc<Fs>, metrics: Arc<MountMetrics>) -> std::io::Result<()> {
    let listener = match on {
        Listen::Tcp(addr) => Listener::Tcp(tokio::net::TcpListener::bind(addr).await?),
        Listen::Unix(path) => {
            // The socket of the server before this one (a handover, a crash):
            // it no longer listens.
            let _ = std::fs::remove_file(path);
            Listener::Unix(tokio::net::UnixListener::bind(path)?)
        }
    };
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    fs.reader().metrics.register(&mut registry);
    if let Some(b) = fs.reader().origin().budget() {
        b.metrics
            .register(registry.sub_registry_with_prefix("shoal_mount_origin_budget"));
    }
    let registry = Arc::new(registry);
    tokio::spawn(async move {
        loop {
            let (fs, metrics, registry) = (fs.clone(), metrics.clone(), registry.clone());
            match &listener {
                Listener::Tcp(l) => {
                    if let Ok((sock, _)) = l.accept().await {
                        tokio::spawn(answer(TokioIo::new(sock), fs, metrics, registry));
                    }
                }
                Listener::Unix(l) => {
                    if let Ok((sock, _)) = l.accept().await {
                        tokio::spawn(answer(TokioIo::new(sock), fs, metrics, registry));
                    }
                }
            }
        }
    });
    Ok(())
}

/// Answers the requests of one connection.
async fn answer<S>(io: S, fs: Arc<Fs>, metrics: Arc<MountMetrics>, registry: Arc<Registry>)
where
    S: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let (fs, metrics, registry) = (fs.clone(), metrics.clone(), registry.clone());
        async move {
            let resp = if req.uri().path() == "/metrics" {
                metrics.refresh(&fs);
                let accept = req
                    .headers()
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok());
                match shoal::exposition::render(&registry, accept) {
                    Ok((ct, body)) => http::Response::builder()
                        .header("content-type", ct)
                        .body(Full::new(Bytes::from(body))),
                    Err(e) => http::Response::builder()
                        .status(500)
                        .body(Full::new(Bytes::from(e))),
                }
            } else {
                http::Response::builder()
                    .status(404)
                    .body(Full::new(Bytes::from_static(b"not found\n")))
            };
            Ok::<_, std::convert::Infallible>(resp.expect("static response"))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, svc)
        .await;
}
