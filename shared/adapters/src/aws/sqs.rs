//! SQS adapter of the task queue: batched concurrent sends with failed entries retried.

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
};
use swarm_core::domain::TaskMessage;
use swarm_core::obs::context::TRACEPARENT;
use swarm_core::ports::{MAX_DELAY_SECONDS, MAX_VISIBILITY_SECONDS, QueueError, SQS_BATCH_LIMIT, TaskQueue};

use crate::aws::retry::{AwsRetryPolicy, sdk_error_is_transient};

/// An SDK failure of SQS call `op` as a [`QueueError`], transient or permanent by [`sdk_error_is_transient`].
pub fn to_queue_error<E>(op: &'static str, e: SdkError<E, HttpResponse>) -> QueueError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let message = format!("SQS {op}: {}", DisplayErrorContext(&e));
    if sdk_error_is_transient(&e) { QueueError::Transient(message) } else { QueueError::Permanent(message) }
}

/// Codes SQS answers for an invalid or stale receipt handle.
const STALE_RECEIPT_CODES: &[&str] = &["ReceiptHandleIsInvalid", "InvalidParameterValue", "MessageNotInflight"];

/// The SQS client with its own retries switched off: the adapters own the retry policy.
pub fn without_sdk_retries(client: Client) -> Client {
    let config = client.config().to_builder().retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled()).build();
    Client::from_conf(config)
}

/// [`TaskQueue`] on one SQS queue.
///
/// `send` splits the messages into `SendMessageBatch` calls of at most 10
/// entries ([`SQS_BATCH_LIMIT`]), sent concurrently; entries SQS reports as
/// failed (not the sender's fault) are resent with jittered backoff, at most
/// [`AwsRetryPolicy::max_attempts`] rounds, then [`QueueError::Transient`].
/// Bodies are the [`TaskMessage`] JSON: ids only, never results. Each message carries the
/// sending span's W3C `traceparent` as a `String` message attribute of that name (when
/// telemetry records spans), which the event source mapping hands to the worker.
#[derive(Clone, Debug)]
pub struct SqsTaskQueue {
    client: Client,
    queue_url: String,
    /// The URL's last segment (the queue's name, as its ARN ends).
    name: String,
    retry: AwsRetryPolicy,
}

impl SqsTaskQueue {
    pub fn new(client: Client, queue_url: String) -> Self {
        let name = queue_url.trim_end_matches('/').rsplit('/').next().unwrap_or_default().to_owned();
        Self { client: without_sdk_retries(client), queue_url, name, retry: AwsRetryPolicy::default() }
    }

    /// Replaces the retry policy (tests use short ones).
    pub fn with_retry(mut self, retry: AwsRetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Sends one chunk (≤ 10 bodies), resending failed entries; each carries `trace` as its
    /// `traceparent` message attribute when set.
    async fn send_chunk(
        &self,
        bodies: &[String],
        delay_seconds: u32,
        trace: Option<&MessageAttributeValue>,
    ) -> Result<(), QueueError> {
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
                    .set_message_attributes(trace.map(|t| [(TRACEPARENT.to_owned(), t.clone())].into()))
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
    fn name(&self) -> &str {
        &self.name
    }

    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        if seconds > MAX_VISIBILITY_SECONDS {
            return Err(QueueError::Permanent(format!(
                "visibility timeout {seconds} s exceeds {MAX_VISIBILITY_SECONDS} s"
            )));
        }
        let req = self
            .client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(i32::try_from(seconds).unwrap_or(i32::MAX));
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

    async fn change_visibility_batch(
        &self,
        receipt_handles: &[String],
        seconds: u32,
    ) -> Result<Vec<String>, QueueError> {
        if seconds > MAX_VISIBILITY_SECONDS {
            return Err(QueueError::Permanent(format!(
                "visibility timeout {seconds} s exceeds {MAX_VISIBILITY_SECONDS} s"
            )));
        }
        let mut failed = Vec::new();
        for chunk in receipt_handles.chunks(SQS_BATCH_LIMIT) {
            let mut req = self.client.change_message_visibility_batch().queue_url(&self.queue_url);
            for (i, handle) in chunk.iter().enumerate() {
                let entry = ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(handle)
                    .visibility_timeout(i32::try_from(seconds).unwrap_or(i32::MAX))
                    .build()
                    .map_err(|e| QueueError::Permanent(format!("ChangeMessageVisibilityBatch entry: {e}")))?;
                req = req.entries(entry);
            }
            let out = self
                .retry
                .run("sqs", "ChangeMessageVisibilityBatch", sdk_error_is_transient, || req.clone().send())
                .await
                .map_err(|e| to_queue_error("ChangeMessageVisibilityBatch", e))?;
            // Entry ids are positions in the chunk; a failed entry (stale handle, or SQS's own fault)
            // is reported, not retried: the next heartbeat tries it again.
            failed.extend(
                out.failed().iter().filter_map(|f| f.id().parse::<usize>().ok()).filter_map(|i| chunk.get(i).cloned()),
            );
        }
        Ok(failed)
    }

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
        // The sender's trace context travels as a message attribute, as W3C `traceparent`.
        let trace = swarm_core::obs::context::current_traceparent()
            .and_then(|t| MessageAttributeValue::builder().data_type("String").string_value(t).build().ok());
        let results = futures::future::join_all(
            bodies.chunks(SQS_BATCH_LIMIT).map(|chunk| self.send_chunk(chunk, delay_seconds, trace.as_ref())),
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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_named_by_its_url_as_its_arn_ends() {
        let config =
            aws_sdk_sqs::Config::builder().behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest()).build();
        let q = SqsTaskQueue::new(
            Client::from_conf(config),
            "https://sqs.us-east-1.amazonaws.com/123456789012/tasks".into(),
        );
        assert_eq!(q.name(), "tasks");
    }

    #[test]
    fn sqs_fixtures_carry_task_messages_and_receive_counts() {
        for (file, kinds) in [
            ("sqs-tasks.json", vec!["run", "run"]),
            ("sqs-deadline.json", vec!["deadline"]),
            ("sqs-dead-letter.json", vec!["run"]),
        ] {
            let path = format!("{}/../../events/{file}", env!("CARGO_MANIFEST_DIR"));
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
