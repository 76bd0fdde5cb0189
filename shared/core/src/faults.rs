//! Named crash points between writes: where a function can die, so tests and the chaos run can kill it exactly there.
//!
//! Production never crashes here: [`at`] is a no-op unless the local platform runs the
//! invocation inside [`with_plan`] with a [`FaultPlan`] (crash-window tests, `swarm-chaos`).
//! A planned crash behaves as Lambda killing the sandbox: [`at`] fires the invocation's
//! kill switch and never returns, the platform drops the handler future — nothing after the
//! point runs, no clean-up, no error path — and then treats the invocation as failed, as AWS
//! would (the SQS message reappears after its visibility timeout, the stream batch is retried,
//! the API client sees no answer).
//!
//! Every pair of writes that can be separated by a crash has a point here; each point has a
//! test that kills the function there and shows what moves the conversation on afterwards.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// A place between two writes where a function may die.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CrashPoint {
    /// Orchestrator: the conversation item is written (`PLANNING`), the deadline is not armed yet.
    OrchestratorAfterCreate,
    /// Orchestrator: the subtasks are written and the conversation is `RUNNING`, nothing is enqueued yet.
    OrchestratorAfterStartRun,
    /// Orchestrator: a follow-up's turn is started (the earlier turn archived, the conversation
    /// `PLANNING` on the new turn), its deadline is not armed yet. Not in [`CrashPoint::ALL`]: the
    /// chaos scenario sends no follow-ups; the turn tests kill it.
    OrchestratorAfterStartTurn,
    /// Orchestrator: the subtasks are sent, the `queued` marker is not written yet.
    OrchestratorAfterEnqueue,
    /// Deadline path's run before the deadline: the never-sent subtasks are sent, the `queued`
    /// marker is not written yet.
    DeadlineAfterRedrive,
    /// Worker: the attempt began (`RUNNING`, attempts + 1), no LLM round has run.
    WorkerAfterBeginAttempt,
    /// Worker: the subtask's result is written, it is not counted yet.
    WorkerAfterRecordResult,
    /// Worker: the subtask is counted, its dependents are not released yet.
    WorkerAfterCount,
    /// Worker: a dependent's message is sent, its `PENDING → QUEUED` flip is not made yet (the message
    /// goes first, so a dependent is never `QUEUED` without one).
    WorkerAfterReleaseSend,
    /// Aggregator (or the deadline path aggregating itself): the aggregation lease is taken
    /// (`RUNNING → AGGREGATING`, or a takeover), the reply is not written.
    AggregatorAfterFlip,
    /// Worker: a side effect's intent is in the subtask's journal, the call is not dispatched yet.
    WorkerAfterIntent,
    /// Worker: the side-effecting call was dispatched and answered, its outcome is not recorded yet.
    WorkerAfterDispatch,
    /// Worker: the side effect's outcome is recorded, the subtask's result is not.
    WorkerAfterOutcome,
    /// Worker: an earlier round's side effect ended (its outcome in the journal), the next round's
    /// side effect's intent is not recorded yet — a crash between the journal writes of two effects.
    WorkerBetweenEffects,
    /// Orchestrator (approvals API): the decision is recorded, the approved call is not enqueued yet.
    ApprovalsAfterDecide,
    /// Deadline path: the open subtasks are closed and counted, the conversation is neither
    /// aggregated nor re-armed yet.
    DeadlineAfterClose,
    /// A decision's teller: the decided subtask is settled (moved on from `AWAITING_APPROVAL`),
    /// the turn that tells the decision is not written yet. Not in [`CrashPoint::ALL`]: the chaos
    /// scenario decides no approvals; the decision tests kill it.
    DecisionAfterSettle,
    /// Worker: an approved call ran and its approval is closed (`EXECUTED`), the decision is not
    /// told yet. Not in [`CrashPoint::ALL`], like [`CrashPoint::DecisionAfterSettle`].
    WorkerAfterFinishApproval,
    /// An answerer (aggregator or deadline path): the turn's reply is written (`DONE`/`HANDOFF`),
    /// a decision that landed while the turn ran is not told yet. Not in [`CrashPoint::ALL`],
    /// like [`CrashPoint::DecisionAfterSettle`].
    AnswerBeforeTell,
}

