//! Rate-limited logging of repeated errors: at most one message per key per interval, with the
//! number suppressed since the last one.
//!
//! [`allow`] is the process's one limiter (10 s per key): every repeated warning goes through
//! it, from any thread. [`RateLimitedLog`] is the mechanism, testable with a given clock.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often one kind of warning may be logged.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// `Some(suppressed)` when a warning for `key` may be logged now, with the number suppressed
/// since the last one; `None` within [`INTERVAL`] of the last one.
pub fn allow(key: &'static str) -> Option<u64> {
    static LIMITER: OnceLock<Mutex<RateLimitedLog>> = OnceLock::new();
    let limiter = LIMITER.get_or_init(|| Mutex::new(RateLimitedLog::new(INTERVAL)));
    let mut limiter = limiter
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    limiter.allow(key)
}

/// Per-key rate limiter for log lines.
#[derive(Debug)]
pub struct RateLimitedLog {
    every: Duration,
    keys: HashMap<&'static str, (Option<Instant>, u64)>,
}

impl RateLimitedLog {
    /// At most one message per key per `every`.
    pub fn new(every: Duration) -> Self {
        RateLimitedLog {
            every,
            keys: HashMap::new(),
        }
    }

    /// `Some(suppressed)` when a message for `key` may be logged now.
    pub fn allow(&mut self, key: &'static str) -> Option<u64> {
        self.allow_at(key, Instant::now())
    }

    fn allow_at(&mut self, key: &'static str, now: Instant) -> Option<u64> {
        let entry = self.keys.entry(key).or_insert((None, 0));
        match entry.0 {
            Some(last) if now.duration_since(last) < self.every => {
                entry.1 += 1;
                None
            }
            _ => {
                let suppressed = entry.1;
                *entry = (Some(now), 0);
                Some(suppressed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suppresses_within_the_interval_and_reports_the_count() {
        let mut log = RateLimitedLog::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(log.allow_at("a", t0), Some(0));
        assert_eq!(log.allow_at("a", t0 + Duration::from_secs(1)), None);
        assert_eq!(log.allow_at("a", t0 + Duration::from_secs(2)), None);
        assert_eq!(log.allow_at("b", t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(log.allow_at("a", t0 + Duration::from_secs(11)), Some(2));
    }
}
