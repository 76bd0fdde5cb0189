//! Real-shaped Lambda events built by the local platform: SQS events and the Lambda context of an invocation (the HTTP API needs none: its router is called directly; DynamoDB stream records come from the backends' change feeds).

use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use serde_json::{Value, json};
use swarm_core::obs::context::TRACEPARENT;
use swarm_core::time::{after_ms, now_ms};

use swarm_adapters::embedded::ReceivedMessage as Delivery;

/// The Lambda context of one invocation of `function`: its deadline is `timeout` (the function's) from now.
pub fn lambda_context(function: &str, timeout: Duration) -> lambda_runtime::Context {
    let mut context = lambda_runtime::Context::default();
    context.request_id = uuid::Uuid::now_v7().to_string();
    context.deadline = u64::try_from(after_ms(now_ms(), timeout)).unwrap_or(0);
    context.invoked_function_arn = format!("arn:aws:lambda:local:000000000000:function:{function}");
    context
}

/// A delivery's message attributes as the SQS event shows them (only `traceparent` is ever sent).
fn message_attributes(d: &Delivery) -> Value {
    match &d.trace_parent {
        Some(t) => {
            json!({ TRACEPARENT: { "stringValue": t, "stringListValues": [], "binaryListValues": [], "dataType": "String" } })
        }
        None => json!({}),
    }
}

/// The SQS event an event source mapping hands `function` for `deliveries`, and the invocation's context.
pub fn sqs_event(
    queue_name: &str,
    function: &str,
    deliveries: &[Delivery],
    timeout: Duration,
) -> (SqsEvent, lambda_runtime::Context) {
    let now = now_ms();
    let records: Vec<Value> = deliveries
        .iter()
        .map(|d| {
            json!({
                "messageId": d.message_id,
                "receiptHandle": d.receipt_handle,
                "body": d.body,
                "attributes": {
                    "ApproximateReceiveCount": d.receive_count.to_string(),
                    "SentTimestamp": d.sent_at_ms.to_string(),
                    "SenderId": "000000000000",
                    "ApproximateFirstReceiveTimestamp": now.to_string()
                },
                "messageAttributes": message_attributes(d),
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": format!("arn:aws:sqs:local:000000000000:{queue_name}"),
                "awsRegion": "local"
            })
        })
        .collect();
    // The shape is fixed above; a failure here is a programming error caught by tests.
    let event: SqsEvent = serde_json::from_value(json!({ "Records": records })).unwrap_or_default();
    (event, lambda_context(function, timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_events_parse_as_lambda_events() {
        let d = Delivery {
            message_id: "m1".into(),
            receipt_handle: "r1".into(),
            body: "{}".into(),
            receive_count: 2,
            sent_at_ms: 1,
            trace_parent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        };
        let before = now_ms() as u64;
        let (e, ctx) = sqs_event("tasks", "worker", &[d], Duration::from_secs(30));
        let after = now_ms() as u64;
        assert_eq!(e.records.len(), 1);
        assert_eq!(e.records[0].message_id.as_deref(), Some("m1"));
        let trace = &e.records[0].message_attributes["traceparent"];
        assert_eq!(trace.string_value.as_deref(), Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        assert_eq!(trace.data_type.as_deref(), Some("String"));
        assert!(
            (before + 30_000..=after + 30_000).contains(&ctx.deadline),
            "the deadline is the function's timeout from now"
        );
        assert_eq!(ctx.invoked_function_arn, "arn:aws:lambda:local:000000000000:function:worker");
    }
}
