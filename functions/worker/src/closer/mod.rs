//! The closer: whatever ends work no model and no tool will finish — the deadline path, the sweep and dead letters. It needs neither a model nor a gateway credential: the DLQ consumer and the sweeper are built as a closer alone, and the tasks worker holds one for its deadline messages.

mod backstop;
mod closing;
mod deadline;
mod sweep;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use swarm_core::approval::ApprovalKey;
use swarm_core::domain::{ConversationId, FailureKind, SubtaskId, SubtaskResult, SubtaskStatus, TaskMessage, now_ms};
use swarm_core::effects::EffectState;
use swarm_core::obs;
use swarm_core::ports::{ConversationStore, QueueError, StoreError, SubtaskStore};
use swarm_core::roles::TaskQueues;
use tokio::time::Instant;
use tracing::Instrument;

use self::backstop::Reissue;
use self::closing::{Closed, Closing};
use self::deadline::DeadlinePath;
use self::sweep::Sweep;
pub use self::sweep::SweepReport;
use crate::bookkeeping::Bookkeeping;
use crate::confirmations::{Confirmations, Scheduled};
use crate::outcome::{MessageHandler, Outcome, subtask_span};
use crate::settings::WorkerSettings;

/// The closer of a worker function: the deadline path, the sweep, dead letters.
pub struct Closer {
    deadline_path: Arc<DeadlinePath>,
    closing: Closing,
    bookkeeping: Bookkeeping,
    sweep: Sweep,
    /// Reads a dead-lettered confirmation's subtask (its role names the queue to hand it back to).
    subtasks: Arc<dyn SubtaskStore>,
    /// Hands a dead-lettered confirmation back to its role's queue while replays remain.
    confirmations: Confirmations,
    /// The queues it sends to, and makes a failed message visible again on.
    queues: TaskQueues,
    /// Kept back from the Lambda deadline.
    safety_margin: Duration,
    /// Seconds until a message reported in `batchItemFailures` comes back.
    retry_visibility_secs: u32,
}

impl Closer {
    /// The closer over `store` (each of its parts holds the roles it uses: no journal), sending to
    /// `queues` (deadline messages to the default one, released dependents to their role's: never
    /// a queue it does not hold), with `settings`' re-arm, aggregation lease and sweep timings.
    pub fn new(store: Arc<dyn ConversationStore>, queues: TaskQueues, settings: &WorkerSettings) -> Self {
        let closing = Closing::new(store.clone());
        let deadline_path = Arc::new(DeadlinePath::new(
            store.clone(),
            store.clone(),
            store.clone(),
            store.clone(),
            closing.clone(),
            queues.clone(),
            settings,
        ));
        Self {
            sweep: Sweep::new(store.clone(), store.clone(), deadline_path.clone(), settings.sweep),
            subtasks: store.clone(),
            confirmations: Confirmations::new(queues.clone(), settings.confirm_delay_secs, settings.confirm_attempts),
            bookkeeping: Bookkeeping::new(store.clone(), store, queues.clone()),
            deadline_path,
            closing,
            queues,
            safety_margin: settings.safety_margin,
            retry_visibility_secs: settings.retry_visibility_secs,
        }
    }

    /// This closer's sweep holding the approval key: it re-enqueues approved side effects not run
    /// past their token's window to their role's queue (of this closer's queues) with a fresh token.
    pub fn with_approval_key(mut self, key: ApprovalKey) -> Self {
        self.sweep = self.sweep.with_reissue(Reissue::new(key, self.queues.clone()));
        self
    }

    /// A [`TaskMessage::Deadline`] of `turn`: the deadline path in its own span (the conversation's
    /// status is recorded once read), re-armed while that turn is the conversation's and not terminal.
    pub async fn deadline(&self, id: &ConversationId, turn: u32) -> Outcome {
        let span = tracing::info_span!("deadline", conversation_id = %id, turn, status = tracing::field::Empty);
        self.deadline_path
            .run(id, Some(turn), true)
            .instrument(span)
            .await
            .map_or_else(Outcome::from, |(outcome, _)| outcome)
    }

    /// One sweep: the deadline path (without re-arming) of every conversation past its deadline that
    /// is not terminal, until `deadline`; then the approvals-waiting gauges.
    pub async fn sweep(&self, deadline: Instant) -> SweepReport {
        self.sweep.run(deadline).await
    }

    /// Handles a message that reached the DLQ: the subtask is recorded as
    /// failed and counted, so the conversation still completes — or, when its journal
    /// holds side effects, as what the journal says (never "failed" for something done);
    /// a confirmation is handed back to its role's queue ([`Self::dead_confirm`]).
    pub async fn handle_dead_letter(&self, message: TaskMessage) -> Outcome {
        match message {
            TaskMessage::Run { conversation_id, subtask_id, .. } => {
                let span = subtask_span(&conversation_id, &subtask_id);
                self.dead_run(&conversation_id, &subtask_id).instrument(span).await.unwrap_or_else(Outcome::from)
            }
            TaskMessage::Deadline { conversation_id, turn } => self.deadline(&conversation_id, turn).await,
            TaskMessage::Execute { approval_id, .. } => {
                // The approval stays approved: once its token's window has passed, the sweep re-enqueues
                // it with a fresh token (a re-post within the window enqueues it again as it is).
                tracing::error!(%approval_id, "an approved side effect reached the dead-letter queue; it did not run");
                Outcome::Ignored("approved side effect dead-lettered".into())
            }
            TaskMessage::Confirm { conversation_id, subtask_id, attempt } => {
                let span = subtask_span(&conversation_id, &subtask_id);
                self.dead_confirm(&conversation_id, &subtask_id, attempt)
                    .instrument(span)
                    .await
                    .unwrap_or_else(Outcome::from)
            }
        }
    }

