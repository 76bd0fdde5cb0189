//! SQS events ⇄ worker calls: each record becomes a `TaskMessage`, retryable outcomes become the partial batch response.

use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use futures::future::join_all;
use lambda_runtime::LambdaEvent;
use swarm_core::domain::TaskMessage;
use tokio::time::Instant;

use crate::core::{Outcome, Worker};

/// Which queue the function consumes (env `WORKER_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerMode {
    /// The tasks queue (or the refund role's queue).
    Tasks,
    /// A dead-letter queue: record each subtask as failed and count it.
    DeadLetters,
}

impl WorkerMode {
    /// Parses `tasks | dlq` (default `tasks`).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "tasks" => Ok(Self::Tasks),
            "dlq" => Ok(Self::DeadLetters),
            other => Err(format!("WORKER_MODE must be tasks or dlq, not {other:?}")),
        }
    }
}

/// Handles one SQS batch. Records run concurrently; only retryable failures
/// are listed in `batchItemFailures` (ReportBatchItemFailures), so a poison
/// message is acknowledged instead of being retried until the DLQ.
pub async fn handle(
    worker: &Worker,
    mode: WorkerMode,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let deadline = invocation_deadline(event.context.deadline, worker.safety_margin());
    let runs = event.payload.records.into_iter().map(|record| async move {
        let message_id = record.message_id.clone().unwrap_or_default();
        let body = record.body.unwrap_or_default();
        let outcome = match serde_json::from_str::<TaskMessage>(&body) {
            Err(e) => Outcome::Poison(format!("unparseable message body: {e}")),
            Ok(message) => match mode {
                WorkerMode::Tasks => worker.handle(message, deadline).await,
                WorkerMode::DeadLetters => worker.handle_dead_letter(message).await,
            },
        };
        match &outcome {
            Outcome::Poison(why) => {
                tracing::warn!(message_id = %message_id, reason = %why, "poison message acknowledged")
            }
            Outcome::Retry(why) => tracing::warn!(message_id = %message_id, reason = %why, "message will be retried"),
            _ => tracing::debug!(message_id = %message_id, outcome = ?outcome, "message handled"),
        }
        (message_id, outcome)
    });
    let mut response = SqsBatchResponse::default();
    for (message_id, outcome) in join_all(runs).await {
        if outcome.should_retry() {
            response.add_failure(message_id);
        }
    }
    Ok(response)
}

/// The instant the invocation must be done by: the Lambda deadline (epoch ms)
/// minus `safety_margin` (the worker's setting, from the timing table), on tokio's clock.
pub fn invocation_deadline(deadline_epoch_ms: u64, safety_margin: Duration) -> Instant {
    let now = swarm_core::domain::now_ms().max(0) as u64;
    let left = Duration::from_millis(deadline_epoch_ms.saturating_sub(now)).saturating_sub(safety_margin);
    Instant::now() + left
}
