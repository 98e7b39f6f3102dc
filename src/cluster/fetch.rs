//! [`Fetcher`]: one request through the cluster (a block, and in
//! [`super::metadata`] a listing page or a HEAD): owner, failover, hedge, origin
//! fallback.
//!
//! The owner is asked first. A failure is retried once on the next ranked node; a
//! slow owner is hedged (a cached-only request to the next node, within the hedge
//! budget) after its hedge delay; whichever answers first wins and the other is
//! dropped. Only one extra node is ever asked. When nothing answers, the origin
//! does, and the cause is counted.
//!
//! A block is written into its buffer as its body arrives ([`Fetcher::fill`]):
//! the race is decided at the first byte, and a body that breaks off midway is
//! resumed from where it stopped (the bytes before it may already have been
//! read), on the next ranked node if no extra node was asked yet, else from the
//! origin, pinned to the same version.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;

use super::call::{cause_of, NodeCalls, Opened};
use super::metrics::{self, ClusterMetrics, Fallback};
use crate::blocks::Filler;
use crate::node_proto;
use crate::route::state::NoNode;
use crate::route::{BlockId, NodeHandle};
use crate::store::pipe::Pipe;
use crate::store::{get_into, BodySink, ByteRange, GetObject, ObjectMeta, Spliced, StoreError};

/// Where a block came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Node,
    Origin,
}

pub(crate) type Fetched = (Bytes, ObjectMeta, Source);

/// What routing a request through the cluster came to, short of a node's answer.
pub(crate) enum Routed {
    /// An answer that is one wherever it comes from (a 404, a 412).
    Answer(StoreError),
    /// No node answered: the origin must, for this reason.
    Fallback(Fallback),
}

/// The nodes, and the origin every request falls back to.
pub(crate) struct Fetcher {
    pub calls: NodeCalls,
    pub origin: Arc<dyn crate::store::ObjectStore>,
    /// Requests per origin read (a body cut off midway is resumed).
    pub origin_attempts: u32,
    pub metrics: Arc<ClusterMetrics>,
}

impl Fetcher {
    /// Fetches `req` (one block range of `bucket/key`, block `index`) through the
    /// cluster, falling back to the origin.
    pub(crate) async fn routed(&self, req: GetObject, index: u64) -> Result<Fetched, StoreError> {
        let ask = |node: NodeHandle, hedged: bool| {
            let req = as_asked(&req, hedged);
            async move { self.calls.node_get(&node, &req).await }
        };
        match self.route(&block_of(&req, index), ask).await {
            Ok((bytes, meta)) => Ok((bytes, meta, Source::Node)),
            Err(Routed::Answer(e)) => Err(e),
            Err(Routed::Fallback(cause)) => self.read_origin(&req, cause).await,
        }
    }

    /// Asks the owner of `block` with `ask(node, hedged)` (a hedge must ask for
    /// cached answers only), failing over or hedging to the next ranked node as a
    /// block read does. Either an answer (a node's, or an error that is one) or
    /// why the origin must answer instead.
    pub(crate) async fn route<T, F>(
        &self,
        block: &BlockId<'_>,
        ask: impl Fn(NodeHandle, bool) -> F,
    ) -> Result<T, Routed>
    where
        F: std::future::Future<Output = Result<T, StoreError>>,
    {
        self.route_on(block, ask).await.map(|(answer, _)| answer)
    }

