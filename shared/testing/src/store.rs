//! `FlakyStore`: any conversation store with transient failures injected per operation, optionally for one subtask only, and a record of the leases and replies it passed on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use swarm_core::approval::{Approval, ApprovalDecision, ApprovalStatus, DecideOutcome};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, Handoff, SubtaskRecord, SubtaskResult, SubtaskStatus, Usage,
};
use swarm_core::effects::{AttemptLease, Effect, EffectChange, EffectOutcome};
use swarm_core::ports::{
    AttemptStart, CloseOutcome, ConversationStore, CountOutcome, CreateOutcome, IntentOutcome, LeaseOutcome,
    LeasePhase, RecordOutcome, StoreError,
};

/// The operations of [`ConversationStore`], to say which one fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    CreateConversation,
    GetConversation,
    StartRun,
    TransitionConversation,
    AcquireLease,
    FinishConversation,
    FailConversation,
    GetSubtask,
    ListSubtasks,
    TransitionSubtask,
    BeginAttempt,
    SaveCheckpoint,
    RecordResult,
    CountFinished,
    ReleaseAttempt,
    RecordIntent,
    RecordEffectOutcome,
    CloseSubtask,
    CreateApproval,
    GetApproval,
    ListApprovals,
    DecideApproval,
    FinishApproval,
    RequestHandoff,
    HandOff,
    OverdueConversations,
}

/// One injected failure: which operation (`None`: every one), which subtask (`None`: any call),
/// the message, and how many more calls it fails (`None`: every call).
struct Failure {
    op: Option<StoreOp>,
    subtask: Option<String>,
    message: String,
    times: Option<AtomicU32>,
    /// Matching calls let through before the failures start.
    after: AtomicU32,
}

/// One call a [`FlakyStore`] passed on, as the store answered it.
#[derive(Clone, Debug, PartialEq)]
pub enum Recorded {
    /// `acquire_lease(holder, now_ms, until_ms)` and its outcome.
    Lease { holder: String, now_ms: i64, until_ms: i64, outcome: LeaseOutcome },
    /// `finish_conversation` and whether it wrote the reply (`AGGREGATING → DONE`).
    Finish { written: bool },
}

/// A log several [`FlakyStore`]s can share (the worker's and the aggregator's views of one table).
pub type RecordLog = Arc<Mutex<Vec<Recorded>>>;

/// Wraps a store; calls matching an injected failure answer
/// [`StoreError::Transient`] (as throttling would) without reaching it, the others pass through.
/// With [`FlakyStore::recording`], every lease taken or refused and every reply written goes to a log.
pub struct FlakyStore {
    inner: Arc<dyn ConversationStore>,
    failures: Vec<Failure>,
    log: Option<RecordLog>,
}

impl FlakyStore {
    pub fn new(inner: Arc<dyn ConversationStore>) -> Self {
        Self { inner, failures: Vec::new(), log: None }
    }

    /// Records every `acquire_lease` and `finish_conversation` that reached the store into `log`.
    pub fn recording(mut self, log: RecordLog) -> Self {
        self.log = Some(log);
        self
    }

    fn record(&self, entry: Recorded) {
        if let Some(log) = &self.log {
            log.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
        }
    }

    /// Every call of `op` fails transiently with `message`.
    pub fn fail(mut self, op: StoreOp, message: &str) -> Self {
        self.failures.push(Failure {
            op: Some(op),
            subtask: None,
            message: message.to_owned(),
            times: None,
            after: AtomicU32::new(0),
        });
        self
    }

    /// The next `times` calls of `op` fail transiently with `message`; later ones pass through.
    pub fn fail_times(self, op: StoreOp, times: u32, message: &str) -> Self {
        self.fail_times_after(op, 0, times, message)
    }

    /// The first `after` calls of `op` pass through, the `times` after them fail transiently with
    /// `message`, later ones pass through again.
    pub fn fail_times_after(mut self, op: StoreOp, after: u32, times: u32, message: &str) -> Self {
        self.failures.push(Failure {
            op: Some(op),
            subtask: None,
            message: message.to_owned(),
            times: Some(AtomicU32::new(times)),
            after: AtomicU32::new(after),
        });
        self
    }

