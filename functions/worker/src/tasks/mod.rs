//! The tasks worker: one message of the tasks queue (or the refund role's) at a time — a subtask's attempt ([`Runner`]), an approved side effect, a confirmation, or a deadline (through its closer).

mod ending;
mod run;
mod started;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use swarm_core::domain::{ConversationId, SubtaskId, SubtaskRecord, TaskMessage};
use swarm_core::effects::EffectState;
use swarm_core::obs;
use swarm_core::ports::{
    ChatModel, ConversationRecords, ConversationStore, QueueError, StoreError, SubtaskStore, ToolGateway,
};
use swarm_core::roles::TaskQueues;
use tokio::time::Instant;
use tracing::Instrument;

use self::run::Runner;
use crate::agent::Agent;
use crate::bookkeeping::Bookkeeping;
use crate::closer::Closer;
use crate::confirmations::Confirmations;
use crate::effects::{ApprovedEffects, Dispatcher, SideEffects};
use crate::outcome::{MessageHandler, Outcome, subtask_span};
use crate::settings::{Heartbeat, WorkerSettings};

/// The worker: runs subtasks from the tasks queue, and the approvals, confirmations and deadlines sent there.
pub struct Worker {
    conversations: Arc<dyn ConversationRecords>,
    subtasks: Arc<dyn SubtaskStore>,
    runner: Runner,
    /// Settles a confirmed subtask and releases its dependents.
    bookkeeping: Bookkeeping,
    effects: Arc<SideEffects>,
    approved: ApprovedEffects,
    closer: Closer,
    /// Kept back from the Lambda deadline.
    safety_margin: Duration,
    /// How its batch's messages are kept in flight while the invocation lives.
    heartbeat: Heartbeat,
}

impl Worker {
    /// The tasks worker over `store` (each room holds the roles it uses), sending to `queues`,
    /// with its work model, compression model and gateway client.
    pub fn new(
        store: Arc<dyn ConversationStore>,
        queues: TaskQueues,
        model: Arc<dyn ChatModel>,
        sub_model: Arc<dyn ChatModel>,
        tools: Arc<dyn ToolGateway>,
        settings: WorkerSettings,
    ) -> Self {
        let confirmations = Confirmations::new(queues.clone(), settings.confirm_delay_secs, settings.confirm_attempts);
        let dispatcher = Arc::new(Dispatcher::new(
            store.clone(),
            store.clone(),
            tools.clone(),
            settings.tool_timeout,
            settings.approval_expiry,
        ));
        let effects = Arc::new(SideEffects::new(store.clone(), dispatcher.clone(), confirmations));
        let agent = Agent::new(model, sub_model, tools, effects.clone(), &settings);
        let bookkeeping = Bookkeeping::new(store.clone(), store.clone(), queues.clone());
        Self {
            conversations: store.clone(),
            subtasks: store.clone(),
            approved: ApprovedEffects::new(store.clone(), dispatcher, settings.idle_expiry),
            closer: Closer::new(store.clone(), queues.clone(), &settings),
            safety_margin: settings.safety_margin,
            heartbeat: settings.heartbeat,
            runner: Runner::new(store.clone(), store, bookkeeping.clone(), effects.clone(), agent, queues, settings),
            bookkeeping,
            effects,
        }
    }

    /// Handles one tasks-queue message; `deadline` is when the invocation must
    /// have returned (the Lambda's deadline minus a safety margin).
    pub async fn handle(&self, message: TaskMessage, deadline: Instant) -> Outcome {
        match message {
            TaskMessage::Run { conversation_id, subtask_id, handbacks } => {
                let span = subtask_span(&conversation_id, &subtask_id);
                self.runner
                    .run(&conversation_id, &subtask_id, handbacks, deadline)
                    .instrument(span)
                    .await
                    .unwrap_or_else(Outcome::from)
            }
            TaskMessage::Deadline { conversation_id, turn } => self.closer.deadline(&conversation_id, turn).await,
            TaskMessage::Execute { conversation_id, approval_id } => {
                let span =
                    tracing::info_span!("execute", conversation_id = %conversation_id, approval_id = %approval_id);
                self.approved
                    .execute(&conversation_id, &approval_id, deadline)
                    .instrument(span)
                    .await
                    .unwrap_or_else(Outcome::from)
            }
            TaskMessage::Confirm { conversation_id, subtask_id, attempt } => {
                let span = subtask_span(&conversation_id, &subtask_id);
                self.confirm(&conversation_id, &subtask_id, attempt, deadline)
                    .instrument(span)
                    .await
                    .unwrap_or_else(Outcome::from)
            }
        }
    }

