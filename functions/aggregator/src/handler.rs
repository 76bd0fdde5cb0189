//! DynamoDB stream events ⇄ aggregator calls: each conversation item that reached `remaining = 0` is aggregated; a record that fails transiently is reported in the partial batch response.

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
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

/// Handles one stream batch (already narrowed by the event filter to
/// conversation items with `remaining = 0` and `status = RUNNING`), in order, each
/// record in its own span (event id, conversation id) attached with `.instrument`.
/// A record whose aggregation fails transiently is reported by its sequence number in
/// `batchItemFailures` (ReportBatchItemFailures) and the batch stops there: Lambda
/// retries from that record on, never the records before it. Aggregation itself is
/// guarded by the lease, so a retry never replies twice. A failed record without a
/// sequence number fails the invocation (the whole batch is retried).
pub async fn handle(
    aggregator: &Aggregator,
    event: LambdaEvent<Event>,
) -> Result<DynamoDbEventResponse, lambda_runtime::Error> {
    let mut response = DynamoDbEventResponse::default();
    for record in &event.payload.records {
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
            continue;
        };
        span.record("conversation_id", id.as_str());
        if let Err(e) = aggregate(aggregator, &id).instrument(span).await {
            let Some(sequence) = record.change.sequence_number.clone() else { return Err(Box::new(e)) };
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(sequence);
            response.batch_item_failures.push(failure);
            return Ok(response);
        }
    }
    Ok(response)
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
