//! [`FaultStore`]: any store, made to fail, stall, wait or refuse on command, and
//! counting what it was asked. The test double for a node that is down, paused,
//! slow or broken.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::StreamExt;

use super::{GetObject, GetResponse, ListPage, ListRequest, ObjectMeta, ObjectStore, StoreError};

/// What one request meets.
#[derive(Clone, Debug)]
pub enum Fault {
    /// The connection is refused.
    Refuse,
    /// Nothing comes back before this long has passed (then the real answer).
    Delay(Duration),
    /// The headers come at once, then the body stops for good after this many bytes.
    StallAfter(u64),
    /// The headers come at once, then the connection breaks after this many
    /// bytes of the body (a reset: the reader sees a transport error).
    CutAfter(u64),
    /// This error comes back instead of an answer.
    Fail(StoreError),
    /// The connection is never answered at all.
    Hang,
}

/// A fault that acts on a body.
enum Body {
    StallAfter(u64),
    CutAfter(u64),
}

#[derive(Default)]
struct Plan {
    /// Faults for the next requests, one each, in order.
    next: VecDeque<Fault>,
    /// The fault of every request once `next` is used up.
    always: Option<Fault>,
}

/// `S` behind a switchboard of faults.
pub struct FaultStore<S> {
    inner: S,
    plan: Mutex<Plan>,
    requests: AtomicU64,
    gets: AtomicU64,
    /// Body bytes handed out.
    sent: std::sync::Arc<AtomicU64>,
}

impl<S: ObjectStore> FaultStore<S> {
    pub fn new(inner: S) -> Self {
        FaultStore {
            inner,
            plan: Mutex::new(Plan::default()),
            requests: AtomicU64::new(0),
            gets: AtomicU64::new(0),
            sent: Default::default(),
        }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Every request from now on meets `fault` (`None`: none).
    pub fn always(&self, fault: Option<Fault>) {
        let mut p = self.plan.lock().unwrap();
        p.next.clear();
        p.always = fault;
    }

    /// The next request meets `fault` (after those queued before it).
    pub fn then(&self, fault: Fault) {
        self.plan.lock().unwrap().next.push_back(fault);
    }

    /// Requests of any kind seen, and GETs among them.
    pub fn requests(&self) -> u64 {
        self.requests.load(Relaxed)
    }
    pub fn gets(&self) -> u64 {
        self.gets.load(Relaxed)
    }

    /// Body bytes it has handed out (of GETs' bodies, as they were read).
    pub fn body_bytes(&self) -> u64 {
        self.sent.load(Relaxed)
    }

    fn fault(&self) -> Option<Fault> {
        self.requests.fetch_add(1, Relaxed);
        let mut p = self.plan.lock().unwrap();
        p.next.pop_front().or_else(|| p.always.clone())
    }

    /// Applies the faults that act before an answer; returns the one that acts on
    /// the body, if any.
    async fn before(&self) -> Result<Option<Body>, StoreError> {
        match self.fault() {
            None => Ok(None),
            Some(Fault::Refuse) => Err(StoreError::Connect {
                endpoint: self.inner.name().to_owned(),
                message: "connection refused (fault)".into(),
            }),
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(None)
            }
            Some(Fault::StallAfter(n)) => Ok(Some(Body::StallAfter(n))),
            Some(Fault::CutAfter(n)) => Ok(Some(Body::CutAfter(n))),
            Some(Fault::Fail(e)) => Err(e),
            Some(Fault::Hang) => std::future::pending().await,
        }
    }
}

#[async_trait::async_trait]
impl<S: ObjectStore> ObjectStore for FaultStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn head(&self, req: &GetObject) -> Result<ObjectMeta, StoreError> {
        self.before().await?;
        self.inner.head(req).await
    }

    async fn get_range(&self, req: &GetObject) -> Result<GetResponse, StoreError> {
        self.gets.fetch_add(1, Relaxed);
        let body_fault = self.before().await?;
        let mut resp = self.inner.get_range(req).await?;
        let counted = self.sent.clone();
        let count = move |c: Result<bytes::Bytes, StoreError>| {
            if let Ok(b) = &c {
                counted.fetch_add(b.len() as u64, Relaxed);
            }
            c
        };
        let (limit, cut) = match body_fault {
            None => {
                resp.body = Box::pin(resp.body.map(count));
                return Ok(resp);
            }
            Some(Body::StallAfter(n)) => (n, false),
            Some(Body::CutAfter(n)) => (n, true),
        };
        let mut sent = 0u64;
        let body = resp.body.map(move |chunk| {
            let chunk = chunk?;
            let room = limit.saturating_sub(sent) as usize;
            sent += chunk.len() as u64;
            Ok(chunk.slice(..room.min(chunk.len())))
        });
        let upto =
            body.take_while(|c| std::future::ready(c.as_ref().map_or(true, |b| !b.is_empty())));
        let endpoint = self.inner.name().to_owned();
        let upto = upto.map(count);
        resp.body = if cut {
            // What fits under the limit, then a reset.
            Box::pin(upto.chain(futures_util::stream::once(async move {
                Err(StoreError::Transport {
                    endpoint,
                    message: "connection reset mid-body (fault)".into(),
                })
            })))
        } else {
            // What fits under the limit, then silence.
            Box::pin(upto.chain(futures_util::stream::pending()))
        };
        Ok(resp)
    }

    async fn list_page(&self, req: &ListRequest) -> Result<ListPage, StoreError> {
        self.before().await?;
        self.inner.list_page(req).await
    }

    async fn head_bucket(&self, bucket: &str) -> Result<(), StoreError> {
        self.before().await?;
        self.inner.head_bucket(bucket).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryStore;
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn faults_come_in_order_then_always() {
        let m = MemoryStore::new("m", &["b"]);
        m.put("b", "k", vec![1u8; 300_000]);
        let f = FaultStore::new(m);
        let req = GetObject::new("b", "k");
        f.then(Fault::Refuse);
        f.then(Fault::Delay(Duration::from_secs(5)));
        assert!(matches!(
            f.head(&req).await,
            Err(StoreError::Connect { .. })
        ));
        let t0 = tokio::time::Instant::now();
        f.head(&req).await.unwrap();
        assert!(t0.elapsed() >= Duration::from_secs(5));
        f.always(Some(Fault::StallAfter(100_000)));
        let r = f.get_range(&req).await.unwrap();
        let body = crate::store::stall_guard(r.body, Duration::from_secs(1), "m".into());
        let got: Vec<_> = body.collect().await;
        let bytes: usize = got
            .iter()
            .filter_map(|c| c.as_ref().ok())
            .map(|b| b.len())
            .sum();
        assert_eq!(bytes, 100_000);
        assert!(matches!(got.last(), Some(Err(StoreError::Timeout { .. }))));
        assert_eq!((f.requests(), f.gets()), (3, 1));
    }
}
