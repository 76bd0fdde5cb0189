//! One invocation as Lambda runs it: the handler future is dropped at the function's timeout, or when it dies at a planned crash point ([`swarm_core::faults`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use swarm_core::faults::{self, FaultPlan, Invocation};

/// How an invocation ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended<T> {
    /// The handler returned (success or a function error: the caller decides).
    Returned(T),
    /// Still running at the function's timeout: dropped, as Lambda kills it.
    TimedOut,
    /// Died at a crash point of its fault plan: dropped there, nothing after it ran.
    Killed,
}

impl<T> Ended<T> {
    /// A short word for logs.
    pub fn describe(&self) -> &'static str {
        match self {
            Ended::Returned(_) => "returned",
            Ended::TimedOut => "timed out",
            Ended::Killed => "killed at a crash point",
        }
    }
}

/// Runs `handler` as one invocation: cut at `timeout`; under `faults` (a plan per invocation,
/// as the chaos run and crash-window tests set it) it may die at a crash point instead.
/// Either way the future is dropped — no clean-up, no error path — and the caller treats
/// the invocation as failed, as the event source would on AWS.
pub async fn invoke<F: Future>(timeout: Duration, faults: Option<&Arc<dyn FaultPlan>>, handler: F) -> Ended<F::Output> {
    let bounded = async {
        match tokio::time::timeout(timeout, handler).await {
            Ok(out) => Ended::Returned(out),
            Err(_) => Ended::TimedOut,
        }
    };
    let Some(plan) = faults else { return bounded.await };
    let invocation = Invocation::new(plan.clone());
    tokio::select! {
        ended = faults::with_plan(invocation.clone(), bounded) => ended,
        () = invocation.killed() => Ended::Killed,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use swarm_core::faults::CrashPoint;

    use super::*;

    struct CrashAt(CrashPoint);
    impl FaultPlan for CrashAt {
        fn crash(&self, point: CrashPoint) -> bool {
            point == self.0
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_past_its_timeout_is_dropped_at_the_timeout() {
        let started = tokio::time::Instant::now();
        let finished = Arc::new(AtomicBool::new(false));
        let f = finished.clone();
        let ended = invoke(Duration::from_secs(3), None, async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            f.store(true, Ordering::SeqCst);
        })
        .await;
        assert_eq!(ended, Ended::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(!finished.load(Ordering::SeqCst), "the handler never ran on after its timeout");
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_within_its_timeout_returns_its_output() {
        let ended = invoke(Duration::from_secs(3), None, async { 7 }).await;
        assert_eq!(ended, Ended::Returned(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_planned_crash_kills_the_invocation_at_its_point() {
        let plan: Arc<dyn FaultPlan> = Arc::new(CrashAt(CrashPoint::WorkerAfterRecordResult));
        let after = Arc::new(AtomicBool::new(false));
        let a = after.clone();
        let ended = invoke(Duration::from_secs(3), Some(&plan), async move {
            faults::at(CrashPoint::WorkerAfterBeginAttempt).await;
            faults::at(CrashPoint::WorkerAfterRecordResult).await;
            a.store(true, Ordering::SeqCst);
        })
        .await;
        assert_eq!(ended, Ended::Killed);
        assert!(!after.load(Ordering::SeqCst), "nothing after the crash point ran");
        // A plan that crashes nowhere changes nothing.
        let never: Arc<dyn FaultPlan> = Arc::new(CrashAt(CrashPoint::AggregatorAfterFlip));
        let ended = invoke(Duration::from_secs(3), Some(&never), async {
            faults::at(CrashPoint::WorkerAfterCount).await;
            "done"
        })
        .await;
        assert_eq!(ended, Ended::Returned("done"));
    }
}
