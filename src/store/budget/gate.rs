//! The queue every origin request passes: strict class priority, the
//! concurrency and the two token buckets (requests, bytes), each bounded by the
//! configured limit and by what throttling allows now.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::aimd::{Aimd, Step};
use super::{BudgetMetrics, Class, Limits};

/// A bucket holds this many seconds of its rate: what may go at once after a
/// quiet spell. Over any window of `t` seconds a bucket lets go at most
/// `rate * (t + BURST_SECONDS)`, plus the one request that took it into debt.
const BURST_SECONDS: f64 = 0.1;
/// The share of the concurrency and of each bucket's burst a class may use:
/// what it must leave is kept for the classes above it.
const SHARE: [f64; 3] = [1.0, 0.75, 0.5];

/// One process's budget of origin requests. Shared by every client of the origin
/// in the process; cheap to ask when no limit is set and nothing throttles.
pub struct Budget {
    limits: Limits,
    state: Mutex<State>,
    /// Woken whenever a request may have become free to go.
    changed: Notify,
    pub metrics: BudgetMetrics,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

struct State {
    /// Tickets of the requests waiting, per class, in arrival order.
    queues: [VecDeque<u64>; 3],
    next_ticket: u64,
    in_flight: usize,
    aimd: Aimd,
    requests: Bucket,
    bytes: Bucket,
}

/// Tokens that come back at a rate, up to a burst; may go below zero (a request
/// larger than what is left is let go, and the ones after it wait longer).
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Bucket {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant, rate: f64, burst: f64) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + rate * dt).min(burst);
        self.at = now;
    }

    /// How long until the bucket holds `need`, at `rate`.
    fn wait_for(&self, need: f64, rate: f64) -> Option<Duration> {
        (self.tokens < need).then(|| Duration::from_secs_f64((need - self.tokens) / rate))
    }
}

fn request_burst(rate: f64) -> f64 {
    // Two, so that the lowest class's share still holds one whole request.
    (rate * BURST_SECONDS).max(2.0)
}

fn byte_burst(rate: u64) -> f64 {
    (rate as f64 * BURST_SECONDS).max(1.0)
}

