//! The hand-off events, as the template's EventBridge pipe makes them on AWS: the table's stream, filtered to a conversation item reaching `HANDOFF`, one event per record — printed and kept in a list locally.

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use swarm_adapters::aws::dynamo::codec::conversation_record_pattern;
use swarm_core::domain::{ConversationStatus, HandoffReason};
use tokio::sync::watch;

use super::ChangeFeed;
use super::filter::matches_pattern;

/// The pipe's filter, exactly as `template.yaml` declares it (`HandoffPipe` →
/// `SourceParameters.FilterCriteria.Filters[0].Pattern`; a test keeps them identical): a
/// conversation item's record (the keys are the table codec's) whose new image is `HANDOFF`.
pub static HANDOFF_FILTER: LazyLock<Value> =
    LazyLock::new(|| conversation_record_pattern(json!({ "status": { "S": [ConversationStatus::Handoff.as_str()] } })));

/// The event's `detail-type` on the bus.
pub const HANDOFF_DETAIL_TYPE: &str = "conversation.handoff";

/// One hand-off event: the `detail` the pipe's input template gives the bus.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffEvent {
    pub conversation_id: String,
    pub customer_id: String,
    /// `customer_asked`, `tool_failures` or `policy` on the bus.
    pub reason: HandoffReason,
}

impl HandoffEvent {
    /// The event of a stream record (Lambda JSON) the pipe's filter passes; `None` for any other,
    /// and for an item without its ids or a reason that reads as one (the writer always sets them).
    pub fn from_record(record: &Value) -> Option<Self> {
        if !matches_pattern(record, &HANDOFF_FILTER) {
            return None;
        }
        let image = &record["dynamodb"]["NewImage"];
        let text = |v: &Value| v["S"].as_str().map(str::to_owned);
        Some(Self {
            conversation_id: text(&image["conversation_id"])?,
            customer_id: text(&image["customer_id"])?,
            reason: text(&image["handoff_reason"]).as_deref().and_then(HandoffReason::parse)?,
        })
    }
}

/// The hand-offs the local stack has seen, in stream order.
#[derive(Default)]
pub struct HandoffLog(Mutex<Vec<HandoffEvent>>);

impl HandoffLog {
    pub fn all(&self) -> Vec<HandoffEvent> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn push(&self, event: HandoffEvent) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(event);
    }
}

/// Reads the table's stream until `shutdown`, printing each hand-off event and keeping it in `log`.
pub async fn run(mut feed: Box<dyn ChangeFeed>, log: Arc<HandoffLog>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let read = tokio::select! {
            r = feed.next_records(Duration::from_secs(1)) => r,
            _ = shutdown.changed() => return,
        };
        let records = match read {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "the hand-off pipe could not read the table's stream");
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
        };
        for event in records.iter().filter_map(HandoffEvent::from_record) {
            eprintln!(
                "{HANDOFF_DETAIL_TYPE}: conversation {} (customer {}) goes to a person: {}",
                event.conversation_id,
                event.customer_id,
                event.reason.code()
            );
            log.push(event);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn only_a_conversation_item_reaching_handoff_is_an_event() {
        let record = |sk: &str, status: &str| {
            serde_json::json!({"eventName": "MODIFY", "dynamodb": {
                "Keys": {"PK": {"S": "CONV#c1"}, "SK": {"S": sk}},
                "NewImage": {"PK": {"S": "CONV#c1"}, "SK": {"S": sk}, "status": {"S": status}, "conversation_id": {"S": "c1"},
                             "customer_id": {"S": "C104"}, "handoff_reason": {"S": "customer_asked"}}}})
        };
        assert_eq!(
            HandoffEvent::from_record(&record("META", "HANDOFF")),
            Some(HandoffEvent {
                conversation_id: "c1".into(),
                customer_id: "C104".into(),
                reason: HandoffReason::CustomerAsked
            })
        );
        assert_eq!(HandoffEvent::from_record(&record("META", "DONE")), None);
        assert_eq!(HandoffEvent::from_record(&record("TASK#w01", "HANDOFF")), None);
    }

    #[test]
    fn the_filter_is_the_templates() {
        let template = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml")).unwrap();
        assert!(
            super::super::filter::tests::template_stream_patterns().contains(&HANDOFF_FILTER),
            "template.yaml's HandoffPipe filter differs"
        );
        assert!(template.contains(&format!("DetailType: {HANDOFF_DETAIL_TYPE}")));
    }
}
