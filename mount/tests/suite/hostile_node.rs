//! A node that answers block GETs with bytes no HTTP/1.1 server should send, in
//! front of the real origin, read through a real mount whose only node it is:
//! every read is byte-exact and within its deadline, from the origin when the
//! node's answer cannot be trusted, and from the node when it is a good answer
//! after interim ones. Nothing a node sends may fail a read the origin serves.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::*;

const MIB: usize = 1 << 20;

/// What the node sends for a block GET.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    /// `500`, chunked, with a chunk size line near the top of u64.
    ChunkedOverflow,
    /// The right body under two different `Content-Length`s.
    TwoLengths,
    /// The right answer, then a second one no request asked for.
    PastBody,
    /// `100 Continue` and `103 Early Hints`, then the right answer.
    Interim,
    /// The right head and half the body, then nothing.
    Stall,
    /// Not HTTP at all.
    Garbage,
}

/// The node: what it serves, and what it saw.
struct HostileNode {
    addr: String,
    /// Requests that came on a connection after an answer with bytes past
    /// its body: the client kept a connection it should have closed.
    reused_after_extra: Arc<AtomicUsize>,
    block_gets: Arc<AtomicUsize>,
}

async fn hostile_node(answer: Answer, object: Bytes, etag: String) -> HostileNode {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let reused = Arc::new(AtomicUsize::new(0));
    let gets = Arc::new(AtomicUsize::new(0));
    let (r, g) = (reused.clone(), gets.clone());
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (object, etag, r, g) = (object.clone(), etag.clone(), r.clone(), g.clone());
            tokio::spawn(async move {
                let _ = serve(conn, answer, &object, &etag, &r, &g).await;
            });
        }
    });
    HostileNode {
        addr,
        reused_after_extra: reused,
        block_gets: gets,
    }
}

/// One connection: each request's head read, then answered.
async fn serve(
    mut conn: TcpStream,
    answer: Answer,
    object: &[u8],
    etag: &str,
    reused: &AtomicUsize,
    gets: &AtomicUsize,
) -> std::io::Result<()> {
    let mut sent_extra = false;
    loop {
        let Some(head) = request_head(&mut conn).await? else {
            return Ok(());
        };
        if sent_extra {
            reused.fetch_add(1, SeqCst);
        }
        let Some((a, b)) = block_range(&head) else {
            // A HEAD or a listing: not HTTP either, so the origin answers it
            // and the node is neither marked down nor counted by its breaker.
            conn.write_all(b"not http\r\n\r\n").await?;
            return Ok(());
        };
        gets.fetch_add(1, SeqCst);
        let body = &object[a..=b];
        let good = format!(
            "HTTP/1.1 206 Partial Content\r\ncontent-length: {}\r\ncontent-range: bytes {a}-{b}/{}\r\n\
             etag: \"{etag}\"\r\n\r\n",
            body.len(),
            object.len()
        );
        match answer {
            Answer::ChunkedOverflow => {
                conn.write_all(
                    b"HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n\
                      ffffffffffffffed\r\n",
                )
                .await?;
                // Held open: more bytes may come, as far as the client knows.
                std::future::pending::<()>().await;
            }
            Answer::TwoLengths => {
                let twice = good.replacen(
                    "\r\ncontent-range",
                    &format!("\r\ncontent-length: {}\r\ncontent-range", body.len() + 100),
                    1,
                );
                conn.write_all(twice.as_bytes()).await?;
                conn.write_all(body).await?;
                conn.write_all(&[b'x'; 100]).await?;
            }
            Answer::PastBody => {
                let mut all = good.clone().into_bytes();
                all.extend_from_slice(body);
                // An answer to no request, wrong bytes of the same span.
                all.extend_from_slice(good.as_bytes());
                all.extend(std::iter::repeat_n(b'!', body.len()));
                conn.write_all(&all).await?;
                sent_extra = true;
            }
            Answer::Interim => {
                conn.write_all(
                    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>; rel=preload\r\n\r\n",
                )
                .await?;
                conn.write_all(good.as_bytes()).await?;
                conn.write_all(body).await?;
            }
            Answer::Stall => {
                conn.write_all(good.as_bytes()).await?;
                conn.write_all(&body[..body.len() / 2]).await?;
                std::future::pending::<()>().await;
            }
            Answer::Garbage => {
                conn.write_all(b"HTTP/1.1 2O6 Partial\r\n\x00\x01\x02\r\n\r\n")
                    .await?;
                return Ok(());
            }
        }
    }
}

