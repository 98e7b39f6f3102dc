//! This client's live view of the nodes, and the choice of node for one request.
//!
//! - Bounded load: an owner at its in-flight limit (`load_limit`, or
//!   `ceil(load_factor × mean in-flight)`) hands the block to the next ranked node
//!   under the limit; when all are at the limit, the owner is used anyway. Hot
//!   blocks cost some duplication instead of a queue behind one node.
//! - Down marking: a connection failure marks a node down for `down_for`; it is
//!   skipped in every ranking until then.
//! - Hedging: each node keeps an EWMA of time to first byte; a request with no
//!   answer after `hedge_factor × estimate` (never sooner than the floor) may be
//!   sent to the next node, within a budget of a fraction of recent requests.
//!
//! Time comes from a [`Clock`] so tests can step it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::membership::Membership;
use super::placement::{BlockId, NodeSet};
use crate::config::{BreakerConfig, ClusterConfig, HedgeConfig};

pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Tokio's clock: the system's, or a test's paused one (so timers and the router
/// agree on what time it is).
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// A clock that only moves when told to.
pub struct TestClock {
    base: Instant,
    offset_ns: AtomicU64,
}

impl Default for TestClock {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            offset_ns: AtomicU64::new(0),
        }
    }
}

impl TestClock {
    pub fn advance(&self, d: Duration) {
        self.offset_ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }
}

impl Clock for TestClock {
    fn now(&self) -> Instant {
        self.base + Duration::from_nanos(self.offset_ns.load(Relaxed))
    }
}

/// Nodes ranked per pick before falling back to a full ranking: the owner, the
/// failover and hedge targets, and room to spill.
const PICK_FIRST: usize = 8;
/// How long the hedge budget remembers requests.
const HEDGE_WINDOW: Duration = Duration::from_secs(10);
/// Weight of a new sample in the latency estimate (as TCP's SRTT).
const EWMA_ALPHA: f64 = 0.125;
/// Hedge delay while a node has no estimate yet.
const UNKNOWN_LATENCY_HEDGE: Duration = Duration::from_millis(100);

struct NodeLive {
    id: String,
    inflight: AtomicUsize,
    /// Nanoseconds after the router's epoch until which the node is down; 0 = up.
    down_until: AtomicU64,
    /// Time-to-first-byte estimate in seconds as f64 bits; 0 = none yet.
    ewma: AtomicU64,
    /// Failures since the last success (the breaker's count).
    failures: AtomicU64,
}

/// One node, as this client sees it. Cheap to clone.
#[derive(Clone)]
pub struct NodeHandle(Arc<NodeLive>);

impl NodeHandle {
    pub fn id(&self) -> &str {
        &self.0.id
    }
    pub fn inflight(&self) -> usize {
        self.0.inflight.load(Relaxed)
    }
    /// The latency estimate, if any sample was seen.
    pub fn latency(&self) -> Option<Duration> {
        let v = f64::from_bits(self.0.ewma.load(Relaxed));
        (v > 0.0).then(|| Duration::from_secs_f64(v))
    }
}

impl std::fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Node({})", self.0.id)
    }
}

/// Counts one request in flight to a node until dropped.
pub struct InFlight {
    node: NodeHandle,
    total: Arc<AtomicUsize>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.node.0.inflight.fetch_sub(1, Relaxed);
        self.total.fetch_sub(1, Relaxed);
    }
}

/// Where one block request goes.
#[derive(Debug)]
pub struct Pick {
    /// The node to ask first.
    pub node: NodeHandle,
    /// The other usable nodes in rank order: failover and hedge targets.
    pub alternates: Vec<NodeHandle>,
    /// The owner was at its limit and `node` is a spill.
    pub spilled: bool,
}

/// Why no node can take a request; the caller reads the origin directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoNode {
    /// No nodes are configured or discovered.
    Empty,
    /// Every ranked node is marked down.
    AllDown,
}

#[derive(Default, Debug)]
pub struct RouterCounters {
    pub spills: AtomicU64,
    pub marked_down: AtomicU64,
    pub hedges_allowed: AtomicU64,
    pub hedges_denied: AtomicU64,
    pub requests: AtomicU64,
    pub breaker_trips: AtomicU64,
}

