//! The time of one `POST /conversations`: when it must be answered, when planning must end, and the per-call deadline of each store write or queue send, so a slow store answers a 503 that says what runs instead of being killed mid-write.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::core::OrchestratorSettings;

/// A store write or queue send that failed, or did not answer by its deadline (it may still have
/// been applied: its caller treats both alike).
#[derive(Debug, thiserror::Error)]
pub enum CallFailed {
    /// Cut at its deadline, after `ms` milliseconds.
    #[error("{what} did not answer within {ms} ms")]
    Cut { what: &'static str, ms: u128 },
    /// The store's or queue's own error (its in-place retries spent).
    #[error("{what} failed: {error}")]
    Failed { what: &'static str, error: String },
}

/// One request's deadlines (`orchestrator.request_budget_secs`, `post_plan_secs`, `aws_call_secs`).
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// The request is answered by then.
    answer_by: Instant,
    /// Kept back before `answer_by` for what follows the plan.
    post_plan: Duration,
    /// At most this per call after planning.
    aws_call: Duration,
}

impl Budget {
    /// A request that starts now under `settings`.
    pub fn starting_now(settings: &OrchestratorSettings) -> Self {
        Self {
            answer_by: Instant::now() + settings.request_budget,
            post_plan: settings.post_plan,
            aws_call: settings.aws_call,
        }
    }

    /// When planning ends: its own budget from now, and never into the time kept for what follows it.
    pub fn plan_deadline(&self, plan_budget: Duration) -> Instant {
        (Instant::now() + plan_budget).min(self.plan_reserve_starts())
    }

    fn plan_reserve_starts(&self) -> Instant {
        self.answer_by.checked_sub(self.post_plan).unwrap_or(self.answer_by)
    }

    /// A call before planning (the rate counter, the conversation's write, arming the deadline):
    /// cut where the post-plan reserve starts.
    pub async fn before_plan<T, E: Display>(
        &self,
        what: &'static str,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, CallFailed> {
        within(self.plan_reserve_starts(), what, call).await
    }

    /// A call after planning with `calls_after` more to come before the answer: it may use the time
    /// left but a per-call deadline for each of those, and has at least its own per-call deadline
    /// (never past the answer's). Planning that used its whole budget leaves each call exactly one.
    pub async fn after_plan<T, E: Display>(
        &self,
        what: &'static str,
        calls_after: u32,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, CallFailed> {
        let now = Instant::now();
        let reserved = self.aws_call * calls_after;
        let until = self.answer_by.checked_sub(reserved).unwrap_or(now).max(now + self.aws_call).min(self.answer_by);
        within(until, what, call).await
    }
}

/// `call` cut at `until`.
async fn within<T, E: Display>(
    until: Instant,
    what: &'static str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, CallFailed> {
    let started = Instant::now();
    match tokio::time::timeout_at(until, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(CallFailed::Failed { what, error: e.to_string() }),
        Err(_) => Err(CallFailed::Cut { what, ms: started.elapsed().as_millis() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> OrchestratorSettings {
        OrchestratorSettings::default()
    }

    #[tokio::test(start_paused = true)]
    async fn planning_ends_before_the_time_kept_for_the_writes_after_it() {
        let s = settings();
        let budget = Budget::starting_now(&s);
        let start = Instant::now();
        // The table's 19 s plan budget fits the 27 s request less the 8 s kept back.
        assert_eq!(budget.plan_deadline(s.plan_timeout) - start, Duration::from_secs(19));
        // Six seconds spent before planning: planning gets what is left before the reserve, 13 s.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(budget.plan_deadline(s.plan_timeout) - start, Duration::from_secs(19));
        // Past the reserve's start: nothing.
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(budget.plan_deadline(s.plan_timeout), budget.plan_reserve_starts());
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_after_planning_keeps_time_for_the_calls_after_it_and_never_passes_the_answer() {
        let s = settings();
        let budget = Budget::starting_now(&s);
        let slow = async {
            tokio::time::sleep(Duration::from_secs(40)).await;
            Ok::<_, String>(())
        };
        // Planning used its whole budget (19 s): the plan's write gets its 2 s, 3 × 2 s stay for the sends and the marker.
        tokio::time::advance(s.plan_timeout).await;
        let start = Instant::now();
        let e = budget.after_plan("start_run", 3, slow).await.unwrap_err();
        assert!(matches!(e, CallFailed::Cut { what: "start_run", ms: 2000 }), "{e:?}");
        assert_eq!(Instant::now() - start, s.aws_call);
        // Planning that ended at once leaves the plan's write all but the 6 s kept for the three calls after it.
        let early = Budget::starting_now(&s);
        let slow = async {
            tokio::time::sleep(Duration::from_secs(40)).await;
            Ok::<_, String>(())
        };
        let before = Instant::now();
        assert!(early.after_plan("start_run", 3, slow).await.is_err());
        assert_eq!(Instant::now() - before, s.request_budget - s.aws_call * 3);
        // One second before the answer is due, the last call gets that second, not its 2 s.
        let late = Budget::starting_now(&s);
        tokio::time::advance(s.request_budget - Duration::from_secs(1)).await;
        let slow = async {
            tokio::time::sleep(Duration::from_secs(40)).await;
            Ok::<_, String>(())
        };
        let before = Instant::now();
        assert!(late.after_plan("the queued marker", 0, slow).await.is_err());
        assert_eq!(Instant::now() - before, Duration::from_secs(1));
        let failed = late.after_plan("send", 0, async { Err::<(), _>("throttled") }).await.unwrap_err();
        assert_eq!(failed.to_string(), "send failed: throttled");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_before_planning_stops_where_the_post_plan_reserve_starts() {
        let s = settings();
        let budget = Budget::starting_now(&s);
        let start = Instant::now();
        let hung = std::future::pending::<Result<(), String>>();
        assert!(budget.before_plan("create", hung).await.is_err());
        assert_eq!(Instant::now() - start, s.request_budget - s.post_plan);
    }
}