    /// A dead-lettered confirmation (`attempt`: replays so far): its receives were used up by failed
    /// invocations (crashes, throttles, a restart), which say nothing of the side effect, so it is
    /// handed back to the subtask's role's queue as the next replay — the dead letter counts as one,
    /// so the chain ends after the timing table's `money.confirm_attempts`. Used up, or with no
    /// sender for that queue, the side effect stays submitted (counted: `swarm_effects_unconfirmed`).
    /// Errors: the store's read (transient: the dead letter comes back).
    async fn dead_confirm(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        attempt: u32,
    ) -> Result<Outcome, StoreError> {
        let Some(record) = self.subtasks.get_subtask(id, subtask_id).await? else {
            return Ok(Outcome::Poison(format!("unknown subtask {subtask_id}")));
        };
        let open = record.status == SubtaskStatus::Submitted || !record.status.is_terminal();
        if !open && !record.effects.iter().any(|e| e.state == EffectState::Intent) {
            return Ok(Outcome::Ignored("a dead-lettered confirmation with nothing left to confirm".into()));
        }
        match self.confirmations.again(&record.role, id, subtask_id, attempt + 1).await {
            Ok(Scheduled::Sent) => {
                tracing::warn!(
                    attempt,
                    "a confirmation reached the dead-letter queue: handed back to its role's queue"
                );
                Ok(Outcome::Requeued("a dead-lettered confirmation handed back".into()))
            }
            Ok(Scheduled::GivenUp) => {
                tracing::error!(
                    attempt,
                    "a confirmation reached the dead-letter queue after every replay; the side effect stays submitted"
                );
                obs::metrics::effect_unconfirmed();
                Ok(Outcome::Ignored("confirmation dead-lettered after every replay".into()))
            }
            Err(e) if e.is_transient() => Ok(Outcome::Retry(format!("could not hand the confirmation back: {e}"))),
            Err(e) => {
                tracing::error!(error = %e, "a confirmation reached the dead-letter queue and cannot be handed back; the side effect stays submitted");
                obs::metrics::effect_unconfirmed();
                Ok(Outcome::Ignored("confirmation dead-lettered".into()))
            }
        }
    }

    /// A dead-lettered run: the subtask closed (failed, or as its journal says) and counted.
    async fn dead_run(&self, id: &ConversationId, subtask_id: &SubtaskId) -> Result<Outcome, StoreError> {
        let fallback = SubtaskResult::failed(
            FailureKind::DeadLetter,
            "gave up after repeated failures (the message reached the dead-letter queue)",
        );
        tracing::warn!("dead letter: recording the subtask as failed");
        obs::metrics::dead_letter();
        match self.closing.close_open(id, subtask_id, fallback, now_ms()).await? {
            Closed::Now(rec) | Closed::Before(rec) => {
                self.bookkeeping.count_and_release(id, &rec).await?;
                Ok(Outcome::Finished(rec.status))
            }
            Closed::Missing => Ok(Outcome::Poison(format!("unknown subtask {subtask_id}"))),
        }
    }
}

impl Closer {
    /// `ChangeMessageVisibilityBatch` of `receipt_handles` on `queue`, one of the queues this
    /// function holds (the tasks worker's receipt heartbeat); another queue's messages keep its own
    /// timeout (nothing failed). Answers the stale handles.
    pub(crate) async fn keep_in_flight(
        &self,
        queue: &str,
        receipt_handles: &[String],
        seconds: u32,
    ) -> Result<Vec<String>, QueueError> {
        match self.queues.by_name(queue) {
            Some(q) => q.change_visibility_batch(receipt_handles, seconds).await,
            None => Ok(Vec::new()),
        }
    }
}

#[async_trait]
impl MessageHandler for Closer {
    fn safety_margin(&self) -> Duration {
        self.safety_margin
    }

    /// A dead-letter queue's message ([`Closer::handle_dead_letter`]).
    async fn on_message(&self, message: TaskMessage, _deadline: Instant) -> Outcome {
        self.handle_dead_letter(message).await
    }

    /// Makes a message reported in `batchItemFailures` visible again after the retry visibility
    /// timeout rather than the queue's. A queue this function does not send to (a DLQ) keeps its
    /// own timeout. A failure is logged: the message then comes back after the queue's visibility
    /// timeout, and the sweep covers its conversation.
    async fn retry_later(&self, queue: &str, receipt_handle: &str) {
        let Some(q) = self.queues.by_name(queue) else {
            tracing::debug!(queue, "not a tasks queue: the message keeps the queue's visibility timeout");
            return;
        };
        if let Err(e) = q.change_visibility(receipt_handle, self.retry_visibility_secs).await {
            tracing::warn!(queue, error = %e, "ChangeMessageVisibility failed: the message returns after the queue's visibility timeout");
        }
    }
}
