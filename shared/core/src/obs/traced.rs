//! Decorators that give every store and queue operation its own span: `TracedStore` (`{system} {operation}`, kind client) around any [`ConversationStore`], `TracedQueue` (`send {queue}`, kind producer; `change_visibility {queue}`, kind client) around any [`TaskQueue`].
//!
//! A message sent inside the `send` span carries that span's context (the queue
//! adapters read it through [`crate::obs::context`]), so the worker's record span
//! is the producer span's child. Wrap once where the adapters are built (the
//! functions' AWS clients, the local stack); every port method delegates.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::approval::{Approval, ApprovalDecision, ApprovalStatus, DecideOutcome};
use crate::domain::{
    Conversation, ConversationId, ConversationStatus, Handoff, SubtaskRecord, SubtaskResult, SubtaskStatus,
    TaskMessage, Usage,
};
use crate::effects::{AttemptLease, Effect, EffectChange, EffectOutcome};
use crate::ports::{
    AttemptStart, CloseOutcome, ConversationStore, CountOutcome, CreateOutcome, IntentOutcome, LeaseOutcome,
    LeasePhase, QueueError, RecordOutcome, StoreError, TaskQueue,
};

/// A [`ConversationStore`] whose every call runs in a span `{system} {operation}`
/// (`db.system.name`, `db.operation.name`; `error.type` transient/permanent on failure).
pub struct TracedStore {
    inner: Arc<dyn ConversationStore>,
    /// `db.system.name`: `aws.dynamodb`, or `memory` for the embedded store.
    system: &'static str,
}

impl TracedStore {
    pub fn new(inner: Arc<dyn ConversationStore>, system: &'static str) -> Self {
        Self { inner, system }
    }

    /// `inner` wrapped, as the functions take it.
    pub fn wrap(inner: Arc<dyn ConversationStore>, system: &'static str) -> Arc<dyn ConversationStore> {
        Arc::new(Self::new(inner, system))
    }

    async fn traced<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let span = tracing::info_span!(
            "store",
            otel.name = %format_args!("{} {operation}", self.system),
            otel.kind = "client",
            otel.status_code = Empty,
            db.system.name = self.system,
            db.operation.name = operation,
            error.type = Empty,
        );
        let result = call.instrument(span.clone()).await;
        if let Err(e) = &result {
            record_error(&span, e.is_transient());
        }
        result
    }
}

fn record_error(span: &Span, transient: bool) {
    span.record("error.type", if transient { "transient" } else { "permanent" });
    span.record("otel.status_code", "ERROR");
}

#[async_trait]
impl ConversationStore for TracedStore {
    async fn create_conversation(&self, conversation: &Conversation) -> Result<CreateOutcome, StoreError> {
        self.traced("create_conversation", self.inner.create_conversation(conversation)).await
    }

    async fn get_conversation(&self, id: &ConversationId) -> Result<Option<Conversation>, StoreError> {
        self.traced("get_conversation", self.inner.get_conversation(id)).await
    }

    async fn start_run(
        &self,
        id: &ConversationId,
        subtasks: &[SubtaskRecord],
        notes: &[String],
        usage: &Usage,
    ) -> Result<bool, StoreError> {
        self.traced("start_run", self.inner.start_run(id, subtasks, notes, usage)).await
    }

    async fn transition_conversation(
        &self,
        id: &ConversationId,
        from: ConversationStatus,
        to: ConversationStatus,
    ) -> Result<bool, StoreError> {
        self.traced("transition_conversation", self.inner.transition_conversation(id, from, to)).await
    }

    async fn acquire_lease(
        &self,
        id: &ConversationId,
        phase: LeasePhase,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<LeaseOutcome, StoreError> {
        self.traced("acquire_lease", self.inner.acquire_lease(id, phase, holder, now_ms, until_ms)).await
    }

    async fn overdue_conversations(
        &self,
        shard: u32,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<ConversationId>, StoreError> {
        self.traced("overdue_conversations", self.inner.overdue_conversations(shard, now_ms, limit)).await
    }

    async fn finish_conversation(&self, id: &ConversationId, reply: &str, usage: &Usage) -> Result<bool, StoreError> {
        self.traced("finish_conversation", self.inner.finish_conversation(id, reply, usage)).await
    }

    async fn fail_conversation(&self, id: &ConversationId, reason: &str) -> Result<bool, StoreError> {
        self.traced("fail_conversation", self.inner.fail_conversation(id, reason)).await
    }

    async fn get_subtask(&self, id: &ConversationId, subtask_id: &str) -> Result<Option<SubtaskRecord>, StoreError> {
        self.traced("get_subtask", self.inner.get_subtask(id, subtask_id)).await
    }

    async fn list_subtasks(&self, id: &ConversationId) -> Result<Vec<SubtaskRecord>, StoreError> {
        self.traced("list_subtasks", self.inner.list_subtasks(id)).await
    }

    async fn transition_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        from: &[SubtaskStatus],
        to: SubtaskStatus,
    ) -> Result<bool, StoreError> {
        self.traced("transition_subtask", self.inner.transition_subtask(id, subtask_id, from, to)).await
    }

    async fn begin_attempt(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        lease: &AttemptLease,
        now_ms: i64,
    ) -> Result<AttemptStart, StoreError> {
        self.traced("begin_attempt", self.inner.begin_attempt(id, subtask_id, lease, now_ms)).await
    }

    async fn release_attempt(&self, id: &ConversationId, subtask_id: &str, holder: &str) -> Result<(), StoreError> {
        self.traced("release_attempt", self.inner.release_attempt(id, subtask_id, holder)).await
    }

    async fn record_intent(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        holder: &str,
        effect: &Effect,
    ) -> Result<IntentOutcome, StoreError> {
        self.traced("record_intent", self.inner.record_intent(id, subtask_id, holder, effect)).await
    }

    async fn record_effect_outcome(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        ordinal: u32,
        change: &EffectChange,
    ) -> Result<Option<Effect>, StoreError> {
        self.traced("record_effect_outcome", self.inner.record_effect_outcome(id, subtask_id, ordinal, change)).await
    }

    async fn close_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        result: &SubtaskResult,
        journal_len: usize,
        now_ms: i64,
    ) -> Result<CloseOutcome, StoreError> {
        self.traced("close_subtask", self.inner.close_subtask(id, subtask_id, result, journal_len, now_ms)).await
    }

