//! Upper bounds on durations and numbers that reach the queue from
//! configuration, manifests, API callers and guests.
//!
//! Invariant: every value checked against these bounds keeps the time
//! arithmetic done with it (`Instant + d`, `DateTime + d`, millisecond
//! columns in the stores) far from overflow, so a hostile or mistyped value
//! is refused with a clear error where it enters instead of panicking the
//! host where it is used.

use std::ops::RangeInclusive;
use std::time::Duration;

const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

/// Longest wall-clock timeout of one run (`handler.timeout`).
pub const MAX_HANDLER_TIMEOUT: Duration = Duration::from_secs(DAY);
/// Longest lease (`handler.lease_duration`) and renewal period.
pub const MAX_LEASE_DURATION: Duration = Duration::from_secs(DAY);
/// Longest delay before a retry: caps `max_backoff` and a handler's
/// `retry_after` (a longer `retry_after` is shortened to this).
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(30 * DAY);
/// Longest `lease_grace` and `shutdown_grace`.
pub const MAX_GRACE: Duration = Duration::from_secs(DAY);
/// Longest `abandon_grace`.
pub const MAX_ABANDON_GRACE: Duration = Duration::from_secs(HOUR);
/// Longest `poll_interval`.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(HOUR);
/// Longest retention age and sweep interval, and the longest delay or ttl a
/// producer may give an enqueue (about 100 years).
pub const MAX_HORIZON: Duration = Duration::from_secs(36_500 * DAY);

/// What a running job may ask of the jobs it enqueues. Set per handler by
/// its manifest; a guest's enqueue outside these bounds is refused. Build
/// it with [`EnqueueBounds::new`] or from `default()`; more bounds may come.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnqueueBounds {
    /// Priorities a guest may give (lower runs first). The default,
    /// `0..=100`, lets a guest defer its follow-ups but not put them ahead
    /// of producers' jobs at the default priority 0.
    pub priority: RangeInclusive<i32>,
    /// Largest `max_attempts` a guest may give.
    pub max_attempts: u32,
    /// Longest delay a guest may give.
    pub max_delay: Duration,
}

impl EnqueueBounds {
    /// Default priority range for guest enqueues.
    pub const DEFAULT_PRIORITY: RangeInclusive<i32> = 0..=100;
    /// Default ceiling on a guest's `max_attempts`.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 25;
    /// Default ceiling on a guest's delay: 30 days.
    pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30 * DAY);

    /// Bounds from a priority range, a ceiling on attempts and a longest
    /// delay (check them with [`EnqueueBounds::validate`]).
    pub fn new(priority: RangeInclusive<i32>, max_attempts: u32, max_delay: Duration) -> Self {
        Self {
            priority,
            max_attempts,
            max_delay,
        }
    }

    /// Checks the bounds themselves.
    ///
    /// # Errors
    /// The setting that is out of range, and why.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.priority.start() > self.priority.end() {
            return Err((
                "enqueue_priority",
                format!(
                    "[{}, {}] is empty: give [lowest, highest]",
                    self.priority.start(),
                    self.priority.end()
                ),
            ));
        }
        if self.max_attempts == 0 {
            return Err(("enqueue_max_attempts", "must be at least 1".into()));
        }
        if self.max_delay > MAX_HORIZON {
            return Err((
                "enqueue_max_delay",
                format!("{:?} is longer than 100 years", self.max_delay),
            ));
        }
        Ok(())
    }
}

impl Default for EnqueueBounds {
    fn default() -> Self {
        Self {
            priority: Self::DEFAULT_PRIORITY,
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            max_delay: Self::DEFAULT_MAX_DELAY,
        }
    }
}

/// `Err` naming `what` and the bound when `value` is longer than `max`.
///
/// # Errors
/// A sentence saying the value is too long and what the maximum is.
pub fn at_most(value: Duration, max: Duration) -> Result<(), String> {
    if value > max {
        Err(format!(
            "{} is longer than the maximum {}",
            humanize(value),
            humanize(max)
        ))
    } else {
        Ok(())
    }
}

/// A short human form of a duration (`30d`, `24h`, `1500ms`).
fn humanize(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || secs == 0 {
        format!("{}ms", d.as_millis())
    } else if secs.is_multiple_of(DAY) {
        format!("{}d", secs / DAY)
    } else if secs.is_multiple_of(HOUR) {
        format!("{}h", secs / HOUR)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_over_a_bound_are_named_with_both_values() {
        assert!(at_most(Duration::from_secs(DAY), MAX_HANDLER_TIMEOUT).is_ok());
        let error = at_most(Duration::from_secs(DAY + 1), MAX_HANDLER_TIMEOUT).unwrap_err();
        assert_eq!(error, "86401s is longer than the maximum 1d");
        let error = at_most(Duration::MAX, MAX_RETRY_DELAY).unwrap_err();
        assert!(error.ends_with("the maximum 30d"), "{error}");
    }

    #[test]
    fn enqueue_bounds_must_be_usable() {
        assert!(EnqueueBounds::default().validate().is_ok());
        let empty = EnqueueBounds {
            priority: RangeInclusive::new(5, 1),
            ..EnqueueBounds::default()
        };
        assert_eq!(empty.validate().unwrap_err().0, "enqueue_priority");
        let zero = EnqueueBounds {
            max_attempts: 0,
            ..EnqueueBounds::default()
        };
        assert_eq!(zero.validate().unwrap_err().0, "enqueue_max_attempts");
    }
}
