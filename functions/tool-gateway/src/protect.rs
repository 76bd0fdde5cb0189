//! Protection of upstreams: a circuit breaker per upstream and rate limits per tool and global (governor).

use std::{collections::VecDeque, num::NonZeroU32, sync::Arc, time::Duration};

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota};
use tokio::time::Instant;

use crate::config::BreakerConfig;

/// Breaker state, as logged and reported in metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }
}

/// What the breaker says about a call about to be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Closed: go ahead.
    Allowed,
    /// Half-open: this call is the single probe; its outcome closes or re-opens the breaker.
    Probe,
    /// Open (or a probe is already out): answer with the fallback result.
    Rejected { retry_in: Duration },
}

#[derive(Debug)]
enum State {
    Closed { failures: VecDeque<Instant> },
    Open { until: Instant },
    HalfOpen { probe_started: Option<Instant> },
}

/// A circuit breaker: opens after `failures` failures (errors or timeouts)
/// within `window`, rejects for `open_for`, then admits one probe: success
/// closes it, failure opens it again. A probe that never reports back (its
/// caller went away) is replaced after `probe_timeout`.
#[derive(Debug)]
pub struct Breaker {
    failures: usize,
    window: Duration,
    open_for: Duration,
    probe_timeout: Duration,
    state: State,
}

impl Breaker {
    /// `probe_timeout`: the upstream's call timeout plus a margin.
    pub fn new(config: &BreakerConfig, probe_timeout: Duration) -> Self {
        Self {
            failures: config.failures.max(1) as usize,
            window: Duration::from_secs_f64(config.window_secs),
            open_for: Duration::from_secs_f64(config.open_secs),
            probe_timeout,
            state: State::Closed { failures: VecDeque::new() },
        }
    }

    pub fn state(&self) -> BreakerState {
        match self.state {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Decides whether a call may go upstream now.
    pub fn admit(&mut self, now: Instant) -> Admission {
        match &mut self.state {
            State::Closed { .. } => Admission::Allowed,
            State::Open { until } => {
                if now >= *until {
                    self.state = State::HalfOpen { probe_started: Some(now) };
                    Admission::Probe
                } else {
                    Admission::Rejected { retry_in: *until - now }
                }
            }
            State::HalfOpen { probe_started } => match probe_started {
                Some(started) if now.saturating_duration_since(*started) < self.probe_timeout => {
                    Admission::Rejected { retry_in: self.probe_timeout - now.saturating_duration_since(*started) }
                }
                _ => {
                    *probe_started = Some(now);
                    Admission::Probe
                }
            },
        }
    }

    /// Records a call that reached the upstream and got an answer. Returns the
    /// new state when it changed.
    pub fn record_success(&mut self) -> Option<BreakerState> {
        match &mut self.state {
            State::Closed { failures } => {
                failures.clear();
                None
            }
            _ => {
                self.state = State::Closed { failures: VecDeque::new() };
                Some(BreakerState::Closed)
            }
        }
    }

    /// Records a failed or timed-out call. Returns the new state when it changed.
    pub fn record_failure(&mut self, now: Instant) -> Option<BreakerState> {
        match &mut self.state {
            State::Closed { failures } => {
                while failures.front().is_some_and(|t| now.saturating_duration_since(*t) > self.window) {
                    failures.pop_front();
                }
                failures.push_back(now);
                if failures.len() >= self.failures {
                    self.state = State::Open { until: now + self.open_for };
                    Some(BreakerState::Open)
                } else {
                    None
                }
            }
            State::HalfOpen { .. } => {
                self.state = State::Open { until: now + self.open_for };
                Some(BreakerState::Open)
            }
            State::Open { .. } => None,
        }
    }
}

fn quota(per_sec: f64) -> Option<Quota> {
    let burst = NonZeroU32::new(per_sec.ceil().clamp(1.0, u32::MAX as f64) as u32)?;
    Quota::with_period(Duration::from_secs_f64(1.0 / per_sec)).map(|q| q.allow_burst(burst))
}

/// Rate limits of one upstream's tools (each tool its own bucket) and of the
/// whole gateway. Never waits: a call over the limit gets the fallback result.
pub struct RateLimits {
    global: Option<DefaultDirectRateLimiter>,
    /// upstream index → per-tool limiter (None = unlimited).
    per_tool: Vec<Option<DefaultKeyedRateLimiter<Arc<str>>>>,
}

/// Which limit refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitHit {
    Global,
    Tool,
}

impl RateLimits {
    /// `global_per_sec` and each upstream's per-tool rate (calls per second;
    /// the burst is the rate rounded up, at least 1).
    pub fn new(global_per_sec: Option<f64>, per_upstream: impl IntoIterator<Item = Option<f64>>) -> Self {
        Self {
            global: global_per_sec.and_then(quota).map(DefaultDirectRateLimiter::direct),
            per_tool: per_upstream.into_iter().map(|r| r.and_then(quota).map(DefaultKeyedRateLimiter::keyed)).collect(),
        }
    }

