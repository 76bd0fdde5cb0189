//! Confirmations scheduled: a side effect whose outcome is still not known gets a `Confirm` message later, while replays remain — whoever left it so (the agent loop, a re-run, the deadline path, a dead letter).

use swarm_core::domain::{SubtaskRecord, TaskMessage};
use swarm_core::roles::TaskQueues;

/// Sends [`TaskMessage::Confirm`] messages to the subtask's role's queue.
#[derive(Clone)]
pub struct Confirmations {
    queues: TaskQueues,
    /// `DelaySeconds` before a side effect whose outcome is not known is replayed to confirm it.
    delay_secs: u32,
    /// Replays of such a side effect before it is left as submitted.
    attempts: u32,
}

impl Confirmations {
    /// Confirmations over `queues`, `delay_secs` apart (SQS `DelaySeconds`), at most `attempts` replays.
    pub fn new(queues: TaskQueues, delay_secs: u32, attempts: u32) -> Self {
        Self { queues, delay_secs, attempts }
    }

    /// Sends a [`TaskMessage::Confirm`] for `record` after the confirm delay, while replays remain
    /// (`attempt`: replays so far). A failed send is logged: the message that brought this subtask
    /// comes back after its visibility timeout and confirms instead.
    pub async fn schedule(&self, record: &SubtaskRecord, attempt: u32) {
        if attempt >= self.attempts {
            tracing::error!(attempt, "a side effect's outcome is still not known; it stays submitted");
            return;
        }
        let message = TaskMessage::Confirm {
            conversation_id: record.conversation_id.clone(),
            subtask_id: record.subtask.id.clone(),
            attempt,
        };
        if let Err(e) = self.queues.for_role(&record.role).send(&[message], self.delay_secs).await {
            // The message that brought this subtask comes back after its visibility timeout and confirms instead.
            tracing::warn!(error = %e, "could not schedule the confirmation of a side effect");
        }
    }
}
