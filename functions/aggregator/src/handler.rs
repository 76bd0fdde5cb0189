//! DynamoDB stream events ⇄ aggregator calls: each conversation item that reached `remaining = 0` is aggregated; a record that fails transiently is reported in the partial batch response.

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use futures::StreamExt;
use lambda_runtime::LambdaEvent;
use swarm_adapters::aws::dynamo::codec::conversation_id_of_keys;
use swarm_core::domain::ConversationId;
use tracing::Instrument;

use crate::core::{AggregateOutcome, Aggregator};

/// The conversation id of a stream record's keys, if they are a conversation item's (the table's
/// codec reads them) and name a canonical id (a stream record is input like any other).
pub fn conversation_of(record: &aws_lambda_events::event::dynamodb::EventRecord) -> Option<ConversationId> {
    let id = conversation_id_of_keys(record.change.keys.clone())?;
    ConversationId::parse(id.as_str())
}

/// The `trace_parent` attribute of a stream record's new image (the conversation item's).
pub fn trace_parent_of(record: &aws_lambda_events::event::dynamodb::EventRecord) -> Option<String> {
    let image = serde_json::to_value(&record.change.new_image).ok()?;
    image.get("trace_parent")?.get("S")?.as_str().map(str::to_owned)
}

/// Handles one stream batch (already narrowed by the event filter to conversation items with
/// `remaining = 0` and `status = RUNNING`): its records at once, at most
/// [`AggregatorSettings::max_parallel_records`](crate::AggregatorSettings) of them, each in its own
/// span (event id, conversation id) attached with `.instrument` — so a batch takes one reply
/// budget, not one per record, and fits the function's timeout (the timing table's rule).
///
/// The partial batch response keeps the stream's semantics: of the records whose aggregation
/// failed transiently, the first in the batch's order is reported by its sequence number in
/// `batchItemFailures` (ReportBatchItemFailures): Lambda retries from it on, and the records
/// before it are done. Records after it ran too; their retry meets their lease or their reply and
/// does nothing (aggregation is guarded by the lease: never two replies). A failed record without
/// a sequence number fails the invocation (the whole batch is retried, bisected).
pub async fn handle(
    aggregator: &Aggregator,
    event: LambdaEvent<Event>,
) -> Result<DynamoDbEventResponse, lambda_runtime::Error> {
    let records = &event.payload.records;
    let outcomes: Vec<Result<(), swarm_core::ports::StoreError>> = futures::stream::iter(0..records.len())
        .map(|i| one_record(aggregator, &records[i]))
        .buffered(aggregator.settings().max_parallel_records.max(1))
        .collect()
        .await;
    let mut response = DynamoDbEventResponse::default();
    if let Some((record, Err(e))) = records.iter().zip(outcomes).find(|(_, outcome)| outcome.is_err()) {
        let Some(sequence) = record.change.sequence_number.clone() else { return Err(Box::new(e)) };
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = Some(sequence);
        response.batch_item_failures.push(failure);
    }
    Ok(response)
}

/// One stream record in its span: a conversation item's aggregation (anything else is ignored).
async fn one_record(
    aggregator: &Aggregator,
    record: &aws_lambda_events::event::dynamodb::EventRecord,
) -> Result<(), swarm_core::ports::StoreError> {
    let span = tracing::info_span!(
        "stream_record",
        otel.name = "aggregate",
        otel.kind = "consumer",
        event_id = %record.event_id,
        conversation_id = tracing::field::Empty
    );
    // The conversation item carries the trace of the request that created it: the reply joins it.
    swarm_adapters::telemetry::propagation::set_parent(&span, trace_parent_of(record).as_deref());
    let Some(id) = conversation_of(record) else {
        span.in_scope(|| tracing::debug!("not a conversation item; ignored"));
        return Ok(());
    };
    span.record("conversation_id", id.as_str());
    aggregate(aggregator, &id).instrument(span).await
}

/// One conversation's aggregation; only a transient store error is returned (the record is retried).
async fn aggregate(aggregator: &Aggregator, id: &ConversationId) -> Result<(), swarm_core::ports::StoreError> {
    match aggregator.aggregate(id).await {
        Ok(AggregateOutcome::NotReady { remaining }) => {
            tracing::warn!(remaining, "triggered before all subtasks finished; ignored");
        }
        Ok(outcome) => tracing::debug!(?outcome, "aggregation trigger handled"),
        Err(e) if e.is_transient() => {
            tracing::warn!(error = %e, "aggregation failed transiently: the record is retried");
            return Err(e);
        }
        Err(e) => tracing::error!(error = %e, "aggregation failed permanently"),
    }
    Ok(())
}
