//! SQS adapters of the task queue: batched concurrent sends with failed entries retried, and the consumer side (receive, delete, change visibility).

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry};

use super::dynamo::{RetryPolicy, sdk_error_is_transient};
use crate::domain::TaskMessage;
use crate::ports::{Delivery, MAX_DELAY_SECONDS, QueueConsumer, QueueError, SQS_BATCH_LIMIT, TaskQueue};

/// Longest `WaitTimeSeconds` of one `ReceiveMessage` call (SQS limit).
const MAX_LONG_POLL_SECS: u64 = 20;
/// Longest visibility timeout (SQS limit: 12 hours).
const MAX_VISIBILITY_SECS: u32 = 43_200;
/// Codes SQS answers for an invalid or stale receipt handle.
const STALE_RECEIPT_CODES: &[&str] = &["ReceiptHandleIsInvalid", "InvalidParameterValue", "MessageNotInflight"];

fn to_queue_error<E>(op: &'static str, e: SdkError<E, HttpResponse>) -> QueueError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let message = format!("SQS {op}: {}", DisplayErrorContext(&e));
    if sdk_error_is_transient(&e) { QueueError::Transient(message) } else { QueueError::Permanent(message) }
}

/// The SQS client with its own retries switched off: the adapters own the retry policy.
fn without_sdk_retries(client: Client) -> Client {
    let config = client.config().to_builder().retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled()).build();
    Client::from_conf(config)
}

/// [`TaskQueue`] on one SQS queue.
///
/// `send` splits the messages into `SendMessageBatch` calls of at most 10
/// entries ([`SQS_BATCH_LIMIT`]), sent concurrently; entries SQS reports as
/// failed (not the sender's fault) are resent with jittered backoff, at most
/// [`RetryPolicy::max_attempts`] rounds, then [`QueueError::Transient`].
/// Bodies are the [`TaskMessage`] JSON: ids only, never results.
#[derive(Clone, Debug)]
pub struct SqsTaskQueue {
    client: Client,
    queue_url: String,
    retry: RetryPolicy,
}

impl SqsTaskQueue {
    pub fn new(client: Client, queue_url: String) -> Self {
        Self { client: without_sdk_retries(client), queue_url, retry: RetryPolicy::default() }
    }

    /// Replaces the retry policy (tests use short ones).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Sends one chunk (≤ 10 bodies), resending failed entries.
    async fn send_chunk(&self, bodies: &[String], delay_seconds: u32) -> Result<(), QueueError> {
        // Entry ids are the positions in the chunk, so a failed entry maps back to its body.
        let mut pending: Vec<usize> = (0..bodies.len()).collect();
        let mut round = 0u32;
        loop {
            let mut req = self.client.send_message_batch().queue_url(&self.queue_url);
            for &i in &pending {
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(&bodies[i])
                    .delay_seconds(delay_seconds as i32)
                    .build()
                    .map_err(|e| QueueError::Permanent(format!("SendMessageBatch entry: {e}")))?;
                req = req.entries(entry);
            }
            let out = self
                .retry
                .run("sqs", "SendMessageBatch", sdk_error_is_transient, || req.clone().send())
                .await
                .map_err(|e| to_queue_error("SendMessageBatch", e))?;
            let failed = out.failed();
            if failed.is_empty() {
                return Ok(());
            }
            if let Some(f) = failed.iter().find(|f| f.sender_fault()) {
                return Err(QueueError::Permanent(format!(
                    "SendMessageBatch rejected entry: {} {}",
                    f.code(),
                    f.message().unwrap_or_default()
                )));
            }
            pending = failed.iter().filter_map(|f| f.id().parse().ok()).collect();
            round += 1;
            if round >= self.retry.max_attempts.max(1) {
                return Err(QueueError::Transient(format!(
                    "SendMessageBatch: {} entries still failing after {round} rounds (last: {})",
                    pending.len(),
                    failed[0].code()
                )));
            }
            let delay = self.retry.backoff(round);
            tracing::warn!(
                queue_url = %self.queue_url,
                failed = pending.len(),
                round,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "SendMessageBatch entries failed, resending"
            );
            tokio::time::sleep(delay).await;
        }
    }
}

