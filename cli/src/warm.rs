//! `shoal warm`: every block of every object under a prefix onto its owner node,
//! or (`--listings`) every directory listing of the tree onto its owner, no bytes.
//!
//! The listing is read twice, page by page (once to count, once to warm), so memory
//! stays bounded whatever the prefix holds. Each block is first asked for
//! cached-only, so "already warm" and "fetched now" are counted exactly.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{stream, StreamExt};
use shoal::cluster::{ClusterReader, ReaderOptions, Warmed};
use shoal::config::Config;
use shoal::store::s3::S3Client;
use shoal::store::{ListRequest, ObjectMeta};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// s3://BUCKET/PREFIX
    url: String,
    /// Blocks warmed at once.
    #[arg(long, default_value_t = 8)]
    parallel: usize,
    /// List what would be warmed, fetch nothing.
    #[arg(long)]
    dry_run: bool,
    /// Warm the tree's metadata instead of its bytes: list every directory under
    /// the prefix through the cluster, as a mount lists it, so that the next
    /// mount's walk is answered by the nodes.
    #[arg(long, conflicts_with = "dry_run")]
    listings: bool,
}

#[derive(Default)]
struct Tally {
    objects: AtomicU64,
    bytes: AtomicU64,
    already: AtomicU64,
    fetched: AtomicU64,
    failures: AtomicU64,
    /// Objects in an archive class, left alone.
    archived: AtomicU64,
    per_node: Mutex<BTreeMap<String, u64>>,
}

fn human(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}

async fn count(origin: &S3Client, bucket: &str, prefix: &str) -> Result<(u64, u64), String> {
    let mut req = ListRequest {
        bucket: bucket.into(),
        prefix: prefix.into(),
        ..Default::default()
    };
    let (mut n, mut bytes) = (0, 0);
    loop {
        let page = origin
            .list_objects_v2(&req)
            .await
            .map_err(|e| e.to_string())?;
        let readable = page.objects.iter().filter(|o| !o.archived());
        n += readable.clone().count() as u64;
        bytes += readable.map(|o| o.size).sum::<u64>();
        match page.next_continuation_token {
            Some(t) => req.continuation_token = Some(t),
            None => return Ok((n, bytes)),
        }
    }
}

