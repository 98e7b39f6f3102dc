//! GETs over plain HTTP/1.1 whose bodies are read straight off the socket into
//! the caller's buffer, or spliced from it into a pipe ([`splice`]).
//!
//! hyper reads every body into buffers of its own, and a block would then be
//! copied once more, from those into the block's buffer: on a mount reading from
//! the nodes that second copy was a fifth of its CPU. So the GETs that move most
//! bytes (a mount's blocks from the nodes, a node's blocks from a plain-HTTP
//! origin) take this path instead, and nothing else does: one request at a time
//! on a kept-alive connection, the request written whole, the answer's head
//! parsed by RFC 9112's rules ([`head`]), a body framed by its `Content-Length`
//! (a successful answer framed any other way is refused as a protocol error, never
//! guessed at; an error answer's small XML may come chunked). A connection goes
//! back to the pool only when its answer ended exactly where its framing said:
//! nothing of a body left unread, nothing past it. TLS and proxies stay with the
//! pooled client.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::HeaderMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use std::os::fd::AsRawFd;

use tokio::io::Interest;

use super::chunked::{dechunk, Chunks};
use crate::store::{Deadline, StoreError};

pub(super) mod head;
mod splice;

use head::{Framing, HeadReader, BUF};

/// A connection unused this long is not used again: the other side may be about
/// to close it (a node closes idle connections after 120 s, S3 after about 20).
const IDLE_FOR: Duration = Duration::from_secs(15);
/// The most of an error answer's body that is read (S3's error XML is small).
const MAX_ERROR_BODY: u64 = 64 << 10;

/// Kept-alive connections to one endpoint's hosts.
pub(super) struct Sockets {
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    connect: Duration,
    stall: Duration,
    label: String,
}

struct Idle {
    authority: String,
    conn: TcpStream,
    /// The connection's buffer for requests and answers' heads, kept with it.
    buf: Vec<u8>,
    since: Instant,
}

/// An answer: its status and head, and its body to be read.
pub(super) struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: SocketBody,
}

/// The body of an answer, read from its connection; the connection is kept for
/// the next request once the body has been read to its end.
pub struct SocketBody {
    conn: Option<TcpStream>,
    authority: String,
    /// The connection's buffer; `early` of it are body bytes that came with the
    /// head, handed out first.
    buf: Vec<u8>,
    early: std::ops::Range<usize>,
    remaining: u64,
    /// An error answer's chunked body: its length is not known, and only
    /// [`SocketBody::small`] reads it.
    chunked: bool,
    /// Whether the connection may carry another request after this one.
    reusable: bool,
    sockets: Arc<Sockets>,
    /// The request's place in the origin's budget, given back with the body.
    permit: Option<crate::store::budget::Permit>,
}

impl Sockets {
    pub fn new(max_idle: usize, connect: Duration, stall: Duration, label: String) -> Sockets {
        Sockets {
            idle: Mutex::new(Vec::new()),
            max_idle,
            connect,
            stall,
            label,
        }
    }

    fn transport(&self, message: String) -> StoreError {
        StoreError::Transport {
            endpoint: self.label.clone(),
            message,
        }
    }

    /// A kept connection to `authority` and its buffer, if one is fresh enough
    /// and nothing came on it while it was idle (bytes no request asked for,
    /// or its end).
    fn kept(&self, authority: &str) -> Option<(TcpStream, Vec<u8>)> {
        let mut idle = self.idle.lock().unwrap();
        idle.retain(|c| c.since.elapsed() < IDLE_FOR);
        loop {
            let i = idle.iter().rposition(|c| c.authority == authority)?;
            let c = idle.swap_remove(i);
            if quiet(&c.conn) {
                return Some((c.conn, c.buf));
            }
        }
    }

