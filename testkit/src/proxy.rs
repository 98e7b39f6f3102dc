//! A small HTTP proxy on loopback, as corporate networks have: `CONNECT` tunnels
//! for HTTPS and absolute-form requests for HTTP. It records where each request
//! went, so a test can tell which traffic passed through it.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What passed through: the target, and whether it was a `CONNECT` tunnel.
type Seen = Arc<Mutex<Vec<(String, bool)>>>;

pub struct Proxy {
    pub addr: std::net::SocketAddr,
    seen: Seen,
    _task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    continue;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let _ = relay(sock, s).await;
                });
            }
        });
        Proxy {
            addr,
            seen,
            _task: task,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `host:port` of every connection made through it, in order.
    pub fn seen(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// `host:port` of every `CONNECT` tunnel made through it (HTTPS), in order.
    pub fn tunnels(&self) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(_, c)| *c)
            .map(|(t, _)| t.clone())
            .collect()
    }
}

/// Reads the first request's head, connects where it names, and splices.
async fn relay(mut client: TcpStream, seen: Seen) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut b).await? == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let line = text.lines().next().unwrap_or("").to_owned();
    let mut parts = line.split(' ');
    let (method, target, version) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or("HTTP/1.1"),
    );
    if method == "CONNECT" {
        seen.lock().unwrap().push((target.to_owned(), true));
        let mut up = TcpStream::connect(target).await?;
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
        tokio::io::copy_bidirectional(&mut client, &mut up).await?;
        return Ok(());
    }
    // GET http://host:port/path HTTP/1.1: on to host:port in origin form.
    let Some(rest) = target.strip_prefix("http://") else {
        client
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await?;
        return Ok(());
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    seen.lock().unwrap().push((authority.to_owned(), false));
    let mut up = TcpStream::connect(authority).await?;
    let rewritten = text.replacen(&line, &format!("{method} {path} {version}"), 1);
    up.write_all(rewritten.as_bytes()).await?;
    // Later requests on this connection go on as sent (absolute form), which an
    // HTTP/1.1 server accepts.
    tokio::io::copy_bidirectional(&mut client, &mut up).await?;
    Ok(())
}