    /// Calls of `op` for subtask `subtask_id` fail transiently with `message` (so its message is redelivered until dead-lettered).
    pub fn fail_for_subtask(mut self, op: StoreOp, subtask_id: &str, message: &str) -> Self {
        self.failures.push(Failure {
            op: Some(op),
            subtask: Some(subtask_id.to_owned()),
            message: message.to_owned(),
            times: None,
            after: AtomicU32::new(0),
        });
        self
    }

    /// Every call fails transiently with `message` (a store throttled on everything).
    pub fn fail_everything(mut self, message: &str) -> Self {
        self.failures.push(Failure {
            op: None,
            subtask: None,
            message: message.to_owned(),
            times: None,
            after: AtomicU32::new(0),
        });
        self
    }

    fn check(&self, op: StoreOp, subtask_id: Option<&str>) -> Result<(), StoreError> {
        let take = |n: &AtomicU32| n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        let hit = self.failures.iter().find(|f| {
            f.op.is_none_or(|o| o == op)
                && f.subtask.as_deref().is_none_or(|s| subtask_id == Some(s))
                && !take(&f.after)
                && f.times.as_ref().is_none_or(take)
        });
        match hit {
            Some(f) => Err(StoreError::Transient(f.message.clone())),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl ConversationStore for FlakyStore {
    async fn create_conversation(&self, c: &Conversation) -> Result<CreateOutcome, StoreError> {
        self.check(StoreOp::CreateConversation, None)?;
        self.inner.create_conversation(c).await
    }
    async fn get_conversation(&self, id: &ConversationId) -> Result<Option<Conversation>, StoreError> {
        self.check(StoreOp::GetConversation, None)?;
        self.inner.get_conversation(id).await
    }
    async fn start_run(
        &self,
        id: &ConversationId,
        s: &[SubtaskRecord],
        n: &[String],
        u: &Usage,
    ) -> Result<bool, StoreError> {
        self.check(StoreOp::StartRun, None)?;
        self.inner.start_run(id, s, n, u).await
    }
    async fn transition_conversation(
        &self,
        id: &ConversationId,
        f: ConversationStatus,
        t: ConversationStatus,
    ) -> Result<bool, StoreError> {
        self.check(StoreOp::TransitionConversation, None)?;
        self.inner.transition_conversation(id, f, t).await
    }
    async fn acquire_lease(
        &self,
        id: &ConversationId,
        phase: LeasePhase,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<LeaseOutcome, StoreError> {
        self.check(StoreOp::AcquireLease, None)?;
        let outcome = self.inner.acquire_lease(id, phase, holder, now, until).await?;
        self.record(Recorded::Lease {
            holder: holder.to_owned(),
            now_ms: now,
            until_ms: until,
            outcome: outcome.clone(),
        });
        Ok(outcome)
    }
    async fn finish_conversation(&self, id: &ConversationId, r: &str, u: &Usage) -> Result<bool, StoreError> {
        self.check(StoreOp::FinishConversation, None)?;
        let written = self.inner.finish_conversation(id, r, u).await?;
        self.record(Recorded::Finish { written });
        Ok(written)
    }
    async fn fail_conversation(&self, id: &ConversationId, r: &str) -> Result<bool, StoreError> {
        self.check(StoreOp::FailConversation, None)?;
        self.inner.fail_conversation(id, r).await
    }
    async fn get_subtask(&self, id: &ConversationId, s: &str) -> Result<Option<SubtaskRecord>, StoreError> {
        self.check(StoreOp::GetSubtask, Some(s))?;
        self.inner.get_subtask(id, s).await
    }
    async fn list_subtasks(&self, id: &ConversationId) -> Result<Vec<SubtaskRecord>, StoreError> {
        self.check(StoreOp::ListSubtasks, None)?;
        self.inner.list_subtasks(id).await
    }
    async fn transition_subtask(
        &self,
        id: &ConversationId,
        s: &str,
        f: &[SubtaskStatus],
        t: SubtaskStatus,
    ) -> Result<bool, StoreError> {
        self.check(StoreOp::TransitionSubtask, Some(s))?;
        self.inner.transition_subtask(id, s, f, t).await
    }
    async fn begin_attempt(
        &self,
        id: &ConversationId,
        s: &str,
        lease: &AttemptLease,
        now: i64,
    ) -> Result<AttemptStart, StoreError> {
        self.check(StoreOp::BeginAttempt, Some(s))?;
        self.inner.begin_attempt(id, s, lease, now).await
    }
    async fn release_attempt(&self, id: &ConversationId, s: &str, holder: &str) -> Result<(), StoreError> {
        self.check(StoreOp::ReleaseAttempt, Some(s))?;
        self.inner.release_attempt(id, s, holder).await
    }
    async fn record_intent(
        &self,
        id: &ConversationId,
        s: &str,
        holder: &str,
        effect: &Effect,
    ) -> Result<IntentOutcome, StoreError> {
        self.check(StoreOp::RecordIntent, Some(s))?;
        self.inner.record_intent(id, s, holder, effect).await
    }
    async fn record_effect_outcome(
        &self,
        id: &ConversationId,
        s: &str,
        ordinal: u32,
        change: &EffectChange,
    ) -> Result<Option<Effect>, StoreError> {
        self.check(StoreOp::RecordEffectOutcome, Some(s))?;
        self.inner.record_effect_outcome(id, s, ordinal, change).await
    }
    async fn close_subtask(
        &self,
        id: &ConversationId,
        s: &str,
        r: &SubtaskResult,
        journal_len: usize,
        now: i64,
    ) -> Result<CloseOutcome, StoreError> {
        self.check(StoreOp::CloseSubtask, Some(s))?;
        self.inner.close_subtask(id, s, r, journal_len, now).await
    }
    async fn create_approval(&self, a: &Approval) -> Result<Approval, StoreError> {
        self.check(StoreOp::CreateApproval, Some(&a.subtask_id))?;
        self.inner.create_approval(a).await
    }
    async fn get_approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        self.check(StoreOp::GetApproval, None)?;
        self.inner.get_approval(id).await
    }
    async fn list_approvals(&self, limit: usize) -> Result<Vec<Approval>, StoreError> {
        self.check(StoreOp::ListApprovals, None)?;
        self.inner.list_approvals(limit).await
    }
    async fn decide_approval(&self, id: &str, d: &ApprovalDecision) -> Result<DecideOutcome, StoreError> {
        self.check(StoreOp::DecideApproval, None)?;
        self.inner.decide_approval(id, d).await
    }
    async fn finish_approval(
        &self,
        id: &str,
        status: ApprovalStatus,
        outcome: &EffectOutcome,
        at: i64,
    ) -> Result<bool, StoreError> {
        self.check(StoreOp::FinishApproval, None)?;
        self.inner.finish_approval(id, status, outcome, at).await
    }
    async fn request_handoff(&self, id: &ConversationId, h: &Handoff) -> Result<bool, StoreError> {
        self.check(StoreOp::RequestHandoff, None)?;
        self.inner.request_handoff(id, h).await
    }
    async fn hand_off(&self, id: &ConversationId, r: &str, u: &Usage, h: &Handoff) -> Result<bool, StoreError> {
        self.check(StoreOp::HandOff, None)?;
        self.inner.hand_off(id, r, u, h).await
    }
    async fn save_checkpoint(&self, id: &ConversationId, s: &str, c: &str) -> Result<(), StoreError> {
        self.check(StoreOp::SaveCheckpoint, Some(s))?;
        self.inner.save_checkpoint(id, s, c).await
    }
    async fn record_result(
        &self,
        id: &ConversationId,
        s: &str,
        r: &SubtaskResult,
        u: &Usage,
        t: &[String],
        now: i64,
    ) -> Result<RecordOutcome, StoreError> {
        self.check(StoreOp::RecordResult, Some(s))?;
        self.inner.record_result(id, s, r, u, t, now).await
    }
    async fn count_finished(&self, id: &ConversationId, s: &str, u: &Usage) -> Result<CountOutcome, StoreError> {
        self.check(StoreOp::CountFinished, Some(s))?;
        self.inner.count_finished(id, s, u).await
    }
    async fn overdue_conversations(
        &self,
        shard: u32,
        now: i64,
        limit: usize,
    ) -> Result<Vec<ConversationId>, StoreError> {
        self.check(StoreOp::OverdueConversations, None)?;
        self.inner.overdue_conversations(shard, now, limit).await
    }
}
