//! The mount's metrics (names in one place) and the optional `/metrics` endpoint.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::fs::Fs;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    pub op: &'static str,
}

pub struct MountMetrics {
    /// FUSE operation latency in seconds, by operation.
    pub op_seconds: Family<OpLabel, Histogram>,
    pub reads: Gauge,
    pub read_bytes: Gauge,
    pub readahead_blocks: Gauge,
    pub prefetched_files: Gauge,
    pub prefetched_listings: Gauge,
    pub skipped_names: Gauge,
    pub listings: Gauge,
    pub stale_reads: Gauge,
    pub open_files: Gauge,
}

impl Default for MountMetrics {
    fn default() -> Self {
        Self {
            op_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 4.0, 10))
            }),
            reads: Gauge::default(),
            read_bytes: Gauge::default(),
            readahead_blocks: Gauge::default(),
            prefetched_files: Gauge::default(),
            prefetched_listings: Gauge::default(),
            skipped_names: Gauge::default(),
            listings: Gauge::default(),
            stale_reads: Gauge::default(),
            open_files: Gauge::default(),
        }
    }
}

impl MountMetrics {
    pub fn observe_op(&self, op: &'static str, took: Duration) {
        self.op_seconds
            .get_or_create(&OpLabel { op })
            .observe(took.as_secs_f64());
    }

    fn register(&self, r: &mut Registry) {
        let p = r.sub_registry_with_prefix("shoal_mount");
        p.register(
            "op_seconds",
            "FUSE operation latency, by operation",
            self.op_seconds.clone(),
        );
        p.register("reads", "FUSE reads served since start", self.reads.clone());
        p.register(
            "read_bytes",
            "Bytes returned to FUSE reads since start",
            self.read_bytes.clone(),
        );
        p.register(
            "readahead_blocks",
            "Blocks fetched ahead of sequential reads",
            self.readahead_blocks.clone(),
        );
        p.register(
            "prefetched_files",
            "Files whose first block was fetched ahead of a directory walk",
            self.prefetched_files.clone(),
        );
        p.register(
            "prefetched_listings",
            "Directory listings fetched ahead of a directory walk",
            self.prefetched_listings.clone(),
        );
        p.register(
            "skipped_names",
            "Keys skipped for not being valid file names",
            self.skipped_names.clone(),
        );
        p.register(
            "listings",
            "ListObjectsV2 pages read",
            self.listings.clone(),
        );
        p.register(
            "stale_reads",
            "Reads refused because the object changed while open",
            self.stale_reads.clone(),
        );
        p.register("open_files", "Open file handles", self.open_files.clone());
    }

    fn refresh(&self, fs: &Fs) {
        let s = &fs.stats;
        self.reads.set(s.reads.load(Relaxed) as i64);
        self.read_bytes.set(s.read_bytes.load(Relaxed) as i64);
        self.readahead_blocks
            .set(s.readahead_blocks.load(Relaxed) as i64);
        self.prefetched_files
            .set(s.prefetched_files.load(Relaxed) as i64);
        self.prefetched_listings
            .set(s.prefetched_listings.load(Relaxed) as i64);
        self.skipped_names.set(s.skipped_names.load(Relaxed) as i64);
        self.listings.set(s.listings.load(Relaxed) as i64);
        self.stale_reads.set(s.stale_reads.load(Relaxed) as i64);
        self.open_files.set(fs.open_files() as i64);
        fs.reader().refresh_gauges();
    }
}

/// Serves `/metrics` (mount and cluster reader) on `addr` until the runtime stops.
pub async fn serve(
    addr: SocketAddr,
    fs: Arc<Fs>,
    metrics: Arc<MountMetrics>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    fs.reader().metrics.register(&mut registry);
    let registry = Arc::new(registry);
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                continue;
            };
            let (fs, metrics, registry) = (fs.clone(), metrics.clone(), registry.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: http::Request<hyper::body::Incoming>| {
                        let (fs, metrics, registry) =
                            (fs.clone(), metrics.clone(), registry.clone());
                        async move {
                            let resp = if req.uri().path() == "/metrics" {
                                metrics.refresh(&fs);
                                let mut out = String::new();
                                let _ =
                                    prometheus_client::encoding::text::encode(&mut out, &registry);
                                http::Response::builder()
                                .header("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
                                .body(Full::new(Bytes::from(out)))
                            } else {
                                http::Response::builder()
                                    .status(404)
                                    .body(Full::new(Bytes::from_static(b"not found\n")))
                            };
                            Ok::<_, std::convert::Infallible>(resp.expect("static response"))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    Ok(())
}
