//! The budget's answer to throttling: additive increase, multiplicative decrease
//! of both the concurrency and the request rate, like a TCP sender's window.
//!
//! Both are needed: a window of one request still asks hundreds a second of an
//! origin answering in milliseconds, and a rate alone lets slow answers pile up.
//!
//! A decrease sets the rate just under what the origin answered (its goodput
//! over the last second), not half of what was sent: an origin that answers at
//! most `N` a second is then asked about `N` at once, not after halvings and
//! regrowth.
//!
//! Each decrease is an experiment. An origin that throttles because it is asked
//! too much stops throttling, or throttles a far smaller share, once asked
//! less; one that throttles a share of requests whatever the rate (a cold
//! prefix, a partition splitting) goes on as before, and shrinking the sender
//! further there only starves it while the origin still answers most requests.
//! So a decrease is judged on the next throttle: after a calm second it helped
//! (and another follows); if throttles never let up for two seconds and the
//! share throttled did not halve, it is undone and the budget holds until that
//! share grows.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// After an undone decrease, the share throttled is measured over this long.
const DECREASE_GAP: Duration = Duration::from_secs(1);
/// Never fewer than this many requests at once, nor this many a second: an
/// origin that throttles still answers some.
const MIN_WINDOW: f64 = 1.0;
const MIN_RATE: f64 = 1.0;
/// A decrease sets the rate to this share of the origin's goodput.
const BACKOFF: f64 = 0.9;
/// Each success adds this share of a request a second to the rate: at a
/// saturated rate `r` there are `r` successes a second, so the rate grows by a
/// tenth of itself a second. Not while a decrease waits to be judged: the
/// rate it set is what is being tried.
const RATE_STEP: f64 = 0.1;
/// Past this the grown-back rate and window bound nothing: dropped.
const UNBOUNDED_RATE: f64 = 1e6;
const UNBOUNDED_WINDOW: f64 = 1e4;
/// A decrease is judged on the first throttle at least this long after it:
/// an origin that counts requests over a second still counts those before it
/// for that long.
const JUDGED_AFTER: Duration = Duration::from_secs(2);
/// Throttles that never let up after a decrease still show it helped if the
/// share throttled fell to this share of what it was.
const HELPED: f64 = 0.5;
/// The rate is set from a goodput of at least this many answers a second;
/// fewer (a process that just started) say nothing of the origin's rate, and
/// only the window shrinks.
const LEAST_SAMPLE: f64 = 10.0;
/// While holding after an undone decrease, a share this much above the one
/// held at starts a new experiment: the origin throttles harder.
const WORSE: f64 = 1.25;
/// A throttle this long after the last one starts a new episode.
const CALM: Duration = Duration::from_secs(1);

/// What a throttle did to the budget.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Nothing changed.
    Held,
    /// The rate and window shrank.
    Decreased,
    /// The last decrease did not lower the share throttled: it is undone.
    Undone,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// No decrease in this episode yet.
    Open,
    /// A decrease at `at`, made when `share` of the last second's answers
    /// were throttles (`None`: too few answered to set a rate, so only the
    /// window shrank and the next decrease is the experiment), from the rate
    /// and window before it; `held` is what an earlier undoing held at.
    Trying {
        at: Instant,
        share: Option<f64>,
        rate: Option<f64>,
        window: Option<f64>,
        held: Option<f64>,
    },
    /// A decrease did not help and was undone at `since`: held until the
    /// share throttled passes `share`, measured a gap after the undoing.
    Holding { since: Instant, share: Option<f64> },
}

#[derive(Debug)]
pub(super) struct Aimd {
    /// Requests at once allowed now, if throttling bounded it.
    pub window: Option<f64>,
    /// Requests a second allowed now, if throttling bounded it.
    pub rate: Option<f64>,
    phase: Phase,
    last_throttle: Option<Instant>,
    /// Answers of the last second: when, and whether throttled.
    answers: VecDeque<(Instant, bool)>,
}

impl Aimd {
    pub fn new() -> Self {
        Aimd {
            window: None,
            rate: None,
            phase: Phase::Open,
            last_throttle: None,
            answers: VecDeque::new(),
        }
    }

