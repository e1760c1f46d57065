//! Retry delay: `min(base * 2^(attempts-1), max)` plus up to 10 % jitter;
//! an explicit `retry_after` is a floor that wins even above `max`.

use std::time::Duration;

use rand::Rng;

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
    (grown + jitter).max(retry_after.unwrap_or_default())
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
}
