//! What only the local platform needs, and no Lambda links: the consumer side of a queue (the event source mapping's view), the SQS consumer, table and queue provisioning, the DynamoDB stream reader with the aggregator's filter.
//!
//! On AWS, Lambda's event source mappings receive from SQS and read the
//! DynamoDB stream; locally `infra/local` does it, over [`QueueConsumer`]
//! (implemented here for the embedded queue and for SQS on an emulator).

pub mod dynamo_stream;
pub mod dynamo_table;
pub mod sqs;

use std::time::Duration;

use async_trait::async_trait;
use swarm_adapters::embedded::InMemoryQueue;
use swarm_core::ports::QueueError;

/// One received message, as an event source mapping hands it to a function
/// (`messageId`, `receiptHandle`, `body`, `ApproximateReceiveCount`, `SentTimestamp`).
pub use swarm_adapters::embedded::ReceivedMessage as Delivery;

/// The receiving side of a queue: what an event source mapping (or the local
/// stack's poller) uses. Semantics as SQS: a received message is invisible for
/// the visibility timeout, reappears unless deleted, and after `maxReceiveCount`
/// receives moves to the DLQ (redrive policy).
#[async_trait]
pub trait QueueConsumer: Send + Sync {
    /// Receives up to `max` (1..=10) messages, waiting up to `wait` for the first (long poll).
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, QueueError>;
    /// Deletes a received message (acknowledge).
    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError>;
    /// Makes a received message visible again after `seconds` (0..=43200).
    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError>;
}

#[async_trait]
impl QueueConsumer for InMemoryQueue {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, QueueError> {
        InMemoryQueue::receive(self, max, wait).await
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        InMemoryQueue::delete(self, receipt_handle).await
    }

    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        InMemoryQueue::change_visibility(self, receipt_handle, seconds).await
    }
}