    /// Takes one cell for `tool` of `upstream`, per-tool bucket first.
    pub fn check(&self, upstream: usize, tool: &Arc<str>) -> Result<(), LimitHit> {
        if let Some(Some(limiter)) = self.per_tool.get(upstream)
            && limiter.check_key(tool).is_err()
        {
            return Err(LimitHit::Tool);
        }
        if let Some(global) = &self.global
            && global.check().is_err()
        {
            return Err(LimitHit::Global);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(&BreakerConfig { failures: 3, window_secs: 10.0, open_secs: 5.0 }, Duration::from_secs(2))
    }

    #[tokio::test(start_paused = true)]
    async fn breaker_opens_after_n_failures_within_the_window() {
        let mut b = breaker();
        let t0 = Instant::now();
        assert_eq!(b.record_failure(t0), None);
        assert_eq!(b.record_failure(t0 + Duration::from_secs(1)), None);
        assert_eq!(b.admit(t0 + Duration::from_secs(1)), Admission::Allowed);
        assert_eq!(b.record_failure(t0 + Duration::from_secs(2)), Some(BreakerState::Open));
        assert_eq!(b.admit(t0 + Duration::from_secs(3)), Admission::Rejected { retry_in: Duration::from_secs(4) });
    }

    #[tokio::test(start_paused = true)]
    async fn failures_older_than_the_window_do_not_count() {
        let mut b = breaker();
        let t0 = Instant::now();
        b.record_failure(t0);
        b.record_failure(t0 + Duration::from_secs(1));
        assert_eq!(b.record_failure(t0 + Duration::from_secs(12)), None);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn breaker_half_opens_with_a_single_probe_and_closes_on_success() {
        let mut b = breaker();
        let t0 = Instant::now();
        for i in 0..3 {
            b.record_failure(t0 + Duration::from_millis(i));
        }
        let later = t0 + Duration::from_secs(6);
        assert_eq!(b.admit(later), Admission::Probe);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(matches!(b.admit(later), Admission::Rejected { .. }), "only one probe at a time");
        assert_eq!(b.record_success(), Some(BreakerState::Closed));
        assert_eq!(b.admit(later), Admission::Allowed);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probe_reopens_the_breaker() {
        let mut b = breaker();
        let t0 = Instant::now();
        for _ in 0..3 {
            b.record_failure(t0);
        }
        let later = t0 + Duration::from_secs(6);
        assert_eq!(b.admit(later), Admission::Probe);
        assert_eq!(b.record_failure(later), Some(BreakerState::Open));
        assert!(matches!(b.admit(later + Duration::from_secs(1)), Admission::Rejected { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_probe_is_replaced_after_the_probe_timeout() {
        let mut b = breaker();
        let t0 = Instant::now();
        for _ in 0..3 {
            b.record_failure(t0);
        }
        let later = t0 + Duration::from_secs(6);
        assert_eq!(b.admit(later), Admission::Probe);
        assert_eq!(b.admit(later + Duration::from_secs(3)), Admission::Probe);
    }

    #[test]
    fn tool_limit_refuses_the_call_over_the_burst_without_waiting() {
        let limits = RateLimits::new(None, [Some(0.001)]);
        let tool: Arc<str> = Arc::from("shop__get_order");
        let other: Arc<str> = Arc::from("shop__get_product");
        assert_eq!(limits.check(0, &tool), Ok(()));
        assert_eq!(limits.check(0, &tool), Err(LimitHit::Tool));
        assert_eq!(limits.check(0, &other), Ok(()), "each tool has its own bucket");
    }

    #[test]
    fn global_limit_covers_all_tools() {
        let limits = RateLimits::new(Some(0.001), [None]);
        assert_eq!(limits.check(0, &Arc::from("a")), Ok(()));
        assert_eq!(limits.check(0, &Arc::from("b")), Err(LimitHit::Global));
    }
}
