//! A load generator for benchmarks: N workers reading random whole blocks of one
//! object for a while, through any S3 endpoint (origin, node, or a proxy).
//!
//! `s3_load --endpoint URL --bucket B --key K --size BYTES [--block BYTES]
//!  [--concurrency 8] [--seconds 5] [--warm | --once]` with keys in `SHOAL_LOAD_ACCESS_KEY` /
//! `SHOAL_LOAD_SECRET_KEY`. `Range` is left out of the signature, so a proxy may
//! rewrite it. Prints one line: `MB/s=... bytes=... requests=... errors=... seconds=... p50_ms=... p99_ms=...`
//! (the latencies of whole requests, first byte to last). `--once` instead
//! reads every block exactly once (N at a time) and reports that single pass
//! (latencies too): a cold read when nothing has been read before.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use shoal::config::{Addressing, CredentialMode, Credentials, RetryPolicy, Timeouts};
use shoal::store::s3::{S3Client, S3ClientOptions};
use shoal::store::{ByteRange, GetObject};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let need = |n: &str| arg(&args, n).ok_or_else(|| format!("{n} is required"));
    let endpoint = need("--endpoint")?;
    let bucket = need("--bucket")?;
    let key = need("--key")?;
    let size: u64 = need("--size")?.parse()?;
    let block: u64 = arg(&args, "--block").map_or(Ok(1 << 20), |s| s.parse())?;
    let conc: usize = arg(&args, "--concurrency").map_or(Ok(8), |s| s.parse())?;
    let secs: f64 = arg(&args, "--seconds").map_or(Ok(5.0), |s| s.parse())?;
    let warm = args.iter().any(|a| a == "--warm");
    let once = args.iter().any(|a| a == "--once");
    let creds = match (
        std::env::var("SHOAL_LOAD_ACCESS_KEY"),
        std::env::var("SHOAL_LOAD_SECRET_KEY"),
    ) {
        (Ok(a), Ok(s)) => CredentialMode::Keys(Credentials {
            access_key_id: a,
            secret_access_key: s,
            session_token: None,
        }),
        _ => CredentialMode::Anonymous,
    };
    let client = S3Client::new(S3ClientOptions {
        endpoint: url::Url::parse(&endpoint)?,
        region: "us-east-1".into(),
        addressing: Addressing::Path,
        credentials: creds,
        timeouts: Timeouts {
            connect: Duration::from_secs(5),
            first_byte: Duration::from_secs(30),
            stall: Duration::from_secs(30),
        },
        retry: RetryPolicy {
            max_attempts: 1,
            base: Duration::from_millis(10),
            max: Duration::from_millis(10),
        },
        sign_range: false,
        pool_idle_per_host: conc * 2,
        network: Default::default(),
        request: Default::default(),
        aws: None,
        throttling: None,
    })?;
    let blocks = size.div_ceil(block);
    let range = move |i: u64| ByteRange::span(i * block, ((i + 1) * block).min(size));
    if once {
        let start = Instant::now();
        let (mut bytes, mut errors) = (0u64, 0u64);
        let mut results = futures_util::stream::iter(0..blocks)
            .map(|i| {
                let c = client.clone();
                let req = GetObject::new(&bucket, &key).range(range(i));
                async move {
                    let t = Instant::now();
                    let r = c.get_bytes(&req).await.map(|(_, b)| b.len() as u64);
                    (r, t.elapsed().as_secs_f64() * 1e3)
                }
            })
            .buffer_unordered(conc);
        let mut lat = vec![];
        while let Some((r, ms)) = results.next().await {
            match r {
                Ok(n) => {
                    bytes += n;
                    lat.push(ms);
                }
                Err(_) => errors += 1,
            }
        }
        let s = start.elapsed().as_secs_f64();
        lat.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0.0)
        };
        println!(
            "MB/s={:.1} bytes={bytes} requests={blocks} errors={errors} seconds={s:.2} p50_ms={:.2} p99_ms={:.2}",
            bytes as f64 / s / 1e6,
            pct(0.5),
            pct(0.99)
        );
        return Ok(());
    }
    if warm {
        // Every block once, in parallel, so the measured pass is all hits.
        futures_util::stream::iter(0..blocks)
            .map(|i| {
                let c = client.clone();
                let req = GetObject::new(&bucket, &key).range(range(i));
                async move { c.get_bytes(&req).await.map(|_| ()) }
            })
            .buffer_unordered(conc)
            .for_each(|r| async {
                if let Err(e) = r {
                    eprintln!("warm-up read failed: {e}");
                }
            })
            .await;
    }
    let bytes = Arc::new(AtomicU64::new(0));
    let reqs = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(secs);
    let workers = (0..conc).map(|w| {
        let (client, bucket, key) = (client.clone(), bucket.clone(), key.clone());
        let (bytes, reqs, errors) = (bytes.clone(), reqs.clone(), errors.clone());
        let latencies = latencies.clone();
        tokio::spawn(async move {
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (w as u64 + 1);
            while Instant::now() < until {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = x % blocks;
                let t0 = Instant::now();
                match client
                    .get_object(&GetObject::new(&bucket, &key).range(range(i)))
                    .await
                {
                    Ok(mut r) => {
                        while let Some(c) = r.body.next().await {
                            match c {
                                Ok(c) => {
                                    bytes.fetch_add(c.len() as u64, Relaxed);
                                }
                                Err(_) => {
                                    errors.fetch_add(1, Relaxed);
                                    break;
                                }
                            }
                        }
                        reqs.fetch_add(1, Relaxed);
                        latencies
                            .lock()
                            .unwrap()
                            .push(t0.elapsed().as_secs_f64() * 1e3);
                    }
                    Err(e) => {
                        if errors.fetch_add(1, Relaxed) == 0 {
                            eprintln!("read failed: {e}");
                        }
                    }
                }
            }
        })
    });
    futures_util::future::join_all(workers).await;
    let took = start.elapsed().as_secs_f64();
    let mut lat = std::mem::take(&mut *latencies.lock().unwrap());
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)));
    println!(
        "MB/s={:.1} bytes={} requests={} errors={} seconds={took:.2} p50_ms={:.2} p99_ms={:.2}",
        bytes.load(Relaxed) as f64 / took / 1e6,
        bytes.load(Relaxed),
        reqs.load(Relaxed),
        errors.load(Relaxed),
        pct(0.5).copied().unwrap_or(f64::NAN),
        pct(0.99).copied().unwrap_or(f64::NAN),
    );
    Ok(())
}