impl CrashPoint {
    /// Every point, in declaration order (the chaos run exercises each).
    pub const ALL: &'static [CrashPoint] = &[
        Self::OrchestratorAfterCreate,
        Self::OrchestratorAfterStartRun,
        Self::OrchestratorAfterEnqueue,
        Self::DeadlineAfterRedrive,
        Self::WorkerAfterBeginAttempt,
        Self::WorkerAfterRecordResult,
        Self::WorkerAfterCount,
        Self::WorkerAfterReleaseSend,
        Self::AggregatorAfterFlip,
        Self::WorkerAfterIntent,
        Self::WorkerAfterDispatch,
        Self::WorkerAfterOutcome,
        Self::WorkerBetweenEffects,
        Self::ApprovalsAfterDecide,
        Self::DeadlineAfterClose,
    ];

    /// The stable snake_case name (as serialised), e.g. `worker_after_record_result`.
    pub fn name(self) -> &'static str {
        match self {
            Self::OrchestratorAfterCreate => "orchestrator_after_create",
            Self::OrchestratorAfterStartRun => "orchestrator_after_start_run",
            Self::OrchestratorAfterStartTurn => "orchestrator_after_start_turn",
            Self::OrchestratorAfterEnqueue => "orchestrator_after_enqueue",
            Self::DeadlineAfterRedrive => "deadline_after_redrive",
            Self::WorkerAfterBeginAttempt => "worker_after_begin_attempt",
            Self::WorkerAfterRecordResult => "worker_after_record_result",
            Self::WorkerAfterCount => "worker_after_count",
            Self::WorkerAfterReleaseSend => "worker_after_release_send",
            Self::AggregatorAfterFlip => "aggregator_after_flip",
            Self::WorkerAfterIntent => "worker_after_intent",
            Self::WorkerAfterDispatch => "worker_after_dispatch",
            Self::WorkerAfterOutcome => "worker_after_outcome",
            Self::WorkerBetweenEffects => "worker_between_effects",
            Self::ApprovalsAfterDecide => "approvals_after_decide",
            Self::DeadlineAfterClose => "deadline_after_close",
            Self::DecisionAfterSettle => "decision_after_settle",
            Self::WorkerAfterFinishApproval => "worker_after_finish_approval",
            Self::AnswerBeforeTell => "answer_before_tell",
        }
    }
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Decides, per point reached, whether the invocation dies there.
pub trait FaultPlan: Send + Sync {
    /// `true`: the invocation dies at `point` now. Called once per point reached.
    fn crash(&self, point: CrashPoint) -> bool;
}

/// What one invocation runs under: its plan and its kill switch.
#[derive(Clone)]
pub struct Invocation {
    plan: Arc<dyn FaultPlan>,
    kill: Arc<Notify>,
}

impl Invocation {
    /// An invocation under `plan`; the platform waits on [`Invocation::killed`] beside the handler.
    pub fn new(plan: Arc<dyn FaultPlan>) -> Self {
        Self { plan, kill: Arc::new(Notify::new()) }
    }

    /// Completes when the invocation died at a crash point (the platform then drops the handler future).
    pub async fn killed(&self) {
        self.kill.notified().await;
    }
}

tokio::task_local! {
    static INVOCATION: Invocation;
}

/// Runs `fut` (one invocation of a handler) under `invocation`'s plan. Only the local platform calls this.
pub async fn with_plan<F: Future>(invocation: Invocation, fut: F) -> F::Output {
    INVOCATION.scope(invocation, fut).await
}

/// A crash point. A no-op unless the invocation runs under a plan that chooses to crash here:
/// then the kill switch fires and this future never completes.
pub async fn at(point: CrashPoint) {
    let kill = INVOCATION.try_with(|inv| inv.plan.crash(point).then(|| inv.kill.clone())).ok().flatten();
    if let Some(kill) = kill {
        tracing::warn!(crash_point = %point, "injected crash: the invocation dies here");
        // notify_one stores a permit, so the platform sees it even if it is not waiting yet.
        kill.notify_one();
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct At(CrashPoint, Mutex<Vec<CrashPoint>>);
    impl FaultPlan for At {
        fn crash(&self, point: CrashPoint) -> bool {
            if let Ok(mut seen) = self.1.lock() {
                seen.push(point);
            }
            point == self.0
        }
    }

    #[tokio::test]
    async fn without_a_plan_a_point_is_a_no_op() {
        at(CrashPoint::WorkerAfterRecordResult).await;
    }

    #[tokio::test]
    async fn a_planned_crash_stops_the_invocation_at_its_point_and_nothing_after_it_runs() {
        let plan = Arc::new(At(CrashPoint::WorkerAfterRecordResult, Mutex::new(Vec::new())));
        let invocation = Invocation::new(plan.clone());
        let after = Arc::new(Mutex::new(false));
        let after2 = after.clone();
        let handler = with_plan(invocation.clone(), async move {
            at(CrashPoint::WorkerAfterBeginAttempt).await;
            at(CrashPoint::WorkerAfterRecordResult).await;
            *after2.lock().unwrap() = true;
        });
        let died = tokio::select! {
            _ = handler => false,
            _ = invocation.killed() => true,
        };
        assert!(died);
        assert!(!*after.lock().unwrap(), "nothing after the crash point ran");
        assert_eq!(
            *plan.1.lock().unwrap(),
            vec![CrashPoint::WorkerAfterBeginAttempt, CrashPoint::WorkerAfterRecordResult]
        );
    }

    #[test]
    fn names_are_the_serialised_form() {
        for p in CrashPoint::ALL {
            assert_eq!(serde_json::to_value(p).unwrap(), serde_json::Value::String(p.name().to_owned()));
        }
    }
}