    async fn create_approval(&self, approval: &Approval) -> Result<Approval, StoreError> {
        self.traced("create_approval", self.inner.create_approval(approval)).await
    }

    async fn get_approval(&self, approval_id: &str) -> Result<Option<Approval>, StoreError> {
        self.traced("get_approval", self.inner.get_approval(approval_id)).await
    }

    async fn list_approvals(&self, limit: usize) -> Result<Vec<Approval>, StoreError> {
        self.traced("list_approvals", self.inner.list_approvals(limit)).await
    }

    async fn decide_approval(
        &self,
        approval_id: &str,
        decision: &ApprovalDecision,
    ) -> Result<DecideOutcome, StoreError> {
        self.traced("decide_approval", self.inner.decide_approval(approval_id, decision)).await
    }

    async fn finish_approval(
        &self,
        approval_id: &str,
        status: ApprovalStatus,
        outcome: &EffectOutcome,
        at_ms: i64,
    ) -> Result<bool, StoreError> {
        self.traced("finish_approval", self.inner.finish_approval(approval_id, status, outcome, at_ms)).await
    }

    async fn request_handoff(&self, id: &ConversationId, handoff: &Handoff) -> Result<bool, StoreError> {
        self.traced("request_handoff", self.inner.request_handoff(id, handoff)).await
    }

    async fn hand_off(
        &self,
        id: &ConversationId,
        reply: &str,
        usage: &Usage,
        handoff: &Handoff,
    ) -> Result<bool, StoreError> {
        self.traced("hand_off", self.inner.hand_off(id, reply, usage, handoff)).await
    }

    async fn save_checkpoint(&self, id: &ConversationId, subtask_id: &str, checkpoint: &str) -> Result<(), StoreError> {
        self.traced("save_checkpoint", self.inner.save_checkpoint(id, subtask_id, checkpoint)).await
    }

    async fn record_result(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        result: &SubtaskResult,
        usage: &Usage,
        tools_used: &[String],
        now_ms: i64,
    ) -> Result<RecordOutcome, StoreError> {
        self.traced("record_result", self.inner.record_result(id, subtask_id, result, usage, tools_used, now_ms)).await
    }

    async fn count_finished(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        usage: &Usage,
    ) -> Result<CountOutcome, StoreError> {
        self.traced("count_finished", self.inner.count_finished(id, subtask_id, usage)).await
    }
}

/// A [`TaskQueue`] whose every send runs in a producer span `send {queue}`
/// (`messaging.system`, `messaging.destination.name`, `messaging.batch.message_count`,
/// `messaging.delay_seconds`). Messages sent inside it carry its context.
pub struct TracedQueue {
    inner: Arc<dyn TaskQueue>,
    /// `messaging.system`: `aws_sqs`, or `memory` for the embedded queue.
    system: &'static str,
    /// The queue's logical name (`tasks`, `refund`).
    queue: &'static str,
}

impl TracedQueue {
    pub fn new(inner: Arc<dyn TaskQueue>, system: &'static str, queue: &'static str) -> Self {
        Self { inner, system, queue }
    }

    /// `inner` wrapped, as the functions take it.
    pub fn wrap(inner: Arc<dyn TaskQueue>, system: &'static str, queue: &'static str) -> Arc<dyn TaskQueue> {
        Arc::new(Self::new(inner, system, queue))
    }
}

#[async_trait]
impl TaskQueue for TracedQueue {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        let span = tracing::info_span!(
            "change_visibility",
            otel.name = %format_args!("change_visibility {}", self.queue),
            otel.kind = "client",
            otel.status_code = Empty,
            messaging.system = self.system,
            messaging.operation.name = "ChangeMessageVisibility",
            messaging.destination.name = self.queue,
            swarm.visibility_seconds = seconds,
            error.type = Empty,
        );
        let result = self.inner.change_visibility(receipt_handle, seconds).instrument(span.clone()).await;
        if let Err(e) = &result {
            record_error(&span, e.is_transient());
        }
        result
    }

    async fn send(&self, messages: &[TaskMessage], delay_seconds: u32) -> Result<(), QueueError> {
        let span = tracing::info_span!(
            "send",
            otel.name = %format_args!("send {}", self.queue),
            otel.kind = "producer",
            otel.status_code = Empty,
            messaging.system = self.system,
            messaging.operation.type = "send",
            messaging.destination.name = self.queue,
            messaging.batch.message_count = messages.len(),
            swarm.delay_seconds = delay_seconds,
            error.type = Empty,
        );
        let result = self.inner.send(messages, delay_seconds).instrument(span.clone()).await;
        if let Err(e) = &result {
            record_error(&span, e.is_transient());
        }
        result
    }
}
