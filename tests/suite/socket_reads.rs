//! GETs read straight off the socket into the caller's buffer (the S3 client's
//! plain-HTTP transport for block bodies): against the real test origin, behind a
//! relay that counts connections and can break them.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal::net::{Network, Proxy};
use shoal::store::pipe::Pipe;
use shoal::store::s3::S3Client;
use shoal::store::{Body, ByteRange, Deadline, GetObject, ObjectStore, Spliced, StoreError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::*;

/// A TCP relay to `upstream` that counts the connections it accepts, can drop
/// every connection it carries, and can stop passing answers on after some bytes.
struct Relay {
    addr: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
    conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    /// Bytes of answers passed on each new connection before it goes silent.
    stall_after: Arc<Mutex<Option<usize>>>,
}

impl Relay {
    async fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let stall_after: Arc<Mutex<Option<usize>>> = Arc::default();
        let (a, c, s) = (accepted.clone(), conns.clone(), stall_after.clone());
        tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                a.fetch_add(1, SeqCst);
                let upstream = upstream.clone();
                let stall = *s.lock().unwrap();
                c.lock().unwrap().push(tokio::spawn(async move {
                    let server = TcpStream::connect(&upstream).await.unwrap();
                    let _ = pass(client, server, stall).await;
                }));
            }
        });
        Relay {
            addr,
            accepted,
            conns,
            stall_after,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn accepted(&self) -> usize {
        self.accepted.load(SeqCst)
    }

    /// Closes every connection it carries, as a server restarting would.
    fn drop_all(&self) {
        for t in self.conns.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

/// Requests one way, answers the other (the first `stall` bytes of them, then
/// nothing, the connection held open).
async fn pass(client: TcpStream, server: TcpStream, stall: Option<usize>) -> std::io::Result<()> {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
    let mut buf = vec![0u8; 64 << 10];
    let mut sent = 0;
    loop {
        let n = sr.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        let n = match stall {
            Some(limit) if sent + n >= limit => {
                cw.write_all(&buf[..limit - sent]).await?;
                std::future::pending::<()>().await;
                unreachable!()
            }
            _ => n,
        };
        cw.write_all(&buf[..n]).await?;
        sent += n;
    }
    up.abort();
    Ok(())
}

/// The whole body of `bucket/key` (or a range of it) through `get_body`, read
/// as a block would be: into one buffer of its size.
async fn read_body(c: &S3Client, req: &GetObject) -> Result<Vec<u8>, StoreError> {
    let mut resp = c.get_body(req).await?;
    assert!(
        matches!(resp.body, Body::Socket(_)),
        "a plain-HTTP body is read off its socket"
    );
    let mut buf = vec![0u8; (resp.end - resp.start) as usize];
    let mut at = 0;
    while at < buf.len() {
        match resp.body.read(&mut buf[at..]).await? {
            0 => break,
            n => at += n,
        }
    }
    buf.truncate(at);
    Ok(buf)
}

fn client_via(relay: &Relay, o: &Origin, stall: Duration) -> S3Client {
    let mut opts = client_options(
        &relay.url(),
        &o.options.region,
        &o.options.access_key,
        &o.options.secret_key,
        true,
    );
    opts.timeouts.stall = stall;
    S3Client::new(opts).unwrap()
}

#[tokio::test]
async fn bodies_come_off_one_kept_connection_byte_exact() {
    let o = origin().await;
    let body = data(3 << 20, 11);
    o.put(BUCKET, "k", body.clone());
    let relay = Relay::start(o.endpoint().trim_start_matches("http://").to_owned()).await;
    let c = client_via(&relay, &o, Duration::from_secs(10));
    assert!(c.reads_sockets());
    for (i, (a, b)) in [
        (0u64, 1u64 << 20),
        (5, 6),
        ((3 << 20) - 7, 3 << 20),
        (0, 3 << 20),
    ]
    .into_iter()
    .enumerate()
    {
        let got = read_body(
            &c,
            &GetObject::new(BUCKET, "k").range(ByteRange::span(a, b)),
        )
        .await
        .unwrap();
        assert_eq!(got, body[a as usize..b as usize], "range {i}: {a}..{b}");
    }
    assert_eq!(relay.accepted(), 1, "one connection, kept between requests");
    // A body left unread cannot carry the next request: its connection goes.
    let resp = c.get_body(&GetObject::new(BUCKET, "k")).await.unwrap();
    drop(resp);
    read_body(
        &c,
        &GetObject::new(BUCKET, "k").range(ByteRange::span(0, 10)),
    )
    .await
    .unwrap();
    assert_eq!(relay.accepted(), 2);
    // Answers about the object come back as they would through the pool.
    let e = read_body(&c, &GetObject::new(BUCKET, "missing"))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::NoSuchKey { .. }), "{e:?}");
    let e = read_body(&c, &GetObject::new(BUCKET, "k").if_match("\"nope\""))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::PreconditionFailed { .. }), "{e:?}");
    // Error answers are read whole: the connection is still good.
    let n = relay.accepted();
    read_body(
        &c,
        &GetObject::new(BUCKET, "k").range(ByteRange::span(0, 10)),
    )
    .await
    .unwrap();
    assert!(relay.accepted() <= n + 1);
}