/// The next request's head (`None` once the client has closed).
async fn request_head(conn: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).await? == 0 {
            return Ok(None);
        }
        head.push(byte[0]);
    }
    Ok(Some(String::from_utf8_lossy(&head).into_owned()))
}

/// `a..=b` of a ranged GET of an object (not a listing, which has a query).
fn block_range(head: &str) -> Option<(usize, usize)> {
    let target = head.strip_prefix("GET ")?.split(' ').next()?;
    if target.contains('?') {
        return None;
    }
    let range = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("range: bytes=")
            .map(str::to_owned)
    })?;
    let (a, b) = range.trim().split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Reads `path` whole off the mount, on a blocking thread.
async fn read_file(path: std::path::PathBuf) -> std::io::Result<Vec<u8>> {
    tokio::task::spawn_blocking(move || std::fs::read(path))
        .await
        .unwrap()
}

async fn blocks_from(addr: &str, source: &str) -> f64 {
    let series = format!("shoal_client_blocks_total{{source=\"{source}\"}}");
    metric(&scrape(addr).await, &series)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatever_a_node_sends_every_read_is_byte_exact_and_in_time() {
    let o = origin().await;
    // Seventeen blocks, more than a read window: connections carry more than
    // one request each.
    let object = data(16 * MIB + 12345, 77);
    let etag = o.put(BUCKET, "hostile.bin", object.clone());
    let etag = etag.trim_matches('"').to_owned();
    let mut failures = Vec::new();
    for answer in [
        Answer::ChunkedOverflow,
        Answer::TwoLengths,
        Answer::PastBody,
        Answer::Interim,
        Answer::Stall,
        Answer::Garbage,
    ] {
        let node = hostile_node(answer, object.clone(), etag.clone()).await;
        let metrics = free_addr();
        let toml = format!("{}{}", origin_toml(&o), cluster_toml(&[&node.addr], ""));
        let m = Mount::start(&toml, BUCKET, &["--metrics-addr", &metrics]);
        let t0 = Instant::now();
        let got = read_file(m.path("hostile.bin")).await;
        let took = t0.elapsed();
        let (from_node, from_origin) = (
            blocks_from(&metrics, "node").await,
            blocks_from(&metrics, "origin").await,
        );
        let asked = node.block_gets.load(SeqCst);
        let reused = node.reused_after_extra.load(SeqCst);
        println!(
            "{answer:?}: {took:?}, blocks from the node {from_node}, from the origin \
             {from_origin}, {asked} block GETs to the node"
        );
        match &got {
            Err(e) => failures.push(format!("{answer:?}: the read failed: {e}")),
            Ok(b) if b[..] != object[..] => {
                failures.push(format!("{answer:?}: {} bytes, not the object's", b.len()))
            }
            Ok(_) => {}
        }
        // Read ahead a window at a time: each block within a stall deadline
        // (1 s) and a failover, with room for a busy machine.
        if took > Duration::from_secs(8) {
            failures.push(format!("{answer:?}: the read took {took:?}"));
        }
        if asked == 0 {
            failures.push(format!("{answer:?}: the node was never asked for a block"));
        }
        match answer {
            // A good answer after interim ones is the node's answer.
            Answer::Interim if from_origin > 0.0 || from_node == 0.0 => failures.push(format!(
                "{answer:?}: {from_node} blocks from the node, {from_origin} from the origin"
            )),
            // Framing that two lengths make ambiguous is not guessed at.
            Answer::TwoLengths if from_node > 0.0 => failures.push(format!(
                "{answer:?}: {from_node} blocks taken from the node"
            )),
            Answer::PastBody if reused > 0 => failures.push(format!(
                "{answer:?}: {reused} requests on connections with bytes past an answer"
            )),
            _ => {}
        }
        drop(m);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