    /// [`Self::route`], with the node a failover may still go to (none once an
    /// extra node was asked).
    async fn route_on<T, F>(
        &self,
        block: &BlockId<'_>,
        ask: impl Fn(NodeHandle, bool) -> F,
    ) -> Result<(T, Option<NodeHandle>), Routed>
    where
        F: std::future::Future<Output = Result<T, StoreError>>,
    {
        let pick = match self.calls.router.pick(block) {
            Ok(p) => p,
            Err(NoNode::Empty) => return Err(Routed::Fallback(Fallback::NoNodes)),
            Err(NoNode::AllDown) if self.calls.router.membership().zone().is_some() => {
                return Err(Routed::Fallback(Fallback::ZoneDown))
            }
            Err(NoNode::AllDown) => return Err(Routed::Fallback(Fallback::Down)),
        };
        let hedge_delay = self.calls.router.hedge_delay(&pick.node);
        let mut next = pick.alternates.into_iter();
        let attempt = |node: NodeHandle, hedged: bool| {
            let f = ask(node, hedged);
            async move { (hedged, f.await) }
        };
        let mut running = FuturesUnordered::new();
        running.push(attempt(pick.node, false));
        // One more node at most: a hedge or a failover, whichever comes first.
        let mut extra_used = false;
        let mut hedge_considered = false;
        let hedge = tokio::time::sleep(hedge_delay);
        tokio::pin!(hedge);
        let mut last = Fallback::Error;
        loop {
            tokio::select! {
                Some((hedged, r)) = running.next() => match r {
                    Ok(answer) => {
                        if hedged {
                            self.metrics.hedges_won.inc();
                        }
                        let spare = if extra_used { None } else { next.next() };
                        return Ok((answer, spare));
                    }
                    Err(e) if e.is_answer() => return Err(Routed::Answer(e)),
                    // A hedge found it cold: keep waiting for the owner, which is
                    // fetching it; a second origin request would only add load.
                    Err(e) if hedged && node_proto::is_not_cached(&e) => {
                        if running.is_empty() {
                            break;
                        }
                    }
                    Err(e) => {
                        last = cause_of(&e);
                        if !extra_used {
                            if let Some(n) = next.next() {
                                extra_used = true;
                                self.metrics.failovers.inc();
                                running.push(attempt(n, false));
                                continue;
                            }
                        }
                        if running.is_empty() {
                            break;
                        }
                    }
                },
                _ = &mut hedge, if !hedge_considered && !extra_used => {
                    hedge_considered = true;
                    if let Some(n) = next.as_slice().first().cloned() {
                        if self.calls.router.allow_hedge() {
                            next.next();
                            extra_used = true;
                            self.metrics.hedges_sent.inc();
                            running.push(attempt(n, true));
                        }
                    }
                },
                else => break,
            }
        }
        Err(Routed::Fallback(last))
    }

    /// Fills `into` with `req` (one block range of `bucket/key`, block `index`,
    /// pinned by `If-Match`) through the cluster, falling back to the origin
    /// unless `req` asks for what a node holds only; says who sent the last
    /// bytes. `into` is empty on entry.
    pub(crate) async fn fill<E>(
        &self,
        req: &GetObject,
        index: u64,
        into: &mut Filler<E>,
    ) -> Result<Source, StoreError>
    where
        E: Clone + Send + Sync + 'static,
    {
        let (start, end) = span(req);
        let (opened, spare) = match self.open_routed(req, index).await {
            Ok(answer) => answer,
            Err(Routed::Answer(e)) => return Err(e),
            Err(_) if node_proto::is_cached_only(req) => return Err(node_proto::not_held(req)),
            Err(Routed::Fallback(cause)) => return self.fill_origin(req, cause, into).await,
        };
        let failed = match check(&opened, req, start, end) {
            Err(e) if e.is_answer() => return Err(e),
            Err(e) => Some(e),
            Ok(()) => None,
        };
        self.fill_from(req, opened, spare, failed, into).await
    }

    /// `req`'s answer (up to its head) from the node the race of owner, hedge
    /// and failover picks, with the node a failover may still go to.
    async fn open_routed(
        &self,
        req: &GetObject,
        index: u64,
    ) -> Result<(Opened, Option<NodeHandle>), Routed> {
        let ask = |node: NodeHandle, hedged: bool| {
            let req = as_asked(req, hedged);
            async move { self.calls.node_open(&node, &req).await }
        };
        self.route_on(&block_of(req, index), ask).await
    }

