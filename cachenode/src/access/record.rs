//! One request from its headers to its body's last byte: the trace it runs
//! under, the bytes it sends charged to its key as they go, and its access-log
//! line once the body ends (or the client goes away).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::log::{AccessLog, Line};
use super::trace::Trace;
use super::Policy;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What is known of a request before it runs.
pub struct Start {
    pub at: Instant,
    pub client: String,
    pub method: String,
    pub bucket: String,
    pub key: String,
    pub range: Option<String>,
}

/// A response body that records its request as it is sent.
pub struct Recorded<B> {
    inner: B,
    trace: Arc<Trace>,
    /// Where the signer's bytes are charged, when it has a byte rate.
    policy: Option<Arc<Policy>>,
    log: Option<Arc<AccessLog>>,
    start: Option<Start>,
    status: u16,
    bytes: u64,
    signer: Option<String>,
}

impl<B> Recorded<B> {
    pub fn new(
        inner: B,
        trace: Arc<Trace>,
        policy: Option<Arc<Policy>>,
        log: Option<Arc<AccessLog>>,
        start: Start,
        status: u16,
    ) -> Self {
        let signer = trace.key();
        // Only a key with a byte rate is charged as its answer goes out.
        let policy = policy.filter(|p| signer.as_deref().is_some_and(|k| p.charges_bytes(k)));
        Recorded {
            inner,
            trace,
            policy,
            log,
            start: Some(start),
            status,
            bytes: 0,
            signer,
        }
    }

    /// Writes the line, once.
    fn finish(&mut self) {
        let (Some(s), Some(log)) = (self.start.take(), &self.log) else {
            return;
        };
        let t = &self.trace;
        log.write(&Line {
            time: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            access_key: self.signer.clone(),
            client: s.client,
            method: s.method,
            bucket: s.bucket,
            key: s.key,
            range: s.range,
            status: self.status,
            bytes: self.bytes,
            cache: t.outcome().map(|o| o.name()),
            duration_ms: (s.at.elapsed().as_secs_f64() * 1e6).round() / 1e3,
            origin_requests: t.origin_requests(),
            error: *t.refused.lock().unwrap(),
            peer_fill: t.peer_fills(),
        });
    }
}

impl<B> Drop for Recorded<B> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<B> Body for Recorded<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let me = &mut *self;
        let trace = me.trace.clone();
        let r = super::trace::sync_scope(&trace, || Pin::new(&mut me.inner).poll_frame(cx));
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    let n = d.len() as u64;
                    me.bytes += n;
                    if let (Some(p), Some(k)) = (&me.policy, &me.signer) {
                        p.spend_bytes(k, n);
                    }
                }
            }
            Poll::Ready(None) => me.finish(),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
