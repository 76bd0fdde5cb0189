//! Confirmations of side effects, armed by the function that makes them: a `Confirm` message on the subtask's role's own queue before any intent is written, which comes back while the subtask runs and, once it is closed (by its worker, the deadline path, the sweep or a dead letter), replays the intents whose outcome is not known — so no function without that role's queue and credential ever needs to send one.

use swarm_core::domain::{ConversationId, SubtaskId, TaskMessage};
use swarm_core::ports::QueueError;
use swarm_core::roles::TaskQueues;

/// What [`Confirmations::again`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scheduled {
    /// The next confirmation was sent.
    Sent,
    /// The replays are used up: the outcome stays not known ("submitted, being confirmed").
    GivenUp,
}

/// Sends [`TaskMessage::Confirm`] messages to the subtask's role's queue — held by the function
/// that runs that role's subtasks (the refund worker for refunds), never another.
#[derive(Clone)]
pub struct Confirmations {
    queues: TaskQueues,
    /// `DelaySeconds` between two looks at a side effect whose outcome is not known.
    delay_secs: u32,
    /// Replays of such a side effect before it is left as submitted.
    attempts: u32,
}

impl Confirmations {
    /// Confirmations over `queues`, `delay_secs` apart (SQS `DelaySeconds`), at most `attempts` replays.
    pub fn new(queues: TaskQueues, delay_secs: u32, attempts: u32) -> Self {
        Self { queues, delay_secs, attempts }
    }

    /// Arms the confirmation of the side effects a subtask of `role` is about to journal: a
    /// [`TaskMessage::Confirm`] (no replay yet) after the confirm delay, sent before any intent is
    /// written, so every intent has one on the way whatever happens to the attempt after it.
    ///
    /// Errors: the send's; a permanent one when this function holds no sender for the role's queue
    /// (it must then make no side effect: nothing could confirm it).
    pub async fn arm(&self, role: &str, id: &ConversationId, subtask_id: &SubtaskId) -> Result<(), QueueError> {
        let queue = self.queues.queue_for(role)?;
        let message = TaskMessage::Confirm { conversation_id: id.clone(), subtask_id: subtask_id.clone(), attempt: 0 };
        queue.send(&[message], self.delay_secs).await
    }

    /// The confirmation of `role`'s subtask after `attempt` replays, sent after the confirm delay
    /// while replays remain ([`Scheduled::GivenUp`] once they are used up).
    ///
    /// Errors: the send's (the caller's message then comes back and confirms instead).
    pub async fn again(
        &self,
        role: &str,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        attempt: u32,
    ) -> Result<Scheduled, QueueError> {
        if attempt >= self.attempts {
            return Ok(Scheduled::GivenUp);
        }
        let queue = self.queues.queue_for(role)?;
        let message = TaskMessage::Confirm { conversation_id: id.clone(), subtask_id: subtask_id.clone(), attempt };
        queue.send(&[message], self.delay_secs).await?;
        Ok(Scheduled::Sent)
    }
}