pub async fn run(cfg: &Config, a: Args) -> Result<ExitCode, String> {
    let (bucket, prefix) = super::parse_url(&a.url)?;
    let cluster = cfg
        .cluster()
        .ok_or("the config has no [cluster] section: nothing to warm")?;
    let origin = (cfg.origin().map_err(|e| e.to_string())?)
        .client()
        .map_err(|e| e.to_string())?;
    if a.listings {
        return super::warm_listings::run(cfg, cluster, origin, &bucket, &prefix, a.parallel).await;
    }
    let (total_objects, total_bytes) = count(&origin, &bucket, &prefix).await?;
    if a.dry_run {
        let blocks = total_bytes.div_ceil(cluster.block_size);
        println!(
            "would warm {total_objects} objects, {} ({} bytes), about {blocks} blocks of {}",
            human(total_bytes as f64),
            total_bytes,
            human(cluster.block_size as f64)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let reader = ClusterReader::new(
        origin.clone(),
        Some(cluster),
        ReaderOptions {
            ram_bytes: 0,
            disk: None,
            max_inflight_blocks: Some(a.parallel.max(1)),
            queue_wait: None,
            ..Default::default()
        },
    );
    reader.membership_ready().await;
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let tty = std::io::stdout().is_terminal();
    let bar = tty.then(|| {
        let pb = indicatif::ProgressBar::new(total_bytes);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}",
            )
            .expect("a valid template"),
        );
        pb
    });

    let work = warm_all(
        &reader,
        &origin,
        &bucket,
        &prefix,
        a.parallel.max(1),
        tally.clone(),
        bar.clone(),
    );
    let ticker = {
        let tally = tally.clone();
        let bar = bar.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            tick.tick().await;
            loop {
                tick.tick().await;
                let (o, b) = (tally.objects.load(Relaxed), tally.bytes.load(Relaxed));
                match &bar {
                    Some(pb) => pb.set_message(format!("{o}/{total_objects} objects")),
                    None => println!(
                        "warm: {o}/{total_objects} objects, {}/{}, {:.1} MB/s",
                        human(b as f64),
                        human(total_bytes as f64),
                        b as f64 / started.elapsed().as_secs_f64() / 1e6
                    ),
                }
            }
        }
    };
    let interrupted = tokio::select! {
        r = work => { r?; false }
        _ = ticker => false,
        _ = tokio::signal::ctrl_c() => true,
    };
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    let t = &*tally;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}: {} of {total_objects} objects, {} bytes ({}) in {secs:.1} s",
        if interrupted { "interrupted" } else { "warmed" },
        t.objects.load(Relaxed),
        t.bytes.load(Relaxed),
        human(t.bytes.load(Relaxed) as f64)
    );
    println!(
        "blocks: {} already warm, {} fetched from the origin, {} failed",
        t.already.load(Relaxed),
        t.fetched.load(Relaxed),
        t.failures.load(Relaxed)
    );
    let archived = t.archived.load(Relaxed);
    if archived > 0 {
        println!(
            "skipped {archived} archived objects (GLACIER, DEEP_ARCHIVE): restore them, then warm them"
        );
    }
    for (node, bytes) in t.per_node.lock().unwrap().iter() {
        println!("  {node:<28} {bytes} bytes ({})", human(*bytes as f64));
    }
    Ok(if interrupted {
        ExitCode::from(130)
    } else if t.failures.load(Relaxed) > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn warm_all(
    reader: &Arc<ClusterReader>,
    origin: &S3Client,
    bucket: &str,
    prefix: &str,
    parallel: usize,
    tally: Arc<Tally>,
    bar: Option<indicatif::ProgressBar>,
) -> Result<(), String> {
    let bs = reader.block_size();
    let mut req = ListRequest {
        bucket: bucket.into(),
        prefix: prefix.into(),
        ..Default::default()
    };
    loop {
        let page = origin
            .list_objects_v2(&req)
            .await
            .map_err(|e| e.to_string())?;
        let mut blocks = Vec::new();
        for o in page.objects {
            if o.archived() {
                // Unreadable until restored: a GET would only fail.
                tally.archived.fetch_add(1, Relaxed);
                continue;
            }
            let meta = ObjectMeta {
                size: o.size,
                etag: o.etag.clone(),
                last_modified: o.last_modified,
                ..Default::default()
            };
            let n = o.size.div_ceil(bs);
            if n == 0 {
                tally.objects.fetch_add(1, Relaxed);
                continue;
            }
            let remaining = Arc::new(AtomicU64::new(n));
            let key: Arc<str> = o.key.into();
            for i in 0..n {
                blocks.push((key.clone(), meta.clone(), i, remaining.clone()));
            }
        }
        stream::iter(blocks)
            .map(|(key, meta, i, remaining)| {
                let (reader, tally, bar) = (reader.clone(), tally.clone(), bar.clone());
                async move {
                    let len = ((i + 1) * bs).min(meta.size) - i * bs;
                    match reader.warm_block(bucket, &key, &meta, i).await {
                        Ok((how, node)) => {
                            match how {
                                Warmed::AlreadyWarm => tally.already.fetch_add(1, Relaxed),
                                Warmed::Fetched => tally.fetched.fetch_add(1, Relaxed),
                            };
                            *tally.per_node.lock().unwrap().entry(node).or_default() += len;
                            tally.bytes.fetch_add(len, Relaxed);
                            if let Some(pb) = &bar {
                                pb.inc(len);
                            }
                        }
                        Err(e) => {
                            tally.failures.fetch_add(1, Relaxed);
                            if let Some(pb) = &bar {
                                pb.println(format!("s3://{bucket}/{key} block {i}: {e}"));
                            } else {
                                eprintln!("s3://{bucket}/{key} block {i}: {e}");
                            }
                        }
                    }
                    if remaining.fetch_sub(1, Relaxed) == 1 {
                        tally.objects.fetch_add(1, Relaxed);
                    }
                }
            })
            .buffer_unordered(parallel)
            .collect::<Vec<()>>()
            .await;
        match page.next_continuation_token {
            Some(t) => req.continuation_token = Some(t),
            None => return Ok(()),
        }
    }
}
