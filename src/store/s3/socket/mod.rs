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

use std::sync::Arc;

use http::HeaderMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::store::StoreError;

mod body;
pub(super) mod head;
mod pool;
mod splice;
mod wait;

pub use body::SocketBody;
use head::{Framing, HeadReader, BUF};
pub(super) use pool::Sockets;

/// An answer: its status and head, and its body to be read.
pub(super) struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: SocketBody,
}

impl Sockets {
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
