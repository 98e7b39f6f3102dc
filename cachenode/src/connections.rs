//! Client connections: how many may be open, and how long a slow or silent client
//! may hold one. A node is an endpoint anyone on the network can reach; 2,000
//! clients that connect and say nothing, or send their headers a byte a second,
//! must not keep the rest from reading.
//!
//! - The cap ([`Gate`]): past `node.max_connections`, a new connection is closed
//!   at once, counted and logged once a minute.
//! - Headers: hyper's `header_read_timeout` (`node.header_read_timeout`) closes a
//!   connection whose request headers have not all arrived in time, counted from
//!   when the node starts waiting for them, so it also ends keep-alive connections
//!   left idle that long.
//! - Idling ([`Activity`]): a connection on which no byte moves either way for
//!   `node.idle_timeout` is closed (a client that stopped reading its response or
//!   sending its body).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use shoal::log_limit::{more, LogLimit};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
// The runtime's clock, which its timers wait on too: a test that pauses it
// sees the idle limit exactly, with no real seconds spent.
use tokio::time::Instant;

/// What `[node]` sets for client connections.
#[derive(Clone, Debug)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Limits {
    pub fn of(n: &shoal::config::NodeConfig) -> Limits {
        Limits {
            header_read_timeout: n.header_read_timeout,
            idle_timeout: n.idle_timeout,
            max_connections: n.max_connections,
        }
    }
}

/// Admits connections up to the cap.
pub struct Gate {
    permits: Arc<Semaphore>,
    max: usize,
    refused_log: LogLimit,
}

/// One admitted connection: its place under the cap, and the open gauge while it
/// lives.
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    open: Gauge,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl Gate {
    pub fn new(max: usize) -> Gate {
        Gate {
            permits: Arc::new(Semaphore::new(max)),
            max,
            refused_log: LogLimit::per_minute(),
        }
    }

    /// A place for one more connection from `peer`, or `None` at the cap (the
    /// caller closes it).
    pub fn admit(&self, peer: SocketAddr, m: &crate::metrics::Metrics) -> Option<Admitted> {
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => {
                m.connections_open.inc();
                Some(Admitted {
                    _permit: permit,
                    open: m.connections_open.clone(),
                })
            }
            Err(_) => {
                m.connections_refused.inc();
                if let Some(n) = self.refused_log.event() {
                    tracing::warn!(
                        %peer,
                        "refusing a connection: {} are open, node.max_connections{}",
                        self.max,
                        more(n)
                    );
                }
                None
            }
        }
    }
}

/// When bytes last moved on a connection.
pub struct Activity {
    start: Instant,
    /// Milliseconds after `start`.
    last: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        self.last
            .store(self.start.elapsed().as_millis() as u64, Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last.load(Relaxed)))
    }

    /// Completes once nothing has moved for `limit`.
    pub async fn idle(&self, limit: Duration) {
        loop {
            let idle = self.idle_for();
            if idle >= limit {
                return;
            }
            tokio::time::sleep(limit - idle).await;
        }
    }
}

/// A connection's I/O, noting each byte that moves in [`Activity`].
pub struct Watched<T> {
    io: T,
    activity: Arc<Activity>,
}

impl<T> Watched<T> {
    pub fn new(io: T, activity: Arc<Activity>) -> Self {
        Watched { io, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_completes_only_after_a_quiet_stretch() {
        let a = Activity::new();
        let t0 = Instant::now();
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.idle(Duration::from_millis(300)).await })
        };
        // Bytes every 100 ms keep it waiting.
        for i in 0..4 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            a.touch();
            assert!(!waiter.is_finished(), "idle after {i} touches");
        }
        // Then 300 ms of quiet from the last, at 400 ms.
        waiter.await.unwrap();
        let quiet = t0.elapsed();
        assert!(
            quiet >= Duration::from_millis(700) && quiet < Duration::from_millis(710),
            "{quiet:?}"
        );
    }
}
