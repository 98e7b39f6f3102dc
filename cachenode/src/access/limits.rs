//! Per-key rates: a token bucket of requests and one of response bytes. A request
//! needs a whole request token and a byte bucket not in debt; the bytes it sends
//! are taken as they go out, so a large answer puts the key in debt and its next
//! requests wait it out (`SlowDown`) while other keys are untouched.

use std::sync::Mutex;
use std::time::Instant;

use shoal::config::KeyLimits;

/// Which limit a request met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Requests,
    Bytes,
}

impl Limit {
    pub fn name(self) -> &'static str {
        match self {
            Limit::Requests => "requests",
            Limit::Bytes => "bytes",
        }
    }
}

struct Bucket {
    rate: f64,
    burst: f64,
    /// Tokens now (negative: debt), as of the instant beside them.
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new((rate, burst): (f64, f64)) -> Bucket {
        Bucket {
            rate,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Refills, then takes `need` tokens if at least `have` are there.
    fn take(&self, have: f64, need: f64) -> bool {
        let mut s = self.state.lock().unwrap();
        let now = Instant::now();
        let (tokens, at) = *s;
        let tokens = (tokens + now.duration_since(at).as_secs_f64() * self.rate).min(self.burst);
        let ok = tokens >= have;
        *s = (if ok { tokens - need } else { tokens }, now);
        ok
    }

    fn spend(&self, n: f64) {
        let mut s = self.state.lock().unwrap();
        s.0 -= n;
    }
}

pub struct Limiter {
    requests: Option<Bucket>,
    bytes: Option<Bucket>,
}

impl Limiter {
    /// `None` for a key with no limits.
    pub fn new(l: &KeyLimits) -> Option<Limiter> {
        (l.requests.is_some() || l.bytes.is_some()).then(|| Limiter {
            requests: l.requests.map(Bucket::new),
            bytes: l.bytes.map(Bucket::new),
        })
    }

    /// Admits one request, or says which limit it is over.
    pub fn admit(&self) -> Result<(), Limit> {
        // Bytes first: a request refused for them takes no request token.
        if let Some(b) = &self.bytes {
            if !b.take(f64::MIN_POSITIVE, 0.0) {
                return Err(Limit::Bytes);
            }
        }
        if let Some(r) = &self.requests {
            if !r.take(1.0, 1.0) {
                return Err(Limit::Requests);
            }
        }
        Ok(())
    }

    pub fn limits_bytes(&self) -> bool {
        self.bytes.is_some()
    }

    /// Bytes sent for an admitted request.
    pub fn spend_bytes(&self, n: u64) {
        if let Some(b) = &self.bytes {
            b.spend(n as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_to_the_burst_then_refused() {
        let l = Limiter::new(&KeyLimits {
            requests: Some((1.0, 3.0)),
            bytes: None,
        })
        .unwrap();
        for _ in 0..3 {
            assert_eq!(l.admit(), Ok(()));
        }
        assert_eq!(l.admit(), Err(Limit::Requests));
    }

    #[test]
    fn bytes_in_debt_refuse_until_repaid() {
        let l = Limiter::new(&KeyLimits {
            requests: None,
            bytes: Some((1e9, 1000.0)),
        })
        .unwrap();
        assert_eq!(l.admit(), Ok(()));
        l.spend_bytes(1_000_000_000_000);
        assert_eq!(l.admit(), Err(Limit::Bytes));
        assert!(Limiter::new(&KeyLimits::default()).is_none());
    }
}