/// Two buckets of [`HEDGE_WINDOW`]: the budget counts the current and the previous.
#[derive(Default)]
struct HedgeWindow {
    start: Option<Instant>,
    /// The request counter when the previous and the current bucket began.
    mark_prev: u64,
    mark_cur: u64,
    hedges_prev: u64,
    hedges_cur: u64,
}

pub struct Router {
    membership: Arc<Membership>,
    nodes: RwLock<HashMap<String, NodeHandle>>,
    clock: Arc<dyn Clock>,
    epoch: Instant,
    load_limit: usize,
    load_factor: Option<f64>,
    down_for: Duration,
    breaker: BreakerConfig,
    hedge: HedgeConfig,
    total_inflight: Arc<AtomicUsize>,
    hedge_window: Mutex<HedgeWindow>,
    pub counters: RouterCounters,
}

impl Router {
    pub fn new(cfg: &ClusterConfig, membership: Arc<Membership>, clock: Arc<dyn Clock>) -> Router {
        let epoch = clock.now();
        Router {
            membership,
            nodes: RwLock::new(HashMap::new()),
            clock,
            epoch,
            load_limit: cfg.load_limit,
            load_factor: cfg.load_factor,
            down_for: cfg.down_for,
            breaker: cfg.breaker,
            hedge: cfg.hedge,
            total_inflight: Arc::new(AtomicUsize::new(0)),
            hedge_window: Mutex::new(HedgeWindow::default()),
            counters: RouterCounters::default(),
        }
    }

    pub fn membership(&self) -> &Arc<Membership> {
        &self.membership
    }

    fn now_ns(&self) -> u64 {
        self.clock
            .now()
            .saturating_duration_since(self.epoch)
            .as_nanos() as u64
    }

    /// The handle of node `id` (created on first sight; kept across membership changes).
    pub fn node(&self, id: &str) -> NodeHandle {
        if let Some(n) = self.nodes.read().unwrap().get(id) {
            return n.clone();
        }
        self.nodes
            .write()
            .unwrap()
            .entry(id.to_owned())
            .or_insert_with(|| {
                NodeHandle(Arc::new(NodeLive {
                    id: id.to_owned(),
                    inflight: AtomicUsize::new(0),
                    down_until: AtomicU64::new(0),
                    ewma: AtomicU64::new(0),
                    failures: AtomicU64::new(0),
                }))
            })
            .clone()
    }

    /// Every node of the current set with its handle.
    pub fn nodes(&self) -> Vec<NodeHandle> {
        self.membership
            .current()
            .nodes()
            .iter()
            .map(|n| self.node(&n.id))
            .collect()
    }

    pub fn is_down(&self, n: &NodeHandle) -> bool {
        self.down_until(n).is_some()
    }

    /// How long `n` stays down, if it is down.
    pub fn down_until(&self, n: &NodeHandle) -> Option<Duration> {
        let until = n.0.down_until.load(Relaxed);
        let now = self.now_ns();
        (until > now).then(|| Duration::from_nanos(until - now))
    }

    /// Chooses the node for `block`, respecting down marks and load limits.
    pub fn pick(&self, block: &BlockId<'_>) -> Result<Pick, NoNode> {
        let set = self.membership.current();
        self.pick_in(&set, block)
    }

    fn pick_in(&self, set: &NodeSet, block: &BlockId<'_>) -> Result<Pick, NoNode> {
        if set.is_empty() {
            return Err(NoNode::Empty);
        }
        self.counters.requests.fetch_add(1, Relaxed);
        let now = self.now_ns();
        let up = |i: usize| {
            let n = self.node(&set.nodes()[i].id);
            (n.0.down_until.load(Relaxed) <= now).then_some(n)
        };
        // The few best nodes nearly always hold the answer; rank everything only
        // when they are all down.
        let mut ranked: Vec<NodeHandle> = set
            .top_k(block, set.len().min(PICK_FIRST))
            .into_iter()
            .filter_map(up)
            .collect();
        if ranked.is_empty() && set.len() > PICK_FIRST {
            ranked = set.rank(block).into_iter().filter_map(up).collect();
        }
        if ranked.is_empty() {
            return Err(NoNode::AllDown);
        }
        let limit = match self.load_factor {
            Some(f) => {
                let mean = (self.total_inflight.load(Relaxed) + 1) as f64 / set.len() as f64;
                ((f * mean).ceil() as usize).max(1)
            }
            None => self.load_limit,
        };
        let chosen = ranked
            .iter()
            .position(|n| n.inflight() < limit)
            .unwrap_or(0);
        let spilled = chosen != 0;
        if spilled {
            self.counters.spills.fetch_add(1, Relaxed);
        }
        let mut alternates = ranked;
        let node = alternates.remove(chosen);
        Ok(Pick {
            node,
            alternates,
            spilled,
        })
    }

