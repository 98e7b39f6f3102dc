//! `shoal warm --listings`: every directory of a tree listed through the cluster,
//! page by page, with the request a mount makes for it (prefix, `/` delimiter),
//! so each page lands in its owner's metadata cache and the next mount's walk is
//! answered from there. No object bytes are read.

use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::Instant;

use futures_util::stream::{FuturesUnordered, StreamExt};
use shoal::cluster::{ClusterReader, ReaderOptions};
use shoal::config::{ClusterConfig, Config};
use shoal::store::s3::S3Client;
use shoal::store::{ListRequest, ObjectStore, StoreError};

#[derive(Default)]
struct Tally {
    directories: u64,
    pages: u64,
    /// Pages the owner already kept (answered with an `Age`).
    kept: u64,
    objects: u64,
    failures: u64,
}

/// What one directory's listing found: its pages, kept pages, objects, subdirectories.
type Listed = (u64, u64, u64, Vec<String>);

async fn list_dir(store: &dyn ObjectStore, bucket: &str, dir: &str) -> Result<Listed, StoreError> {
    let mut req = ListRequest {
        bucket: bucket.into(),
        prefix: dir.into(),
        delimiter: Some("/".into()),
        ..Default::default()
    };
    let (mut pages, mut kept, mut objects, mut subdirs) = (0, 0, 0, Vec::new());
    loop {
        let page = store.list_page(&req).await?;
        pages += 1;
        kept += u64::from(page.age.is_some());
        objects += page.objects.len() as u64;
        subdirs.extend(page.common_prefixes);
        match page.next_continuation_token {
            Some(t) => req.continuation_token = Some(t),
            None => return Ok((pages, kept, objects, subdirs)),
        }
    }
}

pub async fn run(
    cfg: &Config,
    cluster: &ClusterConfig,
    origin: S3Client,
    bucket: &str,
    prefix: &str,
    parallel: usize,
) -> Result<ExitCode, String> {
    // A mount of `bucket/data` lists `data/`: the same pages, whichever way the
    // prefix was written.
    let root = match prefix {
        "" => String::new(),
        p if p.ends_with('/') => p.to_owned(),
        p => format!("{p}/"),
    };
    let reader = ClusterReader::new(
        origin,
        Some(cluster),
        ReaderOptions {
            ram_bytes: 0,
            disk: None,
            max_inflight_blocks: Some(parallel.max(1)),
            queue_wait: None,
            ..Default::default()
        },
    );
    reader.membership_ready().await;
    // Accept what a mount of this config would accept: a page kept within that
    // is already warm for it.
    let store = reader.metadata(cfg.mount.metadata_ttl);
    let started = Instant::now();
    let mut t = Tally::default();
    let mut todo = VecDeque::from([root]);
    let mut running = FuturesUnordered::new();
    loop {
        while running.len() < parallel.max(1) {
            let Some(dir) = todo.pop_front() else { break };
            let store = store.clone();
            running.push(async move {
                let r = list_dir(&*store, bucket, &dir).await;
                (dir, r)
            });
        }
        let Some((dir, r)) = running.next().await else {
            break;
        };
        match r {
            Ok((pages, kept, objects, subdirs)) => {
                t.directories += 1;
                t.pages += pages;
                t.kept += kept;
                t.objects += objects;
                todo.extend(subdirs);
            }
            Err(e) => {
                t.failures += 1;
                eprintln!("s3://{bucket}/{dir}: {e}");
            }
        }
    }
    println!(
        "listed {} directories ({} pages, {} already kept by their owners, {} objects) in {:.1} s",
        t.directories,
        t.pages,
        t.kept,
        t.objects,
        started.elapsed().as_secs_f64()
    );
    if t.failures > 0 {
        println!("{} directories could not be listed", t.failures);
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
