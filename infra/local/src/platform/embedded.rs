//! The embedded backend: the in-memory store and queues with DynamoDB's and SQS's semantics, and the store's lossless stream as the change feed, its records in the exact shape the DynamoDB store's items give on AWS.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue as ItemValue;
use aws_sdk_dynamodbstreams::primitives::{Blob, DateTime};
use aws_sdk_dynamodbstreams::types::{
    AttributeValue as StreamValue, OperationType, Record, StreamRecord, StreamViewType,
};
use serde_json::Value;
use swarm_adapters::aws::dynamo::codec::{
    Item, approval_item, conversation_item, idempotency_item, notice_item, subtask_item, turn_item,
};
use swarm_adapters::embedded::{ChangedItem, InMemoryConversationStore, InMemoryQueue, ItemChange, QueueSettings};
use swarm_core::domain::now_ms;
use swarm_core::ports::{ConversationStore, StoreError, TaskQueue};
use swarm_core::timings::Timings;
use tokio::sync::mpsc;

use super::dynamo_stream::record_to_lambda_json;
use super::{Backend, ChangeFeed, Queue, QueueConsumer, QueueHandles, QueueSet, StreamError};

/// The stream ARN the embedded table's records carry.
const STREAM_ARN: &str = "arn:aws:dynamodb:local:000000000000:table/swarm-local/stream/embedded";
const REGION: &str = "local";

/// The swarm's data in this process.
pub struct EmbeddedBackend {
    store: Arc<InMemoryConversationStore>,
    queues: QueueSet,
}

impl EmbeddedBackend {
    /// A fresh store and the four queues: tasks and refund with their `VisibilityTimeout`s
    /// (`queues.tasks`, `queues.refund`) and a redrive to their DLQ after
    /// `queues.max_receive_count` receives; the DLQs with `queues.dead_letters`.
    pub fn provision(timings: &Timings) -> Self {
        let q = &timings.queues;
        let settings = |name: &str, visibility_timeout: Duration| QueueSettings {
            name: name.into(),
            visibility_timeout,
            max_receive_count: q.max_receive_count,
        };
        let tasks_dlq = InMemoryQueue::new(settings("tasks-dlq", q.dead_letters.visibility_timeout));
        let tasks = InMemoryQueue::with_dlq(settings("tasks", q.tasks.visibility_timeout), tasks_dlq.clone());
        let refund_dlq = InMemoryQueue::new(settings("refund-dlq", q.dead_letters.visibility_timeout));
        let refund = InMemoryQueue::with_dlq(settings("refund", q.refund.visibility_timeout), refund_dlq.clone());
        let handles = |queue: InMemoryQueue| QueueHandles {
            name: queue.name().to_owned(),
            url: format!("{}/{}", super::EMBEDDED_QUEUE_BASE, queue.name()),
            sender: Arc::new(queue.clone()) as Arc<dyn TaskQueue>,
            consumer: Arc::new(queue) as Arc<dyn QueueConsumer>,
        };
        Self {
            store: Arc::new(InMemoryConversationStore::new()),
            queues: QueueSet {
                tasks: handles(tasks),
                tasks_dead_letters: handles(tasks_dlq),
                refund: handles(refund),
                refund_dead_letters: handles(refund_dlq),
            },
        }
    }

    /// The store itself (its stream, for progress that needs no polling).
    pub fn memory_store(&self) -> Arc<InMemoryConversationStore> {
        self.store.clone()
    }
}

#[async_trait]
impl Backend for EmbeddedBackend {
    fn describe(&self) -> String {
        "embedded (in-memory store and queues)".into()
    }

    fn table(&self) -> &str {
        "embedded"
    }

    fn store(&self) -> Arc<dyn ConversationStore> {
        self.store.clone()
    }

    fn access(&self) -> Arc<dyn swarm_core::access::AccessStore> {
        self.store.clone()
    }

    /// The same store and queues for every function: in memory nothing is signed.
    fn clients(&self, _function: &str) -> Option<super::FunctionClients> {
        Some(super::FunctionClients::shared(self))
    }

    fn queue(&self, queue: Queue) -> &QueueHandles {
        self.queues.get(queue)
    }

    async fn change_feed(&self) -> Result<Box<dyn ChangeFeed>, StreamError> {
        Ok(Box::new(EmbeddedFeed { changes: self.store.subscribe() }))
    }

    async fn conversation_count(&self) -> Result<usize, StoreError> {
        Ok(self.store.conversation_count())
    }

    async fn teardown(&self) {}
}

/// The in-memory table's stream as Lambda stream records.
struct EmbeddedFeed {
    changes: mpsc::UnboundedReceiver<ItemChange>,
}

#[async_trait]
impl ChangeFeed for EmbeddedFeed {
    async fn next_records(&mut self, wait: Duration) -> Result<Vec<Value>, StreamError> {
        let first = match tokio::time::timeout(wait, self.changes.recv()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(None) => return Err(StreamError::Permanent("the embedded store is gone".into())),
            Ok(Some(change)) => change,
        };
        let mut records = vec![stream_record(&first)?];
        while let Ok(change) = self.changes.try_recv() {
            records.push(stream_record(&change)?);
        }
        Ok(records)
    }
}

