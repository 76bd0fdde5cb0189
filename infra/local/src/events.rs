//! Real-shaped Lambda events built by the local stack: SQS, DynamoDB stream (the HTTP API needs none: its router is called directly).

use std::time::Duration;

use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::sqs::SqsEvent;
use serde_json::{Value, json};
use swarm_core::domain::{Conversation, now_ms};

use crate::platform::Delivery;

/// A Lambda context whose deadline is `timeout` from now.
pub fn lambda_context(timeout: Duration) -> lambda_runtime::Context {
    let mut context = lambda_runtime::Context::default();
    context.request_id = uuid::Uuid::now_v7().to_string();
    context.deadline = (now_ms().max(0) as u64) + timeout.as_millis() as u64;
    context.invoked_function_arn = "arn:aws:lambda:local:000000000000:function:worker".into();
    context
}

/// The SQS event an event source mapping hands the worker for `deliveries`.
pub fn sqs_event(queue_name: &str, deliveries: &[Delivery], timeout: Duration) -> (SqsEvent, lambda_runtime::Context) {
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
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": format!("arn:aws:sqs:local:000000000000:{queue_name}"),
                "awsRegion": "local"
            })
        })
        .collect();
    // The shape is fixed above; a failure here is a programming error caught by tests.
    let event: SqsEvent = serde_json::from_value(json!({ "Records": records })).unwrap_or_default();
    (event, lambda_context(timeout))
}

/// The DynamoDB stream record (`MODIFY`, `NEW_IMAGE`) of a conversation item, as the aggregator's filter passes it.
pub fn stream_event(conversation: &Conversation) -> StreamEvent {
    let now = now_ms();
    let event = json!({
        "Records": [{
            "eventID": uuid::Uuid::now_v7().simple().to_string(),
            "eventName": "MODIFY",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "local",
            "eventSourceARN": "arn:aws:dynamodb:local:000000000000:table/swarm/stream/local",
            "dynamodb": {
                "ApproximateCreationDateTime": (now / 1000) as f64,
                "Keys": { "PK": { "S": format!("CONV#{}", conversation.id) }, "SK": { "S": "META" } },
                "NewImage": {
                    "PK": { "S": format!("CONV#{}", conversation.id) },
                    "SK": { "S": "META" },
                    "status": { "S": conversation.status.as_str() },
                    "remaining": { "N": conversation.remaining.to_string() },
                    "total": { "N": conversation.total.to_string() },
                    "customer_id": { "S": conversation.customer_id }
                },
                "SequenceNumber": now.to_string(),
                "SizeBytes": 256,
                "StreamViewType": "NEW_IMAGE"
            }
        }]
    });
    serde_json::from_value(event).unwrap_or_default()
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
        };
        let (e, ctx) = sqs_event("tasks", &[d], Duration::from_secs(30));
        assert_eq!(e.records.len(), 1);
        assert_eq!(e.records[0].message_id.as_deref(), Some("m1"));
        assert!(ctx.deadline > 0);
        let c = Conversation::new("C1", "q", 0, 120);
        let s = stream_event(&c);
        assert_eq!(s.records.len(), 1);
    }
}
