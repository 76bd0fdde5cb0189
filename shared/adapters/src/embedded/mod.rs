//! Embedded adapters (feature `embedded`): the conversation store and the queue in memory, with DynamoDB's and SQS's semantics, for the local stack and tests.

mod access;
mod approvals;
mod events;
mod queue;
mod store;
mod subtasks;

pub use queue::{InMemoryQueue, QueueDepth, QueueSettings, ReceivedMessage};
pub use store::{ChangedItem, InMemoryConversationStore, ItemChange};
