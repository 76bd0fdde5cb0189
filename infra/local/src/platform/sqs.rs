//! The SQS side only the local platform needs: `SqsConsumer` (what an event source mapping does: receive, delete, change visibility) and queue provisioning with a DLQ.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use swarm_adapters::aws::retry::{AwsRetryPolicy, sdk_error_is_transient};
use swarm_adapters::aws::sqs::{SqsTaskQueue, to_queue_error, without_sdk_retries};
use swarm_core::ports::{QueueError, SQS_BATCH_LIMIT, TaskQueue};

use super::{Delivery, QueueConsumer, QueueDepth};

/// Longest `WaitTimeSeconds` of one `ReceiveMessage` call (SQS limit).
const MAX_LONG_POLL_SECS: u64 = 20;

/// [`QueueConsumer`] on one SQS queue: what an event source mapping does, for
/// the local stack and tests. Receives ask for `ApproximateReceiveCount` and
/// `SentTimestamp`; long polls over 20 s (the SQS limit) are repeated until the wait ends.
#[derive(Clone, Debug)]
pub struct SqsConsumer {
    client: Client,
    queue_url: String,
    retry: AwsRetryPolicy,
    /// The functions' side of the same queue: `ChangeMessageVisibility` is theirs too.
    sender: SqsTaskQueue,
}

impl SqsConsumer {
    pub fn new(client: Client, queue_url: String) -> Self {
        let sender = SqsTaskQueue::new(client.clone(), queue_url.clone());
        Self { client: without_sdk_retries(client), queue_url, retry: AwsRetryPolicy::default(), sender }
    }

    /// Replaces the retry policy (tests use short ones).
    pub fn with_retry(mut self, retry: AwsRetryPolicy) -> Self {
        self.retry = retry;
        self.sender = self.sender.with_retry(retry);
        self
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }
}

#[async_trait]
impl QueueConsumer for SqsConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, QueueError> {
        let max = max.clamp(1, SQS_BATCH_LIMIT) as i32;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            // Whole seconds, rounded up so a sub-second wait still long-polls.
            let wait_secs = left.as_millis().div_ceil(1000).min(u128::from(MAX_LONG_POLL_SECS)) as i32;
            let req = self
                .client
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(max)
                .wait_time_seconds(wait_secs)
                .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
                .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp);
            // The attempt deadline must outlast the long poll itself.
            let policy = AwsRetryPolicy {
                attempt_timeout: self.retry.attempt_timeout + Duration::from_secs(wait_secs as u64),
                ..self.retry
            };
            let out = policy
                .run("sqs", "ReceiveMessage", sdk_error_is_transient, || req.clone().send())
                .await
                .map_err(|e| to_queue_error("ReceiveMessage", e))?;
            let mut deliveries = Vec::new();
            for m in out.messages() {
                let attrs = m.attributes();
                let receive_count = attrs
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1);
                let sent_at_ms = attrs
                    .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let (Some(message_id), Some(receipt_handle)) = (m.message_id(), m.receipt_handle()) else {
                    return Err(QueueError::Permanent(
                        "ReceiveMessage answered a message without id or receipt handle".into(),
                    ));
                };
                deliveries.push(Delivery {
                    message_id: message_id.to_owned(),
                    receipt_handle: receipt_handle.to_owned(),
                    body: m.body().unwrap_or_default().to_owned(),
                    receive_count,
                    sent_at_ms,
                });
            }
            if !deliveries.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(deliveries);
            }
        }
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let req = self.client.delete_message().queue_url(&self.queue_url).receipt_handle(receipt_handle);
        self.retry
            .run("sqs", "DeleteMessage", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_queue_error("DeleteMessage", e))?;
        Ok(())
    }

    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        self.sender.change_visibility(receipt_handle, seconds).await
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        use QueueAttributeName as A;
        let req = self
            .client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(A::ApproximateNumberOfMessages)
            .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(A::ApproximateNumberOfMessagesDelayed);
        let out = self
            .retry
            .run("sqs", "GetQueueAttributes", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_queue_error("GetQueueAttributes", e))?;
        let attrs = out.attributes.unwrap_or_default();
        let get = |a: A| attrs.get(&a).and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok(QueueDepth {
            visible: get(A::ApproximateNumberOfMessages),
            in_flight: get(A::ApproximateNumberOfMessagesNotVisible),
            delayed: get(A::ApproximateNumberOfMessagesDelayed),
        })
    }
}

/// A queue and its dead-letter queue, as [`create_queue_with_dlq`] creates them.
#[derive(Clone, Copy, Debug)]
pub struct QueueSpec<'a> {
    /// The queue's name; the DLQ is `<name>-dlq`.
    pub name: &'a str,
    /// The queue's `VisibilityTimeout`, seconds.
    pub visibility_timeout_secs: u32,
    /// The DLQ's `VisibilityTimeout`, seconds (what its consumer's retries wait).
    pub dlq_visibility_timeout_secs: u32,
    /// Redrive policy: receives before a message moves to the DLQ.
    pub max_receive_count: u32,
}

/// Creates a queue and its dead-letter queue `<name>-dlq` (for the emulator,
/// tests and `swarm-local`): each with its `VisibilityTimeout`, and a redrive
/// policy moving a message to the DLQ after `max_receive_count` receives.
/// Existing queues of those names with the same attributes are reused.
/// Returns `(queue_url, dlq_url)`.
///
/// Errors: [`QueueError::Permanent`] when SQS rejects a request (e.g. a name
/// over 80 characters, or an existing queue with other attributes).
pub async fn create_queue_with_dlq(client: &Client, spec: QueueSpec<'_>) -> Result<(String, String), QueueError> {
    let QueueSpec { name, visibility_timeout_secs, dlq_visibility_timeout_secs, max_receive_count } = spec;
    let retry = AwsRetryPolicy::default();
    let dlq_name = format!("{name}-dlq");
    let req = client
        .create_queue()
        .queue_name(&dlq_name)
        .attributes(QueueAttributeName::VisibilityTimeout, dlq_visibility_timeout_secs.to_string());
    let dlq_url = retry
        .run("sqs", "CreateQueue", sdk_error_is_transient, || req.clone().send())
        .await
        .map_err(|e| to_queue_error("CreateQueue", e))?
        .queue_url
        .ok_or_else(|| QueueError::Permanent("CreateQueue answered no queue URL".into()))?;
    let req = client.get_queue_attributes().queue_url(&dlq_url).attribute_names(QueueAttributeName::QueueArn);
    let dlq_arn = retry
        .run("sqs", "GetQueueAttributes", sdk_error_is_transient, || req.clone().send())
        .await
        .map_err(|e| to_queue_error("GetQueueAttributes", e))?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .ok_or_else(|| QueueError::Permanent("GetQueueAttributes answered no QueueArn".into()))?;
    let redrive = serde_json::json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": max_receive_count.to_string(),
    })
    .to_string();
    let req = client
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::VisibilityTimeout, visibility_timeout_secs.to_string())
        .attributes(QueueAttributeName::RedrivePolicy, redrive);
    let queue_url = retry
        .run("sqs", "CreateQueue", sdk_error_is_transient, || req.clone().send())
        .await
        .map_err(|e| to_queue_error("CreateQueue", e))?
        .queue_url
        .ok_or_else(|| QueueError::Permanent("CreateQueue answered no queue URL".into()))?;
    tracing::info!(%queue_url, %dlq_url, visibility_timeout_secs, max_receive_count, "queue with DLQ ready");
    Ok((queue_url, dlq_url))
}
