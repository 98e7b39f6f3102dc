//! The origin's fault mode and request counters.
//!
//! Real S3 is far away and sometimes unwell; loopback is neither. Tests and benchmarks
//! turn these knobs (in process, or over `/_origin/faults` from another process) to get
//! first-byte latency, a bandwidth cap, throttling, server errors and cut bodies, and
//! read the counters to know exactly which GETs reached the origin.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Fault knobs, all off by default. Rates are per mille of requests.
#[derive(Default, Debug)]
pub struct Faults {
    first_byte_delay_ms: AtomicU64,
    bandwidth_bytes_per_sec: AtomicU64,
    slowdown_per_mille: AtomicU32,
    slowdown_above_per_second: AtomicU32,
    /// When the requests answered within the last second came.
    answered: Mutex<std::collections::VecDeque<Instant>>,
    error_per_mille: AtomicU32,
    reset_per_mille: AtomicU32,
    reset_after_bytes: AtomicU64,
    fail_next: AtomicU32,
    reset_next: AtomicU32,
}

/// A plain copy of [`Faults`], for JSON and for setting several knobs at once.
#[derive(Default, Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct FaultSettings {
    /// Added before the response headers of every S3 request.
    pub first_byte_delay_ms: u64,
    /// Cap on each response body's rate (0 = none). Responses on one keep-alive
    /// connection are sequential, so this is a per-connection cap.
    pub bandwidth_bytes_per_sec: u64,
    /// Share of requests answered `503 SlowDown`.
    pub slowdown_per_mille: u32,
    /// Requests past this many answered in the last second are answered `503
    /// SlowDown` (0 = no bound), as S3 throttles a prefix.
    pub slowdown_above_per_second: u32,
    /// Share of requests answered `500 InternalError`.
    pub error_per_mille: u32,
    /// Share of GET bodies cut off (the connection is dropped mid-body).
    pub reset_per_mille: u32,
    /// Where a cut body stops (0 = half way).
    pub reset_after_bytes: u64,
}

impl Faults {
    pub fn set(&self, s: FaultSettings) {
        self.first_byte_delay_ms
            .store(s.first_byte_delay_ms, Relaxed);
        self.bandwidth_bytes_per_sec
            .store(s.bandwidth_bytes_per_sec, Relaxed);
        self.slowdown_per_mille
            .store(s.slowdown_per_mille.min(1000), Relaxed);
        self.slowdown_above_per_second
            .store(s.slowdown_above_per_second, Relaxed);
        self.error_per_mille
            .store(s.error_per_mille.min(1000), Relaxed);
        self.reset_per_mille
            .store(s.reset_per_mille.min(1000), Relaxed);
        self.reset_after_bytes.store(s.reset_after_bytes, Relaxed);
    }

    pub fn get(&self) -> FaultSettings {
        FaultSettings {
            first_byte_delay_ms: self.first_byte_delay_ms.load(Relaxed),
            bandwidth_bytes_per_sec: self.bandwidth_bytes_per_sec.load(Relaxed),
            slowdown_per_mille: self.slowdown_per_mille.load(Relaxed),
            slowdown_above_per_second: self.slowdown_above_per_second.load(Relaxed),
            error_per_mille: self.error_per_mille.load(Relaxed),
            reset_per_mille: self.reset_per_mille.load(Relaxed),
            reset_after_bytes: self.reset_after_bytes.load(Relaxed),
        }
    }

    pub fn clear(&self) {
        self.set(FaultSettings::default());
    }

    /// The next `n` S3 requests are answered `503 SlowDown`, whatever the rates say.
    pub fn fail_next(&self, n: u32) {
        self.fail_next.store(n, Relaxed);
    }

    /// The next `n` GET bodies are cut off mid-body.
    pub fn reset_next(&self, n: u32) {
        self.reset_next.store(n, Relaxed);
    }

    pub(crate) fn take(counter: &AtomicU32) -> bool {
        counter
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    pub(crate) fn take_fail(&self) -> bool {
        Self::take(&self.fail_next)
    }

    pub(crate) fn take_reset(&self) -> bool {
        Self::take(&self.reset_next)
    }

    /// Whether a request arriving now is past the rate the origin answers: if
    /// not, it counts towards the rate.
    pub(crate) fn over_rate(&self) -> bool {
        let limit = self.slowdown_above_per_second.load(Relaxed) as usize;
        if limit == 0 {
            return false;
        }
        let now = Instant::now();
        let mut answered = self.answered.lock().unwrap();
        while answered
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
        {
            answered.pop_front();
        }
        if answered.len() >= limit {
            return true;
        }
        answered.push_back(now);
        false
    }

    pub(crate) fn first_byte_delay(&self) -> Duration {
        Duration::from_millis(self.first_byte_delay_ms.load(Relaxed))
    }
}

pub(crate) fn roll(per_mille: u32) -> bool {
    per_mille > 0 && rand::random_range(0..1000) < per_mille
}

/// One kind of request, as counted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RequestKind {
    pub method: String,
    pub bucket: String,
    pub key: String,
    /// The `Range` header as sent, if any.
    pub range: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestCount {
    #[serde(flatten)]
    pub kind: RequestKind,
    pub count: u64,
}

/// Counters of what reached the origin.
#[derive(Debug)]
pub struct Stats {
    requests: Mutex<HashMap<RequestKind, u64>>,
    body_bytes_sent: AtomicU64,
    /// What happened in each [`TICK`] since the counters were last reset.
    timeline: Mutex<(Instant, Vec<Tick>)>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            requests: Default::default(),
            body_bytes_sent: Default::default(),
            timeline: Mutex::new((Instant::now(), Vec::new())),
        }
    }
}

