//! `shoal drain NODE --bucket B`: hand a leaving node's blocks back before it
//! stops. The node lists the blocks of B it holds and owns, each with the node
//! that owns it once this one is gone (its runner-up); each of those takes its
//! share from the leaving node with `Cache-Control: only-if-cached` (as a
//! previous-owner fill does: nothing is asked of the origin), in batches, newest
//! first, until every block is taken or `--max-bytes` or `--timeout` is reached.
//! Then the node can be removed and stopped: its blocks are where the readers go
//! next.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use shoal::config::units::Size;
use shoal::config::Config;
use shoal::node_proto;
use shoal::store::s3::S3Client;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The leaving node, as the cluster names it (host:port).
    node: String,
    /// A bucket whose blocks are handed back (repeat for more).
    #[arg(long, required = true, value_name = "BUCKET")]
    bucket: Vec<String>,
    /// Stop once this many bytes are handed back (1GiB, 500MiB, ...).
    #[arg(long, default_value = "100GiB", value_parser = parse_size)]
    max_bytes: u64,
    /// Stop handing back after this long (the node can be stopped then).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Blocks per take request.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=65536))]
    batch: u64,
}

fn parse_size(s: &str) -> Result<u64, String> {
    Size::parse(s).map(|s| s.0)
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// A block line as the leaving node listed it.
struct Line {
    text: String,
    len: u64,
    to: String,
}

/// A receiving node and the bucket of its batches.
type Target = (String, String);

#[derive(Default)]
struct Tally {
    taken: u64,
    bytes: u64,
    held: u64,
    missed: u64,
    failed_batches: u64,
}

pub async fn run(cfg: &Config, a: Args) -> Result<ExitCode, String> {
    let (cluster, ids) = super::cluster_nodes(cfg).await?;
    let node =
        shoal::config::canonical_node_id(&a.node).map_err(|e| format!("{:?}: {e}", a.node))?;
    if !ids.contains(&node) {
        return Err(format!(
            "{node} is not a node of the cluster (its nodes now: {})",
            ids.join(", ")
        ));
    }
    let region = cfg
        .origin()
        .map(|o| o.region.clone())
        .unwrap_or_else(|_| "us-east-1".into());
    let started = Instant::now();
    let deadline = started + a.timeout;
    let client = |id: &str| {
        let mut opts = node_proto::node_options(cluster, &region, id, 2);
        // A take answers once its batch is in: it may take longer than a
        // block's first byte.
        opts.timeouts.first_byte = a.timeout;
        S3Client::new(opts).map_err(|e| e.to_string())
    };
    let leaving = client(&node)?;
    let mut plan: Vec<(String, Line)> = Vec::new();
    for bucket in &a.bucket {
        let listed = leaving
            .request(Method::POST, bucket, "shoal-drain=".into(), Bytes::new())
            .await
            .map_err(|e| format!("{node} did not list its blocks of {bucket}: {e}"))?;
        for text in String::from_utf8_lossy(&listed).lines() {
            let v: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| format!("{node} answered a bad block line ({e}): {text}"))?;
            let (Some(len), Some(to)) = (v["len"].as_u64(), v["to"].as_str()) else {
                return Err(format!("{node} answered a bad block line: {text}"));
            };
            plan.push((
                bucket.clone(),
                Line {
                    text: text.to_owned(),
                    len,
                    to: to.to_owned(),
                },
            ));
        }
    }
    let listed: u64 = plan.iter().map(|(_, l)| l.len).sum();
    let mut budget = a.max_bytes;
    let mut cut = 0u64;
    // Newest first, as listed, until the byte bound.
    let mut batches: BTreeMap<(String, String), Vec<Vec<Line>>> = BTreeMap::new();
    for (bucket, line) in plan {
        if line.len > budget {
            cut += line.len;
            budget = 0;
            continue;
        }
        budget -= line.len;
        let list = batches.entry((line.to.clone(), bucket)).or_default();
        match list.last_mut() {
            Some(b) if (b.len() as u64) < a.batch => b.push(line),
            _ => list.push(vec![line]),
        }
    }
    let planned = listed - cut;
    println!(
        "{node}: {} of its blocks listed ({}) for {} nodes; handing back {}{}",
        batches.values().flatten().map(Vec::len).sum::<usize>(),
        mib(listed),
        batches
            .keys()
            .map(|(to, _)| to)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        mib(planned),
        if cut > 0 {
            format!(" (--max-bytes leaves {})", mib(cut))
        } else {
            String::new()
        }
    );
    let mut tally = Tally::default();
    let mut timed_out = false;
    // Round robin over the receiving nodes, one batch each in turn.
    let mut queues: Vec<(Target, std::collections::VecDeque<Vec<Line>>)> = batches
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().collect()))
        .collect();
    let mut clients: BTreeMap<String, S3Client> = BTreeMap::new();
    let mut done = 0u64;
    'rounds: while queues.iter().any(|(_, q)| !q.is_empty()) {
        for ((to, bucket), q) in queues.iter_mut() {
            let Some(batch) = q.pop_front() else { continue };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                timed_out = true;
                break 'rounds;
            }
            if !clients.contains_key(to) {
                clients.insert(to.clone(), client(to)?);
            }
            let body: String = batch.iter().map(|l| format!("{}\n", l.text)).collect();
            let bytes: u64 = batch.iter().map(|l| l.len).sum();
            let query = format!("shoal-take=&from={}", shoal::store::s3::query_value(&node));
            let answer = tokio::time::timeout(
                left,
                clients[to].request(Method::POST, bucket, query, Bytes::from(body)),
            )
            .await;
            done += bytes;
            let pct = (done * 100).checked_div(planned).unwrap_or(100);
            let elapsed = started.elapsed().as_secs_f64();
            match answer {
                Err(_) => {
                    timed_out = true;
                    println!(
                        "[{elapsed:6.1}s] {to:<24} batch of {} blocks cut at --timeout",
                        batch.len()
                    );
                    break 'rounds;
                }
                Ok(Err(e)) => {
                    tally.failed_batches += 1;
                    println!(
                        "[{elapsed:6.1}s] {to:<24} FAILED {} blocks: {e}",
                        batch.len()
                    );
                }
                Ok(Ok(a)) => {
                    let v: serde_json::Value = serde_json::from_slice(&a).unwrap_or_default();
                    let n = |f: &str| v[f].as_u64().unwrap_or(0);
                    tally.taken += n("taken");
                    tally.bytes += n("bytes");
                    tally.held += n("held");
                    tally.missed += n("missed");
                    println!(
                        "[{elapsed:6.1}s] {to:<24} took {} of {} blocks ({}), {} held already, {} missed; {pct}% done",
                        n("taken"),
                        batch.len(),
                        mib(n("bytes")),
                        n("held"),
                        n("missed")
                    );
                }
            }
        }
    }
    println!(
        "{node}: {} blocks ({}) handed back in {:.1}s, {} held already, {} missed, {} batches failed{}",
        tally.taken,
        mib(tally.bytes),
        started.elapsed().as_secs_f64(),
        tally.held,
        tally.missed,
        tally.failed_batches,
        if timed_out {
            " - stopped at --timeout: the rest is fetched from the origin once the node is gone"
        } else if cut > 0 {
            " - --max-bytes reached: the rest is fetched from the origin once the node is gone"
        } else {
            "; it can be removed now"
        }
    );
    Ok(if timed_out || tally.failed_batches > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
