//! What became of one message (`Outcome`, the handler turns it into the batch response), and what a worker function fed by a queue answers (`MessageHandler`): the base every room of the worker builds on.

use std::time::Duration;

use async_trait::async_trait;
use swarm_core::domain::{ConversationId, ConversationStatus, SubtaskId, SubtaskStatus, TaskMessage};
use swarm_core::ports::{QueueError, StoreError};

use crate::settings::Heartbeat;
use tokio::time::Instant;

/// What became of one message; the handler turns it into the batch response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The subtask reached a terminal status now.
    Finished(SubtaskStatus),
    /// The conversation reached a terminal status now (a deadline message: answered with the
    /// model-free reply, handed to a person, or failed when planning never finished).
    Concluded(ConversationStatus),
    /// A duplicate delivery: the result was already recorded (its bookkeeping is completed if a crash interrupted it).
    AlreadyFinished,
    /// Too little time left: progress saved and a delayed copy of the message sent.
    HandedBack,
    /// Not this delivery's turn (another attempt holds the lease, dependencies are open, a side
    /// effect is being confirmed): a delayed copy was sent to the same queue and this one is
    /// acknowledged, so its receive count does not grow toward the DLQ.
    Requeued(String),
    /// Nothing to do (deadline not yet due, conversation already over…).
    Ignored(String),
    /// Unusable message (unknown conversation or subtask): acknowledged, not retried.
    Poison(String),
    /// A transient failure: report the message in `batchItemFailures` so SQS redelivers it.
    Retry(String),
}

impl Outcome {
    pub fn should_retry(&self) -> bool {
        matches!(self, Self::Retry(_))
    }
}

impl From<StoreError> for Outcome {
    fn from(e: StoreError) -> Self {
        Self::Retry(e.to_string())
    }
}

/// A worker function fed by an SQS event source mapping (its handler): the tasks worker (its tasks queue) or
/// the closer (a dead-letter queue). The handler asks it for each record of a batch.
#[async_trait]
pub trait MessageHandler: Send + Sync {
    /// Time kept back from the Lambda deadline: the handler's invocation deadline is the
    /// Lambda's minus this.
    fn safety_margin(&self) -> Duration;

    /// Handles one message; `deadline` is when the invocation must have returned (the Lambda's
    /// deadline minus [`Self::safety_margin`]).
    async fn on_message(&self, message: TaskMessage, deadline: Instant) -> Outcome;

    /// Makes a message reported in `batchItemFailures` visible again soon (`ChangeMessageVisibility`);
    /// `queue` is the message's queue name (the end of its `eventSourceARN`). Failures are logged.
    async fn retry_later(&self, queue: &str, receipt_handle: &str);

    /// The heartbeat its batch's messages are kept in flight with while the invocation is alive
    /// (the tasks worker's); `None` (the default): the queue's visibility timeout alone.
    fn receipt_heartbeat(&self) -> Option<Heartbeat> {
        None
    }

    /// `ChangeMessageVisibilityBatch` of `receipt_handles` on `queue` (the end of its
    /// `eventSourceARN`) to `seconds`: answers the handles whose change failed (stale: the message
    /// was received again); `Err` when the call failed as a whole. By default nothing is changed.
    async fn keep_in_flight(
        &self,
        _queue: &str,
        _receipt_handles: &[String],
        _seconds: u32,
    ) -> Result<Vec<String>, QueueError> {
        Ok(Vec::new())
    }
}

/// The span of one subtask's work: every event logged while running it carries its ids.
pub fn subtask_span(conversation_id: &ConversationId, subtask_id: &SubtaskId) -> tracing::Span {
    tracing::info_span!("subtask", conversation_id = %conversation_id, subtask_id = %subtask_id)
}
