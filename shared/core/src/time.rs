//! Epoch time: the clock in Unix epoch milliseconds and the arithmetic on it, written once (saturating: an absurd duration never wraps, a passed instant is no time left).
//!
//! Instants are `i64` Unix epoch milliseconds, as items and messages carry them; spans of
//! time are [`Duration`]s, as configuration holds them.

use std::time::Duration;

/// Now, Unix epoch milliseconds.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `d` in whole milliseconds, saturating at `i64::MAX` (a duration of 292 million years).
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The instant `d` after `at_ms` (Unix epoch milliseconds), saturating at `i64::MAX`.
pub fn after_ms(at_ms: i64, d: Duration) -> i64 {
    at_ms.saturating_add(millis(d))
}

/// The instant `d` before `at_ms` (Unix epoch milliseconds), saturating at `i64::MIN`.
pub fn before_ms(at_ms: i64, d: Duration) -> i64 {
    at_ms.saturating_sub(millis(d))
}

/// The time from `from_ms` to `to_ms` (Unix epoch milliseconds); zero when `to_ms` is not later.
pub fn between(from_ms: i64, to_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(to_ms.saturating_sub(from_ms)).unwrap_or(0))
}

/// The time left until `deadline_ms` (Unix epoch milliseconds) on the clock now; zero once it has passed.
pub fn until(deadline_ms: i64) -> Duration {
    between(now_ms(), deadline_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_move_by_durations_and_saturate_instead_of_wrapping() {
        assert_eq!(after_ms(1_000, Duration::from_secs(2)), 3_000);
        assert_eq!(before_ms(3_000, Duration::from_millis(500)), 2_500);
        assert_eq!(after_ms(i64::MAX - 1, Duration::from_secs(1)), i64::MAX);
        assert_eq!(after_ms(0, Duration::MAX), i64::MAX);
        assert_eq!(before_ms(i64::MIN + 1, Duration::from_secs(1)), i64::MIN);
        assert_eq!(millis(Duration::from_micros(1_999)), 1, "whole milliseconds, cut down");
    }

    #[test]
    fn the_time_between_two_instants_is_never_negative() {
        assert_eq!(between(1_000, 3_500), Duration::from_millis(2_500));
        assert_eq!(between(3_500, 1_000), Duration::ZERO);
        assert_eq!(between(i64::MIN, i64::MAX), Duration::from_millis(i64::MAX as u64));
        assert_eq!(until(now_ms() - 1), Duration::ZERO);
        let left = until(after_ms(now_ms(), Duration::from_secs(60)));
        assert!(left > Duration::from_secs(50) && left <= Duration::from_secs(60), "{left:?}");
    }
}