impl State {
    fn concurrency(&self, limits: &Limits) -> Option<f64> {
        let set = limits.concurrency.map(|c| c as f64);
        match (set, self.aimd.window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn request_rate(&self, limits: &Limits) -> Option<f64> {
        match (limits.requests_per_second, self.aimd.rate) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Lets `ticket` (of `class`, asking `bytes`) go if it is its turn and the
    /// budget has room; else how long until it might (`None`: until something
    /// changes).
    fn try_take(
        &mut self,
        limits: &Limits,
        class: Class,
        ticket: u64,
        bytes: u64,
        now: Instant,
    ) -> Result<(), Option<Duration>> {
        let c = class.index();
        let ahead = self.queues[..c].iter().any(|q| !q.is_empty());
        if ahead || self.queues[c].front() != Some(&ticket) {
            return Err(None);
        }
        let share = SHARE[c];
        if let Some(limit) = self.concurrency(limits) {
            if self.in_flight as f64 >= (limit * share).max(1.0) {
                return Err(None);
            }
        }
        let mut wait = None;
        if let Some(rate) = self.request_rate(limits) {
            let burst = request_burst(rate);
            self.requests.refill(now, rate, burst);
            let need = 1.0 + burst * (1.0 - share);
            wait = self.requests.wait_for(need, rate);
        } else {
            self.requests.at = now;
        }
        if let Some(rate) = limits.bytes_per_second {
            let burst = byte_burst(rate);
            self.bytes.refill(now, rate as f64, burst);
            let need = burst * (1.0 - share);
            wait = wait.max(self.bytes.wait_for(need, rate as f64));
        }
        if let Some(w) = wait {
            return Err(Some(w));
        }
        self.requests.tokens -= 1.0;
        if limits.bytes_per_second.is_some() {
            self.bytes.tokens -= bytes as f64;
        }
        self.in_flight += 1;
        self.queues[c].pop_front();
        Ok(())
    }

    fn forget(&mut self, class: Class, ticket: u64) {
        self.queues[class.index()].retain(|t| *t != ticket);
    }
}

impl Budget {
    pub fn new(limits: Limits) -> Arc<Budget> {
        let now = Instant::now();
        Arc::new(Budget {
            limits,
            state: Mutex::new(State {
                queues: Default::default(),
                next_ticket: 0,
                in_flight: 0,
                aimd: Aimd::new(),
                requests: Bucket::full(limits.requests_per_second.map_or(0.0, request_burst), now),
                bytes: Bucket::full(limits.bytes_per_second.map_or(0.0, byte_burst), now),
            }),
            changed: Notify::new(),
            metrics: BudgetMetrics::default(),
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Waits for this request's turn and room in the budget: `bytes` is what it
    /// asks for (0 when not known yet: [`Permit::charge`] it when it is).
    /// Dropping the future leaves the queue.
    pub async fn acquire(self: &Arc<Self>, class: Class, bytes: u64) -> Permit {
        let arrived = Instant::now();
        let ticket = {
            let mut st = self.state.lock().unwrap();
            let t = st.next_ticket;
            st.next_ticket += 1;
            st.queues[class.index()].push_back(t);
            t
        };
        let mut queued = Queued {
            budget: self,
            class,
            ticket,
            waiting: true,
        };
        let mut waited = false;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = Instant::now();
            let turn = self
                .state
                .lock()
                .unwrap()
                .try_take(&self.limits, class, ticket, bytes, now);
            match turn {
                Ok(()) => break,
                Err(None) => notified.await,
                Err(Some(d)) => {
                    tokio::select! {
                        _ = tokio::time::sleep(d) => {}
                        _ = notified => {}
                    }
                }
            }
            waited = true;
        }
        queued.waiting = false;
        // The next in line may go now too (a bucket with room for two).
        self.changed.notify_waiters();
        let l = BudgetMetrics::label(class);
        let m = &self.metrics;
        m.requests.get_or_create(&l).inc();
        m.bytes.get_or_create(&l).inc_by(bytes);
        if waited {
            m.waits.get_or_create(&l).inc();
            m.wait_seconds
                .get_or_create(&l)
                .inc_by(arrived.elapsed().as_secs_f64());
        }
        Permit(Arc::new(Held {
            budget: self.clone(),
            class,
        }))
    }

    /// The origin throttled a request.
    pub fn throttled(&self) {
        self.metrics.throttles.inc();
        let mut st = self.state.lock().unwrap();
        let in_flight = st.in_flight;
        match st.aimd.throttled(Instant::now(), in_flight) {
            Step::Held => {}
            Step::Decreased => {
                self.metrics.decreases.inc();
                self.show(&st);
                tracing::info!(
                    concurrency = st.aimd.window,
                    rate = st.aimd.rate,
                    "the origin throttles: asking less of it"
                );
            }
            Step::Undone => {
                self.show(&st);
                drop(st);
                self.changed.notify_waiters();
                tracing::info!("the origin throttles as much when asked less: asking as before");
            }
        }
    }

    /// The origin answered a request without throttling it.
    pub fn succeeded(&self) {
        let mut st = self.state.lock().unwrap();
        let bounded = st.aimd.window.is_some() || st.aimd.rate.is_some();
        // Answers are counted even while nothing is bounded: a first decrease
        // is set from them.
        st.aimd.succeeded(Instant::now());
        if !bounded {
            return;
        }
        self.show(&st);
        drop(st);
        self.changed.notify_waiters();
    }

    fn show(&self, st: &State) {
        self.metrics.window.set(st.aimd.window.unwrap_or(0.0));
        self.metrics.rate.set(st.aimd.rate.unwrap_or(0.0));
    }

    fn release(&self) {
        self.state.lock().unwrap().in_flight -= 1;
        self.changed.notify_waiters();
    }
}

/// A ticket in the queue, taken out if its request gives up waiting.
struct Queued<'a> {
    budget: &'a Budget,
    class: Class,
    ticket: u64,
    waiting: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.waiting {
            self.budget
                .state
                .lock()
                .unwrap()
                .forget(self.class, self.ticket);
            self.budget.changed.notify_waiters();
        }
    }
}

/// A request's place in the budget, held while it is out (its body read too):
/// dropping the last clone frees its share of the concurrency.
#[derive(Clone)]
pub struct Permit(Arc<Held>);

struct Held {
    budget: Arc<Budget>,
    class: Class,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.release();
    }
}

impl Permit {
    /// Charges `bytes` more to the request (an answer longer than asked, or one
    /// whose length was not known when it was let go).
    pub fn charge(&self, bytes: u64) {
        let b = &self.0.budget;
        if b.limits.bytes_per_second.is_some() {
            b.state.lock().unwrap().bytes.tokens -= bytes as f64;
        }
        b.metrics
            .bytes
            .get_or_create(&BudgetMetrics::label(self.0.class))
            .inc_by(bytes);
    }

    pub fn budget(&self) -> &Arc<Budget> {
        &self.0.budget
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Permit").field(&self.0.class).finish()
    }
}
