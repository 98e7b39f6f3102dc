//! A log line that repeats at most once per interval: a dead node, a full disk or
//! a flood of refused connections must show in the log without filling it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

pub struct LogLimit {
    every: Duration,
    start: Instant,
    /// Interval number of the last line logged (`u64::MAX`: none yet).
    last: AtomicU64,
    /// Events since the last line, which that line did not report.
    quiet: AtomicU64,
}

impl LogLimit {
    pub fn new(every: Duration) -> Self {
        LogLimit {
            every: every.max(Duration::from_millis(1)),
            start: Instant::now(),
            last: AtomicU64::new(u64::MAX),
            quiet: AtomicU64::new(0),
        }
    }

    /// One a minute: for conditions that last (a full disk, a connection cap).
    pub fn per_minute() -> Self {
        Self::new(Duration::from_secs(60))
    }

    /// Records one event. `Some(n)` means log it now, mentioning the `n` earlier
    /// events that were not logged; `None` means stay quiet.
    pub fn event(&self) -> Option<u64> {
        let slot = (self.start.elapsed().as_nanos() / self.every.as_nanos()) as u64;
        if self.last.swap(slot, Relaxed) == slot {
            self.quiet.fetch_add(1, Relaxed);
            return None;
        }
        Some(self.quiet.swap(0, Relaxed))
    }
}

/// " (N more since the last report)" when `n > 0`: the tail of a limited line.
pub fn more(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} more since the last report)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_rest_counted() {
        let l = LogLimit::new(Duration::from_millis(200));
        assert_eq!(l.event(), Some(0));
        assert_eq!(l.event(), None);
        assert_eq!(l.event(), None);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(l.event(), Some(2));
        assert_eq!(l.event(), None);
    }
}