    /// Keeps `conn` for the next request, unless something is waiting on it:
    /// bytes past the answer's body are no answer to anything, and a connection
    /// carrying them is closed rather than let them be read as the next head.
    fn keep(&self, authority: String, conn: TcpStream, buf: Vec<u8>) {
        if !quiet(&conn) {
            tracing::debug!(endpoint = %self.label, "bytes past an answer's end: connection closed");
            return;
        }
        let mut idle = self.idle.lock().unwrap();
        if idle.len() < self.max_idle {
            idle.push(Idle {
                authority,
                conn,
                buf,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self, authority: &str) -> Result<TcpStream, StoreError> {
        let conn = match tokio::time::timeout(self.connect, TcpStream::connect(authority)).await {
            Err(_) => {
                return Err(StoreError::Timeout {
                    endpoint: self.label.clone(),
                    deadline: Deadline::Connect,
                    after: self.connect,
                })
            }
            Ok(Err(e)) => {
                return Err(StoreError::Connect {
                    endpoint: self.label.clone(),
                    message: e.to_string(),
                })
            }
            Ok(Ok(c)) => c,
        };
        // Requests are small and written whole: never hold one back.
        let _ = conn.set_nodelay(true);
        Ok(conn)
    }

    /// Sends `GET path` to `authority` with `headers` (the Host header is
    /// `host`) and reads the answer's head. A kept connection that turns out to
    /// have been closed before answering is replaced by a new one, once.
    pub async fn get(
        self: &Arc<Self>,
        authority: &str,
        host: &str,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<Answer, StoreError> {
        let request = |buf: &mut Vec<u8>| {
            buf.clear();
            buf.extend_from_slice(b"GET ");
            buf.extend_from_slice(path.as_bytes());
            buf.extend_from_slice(b" HTTP/1.1\r\nhost: ");
            buf.extend_from_slice(host.as_bytes());
            buf.extend_from_slice(b"\r\n");
            for (name, value) in headers {
                buf.extend_from_slice(name.as_str().as_bytes());
                buf.extend_from_slice(b": ");
                buf.extend_from_slice(value.as_bytes());
                buf.extend_from_slice(b"\r\n");
            }
            buf.extend_from_slice(b"\r\n");
        };
        if let Some((conn, mut buf)) = self.kept(authority) {
            request(&mut buf);
            match self.exchange(conn, authority, buf).await {
                Err(Exchange::Unanswered(_)) => {}
                Err(Exchange::Failed(e)) => return Err(e),
                Ok(a) => return Ok(a),
            }
        }
        let conn = self.connect(authority).await?;
        let mut buf = Vec::with_capacity(BUF);
        request(&mut buf);
        match self.exchange(conn, authority, buf).await {
            Ok(a) => Ok(a),
            Err(Exchange::Unanswered(e) | Exchange::Failed(e)) => Err(e),
        }
    }

    /// One request (in `buf`) on `conn`, and the head of its answer (read into
    /// `buf`, which the body then holds).
    async fn exchange(
        self: &Arc<Self>,
        mut conn: TcpStream,
        authority: &str,
        buf: Vec<u8>,
    ) -> Result<Answer, Exchange> {
        if let Err(e) = conn.write_all(&buf).await {
            return Err(Exchange::Unanswered(
                self.transport(format!("cannot send the request: {e}")),
            ));
        }
        let mut reader = HeadReader::new(buf);
        loop {
            let n = match conn.read(reader.room()).await {
                Ok(0) if reader.received() == 0 => {
                    return Err(Exchange::Unanswered(
                        self.transport("the connection closed before an answer".into()),
                    ))
                }
                Ok(0) => {
                    return Err(Exchange::Failed(
                        self.transport("the connection closed inside an answer's head".into()),
                    ))
                }
                Ok(n) => n,
                Err(e) if reader.received() == 0 => {
                    return Err(Exchange::Unanswered(
                        self.transport(format!("no answer: {e}")),
                    ))
                }
                Err(e) => return Err(Exchange::Failed(self.transport(format!("{e}")))),
            };
            let head = match reader.filled(n) {
                Ok(None) => continue,
                Ok(Some(head)) => head,
                Err(e) => return Err(Exchange::Failed(self.transport(e.to_string()))),
            };
            let (buf, len) = reader.into_parts();
            let early = head.body_at..len;
            let (length, chunked) = match head.framing {
                Framing::Length(n) => (n, false),
                Framing::Chunked => (0, true),
            };
            return Ok(Answer {
                status: head.status,
                headers: head.headers,
                body: SocketBody {
                    conn: Some(conn),
                    authority: authority.to_owned(),
                    // The reader refused a head whose early bytes pass its length.
                    remaining: length.saturating_sub(early.len() as u64),
                    buf,
                    early,
                    chunked,
                    reusable: head.reusable,
                    sockets: self.clone(),
                    permit: None,
                },
            });
        }
    }
}

/// How an exchange failed: before any answer (worth a fresh connection, for a
/// kept one the other side may have closed) or inside one.
enum Exchange {
    Unanswered(StoreError),
    Failed(StoreError),
}

impl From<Exchange> for StoreError {
    fn from(e: Exchange) -> StoreError {
        match e {
            Exchange::Unanswered(e) | Exchange::Failed(e) => e,
        }
    }
}

impl SocketBody {
    /// Holds `permit` until the body is dropped.
    pub(in crate::store::s3) fn hold(&mut self, permit: crate::store::budget::Permit) {
        self.permit = Some(permit);
    }

    /// Bytes of the body still to come (of a body framed by its length).
    pub fn remaining(&self) -> u64 {
        self.remaining + self.early.len() as u64
    }

    /// Reads the next bytes of the body into `dst` (0: it has ended). Waits at
    /// most the stall deadline for each.
    pub async fn read(&mut self, dst: &mut [u8]) -> Result<usize, StoreError> {
        if !self.early.is_empty() {
            let n = self.early.len().min(dst.len());
            let from = self.early.start;
            dst[..n].copy_from_slice(&self.buf[from..from + n]);
            self.early.start += n;
            if self.remaining == 0 && self.early.is_empty() {
                self.release();
            }
            return Ok(n);
        }
        if dst.is_empty() {
            return Ok(0);
        }
        if self.remaining == 0 {
            self.release();
            return Ok(0);
        }
        let want = (dst.len() as u64).min(self.remaining) as usize;
        let Some(conn) = self.conn.as_ref() else {
            return Err(self
                .sockets
                .transport("the body was already abandoned".into()));
        };
        let got = read_some(conn, &mut dst[..want], &self.sockets, self.remaining).await;
        match got {
            Ok(n) => {
                self.remaining -= n as u64;
                if self.remaining == 0 {
                    self.release();
                }
                Ok(n)
            }
            Err(e) => {
                // The connection is in an unknown place of an answer: never used again.
                self.conn = None;
                Err(e)
            }
        }
    }

    /// The whole (small) body, for an error answer: at most 64 KiB is read, and
    /// nothing of a longer one.
    pub(super) async fn small(mut self) -> Vec<u8> {
        if self.chunked {
            return self.small_chunked().await;
        }
        if self.remaining() > MAX_ERROR_BODY {
            return Vec::new();
        }
        let mut out = vec![0u8; self.remaining() as usize];
        let mut at = 0;
        while at < out.len() {
            match self.read(&mut out[at..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => at += n,
            }
        }
        out.truncate(at);
        out
    }

    /// [`Self::small`] of a chunked body: raw bytes until the chunks are
    /// complete, then decoded (nothing if they run past the bound or break off).
    async fn small_chunked(mut self) -> Vec<u8> {
        let mut raw = self.buf[self.early.clone()].to_vec();
        let Some(conn) = self.conn.take() else {
            return Vec::new();
        };
        loop {
            match dechunk(&raw, MAX_ERROR_BODY as usize) {
                Chunks::Whole(body) => return body,
                Chunks::Bad => return Vec::new(),
                Chunks::Partial if raw.len() as u64 > MAX_ERROR_BODY => return Vec::new(),
                Chunks::Partial => {}
            }
            let mut buf = [0u8; 4096];
            match read_some(&conn, &mut buf, &self.sockets, 0).await {
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                Err(_) => return Vec::new(),
            }
        }
    }

    /// Gives the connection back for the next request once the body is read.
    fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.reusable && self.remaining == 0 && self.early.is_empty() {
                self.sockets.keep(
                    std::mem::take(&mut self.authority),
                    conn,
                    std::mem::take(&mut self.buf),
                );
            }
        }
    }
}

/// Whether nothing is waiting on `conn`: no bytes, and not its end.
fn quiet(conn: &TcpStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: peeking at most one byte into a byte we own; nothing is consumed.
    let n = unsafe {
        libc::recv(
            conn.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock
}

/// Some bytes (at least one) of a body off `conn` into `dst`, within the stall
/// deadline for each wait; `left` of it are still to come.
async fn read_some(
    conn: &TcpStream,
    dst: &mut [u8],
    sockets: &Sockets,
    left: u64,
) -> Result<usize, StoreError> {
    let fd = conn.as_raw_fd();
    // SAFETY: receiving into a buffer we borrow.
    let recv = || match unsafe { libc::recv(fd, dst.as_mut_ptr().cast(), dst.len(), 0) } {
        n if n < 0 => Err(std::io::Error::last_os_error()),
        n => Ok(n as usize),
    };
    when_readable(conn, sockets, left, recv)
        .await?
        .map_err(|e| sockets.transport(format!("body cut off: {e}")))
}

/// What `op` moved off `conn` (how many bytes; none means the body ended
/// early, an error), run as soon as `conn` has bytes, within the stall
/// deadline for each wait; `left` bytes of the body are still to come. Errors
/// of `op` other than "would block" are the caller's to judge.
async fn when_readable(
    conn: &TcpStream,
    sockets: &Sockets,
    left: u64,
    mut op: impl FnMut() -> std::io::Result<usize>,
) -> Result<std::io::Result<usize>, StoreError> {
    loop {
        match conn.try_io(Interest::READABLE, &mut op) {
            Ok(0) => {
                return Err(sockets.transport(format!(
                    "body cut off: the connection closed {left} bytes short"
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                match tokio::time::timeout(sockets.stall, conn.readable()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(sockets.transport(format!("body cut off: {e}"))),
                    // Bytes came, fewer than the socket's low-water mark
                    // ([`splice`]): a body still arriving is not stalled.
                    Err(_) if splice::pending(conn.as_raw_fd()) > 0 => {}
                    Err(_) => {
                        return Err(StoreError::Timeout {
                            endpoint: sockets.label.clone(),
                            deadline: Deadline::Stall,
                            after: sockets.stall,
                        })
                    }
                }
            }
            r => return Ok(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A server answering every request on a connection with `parts`, written
    /// one after another `gap` apart.
    async fn answering(parts: Vec<Vec<u8>>, gap: Duration) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let parts = parts.clone();
                tokio::spawn(async move {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                            match conn.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => req.extend_from_slice(&buf[..n]),
                            }
                        }
                        req.clear();
                        for p in &parts {
                            tokio::time::sleep(gap).await;
                            if conn.write_all(p).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    fn sockets() -> Arc<Sockets> {
        Arc::new(Sockets::new(
            4,
            Duration::from_secs(1),
            Duration::from_secs(1),
            "test".into(),
        ))
    }

    async fn body_of(a: &mut Answer) -> Vec<u8> {
        let mut out = vec![0u8; a.body.remaining() as usize];
        let mut at = 0;
        while at < out.len() {
            at += a.body.read(&mut out[at..]).await.unwrap();
        }
        assert_eq!(a.body.read(&mut [0u8; 1]).await.unwrap(), 0);
        out
    }

    fn ok_head(len: usize) -> Vec<u8> {
        format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n").into_bytes()
    }

    #[tokio::test]
    async fn a_connection_with_bytes_past_its_answer_is_closed_not_kept() {
        let body = vec![7u8; 256 << 10];
        let extra = b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n!".to_vec();
        // Past the body in the same write, and a while after it (while idle).
        for gap in [Duration::ZERO, Duration::from_millis(100)] {
            let mut first = ok_head(body.len());
            first.extend_from_slice(&body);
            let addr = answering(vec![first, extra.clone()], gap).await;
            let s = sockets();
            let mut a = s.get(&addr, "h", "/k", &Default::default()).await.unwrap();
            assert_eq!(body_of(&mut a).await, body);
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                s.kept(&addr).is_none(),
                "kept with bytes past the answer ({gap:?})"
            );
        }
        // An answer that ends where its length says keeps its connection.
        let mut whole = ok_head(3);
        whole.extend_from_slice(b"abc");
        let addr = answering(vec![whole], Duration::ZERO).await;
        let s = sockets();
        let mut a = s.get(&addr, "h", "/k", &Default::default()).await.unwrap();
        assert_eq!(body_of(&mut a).await, b"abc");
        assert!(s.kept(&addr).is_some());
    }

    #[tokio::test]
    async fn interim_answers_are_skipped_for_the_final_one() {
        let addr = answering(
            vec![
                b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(),
                b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n".to_vec(),
                b"content-length: 2\r\n\r\nok".to_vec(),
            ],
            Duration::from_millis(20),
        )
        .await;
        let s = sockets();
        let mut a = s.get(&addr, "h", "/k", &Default::default()).await.unwrap();
        assert_eq!(a.status, 200);
        assert_eq!(body_of(&mut a).await, b"ok");
    }

    #[tokio::test]
    async fn ambiguous_framing_is_a_transport_error() {
        for head in [
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
            "HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nok",
            "HTTP/1.1 500 x\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\nok",
        ] {
            let addr = answering(vec![head.as_bytes().to_vec()], Duration::ZERO).await;
            let e = sockets()
                .get(&addr, "h", "/k", &Default::default())
                .await
                .err()
                .unwrap_or_else(|| panic!("{head:?} was taken"));
            assert!(matches!(e, StoreError::Transport { .. }), "{e:?}");
        }
    }

    #[tokio::test]
    async fn a_chunked_error_body_whose_size_overflows_reads_as_empty() {
        let addr = answering(
            vec![
                b"HTTP/1.1 500 x\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffed\r\n"
                    .to_vec(),
            ],
            Duration::ZERO,
        )
        .await;
        let a = sockets()
            .get(&addr, "h", "/k", &Default::default())
            .await
            .unwrap();
        assert_eq!(a.status, 500);
        // At once: the size line alone says it cannot fit.
        let body = tokio::time::timeout(Duration::from_millis(500), a.body.small()).await;
        assert_eq!(body.expect("no wait for the stall deadline"), b"");
    }
}
