//! Kept-alive connections to one endpoint's hosts: a connection is kept only when
//! nothing is waiting on it, and taken again only while fresh and still quiet.

use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::store::{Deadline, StoreError};

/// A connection unused this long is not used again: the other side may be about
/// to close it (a node closes idle connections after 120 s, S3 after about 20).
const IDLE_FOR: Duration = Duration::from_secs(15);

/// Kept-alive connections to one endpoint's hosts.
pub(in crate::store::s3) struct Sockets {
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    connect: Duration,
    pub(super) stall: Duration,
    pub(super) label: String,
}

struct Idle {
    authority: String,
    conn: TcpStream,
    /// The connection's buffer for requests and answers' heads, kept with it.
    buf: Vec<u8>,
    since: Instant,
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

    pub(super) fn transport(&self, message: String) -> StoreError {
        StoreError::Transport {
            endpoint: self.label.clone(),
            message,
        }
    }

    /// A kept connection to `authority` and its buffer, if one is fresh enough
    /// and nothing came on it while it was idle (bytes no request asked for,
    /// or its end).
    pub(super) fn kept(&self, authority: &str) -> Option<(TcpStream, Vec<u8>)> {
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
    pub(super) fn keep(&self, authority: String, conn: TcpStream, buf: Vec<u8>) {
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

    pub(super) async fn connect(&self, authority: &str) -> Result<TcpStream, StoreError> {
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
