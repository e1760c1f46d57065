//! Retry delay: `min(base * 2^(attempts-1), max)` plus up to 10 % jitter;
//! an explicit `retry_after` is a floor that wins even above `max`, up to
//! [`MAX_RETRY_DELAY`] (30 days): a longer one is shortened to that, so a
//! handler cannot park a job beyond any time the stores can hold.

use std::time::Duration;

use rand::Rng;

use crate::bounds::MAX_RETRY_DELAY;

/// The delay before the next attempt after `attempts` attempts.
pub fn retry_delay(
    attempts: u32,
    base: Duration,
    max: Duration,
    retry_after: Option<Duration>,
) -> Duration {
    let exp = attempts.saturating_sub(1).min(32);
    let grown = base.saturating_mul(1u32 << exp.min(31)).min(max);
    let jitter_ms = (grown.as_millis() / 10) as u64;
    let jitter = if jitter_ms == 0 {
        Duration::ZERO
    } else {
        Duration::from_millis(rand::rng().random_range(0..=jitter_ms))
    };
    let floor = retry_after.unwrap_or_default().min(MAX_RETRY_DELAY);
    grown.saturating_add(jitter).max(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_caps_and_honours_floor() {
        let base = Duration::from_secs(2);
        let max = Duration::from_secs(300);
        let d1 = retry_delay(1, base, max, None);
        assert!(d1 >= base && d1 <= base + base / 10, "{d1:?}");
        let d3 = retry_delay(3, base, max, None);
        assert!(
            d3 >= Duration::from_secs(8) && d3 <= Duration::from_millis(8800),
            "{d3:?}"
        );
        let d20 = retry_delay(20, base, max, None);
        assert!(d20 >= max && d20 <= max + max / 10, "{d20:?}");
        let floor = Duration::from_secs(3600);
        assert_eq!(retry_delay(1, base, max, Some(floor)), floor);
    }

    #[test]
    fn a_retry_after_beyond_the_maximum_is_shortened_to_it() {
        let base = Duration::from_secs(2);
        let max = Duration::from_secs(300);
        assert_eq!(
            retry_delay(1, base, max, Some(Duration::from_millis(u64::MAX))),
            MAX_RETRY_DELAY
        );
        assert_eq!(
            retry_delay(1, base, max, Some(Duration::MAX)),
            MAX_RETRY_DELAY
        );
        let just_under = MAX_RETRY_DELAY - Duration::from_secs(1);
        assert_eq!(
            retry_delay(1, base, max, Some(just_under)),
            just_under,
            "up to the maximum, an explicit retry_after above max_backoff still wins"
        );
    }
}