    /// A [`TaskMessage::Confirm`] (armed before the subtask's intents, or sent after a replay that
    /// still learnt nothing; `attempt`: replays so far): learn the outcome of side effects still
    /// being confirmed. While the subtask is open its attempt may still record them: looked at again
    /// after the confirm delay, replays not counted. Once it is closed (by its worker, the deadline
    /// path, the sweep or a dead letter) its intents are replayed as recorded; one still unknown is
    /// looked at again until the replays are used up. Once every outcome is known the subtask is
    /// settled (`SUBMITTED` → the journal's result) and its dependents, which waited for it, are
    /// released or skipped ([`Self::settle_and_release`]).
    async fn confirm(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        attempt: u32,
        deadline: Instant,
    ) -> Result<Outcome, StoreError> {
        let Some(conversation) = self.conversations.get_conversation(id).await? else {
            return Ok(Outcome::Poison(format!("unknown conversation {id}")));
        };
        let Some(record) = self.subtasks.get_subtask(id, subtask_id).await? else {
            return Ok(Outcome::Poison(format!("unknown subtask {subtask_id}")));
        };
        if !record.effects.iter().any(|e| e.state == EffectState::Intent) {
            if record.status.is_terminal() && !record.effects.is_empty() {
                // Every outcome is known: a confirmation killed after the last one's write, or after
                // the settle, left the settle or the release undone; its redelivery does them now.
                return self.settle_and_release(id, record).await;
            }
            return Ok(Outcome::Ignored("nothing to confirm".into()));
        }
        if !record.status.is_terminal() {
            if conversation.status.is_terminal() {
                // Never so: the deadline path closes every open subtask before the conversation ends.
                tracing::error!(status = record.status.as_str(), "an open subtask of a finished conversation");
                obs::metrics::effect_unconfirmed();
                return Ok(Outcome::Ignored("the subtask is open in a finished conversation".into()));
            }
            return Ok(self.effects.confirm_later(&record, attempt).await);
        }
        if self.effects.confirm_effects(&record, &conversation.customer_id, deadline).await? {
            tracing::info!("side effects confirmed");
            // The journal as the replays left it.
            let Some(record) = self.subtasks.get_subtask(id, subtask_id).await? else {
                return Ok(Outcome::Poison(format!("unknown subtask {subtask_id}")));
            };
            return self.settle_and_release(id, record).await;
        }
        Ok(self.effects.confirm_later(&record, attempt + 1).await)
    }

    /// A closed subtask whose journal holds every outcome: settled (`SUBMITTED` → the journal's
    /// result), then its dependents decided — released when all their parents succeeded, skipped
    /// when one did not. Both are safe to repeat, so a redelivered confirmation (after a crash
    /// anywhere in between) completes them exactly once; while it never comes, the deadline path
    /// closes the dependents. Answers the subtask's status after.
    async fn settle_and_release(&self, id: &ConversationId, record: SubtaskRecord) -> Result<Outcome, StoreError> {
        let settled = self.bookkeeping.settle(id, record).await?;
        if !settled.dependents.is_empty() {
            self.bookkeeping.count_and_release(id, &settled).await?;
        }
        Ok(Outcome::Finished(settled.status))
    }
}

#[async_trait]
impl MessageHandler for Worker {
    fn safety_margin(&self) -> Duration {
        self.safety_margin
    }

    /// A tasks-queue message ([`Worker::handle`]).
    async fn on_message(&self, message: TaskMessage, deadline: Instant) -> Outcome {
        self.handle(message, deadline).await
    }

    /// As its closer does: the tasks queues' retry visibility timeout.
    async fn retry_later(&self, queue: &str, receipt_handle: &str) {
        self.closer.retry_later(queue, receipt_handle).await
    }

    /// The table's receipt heartbeat: a crashed invocation's batch comes back after the receipt visibility.
    fn receipt_heartbeat(&self) -> Option<Heartbeat> {
        Some(self.heartbeat)
    }

    /// On the queue it consumes (one it holds: the tasks queue, or the refund role's).
    async fn keep_in_flight(
        &self,
        queue: &str,
        receipt_handles: &[String],
        seconds: u32,
    ) -> Result<Vec<String>, QueueError> {
        self.closer.keep_in_flight(queue, receipt_handles, seconds).await
    }
}
