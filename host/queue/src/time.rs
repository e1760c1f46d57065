//! Checked time arithmetic on durations a caller, producer, operator or
//! guest supplies (a delay, a TTL, a lease, a `retry_after`, a retention
//! age).
//!
//! Invariant: every instant computed from such a duration saturates at
//! [`far_future`] (9999-12-31T23:59:59.999Z), which every backend can store
//! and read back: SQLite as integer milliseconds, Postgres as `timestamptz`
//! (up to 294276 AD), chrono (up to 262143 AD), and RFC 3339 with a
//! four-digit year. A duration of `u64::MAX` seconds therefore means "not
//! before the end of year 9999" — never a panic, an overflowed integer or an
//! out-of-range database error.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// [`far_future`] in milliseconds since the Unix epoch.
pub(crate) const FAR_FUTURE_MS: i64 = 253_402_300_799_999;

/// [`far_future`] as a Postgres `timestamptz` literal.
#[cfg(feature = "postgres")]
pub(crate) const FAR_FUTURE_SQL: &str = "'9999-12-31 23:59:59.999+00'::timestamptz";

/// The latest instant a store writes: 9999-12-31T23:59:59.999Z.
pub fn far_future() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(FAR_FUTURE_MS).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `d` in whole milliseconds, at most [`FAR_FUTURE_MS`]: added to any
/// instant after 1970 it reaches at least [`far_future`], so a longer
/// duration could not mean anything more.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).map_or(FAR_FUTURE_MS, |ms| ms.min(FAR_FUTURE_MS))
}

/// `d` as a chrono duration (nanosecond precision), at most
/// [`FAR_FUTURE_MS`] milliseconds.
pub(crate) fn span(d: Duration) -> chrono::Duration {
    let cap = chrono::Duration::milliseconds(FAR_FUTURE_MS);
    chrono::Duration::from_std(d).map_or(cap, |s| s.min(cap))
}

/// `t + d`, saturating at [`far_future`].
pub(crate) fn after(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    let far = far_future();
    t.checked_add_signed(span(d)).map_or(far, |x| x.min(far))
}

/// `t - d`, saturating at chrono's earliest instant.
pub(crate) fn before(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t.checked_sub_signed(span(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// `d` from now on tokio's clock (timeouts and lease deadlines in this
/// process), saturating about a century ahead.
pub(crate) fn instant_after(d: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(crate::bounds::MAX_HORIZON))
        .unwrap_or(now)
}

/// `ms + d` in milliseconds, saturating at [`FAR_FUTURE_MS`].
#[cfg(feature = "sqlite")]
pub(crate) fn after_ms(ms: i64, d: Duration) -> i64 {
    ms.saturating_add(millis(d)).min(FAR_FUTURE_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_future_is_the_last_millisecond_of_9999() {
        assert_eq!(far_future().to_rfc3339(), "9999-12-31T23:59:59.999+00:00");
    }

    #[test]
    fn enormous_durations_saturate() {
        let now = Utc::now();
        let forever = Duration::from_secs(u64::MAX);
        assert_eq!(after(now, forever), far_future());
        assert_eq!(after(far_future(), Duration::from_millis(1)), far_future());
        assert!(before(now, forever) < now);
        let hour = Duration::from_secs(3600);
        assert_eq!(after(now, hour), now + chrono::Duration::hours(1));
        assert_eq!(
            span(Duration::from_nanos(1_500)).num_nanoseconds(),
            Some(1_500)
        );
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn millisecond_sums_saturate() {
        assert_eq!(millis(Duration::from_secs(u64::MAX)), FAR_FUTURE_MS);
        assert_eq!(
            after_ms(1_000, Duration::from_secs(u64::MAX)),
            FAR_FUTURE_MS
        );
        assert_eq!(after_ms(i64::MAX, Duration::from_secs(1)), FAR_FUTURE_MS);
        assert_eq!(after_ms(1_000, Duration::from_millis(500)), 1_500);
    }
}
