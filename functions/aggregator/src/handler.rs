//! DynamoDB stream events ⇄ aggregator calls: each conversation item that reached `remaining = 0` is aggregated.

use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::LambdaEvent;
use swarm_core::domain::ConversationId;
use tracing::Instrument;

use crate::core::{AggregateOutcome, Aggregator};

/// The conversation id of a stream record's keys (`PK = CONV#<id>`, `SK = META`), if it is a conversation item.
pub fn conversation_of(record: &aws_lambda_events::event::dynamodb::EventRecord) -> Option<ConversationId> {
    let keys = serde_json::to_value(&record.change.keys).ok()?;
    let pk = keys.get("PK")?.get("S")?.as_str()?;
    let sk = keys.get("SK").and_then(|v| v.get("S")).and_then(|v| v.as_str());
    if sk.is_some_and(|s| s != "META") {
        return None;
    }
    ConversationId::parse(pk.strip_prefix("CONV#")?)
}

/// The `trace_parent` attribute of a stream record's new image (the conversation item's).
pub fn trace_parent_of(record: &aws_lambda_events::event::dynamodb::EventRecord) -> Option<String> {
    let image = serde_json::to_value(&record.change.new_image).ok()?;
    image.get("trace_parent")?.get("S")?.as_str().map(str::to_owned)
}

/// Handles one stream batch (already narrowed by the event filter to
/// conversation items with `remaining = 0` and `status = RUNNING`), each record
/// in its own span (event id, conversation id) attached with `.instrument`. A
/// transient store error fails the invocation so Lambda retries the batch;
/// aggregation itself is guarded by the conditional flip, so a retry never replies twice.
pub async fn handle(aggregator: &Aggregator, event: LambdaEvent<Event>) -> Result<(), lambda_runtime::Error> {
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
        aggregate(aggregator, &id).instrument(span).await?;
    }
    Ok(())
}

/// One conversation's aggregation; only a transient store error is returned (the batch is retried).
async fn aggregate(aggregator: &Aggregator, id: &ConversationId) -> Result<(), lambda_runtime::Error> {
    match aggregator.aggregate(id).await {
        Ok(AggregateOutcome::NotReady { remaining }) => {
            tracing::warn!(remaining, "triggered before all subtasks finished; ignored");
        }
        Ok(outcome) => tracing::debug!(?outcome, "aggregation trigger handled"),
        Err(e) if e.is_transient() => return Err(Box::new(e)),
        Err(e) => tracing::error!(error = %e, "aggregation failed permanently"),
    }
    Ok(())
}
