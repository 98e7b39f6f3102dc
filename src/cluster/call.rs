//! [`NodeCalls`]: one request to one node, the only way the reader talks to nodes.
//!
//! Each call is counted, held in flight against the node's load, and bounded by
//! the cluster's first-byte and body-stall deadlines here (whatever the node's
//! store does itself). What it meets is judged in one place: an answer resets the
//! node's breaker, a node that cannot be reached or stays silent is marked down,
//! one that answers with failures counts toward its breaker.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::metrics::{ClusterMetrics, Fallback, NodeLabel};
use super::nodes::Nodes;
use crate::config::Timeouts;
use crate::log_limit::{more, LogLimit};
use crate::node_proto;
use crate::route::{NodeHandle, Router};
use crate::store::{
    collect, stall_guard, BodyResponse, Deadline, GetObject, ListPage, ListRequest, ObjectMeta,
    StoreError,
};

/// A node's answer whose body is still to be read, holding its place in the
/// node's load until it is.
pub(crate) struct Opened {
    pub resp: BodyResponse,
    pub node: NodeHandle,
    _inflight: crate::route::state::InFlight,
}

/// The nodes, the client's view of each (load, latency, breaker, down), and the
/// deadlines every call to one of them is held to.
pub(crate) struct NodeCalls {
    pub router: Arc<Router>,
    pub nodes: Arc<dyn Nodes>,
    pub timeouts: Timeouts,
    pub metrics: Arc<ClusterMetrics>,
    /// Node failures are logged at most once a second: a dead node must not flood.
    pub failure_log: LogLimit,
    /// Each node's request counter, found without making its label anew for
    /// every request.
    pub requests: std::sync::RwLock<
        std::collections::HashMap<String, prometheus_client::metrics::counter::Counter>,
    >,
}

/// The fallback cause a failed node request stands for.
pub(crate) fn cause_of(e: &StoreError) -> Fallback {
    match e.cause() {
        StoreError::Connect { .. }
        | StoreError::Timeout {
            deadline: Deadline::Connect,
            ..
        } => Fallback::Connect,
        StoreError::Timeout {
            deadline: Deadline::FirstByte,
            ..
        } => Fallback::FirstByte,
        StoreError::Timeout {
            deadline: Deadline::Stall,
            ..
        } => Fallback::Stall,
        _ => Fallback::Error,
    }
}

impl NodeCalls {
    /// A GET of `req` from `node`, collected.
    pub(crate) async fn node_get(
        &self,
        node: &NodeHandle,
        req: &GetObject,
    ) -> Result<(Bytes, ObjectMeta), StoreError> {
        let store = self.nodes.store(node.id());
        let timeouts = self.timeouts;
        let _inflight = self.begin(node);
        let t0 = Instant::now();
        let r = async {
            let mut resp = tokio::time::timeout(timeouts.first_byte, store.get_range(req))
                .await
                .map_err(|_| first_byte_timeout(node, timeouts.first_byte))??;
            self.router.observe(node, t0.elapsed());
            let meta = resp.meta.clone();
            resp.body = stall_guard(resp.body, timeouts.stall, node.id().to_owned());
            Ok((collect(resp).await?, meta))
        }
        .await;
        self.judge(node, r.as_ref().err());
        r
    }

    /// A GET of `req` from `node` that nobody waits on (a warm), collected: its
    /// first byte may come as late as `first_byte`, after the node's origin
    /// budget served every read waiting there, and a node that answers late is
    /// not judged slow for it.
    pub(crate) async fn node_get_patient(
        &self,
        node: &NodeHandle,
        req: &GetObject,
        first_byte: std::time::Duration,
    ) -> Result<(), StoreError> {
        let store = self.nodes.store(node.id());
        let stall = self.timeouts.stall;
        let _inflight = self.begin(node);
        let r = async {
            let mut resp = tokio::time::timeout(first_byte, store.get_range(req))
                .await
                .map_err(|_| first_byte_timeout(node, first_byte))??;
            resp.body = stall_guard(resp.body, stall, node.id().to_owned());
            collect(resp).await.map(drop)
        }
        .await;
        match &r {
            Err(StoreError::Timeout {
                deadline: Deadline::FirstByte,
                ..
            }) => {}
            other => self.judge(node, other.as_ref().err()),
        }
        r
    }

