//! Embedding shoal: read an object through the cache cluster, with origin fallback.
//!
//! `cluster_read CONFIG s3://BUCKET/KEY [--out FILE]` reads the whole object with
//! the config's `[origin]` and `[cluster]` (no `[cluster]`: straight from the origin),
//! writes it to FILE (or discards it), and reports the rate and where blocks came
//! from on stderr.

use std::io::Write;
use std::time::Instant;

use futures_util::StreamExt;
use shoal::cluster::{ClusterReader, ReaderOptions};
use shoal::config::Config;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (config, url) = match args.as_slice() {
        [c, u, ..] => (c, u),
        _ => return Err("usage: cluster_read CONFIG s3://BUCKET/KEY [--out FILE]".into()),
    };
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1));
    let (bucket, key) = url
        .strip_prefix("s3://")
        .and_then(|r| r.split_once('/'))
        .ok_or("the object is s3://BUCKET/KEY")?;

    let cfg = Config::load(config.as_ref())?;
    let origin = (cfg.origin()?).client()?;
    let reader = ClusterReader::new(
        origin,
        cfg.cluster(),
        ReaderOptions {
            ram_bytes: cfg.cache.ram_size,
            disk: None,
            max_inflight_blocks: None,
            queue_wait: None,
            ..Default::default()
        },
    );

    let t = Instant::now();
    let handle = reader.open(bucket, key, None).await?;
    let mut sink: Box<dyn Write> = match out {
        Some(p) if p != "-" => Box::new(std::io::BufWriter::new(std::fs::File::create(p)?)),
        Some(_) => Box::new(std::io::stdout().lock()),
        None => Box::new(std::io::sink()),
    };
    let mut body = Box::pin(handle.stream(0, handle.meta().size));
    let mut n = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        n += chunk.len() as u64;
        sink.write_all(&chunk)?;
    }
    sink.flush()?;
    let secs = t.elapsed().as_secs_f64();

    let mut registry = prometheus_client::registry::Registry::default();
    reader.refresh_gauges();
    reader.metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    let pick = |prefix: &str| -> String {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| {
                l.trim_start_matches(prefix)
                    .replace("\"}", "")
                    .replace("{", "")
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    eprintln!(
        "read {n} bytes of s3://{bucket}/{key} (etag {}) in {secs:.3} s: {:.1} MB/s",
        handle.meta().etag,
        n as f64 / secs.max(1e-9) / 1e6
    );
    eprintln!(
        "  blocks by source: {}",
        pick("shoal_client_blocks_total{source=\"")
    );
    let fallbacks = pick("shoal_client_fallbacks_total{cause=\"");
    eprintln!(
        "  origin fallbacks: {}",
        if fallbacks.is_empty() {
            "none".into()
        } else {
            fallbacks
        }
    );
    Ok(())
}
