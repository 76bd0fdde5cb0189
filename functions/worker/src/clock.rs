//! The worker's epoch-millisecond arithmetic (leases, deadlines, expiries, waits), saturating, in one place.
//!
//! Private to the worker until the shared epoch-time helper of `swarm-core` exists; then these
//! two go to it.

use std::time::Duration;

/// `at_ms + d` in Unix epoch milliseconds, saturating at `i64::MAX`.
pub(crate) fn ms_after(at_ms: i64, d: Duration) -> i64 {
    at_ms.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The time from `from_ms` to `to_ms` (Unix epoch milliseconds); zero when `to_ms` is not later.
pub(crate) fn ms_between(from_ms: i64, to_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(to_ms.saturating_sub(from_ms)).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_never_goes_negative() {
        assert_eq!(ms_after(1_000, Duration::from_millis(250)), 1_250);
        assert_eq!(ms_after(i64::MAX - 1, Duration::from_secs(5)), i64::MAX);
        assert_eq!(ms_after(0, Duration::MAX), i64::MAX);
        assert_eq!(ms_between(1_000, 3_500), Duration::from_millis(2_500));
        assert_eq!(ms_between(3_500, 1_000), Duration::ZERO);
        assert_eq!(ms_between(i64::MIN, i64::MAX), Duration::from_millis(i64::MAX as u64));
    }
}