/// The stream record (`NEW_IMAGE`) of one write, with the item as the DynamoDB store writes it.
///
/// Errors: [`StreamError::Permanent`] when an item cannot be encoded (the store could not
/// have written it either).
pub fn stream_record(change: &ItemChange) -> Result<Value, StreamError> {
    let item: Item = match &change.item {
        ChangedItem::Conversation(c) => conversation_item(c),
        ChangedItem::Subtask(r) => subtask_item(r),
        ChangedItem::IdempotencyKey { customer_id, key, conversation_id, request_hash, ttl } => {
            idempotency_item(customer_id, key, conversation_id, request_hash.as_deref(), *ttl)
        }
        ChangedItem::Approval(a) => approval_item(a),
        ChangedItem::Turn(id, turn) => turn_item(id, turn),
        ChangedItem::Notice(id, notice) => notice_item(id, notice),
    }
    .map_err(|e| StreamError::Permanent(e.to_string()))?;
    let image: std::collections::HashMap<String, StreamValue> =
        item.iter().map(|(k, v)| (k.clone(), stream_value(v))).collect();
    let keys = image.iter().filter(|(k, _)| *k == "PK" || *k == "SK").map(|(k, v)| (k.clone(), v.clone())).collect();
    let size: usize = item.iter().map(|(k, v)| k.len() + approximate_size(v)).sum();
    let sequence = format!("{:021}", change.sequence);
    let record = Record::builder()
        .event_id(format!("embedded-{sequence}"))
        .event_name(if change.created { OperationType::Insert } else { OperationType::Modify })
        .event_version("1.1")
        .event_source("aws:dynamodb")
        .aws_region(REGION)
        .dynamodb(
            StreamRecord::builder()
                .approximate_creation_date_time(DateTime::from_secs(now_ms() / 1000))
                .set_keys(Some(keys))
                .set_new_image(Some(image))
                .sequence_number(sequence)
                .size_bytes(i64::try_from(size).unwrap_or(i64::MAX))
                .stream_view_type(StreamViewType::NewImage)
                .build(),
        )
        .build();
    Ok(record_to_lambda_json(&record, STREAM_ARN, REGION))
}

/// A table item's attribute value as the stream carries it (the two SDKs have one type each).
fn stream_value(value: &ItemValue) -> StreamValue {
    match value {
        ItemValue::S(s) => StreamValue::S(s.clone()),
        ItemValue::N(n) => StreamValue::N(n.clone()),
        ItemValue::Ss(v) => StreamValue::Ss(v.clone()),
        ItemValue::Ns(v) => StreamValue::Ns(v.clone()),
        ItemValue::B(b) => StreamValue::B(Blob::new(b.as_ref())),
        ItemValue::Bs(v) => StreamValue::Bs(v.iter().map(|b| Blob::new(b.as_ref())).collect()),
        ItemValue::Bool(b) => StreamValue::Bool(*b),
        ItemValue::L(items) => StreamValue::L(items.iter().map(stream_value).collect()),
        ItemValue::M(map) => StreamValue::M(map.iter().map(|(k, v)| (k.clone(), stream_value(v))).collect()),
        // NULL, and any type newer than these SDKs (the store writes none).
        _ => StreamValue::Null(true),
    }
}

/// Bytes a value takes, roughly as DynamoDB counts them (for `SizeBytes`).
fn approximate_size(value: &ItemValue) -> usize {
    match value {
        ItemValue::S(s) | ItemValue::N(s) => s.len(),
        ItemValue::Ss(v) | ItemValue::Ns(v) => v.iter().map(String::len).sum(),
        ItemValue::B(b) => b.as_ref().len(),
        ItemValue::L(items) => 3 + items.iter().map(approximate_size).sum::<usize>(),
        ItemValue::M(map) => 3 + map.iter().map(|(k, v)| k.len() + approximate_size(v)).sum::<usize>(),
        _ => 1,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use swarm_core::domain::{Conversation, ConversationStatus};

    use super::*;
    use crate::platform::filter::matches_aggregator_filter;

    #[test]
    fn a_conversation_reaching_zero_is_a_record_the_aggregator_handler_reads_and_its_filter_passes() {
        let mut c = Conversation::new("C104", "q", 0, 120);
        c.status = ConversationStatus::Running;
        c.total = 2;
        c.remaining = 0;
        c.finished = ["w01".to_owned(), "w02".to_owned()].into();
        let change = ItemChange { sequence: 7, created: false, item: ChangedItem::Conversation(c.clone()) };
        let record = stream_record(&change).unwrap();
        assert_eq!(record["eventName"], "MODIFY");
        assert_eq!(record["eventSource"], "aws:dynamodb");
        assert_eq!(record["dynamodb"]["Keys"]["SK"]["S"], "META");
        assert_eq!(record["dynamodb"]["NewImage"]["finished"]["SS"], serde_json::json!(["w01", "w02"]));
        assert_eq!(record["dynamodb"]["SequenceNumber"], "000000000000000000007");
        assert!(matches_aggregator_filter(&record));
        let event: aws_lambda_events::event::dynamodb::Event =
            serde_json::from_value(serde_json::json!({ "Records": [record] })).unwrap();
        assert_eq!(aggregator::handler::conversation_of(&event.records[0]), Some(c.id.clone()));

        c.remaining = 1;
        let change = ItemChange { sequence: 6, created: false, item: ChangedItem::Conversation(c) };
        assert!(!matches_aggregator_filter(&stream_record(&change).unwrap()), "remaining 1 is filtered out");
    }
}