    /// A GET of `req` from `node`, up to its answer's head: the body is read into
    /// the caller's buffer afterwards (a chunked one held to the stall deadline
    /// here, a socket's by its client), and a failure there is told to
    /// [`Self::body_failed`].
    pub(crate) async fn node_open(
        &self,
        node: &NodeHandle,
        req: &GetObject,
    ) -> Result<Opened, StoreError> {
        let store = self.nodes.store(node.id());
        let timeouts = self.timeouts;
        let inflight = self.begin(node);
        let t0 = Instant::now();
        let r = tokio::time::timeout(timeouts.first_byte, store.get_body(req))
            .await
            .unwrap_or_else(|_| Err(first_byte_timeout(node, timeouts.first_byte)));
        self.judge(node, r.as_ref().err());
        let mut resp = r?;
        self.router.observe(node, t0.elapsed());
        let id = node.id().to_owned();
        resp.body = resp
            .body
            .map_stream(move |s| stall_guard(s, timeouts.stall, id));
        Ok(Opened {
            resp,
            node: node.clone(),
            _inflight: inflight,
        })
    }

    /// The body of an answer [`Self::node_open`] gave failed with `e`.
    pub(crate) fn body_failed(&self, node: &NodeHandle, e: &StoreError) {
        self.judge(node, Some(e));
    }

    /// A HEAD of `req` from `node`.
    pub(crate) async fn node_head(
        &self,
        node: &NodeHandle,
        req: &GetObject,
    ) -> Result<ObjectMeta, StoreError> {
        let store = self.nodes.store(node.id());
        let deadline = self.timeouts.first_byte;
        let _inflight = self.begin(node);
        let r = tokio::time::timeout(deadline, store.head(req))
            .await
            .unwrap_or_else(|_| Err(first_byte_timeout(node, deadline)));
        self.judge(node, r.as_ref().err());
        r
    }

    /// One listing page from `node`.
    pub(crate) async fn node_list(
        &self,
        node: &NodeHandle,
        req: &ListRequest,
    ) -> Result<ListPage, StoreError> {
        let store = self.nodes.store(node.id());
        let deadline = self.timeouts.first_byte;
        let _inflight = self.begin(node);
        let t0 = Instant::now();
        let r = tokio::time::timeout(deadline, store.list_page(req))
            .await
            .unwrap_or_else(|_| Err(first_byte_timeout(node, deadline)));
        if r.is_ok() {
            self.router.observe(node, t0.elapsed());
        }
        self.judge(node, r.as_ref().err());
        r
    }

    fn begin(&self, node: &NodeHandle) -> crate::route::state::InFlight {
        let known = self.requests.read().unwrap().get(node.id()).cloned();
        let counter = known.unwrap_or_else(|| {
            let c = self
                .metrics
                .node_requests
                .get_or_create(&NodeLabel {
                    node: node.id().to_owned(),
                })
                .clone();
            self.requests
                .write()
                .unwrap()
                .insert(node.id().to_owned(), c.clone());
            c
        });
        counter.inc();
        self.router.begin(node)
    }

    /// What a call's outcome says about the node.
    fn judge(&self, node: &NodeHandle, err: Option<&StoreError>) {
        let Some(e) = err else {
            return self.router.success(node);
        };
        if e.is_answer() {
            return self.router.success(node);
        }
        // Not cached is an answer to a cached-only request, not a failure.
        if node_proto::is_not_cached(e) {
            return;
        }
        self.metrics
            .node_failures
            .get_or_create(&NodeLabel {
                node: node.id().to_owned(),
            })
            .inc();
        match cause_of(e) {
            Fallback::Connect | Fallback::FirstByte => self.router.mark_down(node),
            _ if matches!(
                e.cause(),
                StoreError::Server { .. }
                    | StoreError::Throttled { .. }
                    | StoreError::Protocol { .. }
            ) =>
            {
                // It answers, but with failures: the breaker's business. A reset
                // connection (a node restarting) is not counted.
                self.router.failure(node)
            }
            _ => {}
        }
        self.log_failure(node, e);
    }

    /// Logs a node failure, at most one line per second.
    fn log_failure(&self, node: &NodeHandle, e: &StoreError) {
        if let Some(n) = self.failure_log.event() {
            tracing::warn!(node = %node.id(), "request failed, trying elsewhere: {e}{}", more(n));
        }
    }
}

fn first_byte_timeout(node: &NodeHandle, after: std::time::Duration) -> StoreError {
    StoreError::Timeout {
        endpoint: node.id().to_owned(),
        deadline: Deadline::FirstByte,
        after,
    }
}
