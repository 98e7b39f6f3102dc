//! What one request did, gathered as it happens for its access-log line and its
//! `Cache-Status`: the key it was signed with, what the cache did, how many
//! requests it sent to the origin, and why it was refused.
//!
//! The server puts a [`Trace`] in a task-local around the S3 call and every poll
//! of the response body, so the read path notes what it does without a parameter
//! through every layer; a block fetch started for a request runs in a task of
//! its own and carries its asker's trace there ([`current`], [`scope`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

tokio::task_local! {
    static CURRENT: Arc<Trace>;
}

/// What the cache did for an object answer (RFC 9211's vocabulary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every byte asked for was held.
    Hit,
    /// Some were not, and were fetched (and kept).
    Miss,
    /// The version was past `revalidate_after` and asked of the origin again.
    Stale,
    /// The rules leave the key uncached: passed through.
    Bypass,
}

impl Outcome {
    /// Each, for their series at 0 from the start.
    pub const ALL: [Outcome; 4] = [Outcome::Hit, Outcome::Miss, Outcome::Stale, Outcome::Bypass];

    pub fn name(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Stale => "stale",
            Outcome::Bypass => "bypass",
        }
    }

    /// This node's `Cache-Status` entry (RFC 9211).
    pub fn entry(self, stored: bool) -> String {
        let mut s = match self {
            Outcome::Hit => "shoal; hit".to_owned(),
            Outcome::Miss => "shoal; fwd=miss".to_owned(),
            Outcome::Stale => "shoal; fwd=stale".to_owned(),
            Outcome::Bypass => "shoal; fwd=bypass".to_owned(),
        };
        if stored && self != Outcome::Hit && self != Outcome::Bypass {
            s.push_str("; stored");
        }
        s
    }
}

/// Which node a missed block is asked of (here beside what the ask found,
/// for the metrics that count both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerRole {
    /// The previous owner of a block this node owns: its runner-up (or a
    /// leaving node handing its blocks back).
    RunnerUp,
    /// The owner of a block this node does not own.
    Owner,
}

/// What asking a block's runner-up node for it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerFill {
    /// It held the block and sent it.
    Hit,
    /// It answered that it holds none (504 to `only-if-cached`).
    Miss,
    /// No answer within `node.peer_fill_timeout`.
    Timeout,
    /// Anything else: refused, reset, another version, a wrong length.
    Error,
}

impl PeerFill {
    /// Each, for their series at 0 from the start.
    pub const ALL: [PeerFill; 4] = [
        PeerFill::Hit,
        PeerFill::Miss,
        PeerFill::Timeout,
        PeerFill::Error,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PeerFill::Hit => "hit",
            PeerFill::Miss => "miss",
            PeerFill::Timeout => "timeout",
            PeerFill::Error => "error",
        }
    }
}

/// Asks of runner-up nodes made for one request, by result.
#[derive(Default, Debug, serde::Serialize, PartialEq, Eq, Clone, Copy)]
pub struct PeerFills {
    pub hit: u32,
    pub miss: u32,
    pub timeout: u32,
    pub error: u32,
}

impl PeerFills {
    fn slot(&mut self, r: PeerFill) -> &mut u32 {
        match r {
            PeerFill::Hit => &mut self.hit,
            PeerFill::Miss => &mut self.miss,
            PeerFill::Timeout => &mut self.timeout,
            PeerFill::Error => &mut self.error,
        }
    }
}

#[derive(Default)]
pub struct Trace {
    /// The access key the request was signed with, once its signature held.
    pub key: Mutex<Option<String>>,
    pub outcome: Mutex<Option<Outcome>>,
    /// Requests sent to the origin for this one.
    pub origin_requests: AtomicU32,
    /// The version was asked of the origin again though one was known.
    pub revalidated: std::sync::atomic::AtomicBool,
    /// Something was asked of another node (a gateway's forward).
    pub forwarded: std::sync::atomic::AtomicBool,
    /// The S3 error code of a refusal made before the operation ran.
    pub refused: Mutex<Option<&'static str>>,
    /// `Cache-Status` entries of the node a gateway forwarded to.
    pub upstream: Mutex<Vec<String>>,
    /// Asks of runner-up nodes for blocks this request missed.
    pub peer_fills: Mutex<PeerFills>,
}

impl Trace {
    pub fn key(&self) -> Option<String> {
        self.key.lock().unwrap().clone()
    }
    pub fn outcome(&self) -> Option<Outcome> {
        *self.outcome.lock().unwrap()
    }
    pub fn origin_requests(&self) -> u32 {
        self.origin_requests.load(Ordering::Relaxed)
    }
    /// The asks of runner-up nodes, if any were made.
    pub fn peer_fills(&self) -> Option<PeerFills> {
        let p = *self.peer_fills.lock().unwrap();
        (p != PeerFills::default()).then_some(p)
    }
}

/// The trace of the request being served here, if any.
pub fn current() -> Option<Arc<Trace>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// Runs `f` with `t` as the current trace (a fetch started for a request).
pub async fn scope<F: std::future::Future>(t: Option<Arc<Trace>>, f: F) -> F::Output {
    match t {
        Some(t) => CURRENT.scope(t, f).await,
        None => f.await,
    }
}

/// Runs `f` synchronously with `t` as the current trace (a body's poll).
pub fn sync_scope<R>(t: &Arc<Trace>, f: impl FnOnce() -> R) -> R {
    CURRENT.sync_scope(t.clone(), f)
}

fn with(f: impl FnOnce(&Trace)) {
    let _ = CURRENT.try_with(|t| f(t));
}

/// One request to the origin made for the current request.
pub fn origin_request() {
    with(|t| {
        t.origin_requests.fetch_add(1, Ordering::Relaxed);
    });
}

/// One ask of a block's runner-up made for the current request; one that
/// brought the block counts as going out, as a forward does.
pub fn peer_fill(r: PeerFill) {
    with(|t| {
        *t.peer_fills.lock().unwrap().slot(r) += 1;
        if r == PeerFill::Hit {
            t.forwarded.store(true, Ordering::Relaxed);
        }
    });
}

/// A request to another node made for the current request.
pub fn forwarded() {
    with(|t| t.forwarded.store(true, Ordering::Relaxed));
}

/// Whether anything was asked past this node's cache for the current request.
pub fn went_out() -> bool {
    CURRENT
        .try_with(|t| t.origin_requests() > 0 || t.forwarded.load(Ordering::Relaxed))
        .unwrap_or(false)
}

/// The known version was revalidated with the origin.
pub fn revalidated() {
    with(|t| t.revalidated.store(true, Ordering::Relaxed));
}

pub fn signed_by(key: &str) {
    with(|t| *t.key.lock().unwrap() = Some(key.to_owned()));
}

pub fn refused(code: &'static str) {
    with(|t| *t.refused.lock().unwrap() = Some(code));
}

/// What the cache did; the first word said stands.
pub fn outcome(o: Outcome) {
    with(|t| {
        t.outcome.lock().unwrap().get_or_insert(o);
    });
}

/// Whether the current request's version was revalidated.
pub fn was_revalidated() -> bool {
    CURRENT
        .try_with(|t| t.revalidated.load(Ordering::Relaxed))
        .unwrap_or(false)
}

/// The upstream node's `Cache-Status`, as a gateway's forward met it.
pub fn upstream(entry: &str) {
    with(|t| {
        let mut u = t.upstream.lock().unwrap();
        if u.len() < 8 {
            u.push(entry.to_owned());
        }
    });
}