    /// Counts a request to `n` as in flight until the guard drops.
    pub fn begin(&self, n: &NodeHandle) -> InFlight {
        n.0.inflight.fetch_add(1, Relaxed);
        self.total_inflight.fetch_add(1, Relaxed);
        InFlight {
            node: n.clone(),
            total: self.total_inflight.clone(),
        }
    }

    /// A connection to `n` failed: skip it for `down_for`.
    pub fn mark_down(&self, n: &NodeHandle) {
        self.down_for_a_while(n, self.down_for);
    }

    fn down_for_a_while(&self, n: &NodeHandle, d: Duration) {
        let now = self.now_ns();
        let until = now + d.as_nanos() as u64;
        let prev = n.0.down_until.fetch_max(until, Relaxed);
        if prev <= now {
            self.counters.marked_down.fetch_add(1, Relaxed);
            tracing::warn!(node = %n.id(), "node marked down for {d:?}");
        }
    }

    /// A request to `n` failed after it was accepted (an error status, a stalled
    /// body; an unreachable node is marked down instead). After `breaker.failures`
    /// in a row its breaker opens: it is skipped for `breaker.cooldown`, which
    /// outlasts a down mark, for a node that is up but keeps failing.
    pub fn failure(&self, n: &NodeHandle) {
        let f = n.0.failures.fetch_add(1, Relaxed) + 1;
        if f >= self.breaker.failures as u64 {
            n.0.failures.store(0, Relaxed);
            self.counters.breaker_trips.fetch_add(1, Relaxed);
            self.down_for_a_while(n, self.breaker.cooldown);
        }
    }

    /// A request to `n` was answered: its breaker count starts over.
    pub fn success(&self, n: &NodeHandle) {
        if n.0.failures.load(Relaxed) != 0 {
            n.0.failures.store(0, Relaxed);
        }
    }

    /// Records a time to first byte from `n`.
    pub fn observe(&self, n: &NodeHandle, ttfb: Duration) {
        let sample = ttfb.as_secs_f64().max(1e-6);
        let _ = n.0.ewma.fetch_update(Relaxed, Relaxed, |bits| {
            let old = f64::from_bits(bits);
            let new = if old > 0.0 {
                old + EWMA_ALPHA * (sample - old)
            } else {
                sample
            };
            Some(new.to_bits())
        });
    }

    /// How long to wait for `n`'s first byte before hedging.
    pub fn hedge_delay(&self, n: &NodeHandle) -> Duration {
        match n.latency() {
            Some(est) => est.mul_f64(self.hedge.factor).max(self.hedge.floor),
            None => UNKNOWN_LATENCY_HEDGE.max(self.hedge.floor),
        }
    }

    /// Asks the budget for one hedge; `true` means send it.
    pub fn allow_hedge(&self) -> bool {
        let now = self.clock.now();
        let requests = self.counters.requests.load(Relaxed);
        let mut w = self.hedge_window.lock().unwrap();
        let start = *w.start.get_or_insert(now);
        let age = now.saturating_duration_since(start);
        if age >= HEDGE_WINDOW * 2 {
            *w = HedgeWindow {
                start: Some(now),
                mark_prev: requests,
                mark_cur: requests,
                hedges_prev: 0,
                hedges_cur: 0,
            };
        } else if age >= HEDGE_WINDOW {
            w.start = Some(start + HEDGE_WINDOW);
            w.mark_prev = w.mark_cur;
            w.mark_cur = requests;
            w.hedges_prev = w.hedges_cur;
            w.hedges_cur = 0;
        }
        let seen = requests.saturating_sub(w.mark_prev);
        let hedged = w.hedges_prev + w.hedges_cur;
        let ok = (hedged + 1) as f64 <= self.hedge.budget * seen as f64;
        if ok {
            w.hedges_cur += 1;
            self.counters.hedges_allowed.fetch_add(1, Relaxed);
        } else {
            self.counters.hedges_denied.fetch_add(1, Relaxed);
        }
        ok
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
