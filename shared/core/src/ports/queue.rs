//! The tasks queue's sending side as a function uses it (SQS on AWS): sending, and when a received message comes back.

use async_trait::async_trait;

use crate::domain::TaskMessage;

/// Errors of a [`TaskQueue`].
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue temporarily unavailable: {0}")]
    Transient(String),
    #[error("queue error: {0}")]
    Permanent(String),
}

impl QueueError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
}

/// Longest SQS `DelaySeconds` (15 minutes).
pub const MAX_DELAY_SECONDS: u32 = 900;
/// Most entries in one `SendMessageBatch` call.
pub const SQS_BATCH_LIMIT: usize = 10;

/// Longest visibility timeout of an SQS message (12 hours).
pub const MAX_VISIBILITY_SECONDS: u32 = 43_200;

/// A tasks queue as a function uses it (SQS on AWS): sending, and setting when a message it
/// received comes back.
#[async_trait]
pub trait TaskQueue: Send + Sync {
    /// The queue's name: the last part of its URL and of its ARN (an SQS event record names its
    /// queue by ARN, `eventSourceARN`).
    fn name(&self) -> &str;

    /// Sends every message, delayed by `delay_seconds` (0..=900, SQS `DelaySeconds`).
    /// Adapters send in chunks of at most 10 ([`SQS_BATCH_LIMIT`]) and retry
    /// failed entries; an error means some message may not have been sent.
    /// Each message carries the sending span's trace context as its W3C `traceparent`
    /// message attribute ([`crate::obs::context::current_traceparent`]; none without
    /// telemetry), which the consumer's record span continues.
    async fn send(&self, messages: &[TaskMessage], delay_seconds: u32) -> Result<(), QueueError>;

    /// `ChangeMessageVisibility`: the received message of `receipt_handle` becomes visible again
    /// `seconds` (0..=[`MAX_VISIBILITY_SECONDS`]) from now, instead of after the queue's visibility
    /// timeout. Errors: a stale or unknown receipt handle, or more than the maximum, is permanent.
    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError>;

    /// `ChangeMessageVisibilityBatch`: every received message of `receipt_handles` becomes visible
    /// again `seconds` (0..=[`MAX_VISIBILITY_SECONDS`]) from now, in calls of at most 10 entries
    /// ([`SQS_BATCH_LIMIT`]). Answers the handles whose change failed (stale or unknown: the
    /// message was deleted or received again); `Err` when no call could be made (transient) or
    /// `seconds` is beyond the maximum (permanent). By default one [`Self::change_visibility`] each.
    async fn change_visibility_batch(
        &self,
        receipt_handles: &[String],
        seconds: u32,
    ) -> Result<Vec<String>, QueueError> {
        let mut failed = Vec::new();
        for handle in receipt_handles {
            match self.change_visibility(handle, seconds).await {
                Ok(()) => {}
                Err(e) if e.is_transient() => return Err(e),
                Err(_) => failed.push(handle.clone()),
            }
        }
        Ok(failed)
    }
}