    /// Splices `req` (a range inside block `index`, pinned by `If-Match`) from
    /// the node that answers it into `pipe`, after the pipe's prefix; routed,
    /// failed over and hedged as a block is. What cannot go into the pipe whole
    /// (no node answered, the pipe filled, the body broke off) is read into
    /// `into` instead, the pipe drained into it first.
    pub(crate) async fn pipe<E>(
        &self,
        req: &GetObject,
        index: u64,
        pipe: &mut Pipe,
        filler: impl FnOnce() -> Filler<E>,
    ) -> Result<Option<(Source, Filler<E>)>, StoreError>
    where
        E: Clone + Send + Sync + 'static,
    {
        let (start, end) = span(req);
        let (mut opened, spare) = match self.open_routed(req, index).await {
            Ok(answer) => answer,
            Err(Routed::Answer(e)) => return Err(e),
            Err(Routed::Fallback(cause)) => {
                let mut into = filler();
                let source = self.fill_origin(req, cause, &mut into).await?;
                return Ok(Some((source, into)));
            }
        };
        let failed = match check(&opened, req, start, end) {
            Err(e) if e.is_answer() => return Err(e),
            Err(e) => Some(e),
            Ok(()) => match opened.resp.body.splice_into(pipe, end - start).await {
                Ok(Spliced::Whole) => return Ok(None),
                Ok(Spliced::Stopped) => None,
                Err(e) => Some(e),
            },
        };
        // The bytes in the pipe came before the stop or the break: kept.
        let mut into = filler();
        let n = pipe
            .drain(into.spare())
            .map_err(|e| StoreError::Transport {
                endpoint: "a pipe".into(),
                message: e.to_string(),
            })?;
        into.commit(n);
        let source = self
            .fill_from(req, opened, spare, failed, &mut into)
            .await?;
        Ok(Some((source, into)))
    }

    /// Goes on filling `into` from `opened`'s body (checked already; failed
    /// already with `failed`, if given), then from `spare` or the origin if it
    /// breaks off.
    async fn fill_from<E>(
        &self,
        req: &GetObject,
        mut opened: Opened,
        mut spare: Option<NodeHandle>,
        mut failed: Option<StoreError>,
        into: &mut Filler<E>,
    ) -> Result<Source, StoreError>
    where
        E: Clone + Send + Sync + 'static,
    {
        let (start, end) = span(req);
        loop {
            let error = match failed.take() {
                Some(e) => e,
                None => {
                    let at = start + into.len() as u64;
                    match read_body(&mut opened, into, end - at).await {
                        Ok(()) => return Ok(Source::Node),
                        Err(e) => e,
                    }
                }
            };
            self.calls.body_failed(&opened.node, &error);
            let mut cause = cause_of(&error);
            // Once, on the next ranked node, for the rest; else the origin.
            if let Some(node) = spare.take() {
                self.metrics.failovers.inc();
                let at = start + into.len() as u64;
                match self.calls.node_open(&node, &rest_of(req, at, end)).await {
                    Ok(o) => {
                        match check(&o, req, at, end) {
                            Err(e) if e.is_answer() => return Err(e),
                            Err(e) => failed = Some(e),
                            Ok(()) => {}
                        }
                        opened = o;
                        continue;
                    }
                    Err(e) if e.is_answer() => return Err(e),
                    Err(e) => cause = cause_of(&e),
                }
            }
            if node_proto::is_cached_only(req) {
                return Err(node_proto::not_held(req));
            }
            let rest = rest_of(req, start + into.len() as u64, end);
            return self.fill_origin(&rest, cause, into).await;
        }
    }

    /// Fills `into` with `req` from the origin (a cut body resumed), for `cause`.
    pub(crate) async fn fill_origin<E>(
        &self,
        req: &GetObject,
        cause: Fallback,
        into: &mut Filler<E>,
    ) -> Result<Source, StoreError>
    where
        E: Clone + Send + Sync + 'static,
    {
        self.metrics.fallbacks.get_or_create(&cause.label()).inc();
        let mut req = req.clone();
        node_proto::strip(&mut req);
        let (start, end) = span(&req);
        let mut sink = IntoFiller {
            into,
            req: &req,
            span: (start, end),
        };
        get_into(&*self.origin, &req, self.origin_attempts, &mut sink).await?;
        Ok(Source::Origin)
    }

    pub(crate) async fn read_origin(
        &self,
        req: &GetObject,
        cause: Fallback,
    ) -> Result<Fetched, StoreError> {
        self.metrics.fallbacks.get_or_create(&cause.label()).inc();
        let mut req = req.clone();
        node_proto::strip(&mut req);
        let (meta, bytes) =
            crate::store::get_bytes(&*self.origin, &req, self.origin_attempts).await?;
        Ok((bytes, meta, Source::Origin))
    }

