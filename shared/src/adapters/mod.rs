//! Adapters behind the ports: embedded ones for the local run and tests, AWS ones behind the `aws` feature.

#[cfg(feature = "aws")]
pub mod dynamo;
#[cfg(feature = "aws")]
pub mod dynamo_stream;
pub mod mcp_gateway;
pub mod memory_queue;
pub mod memory_store;
#[cfg(feature = "aws")]
pub mod sqs;

pub use memory_queue::{InMemoryQueue, QueueSettings};
pub use memory_store::{InMemoryConversationStore, ItemChange};