/// The length of one entry of [`StatsSnapshot::timeline`].
pub const TICK: Duration = Duration::from_millis(100);

/// What reached the origin in one [`TICK`].
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Tick {
    /// Requests that arrived, throttled ones too.
    pub requests: u64,
    /// Of those, answered `503 SlowDown`.
    pub throttled: u64,
    /// Body bytes sent.
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatsSnapshot {
    pub requests: Vec<RequestCount>,
    pub body_bytes_sent: u64,
    /// Entry `i` covers `i * TICK .. (i + 1) * TICK` after the last reset.
    #[serde(default)]
    pub timeline: Vec<Tick>,
}

impl StatsSnapshot {
    /// The most any `window` (a whole number of ticks) of the timeline holds
    /// of what `of` counts, from tick `from` on.
    pub fn busiest(&self, window: Duration, from: usize, of: impl Fn(&Tick) -> u64) -> u64 {
        let n = (window.as_millis() / TICK.as_millis()).max(1) as usize;
        let t = self.timeline.get(from..).unwrap_or_default();
        if t.len() < n {
            return t.iter().map(&of).sum();
        }
        t.windows(n)
            .map(|w| w.iter().map(&of).sum())
            .max()
            .unwrap_or(0)
    }
}

impl StatsSnapshot {
    /// GETs of one object, whatever their range.
    pub fn gets_of(&self, bucket: &str, key: &str) -> u64 {
        self.requests
            .iter()
            .filter(|r| r.kind.method == "GET" && r.kind.bucket == bucket && r.kind.key == key)
            .map(|r| r.count)
            .sum()
    }

    /// All GETs of objects (not listings: those have an empty key).
    pub fn object_gets(&self) -> u64 {
        self.requests
            .iter()
            .filter(|r| r.kind.method == "GET" && !r.kind.key.is_empty())
            .map(|r| r.count)
            .sum()
    }

    /// Listings (GETs of a bucket itself).
    pub fn lists(&self) -> u64 {
        self.requests
            .iter()
            .filter(|r| {
                r.kind.method == "GET" && !r.kind.bucket.is_empty() && r.kind.key.is_empty()
            })
            .map(|r| r.count)
            .sum()
    }

    /// HEADs of objects.
    pub fn object_heads(&self) -> u64 {
        self.requests
            .iter()
            .filter(|r| r.kind.method == "HEAD" && !r.kind.key.is_empty())
            .map(|r| r.count)
            .sum()
    }

    pub fn count(&self, method: &str) -> u64 {
        self.requests
            .iter()
            .filter(|r| r.kind.method == method)
            .map(|r| r.count)
            .sum()
    }
}

impl Stats {
    pub(crate) fn record(&self, kind: RequestKind) {
        *self.requests.lock().unwrap().entry(kind).or_default() += 1;
        self.tick(|t| t.requests += 1);
    }

    pub(crate) fn record_throttled(&self) {
        self.tick(|t| t.throttled += 1);
    }

    pub(crate) fn add_body_bytes(&self, n: u64) {
        self.body_bytes_sent.fetch_add(n, Relaxed);
        self.tick(|t| t.bytes += n);
    }

    fn tick(&self, f: impl FnOnce(&mut Tick)) {
        let mut tl = self.timeline.lock().unwrap();
        let i = (tl.0.elapsed().as_millis() / TICK.as_millis()) as usize;
        if tl.1.len() <= i {
            tl.1.resize(i + 1, Tick::default());
        }
        f(&mut tl.1[i]);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let mut requests: Vec<RequestCount> = self
            .requests
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| RequestCount {
                kind: k.clone(),
                count: *v,
            })
            .collect();
        requests.sort_by(|a, b| {
            (&a.kind.key, &a.kind.range, &a.kind.method).cmp(&(
                &b.kind.key,
                &b.kind.range,
                &b.kind.method,
            ))
        });
        StatsSnapshot {
            requests,
            body_bytes_sent: self.body_bytes_sent.load(Relaxed),
            timeline: self.timeline.lock().unwrap().1.clone(),
        }
    }

    pub fn reset(&self) {
        self.requests.lock().unwrap().clear();
        self.body_bytes_sent.store(0, Relaxed);
        *self.timeline.lock().unwrap() = (Instant::now(), Vec::new());
    }
}
