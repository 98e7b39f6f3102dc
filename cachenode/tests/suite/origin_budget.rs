//! What a node asks of its origin: an origin that throttles (`503 SlowDown`,
//! a share of requests at random or every request past a rate) fails no read
//! (throttled requests are retried within `throttle_deadline`, and the node asks
//! less of it), and `max_bytes_per_second` bounds the bytes a warm and a reader
//! ask together.

use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal::store::GetObject;
use shoal_testorigin::{FaultSettings, TICK};

use crate::common::*;

const MIB: usize = 1 << 20;

fn node(
    origin: &Origin,
    dir: &std::path::Path,
    node_extra: &str,
    origin_extra: &str,
) -> NodeProcess {
    let toml = node_toml(origin, node_extra, "");
    // The test origin's section ends with its credentials: the keys go before.
    let toml = toml.replacen(
        "[origin.credentials]",
        &format!("{origin_extra}\n[origin.credentials]"),
        1,
    );
    NodeProcess::start(dir, "node", &toml)
}

/// `n` objects `prefix/i` of `len` bytes, put at the origin.
fn objects(origin: &Origin, prefix: &str, n: u64, len: usize, seed: u64) -> Vec<(String, Bytes)> {
    (0..n)
        .map(|i| {
            let (k, b) = (format!("{prefix}/{i}"), data(len, seed + i));
            origin.put(BUCKET, &k, b.clone());
            (k, b)
        })
        .collect()
}

