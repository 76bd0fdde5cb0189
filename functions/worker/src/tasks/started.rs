//! One delivery of a `Run` message whose attempt started: the conversation, the subtask as begun, the lease holder and when the work must stop.

use swarm_core::domain::{Conversation, ConversationId, SubtaskId, SubtaskRecord, TaskMessage};
use tokio::time::Instant;

/// One delivery of a `Run` message whose attempt started (this delivery holds the subtask's lease).
pub struct Started<'a> {
    pub conversation: &'a Conversation,
    pub record: SubtaskRecord,
    /// The attempt's lease holder.
    pub holder: String,
    /// Hand-backs so far (the message's).
    pub handbacks: u32,
    /// When the work stops: the earlier of the invocation's deadline and the conversation's.
    pub deadline: Instant,
    /// Whether that is the conversation's (running out of time then records what the subtask has).
    pub conversation_bound: bool,
}

impl Started<'_> {
    pub fn id(&self) -> &ConversationId {
        &self.conversation.id
    }

    pub fn subtask_id(&self) -> &SubtaskId {
        &self.record.subtask.id
    }

    /// The message that runs this subtask again, `handbacks` as given.
    pub fn again(&self, handbacks: u32) -> TaskMessage {
        TaskMessage::Run { conversation_id: self.id().clone(), subtask_id: self.subtask_id().clone(), handbacks }
    }
}