#[tokio::test]
async fn a_kept_connection_the_server_closed_is_replaced() {
    let o = origin().await;
    o.put(BUCKET, "k", data(100_000, 12));
    let relay = Relay::start(o.endpoint().trim_start_matches("http://").to_owned()).await;
    let c = client_via(&relay, &o, Duration::from_secs(10));
    let req = GetObject::new(BUCKET, "k");
    read_body(&c, &req).await.unwrap();
    relay.drop_all();
    // The kept connection is closed under the client: the request goes out again
    // on a new one, and nobody sees an error.
    let got = read_body(&c, &req).await.unwrap();
    assert_eq!(got, data(100_000, 12));
    assert_eq!(relay.accepted(), 2);
}

#[tokio::test]
async fn a_body_that_stops_is_a_stall_and_a_cut_one_an_error() {
    let o = origin().await;
    o.put(BUCKET, "k", data(1 << 20, 13));
    let relay = Relay::start(o.endpoint().trim_start_matches("http://").to_owned()).await;
    let c = client_via(&relay, &o, Duration::from_millis(300));
    *relay.stall_after.lock().unwrap() = Some(100_000);
    let t0 = std::time::Instant::now();
    let e = read_body(&c, &GetObject::new(BUCKET, "k"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::Timeout {
                deadline: Deadline::Stall,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    // The origin cuts the body: the read says so, and the bytes before the cut
    // were right.
    *relay.stall_after.lock().unwrap() = None;
    o.faults.reset_next(1);
    let mut resp = c.get_body(&GetObject::new(BUCKET, "k")).await.unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    let e = loop {
        match resp.body.read(&mut buf[at..]).await {
            Ok(0) => panic!("a cut body ended as if whole at {at}"),
            Ok(n) => at += n,
            Err(e) => break e,
        }
    };
    assert!(e.to_string().contains("body cut off"), "{e}");
    assert!(at < 1 << 20);
    assert_eq!(buf[..at], data(1 << 20, 13)[..at]);
}

/// A server that answers every request with `answer`, then closes.
async fn fixed_server(answer: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let _ = s.write_all(answer).await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn answers_framed_otherwise_are_refused_and_chunked_errors_read() {
    let opts = |url: &str| {
        let mut o = client_options(url, "us-east-1", "k", "s", true);
        o.retry.max_attempts = 1;
        o
    };
    let chunked_ok = fixed_server(
        b"HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 0-4/5\r\netag: \"e\"\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    let c = S3Client::new(opts(&chunked_ok)).unwrap();
    let e = c.get_body(&GetObject::new("b", "k")).await.err().unwrap();
    assert!(e.to_string().contains("Content-Length"), "{e}");
    let unframed = fixed_server(b"HTTP/1.1 200 OK\r\netag: \"e\"\r\n\r\nhello").await;
    let c = S3Client::new(opts(&unframed)).unwrap();
    let e = c.get_body(&GetObject::new("b", "k")).await.err().unwrap();
    assert!(e.to_string().contains("Content-Length"), "{e}");
    let garbage = fixed_server(b"SSH-2.0-OpenSSH_9.2\r\n\r\n").await;
    let c = S3Client::new(opts(&garbage)).unwrap();
    let e = c.get_body(&GetObject::new("b", "k")).await.err().unwrap();
    assert!(matches!(e, StoreError::Transport { .. }), "{e:?}");
    // An error's XML, chunked and split oddly, still names what went wrong.
    let chunked_error = fixed_server(
        b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\n\r\n\
          10\r\n<Error><Code>Slo\r\n1b\r\nwDown</Code><Message>easy</\r\n12\r\nMessage></Error>  \r\n0\r\n\r\n",
    )
    .await;
    let c = S3Client::new(opts(&chunked_error)).unwrap();
    let e = c.get_body(&GetObject::new("b", "k")).await.err().unwrap();
    assert!(
        matches!(&e, StoreError::Throttled { code, message } if code == "SlowDown" && message == "easy"),
        "{e:?}"
    );
}

#[tokio::test]
async fn tls_and_proxies_keep_the_pooled_client() {
    let o = origin().await;
    let mut opts = client_options(&o.endpoint(), "us-east-1", "k", "s", true);
    assert!(S3Client::new(opts.clone()).unwrap().reads_sockets());
    opts.network = Network {
        proxy: Proxy::Url("http://127.0.0.1:9".into()),
        ca_bundle: None,
    };
    assert!(!S3Client::new(opts.clone()).unwrap().reads_sockets());
    opts.network.proxy = Proxy::Off;
    opts.endpoint = url::Url::parse("https://127.0.0.1:9").unwrap();
    assert!(!S3Client::new(opts).unwrap().reads_sockets());
}

/// `want` bytes of `body` spliced into `pipe` after its prefix, and what did not
/// fit read after them, as a spliced FUSE reply takes them: the bytes, and
/// whether all went into the pipe.
async fn splice_all(
    body: &mut Body,
    pipe: &mut Pipe,
    want: usize,
) -> Result<(Vec<u8>, bool), StoreError> {
    let whole = body.splice_into(pipe, want as u64).await? == Spliced::Whole;
    let mut out = vec![0u8; want];
    let mut at = pipe.drain(&mut out).unwrap();
    assert_eq!(pipe.held(), 0, "a drained pipe is empty");
    while at < want {
        match body.read(&mut out[at..]).await? {
            0 => break,
            n => at += n,
        }
    }
    out.truncate(at);
    Ok((out, whole))
}

#[tokio::test]
async fn bodies_spliced_into_a_pipe_arrive_whole_and_what_does_not_fit_is_read() {
    let o = origin().await;
    let body = data(1 << 20, 17);
    o.put(BUCKET, "k", body.clone());
    let relay = Relay::start(o.endpoint().trim_start_matches("http://").to_owned()).await;
    let c = client_via(&relay, &o, Duration::from_secs(5));
    // One kept connection; each body whole in the pipe, after the prefix.
    let mut pipe = Pipe::new().unwrap();
    for (first, end) in [(0, 1 << 20), (4096, 700_001), (1000, 1001)] {
        pipe.prefix(b"head").unwrap();
        let req = GetObject::new(BUCKET, "k").range(ByteRange::span(first, end));
        let mut resp = c.get_body(&req).await.unwrap();
        let want = (end - first) as usize;
        assert!(matches!(resp.body, Body::Socket(_)));
        assert_eq!(
            resp.body.splice_into(&mut pipe, want as u64).await.unwrap(),
            Spliced::Whole
        );
        assert_eq!((pipe.held(), pipe.body_len()), (want + 4, want));
        let mut out = vec![0u8; want];
        assert_eq!(pipe.drain(&mut out).unwrap(), want);
        assert!(
            out[..] == body[first as usize..end as usize],
            "{first}..{end}"
        );
    }
    assert_eq!(relay.accepted(), 1);
    // A pipe too small for the body: the splice stops where the pipe is full,
    // the rest is read, and the connection is kept.
    let mut small = Pipe::with_size(4096).unwrap();
    let mut resp = c.get_body(&GetObject::new(BUCKET, "k")).await.unwrap();
    let (got, whole) = splice_all(&mut resp.body, &mut small, 1 << 20)
        .await
        .unwrap();
    assert!(!whole, "a megabyte went into a one-page pipe");
    assert!(got == body[..], "bytes spliced then read differ");
    let mut resp = c.get_body(&GetObject::new(BUCKET, "k")).await.unwrap();
    let (got, _) = splice_all(&mut resp.body, &mut pipe, 1 << 20)
        .await
        .unwrap();
    assert!(got == body[..]);
    assert_eq!(relay.accepted(), 1);
    // A body cut midway: an error, and what the pipe got before it is right.
    o.faults.reset_next(1);
    let mut resp = c.get_body(&GetObject::new(BUCKET, "k")).await.unwrap();
    let e = resp.body.splice_into(&mut pipe, 1 << 20).await.unwrap_err();
    assert!(e.to_string().contains("body cut off"), "{e}");
    let mut out = vec![0u8; 1 << 20];
    let n = pipe.drain(&mut out).unwrap();
    assert!(n < 1 << 20);
    assert!(out[..n] == body[..n]);
}
