//! SQS events ⇄ worker calls: each record becomes a `TaskMessage` for the function (the tasks worker, or the closer on a DLQ), its batch held in flight by the receipt heartbeat while the invocation lives, retryable outcomes become the partial batch response (and come back soon: `ChangeMessageVisibility`); the scheduler's event runs one sweep of the closer.

use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use futures::future::join_all;
use lambda_runtime::LambdaEvent;
use swarm_core::domain::TaskMessage;
use swarm_core::obs;
use swarm_core::obs::context::TRACEPARENT;
use tokio::time::Instant;
use tracing::Instrument;

use crate::clock::ms_between;
use crate::closer::{Closer, SweepReport};
use crate::heartbeat::{Held, beside};
use crate::outcome::{MessageHandler, Outcome};

/// What the function is invoked with (`WORKER_MODE`, parsed by [`crate::WorkerConfig`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerMode {
    /// The tasks queue (or the refund role's queue).
    Tasks,
    /// A dead-letter queue: record each subtask as failed and count it (the closer alone).
    DeadLetters,
    /// The periodic sweep (EventBridge Scheduler): the deadline path of every conversation past its deadline (the closer alone).
    Sweep,
}

/// Handles one SQS batch with `function` (the tasks worker on a tasks queue, the closer on a
/// DLQ). Where the function has a receipt heartbeat (the tasks worker), every message of the batch
/// is set to its receipt visibility before any work begins and extended every beat until the batch is done, beside
/// the work in the same future: a crashed or timed-out invocation's messages come back after the
/// receipt visibility, not the queue's visibility timeout. Records run concurrently, each in its own span
/// (message id, conversation id, subtask id) attached with `.instrument`, so a
/// line logged for one record never carries another's ids; only retryable
/// failures are listed in `batchItemFailures` (ReportBatchItemFailures), so a
/// poison message is acknowledged instead of being retried until the DLQ. Each
/// listed message is made visible again after the worker's retry visibility
/// timeout ([`MessageHandler::retry_later`]), so it comes back well inside the conversation's
/// deadline instead of after the queue's visibility timeout.
pub async fn handle(
    function: &dyn MessageHandler,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let deadline = invocation_deadline(event.context.deadline, function.safety_margin());
    let held = Held::new(event.payload.records.iter().map(|record| {
        let queue = record.event_source_arn.as_deref().map(queue_name).unwrap_or_default().to_owned();
        (queue, record.receipt_handle.clone().unwrap_or_default())
    }));
    let held = &held;
    let runs = event.payload.records.into_iter().map(|record| {
        let message_id = record.message_id.unwrap_or_default();
        let message = serde_json::from_str::<TaskMessage>(record.body.as_deref().unwrap_or_default());
        let span = record_span(&message_id, message.as_ref().ok());
        // Each record continues the trace of the span that sent it (its `traceparent` attribute).
        let sender = record.message_attributes.get(TRACEPARENT).and_then(|a| a.string_value.as_deref());
        swarm_adapters::telemetry::propagation::set_parent(&span, sender);
        let queue = record.event_source_arn.as_deref().map(queue_name).unwrap_or_default().to_owned();
        let receipt_handle = record.receipt_handle.unwrap_or_default();
        async move {
            let started = Instant::now();
            obs::metrics::worker_busy(true);
            let outcome = match message {
                Err(e) => Outcome::Poison(format!("unparseable message body: {e}")),
                Ok(message) => function.on_message(message, deadline).await,
            };
            obs::metrics::worker_busy(false);
            obs::metrics::subtask_attempt(started.elapsed());
            match &outcome {
                Outcome::Poison(why) => tracing::warn!(reason = %why, "poison message acknowledged"),
                Outcome::Retry(why) => {
                    tracing::warn!(reason = %why, "message will be retried");
                    held.let_go(&queue, &receipt_handle, function.retry_later(&queue, &receipt_handle)).await;
                }
                _ => tracing::debug!(outcome = ?outcome, "message handled"),
            }
            (message_id, outcome)
        }
        .instrument(span)
    });
    let work = join_all(runs);
    let outcomes = match function.receipt_heartbeat() {
        Some(heartbeat) => {
            // The first beat lands before any work begins: an invocation killed early (its first
            // work done, the beat's call still in flight) would leave its batch at the queue's
            // visibility timeout.
            held.beat(function, &heartbeat).await;
            beside(work, held.beats(function, heartbeat)).await
        }
        None => work.await,
    };
    let mut response = SqsBatchResponse::default();
    for (message_id, outcome) in outcomes {
        if outcome.should_retry() {
            response.add_failure(message_id);
        }
    }
    Ok(response)
}

/// One sweep of `closer` (the scheduler's event is not read): the deadline path of every conversation past its
/// deadline, until the invocation's deadline less the worker's safety margin. Answers what it did.
pub async fn sweep(
    closer: &Closer,
    event: LambdaEvent<serde_json::Value>,
) -> Result<SweepReport, lambda_runtime::Error> {
    let deadline = invocation_deadline(event.context.deadline, closer.safety_margin());
    // One span per run, a root (the schedule carries no trace); each conversation's run is a
    // child that links to the conversation's own trace.
    let span = tracing::info_span!(
        "sweep_invocation",
        otel.name = "sweep",
        otel.kind = "consumer",
        swarm.sweep.found = tracing::field::Empty,
        swarm.sweep.answered = tracing::field::Empty,
        swarm.sweep.moved = tracing::field::Empty,
        swarm.sweep.unfinished = tracing::field::Empty,
        swarm.sweep.errors = tracing::field::Empty,
    );
    let report = closer.sweep(deadline).instrument(span.clone()).await;
    span.record("swarm.sweep.found", report.found);
    span.record("swarm.sweep.answered", report.answered);
    span.record("swarm.sweep.moved", report.moved);
    span.record("swarm.sweep.unfinished", report.unfinished);
    span.record("swarm.sweep.errors", report.errors);
    Ok(report)
}

/// The queue's name at the end of an SQS ARN (`arn:aws:sqs:<region>:<account>:<name>`).
pub fn queue_name(arn: &str) -> &str {
    arn.rsplit(':').next().unwrap_or(arn)
}

/// The span of one SQS record: its message id and, once the body parsed, the
/// ids it names (a deadline message names no subtask).
fn record_span(message_id: &str, message: Option<&TaskMessage>) -> tracing::Span {
    let span = tracing::info_span!(
        "sqs_record",
        otel.name = "process task",
        otel.kind = "consumer",
        messaging.system = "aws_sqs",
        messaging.operation.type = "process",
        message_id = %message_id,
        conversation_id = tracing::field::Empty,
        subtask_id = tracing::field::Empty
    );
    if let Some(message) = message {
        span.record("conversation_id", message.conversation_id().as_str());
        if let TaskMessage::Run { subtask_id, .. } | TaskMessage::Confirm { subtask_id, .. } = message {
            span.record("subtask_id", subtask_id.as_str());
        }
    }
    span
}

/// The instant the invocation must be done by: the Lambda deadline (epoch ms)
/// minus `safety_margin` (the worker's setting, from the timing table), on tokio's clock.
pub fn invocation_deadline(deadline_epoch_ms: u64, safety_margin: Duration) -> Instant {
    let deadline_ms = i64::try_from(deadline_epoch_ms).unwrap_or(i64::MAX);
    let left = ms_between(swarm_core::domain::now_ms(), deadline_ms).saturating_sub(safety_margin);
    Instant::now() + left
}