    pub(crate) fn count(&self, source: Source, bytes: usize) {
        let label = match source {
            Source::Node => metrics::NODE,
            Source::Origin => metrics::ORIGIN,
        };
        self.metrics.blocks.get_or_create(&label).inc();
        self.metrics
            .bytes
            .get_or_create(&label)
            .inc_by(bytes as u64);
    }
}

/// Block `index` of the object `req` asks for.
fn block_of(req: &GetObject, index: u64) -> BlockId<'_> {
    BlockId {
        bucket: &req.bucket,
        key: &req.key,
        index,
    }
}

/// `req` as a node is asked it: a hedge asks for what the node holds only.
fn as_asked(req: &GetObject, hedged: bool) -> GetObject {
    let mut req = req.clone();
    if hedged {
        node_proto::set_cached_only(&mut req, true);
    }
    req
}

/// The span `start..end` a block request asks for.
fn span(req: &GetObject) -> (u64, u64) {
    match req.range {
        Some(ByteRange::From {
            first,
            last: Some(last),
        }) => (first, last + 1),
        other => unreachable!("a block request asks for a closed range, not {other:?}"),
    }
}

/// `req` for just `at..end`.
fn rest_of(req: &GetObject, at: u64, end: u64) -> GetObject {
    let mut rest = req.clone();
    rest.range = Some(ByteRange::span(at, end));
    rest
}

/// Whether a node's answer is the one asked for: the version pinned (a node that
/// ignored `If-Match` must never mix two), and the span `at..end`.
fn check(opened: &Opened, req: &GetObject, at: u64, end: u64) -> Result<(), StoreError> {
    let r = &opened.resp;
    if req.if_match.as_deref().is_some_and(|e| e != r.meta.etag) {
        return Err(StoreError::PreconditionFailed {
            bucket: req.bucket.clone(),
            key: req.key.clone(),
        });
    }
    if (r.start, r.end) != (at, end) {
        return Err(StoreError::Protocol {
            endpoint: opened.node.id().to_owned(),
            message: format!("answered {}..{} for {at}..{end}", r.start, r.end),
        });
    }
    Ok(())
}

/// Reads `want` bytes of `opened`'s body into `into`.
async fn read_body<E>(
    opened: &mut Opened,
    into: &mut Filler<E>,
    want: u64,
) -> Result<(), StoreError>
where
    E: Clone + Send + Sync + 'static,
{
    let mut left = want as usize;
    while left > 0 {
        let room = into.spare();
        let n = room.len().min(left);
        if n == 0 {
            return Err(StoreError::Protocol {
                endpoint: opened.node.id().to_owned(),
                message: format!("no room for {left} more bytes"),
            });
        }
        match opened.resp.body.read(&mut room[..n]).await? {
            0 => {
                return Err(StoreError::ShortBody {
                    got: want - left as u64,
                    want,
                })
            }
            got => {
                into.commit(got);
                left -= got;
            }
        }
    }
    Ok(())
}

/// An origin body into a block being filled: the version and span asked for, or
/// nothing is written.
struct IntoFiller<'a, E> {
    into: &'a mut Filler<E>,
    req: &'a GetObject,
    span: (u64, u64),
}

impl<E: Clone + Send + Sync + 'static> BodySink for IntoFiller<'_, E> {
    type Error = StoreError;

    fn begin(&mut self, meta: &ObjectMeta, start: u64, end: u64) -> Result<(), StoreError> {
        if self.req.if_match.as_deref().is_some_and(|e| e != meta.etag) {
            return Err(StoreError::PreconditionFailed {
                bucket: self.req.bucket.clone(),
                key: self.req.key.clone(),
            });
        }
        if (start, end) != self.span {
            return Err(StoreError::Protocol {
                endpoint: "the origin".into(),
                message: format!(
                    "answered {start}..{end} for {}..{}",
                    self.span.0, self.span.1
                ),
            });
        }
        Ok(())
    }

    fn spare(&mut self) -> &mut [u8] {
        self.into.spare()
    }

    fn commit(&mut self, n: usize) {
        self.into.commit(n);
    }
}