/// GETs every object at once through the node: the ones that failed or came
/// back other than put.
async fn read_all(addr: std::net::SocketAddr, objects: &[(String, Bytes)]) -> Vec<String> {
    let reads = objects.iter().map(|(k, b)| async move {
        match client(addr).get_bytes(&GetObject::new(BUCKET, k)).await {
            Ok((_, got)) if got == *b => None,
            Ok((_, got)) => Some(format!(
                "{k}: {} bytes of {}, or other bytes",
                got.len(),
                b.len()
            )),
            Err(e) => Some(format!("{k}: {e}")),
        }
    });
    futures_util::future::join_all(reads)
        .await
        .into_iter()
        .flatten()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_throttling_at_random_cuts_no_get_short() {
    for per_mille in [300, 600] {
        let origin = origin().await;
        let dir = tempfile::tempdir().unwrap();
        let objects = objects(&origin, "big", 8, 32 * MIB, 10);
        let node = node(&origin, dir.path(), "", "");
        origin.stats.reset();
        origin.faults.set(FaultSettings {
            slowdown_per_mille: per_mille,
            ..Default::default()
        });
        let t = Instant::now();
        let failed = read_all(node.socket_addr(), &objects).await;
        let took = t.elapsed();
        origin.faults.set(FaultSettings::default());
        let s = origin.stats.snapshot();
        let (requests, throttled) = s
            .timeline
            .iter()
            .fold((0, 0), |(r, t), k| (r + k.requests, t + k.throttled));
        eprintln!(
            "{}% throttled: 8 GETs of 32 MiB in {took:.1?}, {requests} origin requests, {throttled} answered SlowDown",
            per_mille / 10
        );
        assert!(failed.is_empty(), "{}%: {failed:#?}", per_mille / 10);
        let text = scrape(node.socket_addr()).await;
        let seen = metric(&text, "shoal_node_origin_budget_throttles_total");
        assert!(
            seen >= throttled as f64 * 0.9 && throttled > 0,
            "the node counted {seen} throttles of {throttled}"
        );
    }
}

/// The mean and the most requests a second the origin saw from `from` on.
fn request_rate(origin: &Origin, from: Duration) -> (f64, u64) {
    let s = origin.stats.snapshot();
    let first = (from.as_millis() / TICK.as_millis()) as usize;
    let ticks = &s.timeline[first.min(s.timeline.len())..];
    let secs = ticks.len() as f64 * TICK.as_secs_f64();
    let mean = ticks.iter().map(|t| t.requests).sum::<u64>() as f64 / secs;
    (
        mean,
        s.busiest(Duration::from_secs(1), first, |t| t.requests),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_throttles_past_a_rate_is_asked_at_that_rate() {
    const RATE: u32 = 100;
    const RUN: Duration = Duration::from_secs(18);
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    // Small blocks: every 64 KiB a request, far more than the origin allows.
    let objects = objects(&origin, "small", 160, MIB, 20);
    let node = node(&origin, dir.path(), "block_size = \"64KiB\"", "");
    origin.stats.reset();
    origin.faults.set(FaultSettings {
        slowdown_above_per_second: RATE,
        ..Default::default()
    });
    let t = Instant::now();
    let addr = node.socket_addr();
    let mut readers = vec![];
    for r in 0..4 {
        let mine: Vec<_> = objects.iter().skip(r).step_by(4).cloned().collect();
        readers.push(tokio::spawn(async move {
            let (mut read, mut failed) = (0, vec![]);
            for chunk in mine.chunks(2) {
                if t.elapsed() >= RUN {
                    break;
                }
                failed.extend(read_all(addr, chunk).await);
                read += chunk.len();
            }
            (read, failed)
        }));
    }
    let (mut read, mut failed) = (0, vec![]);
    for r in readers {
        let (n, f) = r.await.unwrap();
        read += n;
        failed.extend(f);
    }
    let (mean, busiest) = request_rate(&origin, Duration::from_secs(10));
    let (first_mean, first_busiest) = {
        let s = origin.stats.snapshot();
        let n = (Duration::from_secs(10).as_millis() / TICK.as_millis()) as usize;
        let early: u64 = s.timeline.iter().take(n).map(|t| t.requests).sum();
        (
            early as f64 / 10.0,
            s.busiest(Duration::from_secs(1), 0, |t| t.requests),
        )
    };
    let text = scrape(addr).await;
    eprintln!(
        "origin throttling past {RATE}/s: {read} objects of 1 MiB read in {:.1?}; requests a second: \
         first 10 s mean {first_mean:.0} (busiest second {first_busiest}), after 10 s mean {mean:.0} \
         (busiest second {busiest}); node: {} throttles, {} decreases, rate now {}",
        t.elapsed(),
        metric(&text, "shoal_node_origin_budget_throttles_total"),
        metric(&text, "shoal_node_origin_budget_decreases_total"),
        metric(&text, "shoal_node_origin_budget_throttled_rate"),
    );
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(
        read >= 40,
        "only {read} objects read: the test measured nothing"
    );
    assert!(
        mean <= RATE as f64,
        "after 10 s the node asked {mean:.0} a second of an origin answering {RATE}"
    );
    assert!(
        metric(&text, "shoal_node_origin_budget_decreases_total") >= 1.0,
        "the node never asked less"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_budget_bounds_a_warm_and_a_reader_together() {
    const BUDGET: u64 = 24 << 20;
    let origin = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let warmed = objects(&origin, "warm", 12, 16 * MIB, 30);
    let other = objects(&origin, "read", 8, 4 * MIB, 50);
    let node = node(
        &origin,
        dir.path(),
        "",
        &format!("max_bytes_per_second = \"{}MiB\"", BUDGET >> 20),
    );
    let addr = node.socket_addr();
    let cli = dir.path().join("cli.toml");
    std::fs::write(
        &cli,
        format!(
            "{}{}",
            origin_toml(&origin),
            cluster_toml(&[&addr.to_string()], "")
        ),
    )
    .unwrap();
    origin.stats.reset();
    let t = Instant::now();
    let warm = std::process::Command::new(bin("shoal"))
        .arg("--config")
        .arg(&cli)
        .args(["warm", &format!("s3://{BUCKET}/warm/")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader starts once the warm is under way at the origin.
    wait_for(
        "the warm's first origin bytes",
        Duration::from_secs(20),
        || async {
            metric(
                &scrape(addr).await,
                "shoal_node_origin_budget_bytes_total{class=\"background\"}",
            ) > 0.0
        },
    )
    .await;
    let failed = read_all(addr, &other).await;
    let read_took = t.elapsed();
    let warm = tokio::task::spawn_blocking(move || warm.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let took = t.elapsed();
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&warm.stdout),
        String::from_utf8_lossy(&warm.stderr)
    );
    assert!(warm.status.success(), "shoal warm failed");
    assert!(failed.is_empty(), "{failed:#?}");
    let s = origin.stats.snapshot();
    let total = s.body_bytes_sent;
    let busiest = s.busiest(Duration::from_secs(5), 0, |t| t.bytes);
    let text = scrape(addr).await;
    let class = |c: &str| {
        metric(
            &text,
            &format!("shoal_node_origin_budget_bytes_total{{class=\"{c}\"}}"),
        )
    };
    eprintln!(
        "byte budget {} MiB/s: warm of {} objects (192 MiB) and a reader of 32 MiB in {took:.1?} (reader done at {read_took:.1?}); \
         origin sent {} MiB, busiest 5 s {:.2} MiB/s; budget bytes: read {} MiB, background {} MiB",
        BUDGET >> 20,
        warmed.len(),
        total >> 20,
        busiest as f64 / 5.0 / MIB as f64,
        class("read") as u64 >> 20,
        class("background") as u64 >> 20,
    );
    assert!(total >= 224 << 20, "the origin sent only {total} bytes");
    assert!(
        busiest as f64 <= 1.05 * 5.0 * BUDGET as f64,
        "{:.2}x the budget in 5 s",
        busiest as f64 / (5.0 * BUDGET as f64)
    );
    assert!(
        class("background") >= (192 << 20) as f64,
        "the warm was not counted as background"
    );
    assert!(
        class("read") >= (32 << 20) as f64,
        "the reader was not counted as read"
    );
}
