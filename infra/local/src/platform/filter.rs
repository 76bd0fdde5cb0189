//! The aggregator's `FilterCriteria`, as Lambda's event filtering applies it to DynamoDB stream records (both backends' change feeds).

use std::sync::LazyLock;

use serde_json::{Value, json};
use swarm_adapters::aws::dynamo::codec::conversation_record_pattern;
use swarm_core::domain::ConversationStatus;

/// The aggregator's event filter, exactly as `template.yaml` declares it (`Aggregator` → `Events`
/// → `FilterCriteria.Filters[0].Pattern`; a unit test keeps them identical): a conversation
/// item's record (the keys are the table codec's) whose new image has `remaining = 0` while `RUNNING`.
pub static AGGREGATOR_FILTER: LazyLock<Value> = LazyLock::new(|| {
    conversation_record_pattern(
        json!({ "remaining": { "N": ["0"] }, "status": { "S": [ConversationStatus::Running.as_str()] } }),
    )
});

/// Whether Lambda would pass this stream record (Lambda JSON, as
/// [`record_to_lambda_json`](super::dynamo_stream::record_to_lambda_json) makes it) to the aggregator: the template's
/// `FilterCriteria` pattern [`AGGREGATOR_FILTER`].
pub fn matches_aggregator_filter(record: &Value) -> bool {
    matches_pattern(record, &AGGREGATOR_FILTER)
}

/// Lambda event filtering (the EventBridge pattern subset Lambda supports):
/// every field of the pattern must be in the event; an object recurses; an
/// array lists the allowed values (an event array matches when any element
/// does), each an exact value or one of `{"prefix": s}`, `{"exists": bool}`,
/// `{"anything-but": v | [v..]}`. Anything else matches nothing.
pub fn matches_pattern(event: &Value, pattern: &Value) -> bool {
    let Value::Object(fields) = pattern else { return false };
    fields.iter().all(|(name, sub)| {
        let value = event.get(name);
        match sub {
            Value::Object(_) => value.is_some_and(|v| matches_pattern(v, sub)),
            Value::Array(allowed) => allowed.iter().any(|rule| matches_rule(value, rule)),
            _ => false,
        }
    })
}

fn matches_rule(value: Option<&Value>, rule: &Value) -> bool {
    if let Value::Object(op) = rule {
        if let Some(exists) = op.get("exists").and_then(Value::as_bool) {
            return value.is_some() == exists;
        }
        let Some(value) = value else { return false };
        let candidates: Vec<&Value> = match value {
            Value::Array(a) => a.iter().collect(),
            v => vec![v],
        };
        if let Some(prefix) = op.get("prefix").and_then(Value::as_str) {
            return candidates.iter().any(|v| v.as_str().is_some_and(|s| s.starts_with(prefix)));
        }
        if let Some(excluded) = op.get("anything-but") {
            let excluded: Vec<&Value> = match excluded {
                Value::Array(a) => a.iter().collect(),
                v => vec![v],
            };
            return candidates.iter().all(|v| !excluded.contains(v));
        }
        return false;
    }
    match value {
        Some(Value::Array(a)) => a.contains(rule),
        Some(v) => v == rule,
        None => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
pub(super) mod tests {
    use serde_json::json;

    use super::*;

    fn conversation_record(remaining: &str, status: &str, sk: &str) -> Value {
        json!({
            "eventID": "1", "eventName": "MODIFY", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
            "dynamodb": {
                "Keys": { "PK": { "S": "CONV#x" }, "SK": { "S": sk } },
                "NewImage": { "PK": { "S": "CONV#x" }, "SK": { "S": sk }, "remaining": { "N": remaining }, "status": { "S": status } },
                "SequenceNumber": "1", "SizeBytes": 10, "StreamViewType": "NEW_IMAGE"
            }
        })
    }

    /// The stream filter patterns `template.yaml` declares, parsed.
    pub(in crate::platform) fn template_stream_patterns() -> Vec<Value> {
        let template = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml")).unwrap();
        template
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- Pattern: '"))
            .filter_map(|l| l.strip_suffix('\''))
            .filter(|p| p.contains("\"dynamodb\""))
            .map(|p| serde_json::from_str(p).unwrap())
            .collect()
    }

    #[test]
    fn the_filter_is_the_one_template_yaml_declares() {
        let patterns: Vec<Value> = template_stream_patterns()
            .into_iter()
            // The table's other stream reader: the hand-off pipe (its own test checks its pattern).
            .filter(|p| *p != *super::super::handoff::HANDOFF_FILTER)
            .collect();
        assert_eq!(
            patterns,
            vec![AGGREGATOR_FILTER.clone()],
            "template.yaml's stream filter and this one must be identical"
        );
        assert!(AGGREGATOR_FILTER.is_object());
    }

    #[test]
    fn conversation_reaching_zero_while_running_passes_the_filter() {
        assert!(matches_aggregator_filter(&conversation_record("0", "RUNNING", "META")));
    }

    #[test]
    fn other_counts_statuses_and_items_are_filtered_out() {
        assert!(!matches_aggregator_filter(&conversation_record("1", "RUNNING", "META")));
        assert!(!matches_aggregator_filter(&conversation_record("0", "AGGREGATING", "META")));
        assert!(!matches_aggregator_filter(&conversation_record("0", "DONE", "META")));
        assert!(!matches_aggregator_filter(&conversation_record("0", "RUNNING", "TASK#w01")));
        // A number written as "0.0" is a different string: Lambda compares the text, and so does the filter.
        assert!(!matches_aggregator_filter(&conversation_record("0.0", "RUNNING", "META")));
        let mut removed = conversation_record("0", "RUNNING", "META");
        removed["dynamodb"].as_object_mut().unwrap().remove("NewImage");
        assert!(!matches_aggregator_filter(&removed), "a REMOVE record has no NewImage");
    }

    #[test]
    fn the_event_fixture_passes_the_filter() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../events/dynamodb-stream-remaining-zero.json");
        let event: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(matches_aggregator_filter(&event["Records"][0]));
    }

    #[test]
    fn pattern_operators_behave_as_lambda_documents_them() {
        let event = json!({ "a": "hello", "n": ["x", "y"], "z": null });
        assert!(matches_pattern(&event, &json!({ "a": [{ "prefix": "he" }] })));
        assert!(!matches_pattern(&event, &json!({ "a": [{ "prefix": "lo" }] })));
        assert!(matches_pattern(&event, &json!({ "b": [{ "exists": false }] })));
        assert!(!matches_pattern(&event, &json!({ "a": [{ "exists": false }] })));
        assert!(matches_pattern(&event, &json!({ "n": ["y"] })), "an event array matches when any element does");
        assert!(matches_pattern(&event, &json!({ "a": [{ "anything-but": ["bye"] }] })));
        assert!(!matches_pattern(&event, &json!({ "a": [{ "anything-but": "hello" }] })));
        assert!(matches_pattern(&event, &json!({ "z": [null] })));
        assert!(
            !matches_pattern(&event, &json!({ "a": [{ "numeric": [">", 0] }] })),
            "unsupported operators match nothing"
        );
    }
}