    fn answered(&mut self, now: Instant, throttled: bool) {
        while self
            .answers
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > Duration::from_secs(1))
        {
            self.answers.pop_front();
        }
        if self.answers.len() < 100_000 {
            self.answers.push_back((now, throttled));
        }
    }

    /// The share throttled of the answers of the last second since `since`.
    /// The share throttled of the last second's answers.
    fn share(&self) -> f64 {
        let throttled = self.answers.iter().filter(|(_, t)| *t).count();
        throttled as f64 / self.answers.len().max(1) as f64
    }

    fn share_since(&self, since: Instant) -> f64 {
        let (mut n, mut throttled) = (0usize, 0usize);
        for (t, th) in &self.answers {
            if *t > since {
                n += 1;
                throttled += usize::from(*th);
            }
        }
        throttled as f64 / n.max(1) as f64
    }

    /// Answers not throttled in the last second.
    fn goodput(&self) -> f64 {
        self.answers.iter().filter(|(_, t)| !*t).count() as f64
    }

    /// The origin throttled a request; `in_flight` are out now.
    pub fn throttled(&mut self, now: Instant, in_flight: usize) -> Step {
        self.answered(now, true);
        let calm = self
            .last_throttle
            .is_none_or(|t| now.duration_since(t) > CALM);
        self.last_throttle = Some(now);
        // A new episode: the last one's shares say nothing of this one. Not
        // while a decrease is judged: a sender slowed to a few requests a
        // second sees throttles more than a second apart.
        if calm && !matches!(self.phase, Phase::Trying { .. }) {
            self.phase = Phase::Open;
        }
        match self.phase {
            Phase::Open => self.decrease(now, in_flight),
            Phase::Trying {
                at,
                share,
                rate,
                window,
                held,
            } => {
                if calm {
                    // The decrease stopped the throttling a while: the origin
                    // was asked too much, and is again.
                    return self.decrease(now, in_flight);
                }
                if now.duration_since(at) < JUDGED_AFTER {
                    return Step::Held;
                }
                if share.is_none_or(|share| self.share() <= share * HELPED) {
                    return self.decrease(now, in_flight);
                }
                self.rate = wider(self.rate, rate);
                self.window = wider(self.window, window);
                self.phase = Phase::Holding {
                    since: now,
                    share: held,
                };
                Step::Undone
            }
            Phase::Holding { since, share } => {
                let now_share = self.share_since(since);
                match share {
                    // Measured over a whole second at the rate restored; never
                    // above what an earlier undoing held at, so holding does
                    // not ratchet up with each experiment.
                    None if now.duration_since(since) >= DECREASE_GAP => {
                        self.phase = Phase::Holding {
                            since,
                            share: Some(now_share),
                        };
                        Step::Held
                    }
                    Some(share) if now_share > share * WORSE => self.decrease(now, in_flight),
                    _ => Step::Held,
                }
            }
        }
    }

    fn decrease(&mut self, now: Instant, in_flight: usize) -> Step {
        let goodput = self.goodput();
        let held = match self.phase {
            Phase::Holding { share, .. } => share,
            Phase::Trying { held, .. } => held,
            Phase::Open => None,
        };
        self.phase = Phase::Trying {
            at: now,
            share: (goodput >= LEAST_SAMPLE).then(|| self.share()),
            rate: self.rate,
            window: self.window,
            held,
        };
        let used = (in_flight as f64).max(MIN_WINDOW);
        let window = self.window.map_or(used, |w| w.min(used));
        self.window = Some((window / 2.0).max(MIN_WINDOW));
        if goodput >= LEAST_SAMPLE {
            let rate = self.rate.map_or(goodput, |r| r.min(goodput.max(r / 2.0)));
            self.rate = Some((rate * BACKOFF).max(MIN_RATE));
        }
        Step::Decreased
    }

    /// A request was answered without throttling.
    pub fn succeeded(&mut self, now: Instant) {
        self.answered(now, false);
        if let Phase::Trying { at, .. } = self.phase {
            if now.duration_since(at) < JUDGED_AFTER {
                return;
            }
        }
        if let Some(w) = self.window {
            let w = w + 1.0 / w;
            self.window = (w < UNBOUNDED_WINDOW).then_some(w);
        }
        if let Some(r) = self.rate {
            let r = r + RATE_STEP;
            self.rate = (r < UNBOUNDED_RATE).then_some(r);
        }
    }
}

/// The looser of two bounds; `None` bounds nothing.
fn wider(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).map(|(a, b)| a.max(b))
}