#[async_trait]
impl TaskQueue for SqsTaskQueue {
    async fn send(&self, messages: &[TaskMessage], delay_seconds: u32) -> Result<(), QueueError> {
        if delay_seconds > MAX_DELAY_SECONDS {
            return Err(QueueError::Permanent(format!("DelaySeconds {delay_seconds} exceeds {MAX_DELAY_SECONDS}")));
        }
        let bodies = messages
            .iter()
            .map(|m| {
                serde_json::to_string(m).map_err(|e| QueueError::Permanent(format!("cannot serialize message: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let results = futures::future::join_all(
            bodies.chunks(SQS_BATCH_LIMIT).map(|chunk| self.send_chunk(chunk, delay_seconds)),
        )
        .await;
        let failures: Vec<QueueError> = results.into_iter().filter_map(Result::err).collect();
        tracing::debug!(queue_url = %self.queue_url, messages = messages.len(), delay_seconds, failed_chunks = failures.len(), "messages sent");
        match failures.into_iter().next() {
            None => Ok(()),
            Some(first) => Err(first),
        }
    }
}

/// [`QueueConsumer`] on one SQS queue: what an event source mapping does, for
/// the local stack and tests. Receives ask for `ApproximateReceiveCount` and
/// `SentTimestamp`; long polls over 20 s (the SQS limit) are repeated until the wait ends.
#[derive(Clone, Debug)]
pub struct SqsConsumer {
    client: Client,
    queue_url: String,
    retry: RetryPolicy,
}

impl SqsConsumer {
    pub fn new(client: Client, queue_url: String) -> Self {
        Self { client: without_sdk_retries(client), queue_url, retry: RetryPolicy::default() }
    }

    /// Replaces the retry policy (tests use short ones).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
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
            let policy = RetryPolicy {
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
        if seconds > MAX_VISIBILITY_SECS {
            return Err(QueueError::Permanent(format!(
                "visibility timeout {seconds} s exceeds {MAX_VISIBILITY_SECS} s"
            )));
        }
        let req = self
            .client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(seconds as i32);
        match self.retry.run("sqs", "ChangeMessageVisibility", sdk_error_is_transient, || req.clone().send()).await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error().and_then(|se| se.code()).is_some_and(|c| STALE_RECEIPT_CODES.contains(&c)) =>
            {
                Err(QueueError::Permanent(format!("receipt handle is not valid: {}", DisplayErrorContext(&e))))
            }
            Err(e) => Err(to_queue_error("ChangeMessageVisibility", e)),
        }
    }
}

/// Creates `name` and its dead-letter queue `<name>-dlq` (for the emulator,
/// tests and `swarm-local`): `VisibilityTimeout` in seconds, and a redrive
/// policy moving a message to the DLQ after `max_receive_count` receives.
/// Existing queues of those names with the same attributes are reused.
/// Returns `(queue_url, dlq_url)`.
///
/// Errors: [`QueueError::Permanent`] when SQS rejects a request (e.g. a name
/// over 80 characters, or an existing queue with other attributes).
pub async fn create_queue_with_dlq(
    client: &Client,
    name: &str,
    visibility_timeout_secs: u32,
    max_receive_count: u32,
) -> Result<(String, String), QueueError> {
    let retry = RetryPolicy::default();
    let dlq_name = format!("{name}-dlq");
    let req = client.create_queue().queue_name(&dlq_name);
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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn sqs_fixtures_carry_task_messages_and_receive_counts() {
        for (file, kinds) in [
            ("sqs-tasks.json", vec!["run", "run"]),
            ("sqs-deadline.json", vec!["deadline"]),
            ("sqs-dead-letter.json", vec!["run"]),
        ] {
            let path = format!("{}/../events/{file}", env!("CARGO_MANIFEST_DIR"));
            let event: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let records = event["Records"].as_array().unwrap();
            assert_eq!(records.len(), kinds.len(), "{file}");
            for (record, kind) in records.iter().zip(kinds) {
                let body = record["body"].as_str().unwrap();
                let message: TaskMessage = serde_json::from_str(body).unwrap();
                assert_eq!(serde_json::to_value(&message).unwrap()["kind"], kind, "{file}");
                assert_eq!(record["eventSource"], "aws:sqs");
                assert!(record["attributes"]["ApproximateReceiveCount"].as_str().unwrap().parse::<u32>().unwrap() >= 1);
                assert_eq!(record["md5OfBody"].as_str().unwrap().len(), 32);
            }
        }
    }
}
