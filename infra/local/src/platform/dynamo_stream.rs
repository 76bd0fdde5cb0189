//! DynamoDB stream reader (the emulator backend's change feed): follows a table's stream and hands records over in the JSON shape of a Lambda DynamoDB stream event.
//!
//! On AWS, Lambda's event source mapping reads the stream. On an emulator (moto)
//! nothing does, so [`DynamoStreamReader`] does the reading (`DescribeTable` →
//! `LatestStreamArn`, `DescribeStream` → shards, `GetShardIterator`,
//! `GetRecords`) for the local platform's stream trigger, which filters and
//! batches. An emulator pushes nothing: [`DynamoStreamReader::next_batch`]
//! polls, and waits a bounded interval between empty polls.
//!
//! After a poll that found nothing in an open shard, the reader takes a fresh
//! iterator after the last record it handed over instead of reusing
//! `NextShardIterator`: moto rolls a failed transaction back by swapping in a
//! copy of its tables, and an iterator taken before that keeps reading the old
//! copy, which never grows again (seen with a cancelled idempotency-key transaction).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodbstreams::config::http::HttpResponse;
use aws_sdk_dynamodbstreams::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodbstreams::types::{AttributeValue, Record, ShardIteratorType};
use serde_json::{Map, Value, json};

use base64::Engine as _;
use swarm_adapters::aws::retry::{AwsRetryPolicy, sdk_error_is_transient};
use swarm_core::timings::Timings;

/// Most records one `GetRecords` call returns (DynamoDB Streams limit).
const MAX_RECORDS_PER_CALL: i32 = 1000;
/// Error codes of DynamoDB Streams worth retrying besides the shared ones.
const STREAM_TRANSIENT_CODES: &[&str] = &["LimitExceededException"];

/// Errors of the stream reader.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Throttling (`LimitExceededException`), timeouts, 5xx: poll again later.
    #[error("stream temporarily unavailable: {0}")]
    Transient(String),
    /// No such table, no stream on the table, access denied: polling again will not help.
    #[error("stream error: {0}")]
    Permanent(String),
}

impl StreamError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
}

fn is_transient<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> bool {
    sdk_error_is_transient(e)
        || matches!(e, SdkError::ServiceError(ctx) if ctx.err().code().is_some_and(|c| STREAM_TRANSIENT_CODES.contains(&c)))
}

fn to_stream_error<E>(op: &'static str, e: SdkError<E, HttpResponse>) -> StreamError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let message = format!("DynamoDB Streams {op}: {}", DisplayErrorContext(&e));
    if is_transient(&e) { StreamError::Transient(message) } else { StreamError::Permanent(message) }
}

/// Where reading starts in the shards open when the reader is opened
/// (shards that appear later are always read from their start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartPosition {
    /// The oldest record still in the stream (a table created for this run: nothing is missed).
    TrimHorizon,
    /// Only records written after the reader opened.
    Latest,
}

/// Reading state of one shard.
#[derive(Debug)]
struct ShardCursor {
    parent: Option<String>,
    /// `None` once the shard is closed and read to its end.
    iterator: Option<String>,
    /// Sequence number of the last record handed over (to resume after an expired iterator).
    last_sequence: Option<String>,
    /// Where to start again when no record was read yet.
    start: ShardIteratorType,
}

/// Follows one table's stream, shard by shard, parents before children.
///
/// Records come out as Lambda DynamoDB stream event records (see [`record_to_lambda_json`]);
/// put them under `{"Records": [...]}` for `aws_lambda_events::dynamodb::Event`.
#[derive(Debug)]
pub struct DynamoStreamReader {
    client: aws_sdk_dynamodbstreams::Client,
    stream_arn: String,
    region: String,
    start: StartPosition,
    /// Shards in the order they were discovered.
    order: Vec<String>,
    shards: HashMap<String, ShardCursor>,
    poll_interval: Duration,
    retry: AwsRetryPolicy,
    /// Take a fresh iterator after an empty poll (see the module documentation).
    fresh_iterator_when_idle: bool,
}

impl DynamoStreamReader {
    /// Opens the latest stream of `table` (`DescribeTable` → `LatestStreamArn`) and
    /// positions every open shard at `start`. `region` goes into each record's `awsRegion`.
    ///
    /// Errors: [`StreamError::Permanent`] when the table does not exist or has no stream.
    pub async fn open(
        dynamodb: &aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        table: &str,
        region: &str,
        start: StartPosition,
    ) -> Result<Self, StreamError> {
        let retry = AwsRetryPolicy::default();
        let req = dynamodb.describe_table().table_name(table);
        let out = retry.run("dynamodb", "DescribeTable", sdk_error_is_transient, || req.clone().send()).await.map_err(
            |e| {
                let message = format!("DynamoDB DescribeTable: {}", DisplayErrorContext(&e));
                if sdk_error_is_transient(&e) {
                    StreamError::Transient(message)
                } else {
                    StreamError::Permanent(message)
                }
            },
        )?;
        let stream_arn = out
            .table()
            .and_then(|t| t.latest_stream_arn())
            .ok_or_else(|| {
                StreamError::Permanent(format!("table {table} has no stream (StreamSpecification not enabled)"))
            })?
            .to_owned();
        let mut reader = Self {
            client: streams,
            stream_arn,
            region: region.to_owned(),
            start,
            order: Vec::new(),
            shards: HashMap::new(),
            poll_interval: Timings::standard().local.stream_poll,
            retry,
            fresh_iterator_when_idle: true,
        };
        reader.refresh_shards(true).await?;
        tracing::info!(table, stream_arn = %reader.stream_arn, shards = reader.order.len(), ?start, "stream reader opened");
        Ok(reader)
    }

    /// Sets the wait between two polls that found nothing (bounded below by 10 ms).
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(10));
        self
    }

    /// Replaces the retry policy of each call (tests use short ones).
    pub fn with_retry(mut self, retry: AwsRetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Whether an empty poll renews the shard iterator (default `true`, needed on moto;
    /// on AWS it only costs one `GetShardIterator` per empty poll, and `false` saves it).
    pub fn with_fresh_iterator_when_idle(mut self, fresh: bool) -> Self {
        self.fresh_iterator_when_idle = fresh;
        self
    }

    pub fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    /// Lists the stream's shards (`DescribeStream`, paginated) and takes up the new ones.
    /// At open, shards still open start at the reader's start position and closed ones
    /// are read from their start only for [`StartPosition::TrimHorizon`]; later shards start at their beginning.
    async fn refresh_shards(&mut self, at_open: bool) -> Result<(), StreamError> {
        let mut exclusive_start: Option<String> = None;
        loop {
            let mut req = self.client.describe_stream().stream_arn(&self.stream_arn);
            if let Some(s) = &exclusive_start {
                req = req.exclusive_start_shard_id(s);
            }
            let out = self
                .retry
                .run("dynamodbstreams", "DescribeStream", is_transient, || req.clone().send())
                .await
                .map_err(|e| to_stream_error("DescribeStream", e))?;
            let Some(description) = out.stream_description() else {
                return Err(StreamError::Permanent("DescribeStream answered no StreamDescription".into()));
            };
            for shard in description.shards() {
                let Some(id) = shard.shard_id() else { continue };
                if self.shards.contains_key(id) {
                    continue;
                }
                let closed = shard.sequence_number_range().and_then(|r| r.ending_sequence_number()).is_some();
                let start = match (at_open, closed, self.start) {
                    (false, _, _) | (true, _, StartPosition::TrimHorizon) => ShardIteratorType::TrimHorizon,
                    (true, false, StartPosition::Latest) => ShardIteratorType::Latest,
                    // Closed before we opened, and only new records are wanted: nothing to read.
                    (true, true, StartPosition::Latest) => {
                        self.order.push(id.to_owned());
                        self.shards.insert(
                            id.to_owned(),
                            ShardCursor {
                                parent: None,
                                iterator: None,
                                last_sequence: None,
                                start: ShardIteratorType::Latest,
                            },
                        );
                        continue;
                    }
                };
                let iterator = self.shard_iterator(id, start.clone(), None).await?;
                tracing::debug!(shard_id = id, ?start, "stream shard taken up");
                self.order.push(id.to_owned());
                self.shards.insert(
                    id.to_owned(),
                    ShardCursor {
                        parent: shard.parent_shard_id().map(str::to_owned),
                        iterator,
                        last_sequence: None,
                        start,
                    },
                );
            }
            match description.last_evaluated_shard_id() {
                Some(last) => exclusive_start = Some(last.to_owned()),
                None => return Ok(()),
            }
        }
    }

    async fn shard_iterator(
        &self,
        shard_id: &str,
        kind: ShardIteratorType,
        after: Option<&str>,
    ) -> Result<Option<String>, StreamError> {
        let mut req =
            self.client.get_shard_iterator().stream_arn(&self.stream_arn).shard_id(shard_id).shard_iterator_type(kind);
        if let Some(sequence) = after {
            req = req.sequence_number(sequence);
        }
        let out = self
            .retry
            .run("dynamodbstreams", "GetShardIterator", is_transient, || req.clone().send())
            .await
            .map_err(|e| to_stream_error("GetShardIterator", e))?;
        Ok(out.shard_iterator().map(str::to_owned))
    }

    /// One pass over every readable shard (a child only once its parent is read to
    /// its end); answers the records found, oldest first per shard, as Lambda JSON.
    pub async fn poll(&mut self) -> Result<Vec<Value>, StreamError> {
        self.refresh_shards(false).await?;
        let mut records = Vec::new();
        for id in self.order.clone() {
            let parent_pending = self
                .shards
                .get(&id)
                .and_then(|c| c.parent.as_ref())
                .and_then(|p| self.shards.get(p))
                .is_some_and(|p| p.iterator.is_some());
            if parent_pending {
                continue;
            }
            let Some(iterator) = self.shards.get(&id).and_then(|c| c.iterator.clone()) else { continue };
            let req = self.client.get_records().shard_iterator(&iterator).limit(MAX_RECORDS_PER_CALL);
            let out = match self.retry.run("dynamodbstreams", "GetRecords", is_transient, || req.clone().send()).await {
                Ok(out) => out,
                Err(e) if e.as_service_error().is_some_and(|se| se.is_expired_iterator_exception()) => {
                    // Iterators live 15 minutes: resume after the last record handed over.
                    tracing::info!(shard_id = %id, "shard iterator expired; taking a new one");
                    self.renew_iterator(&id).await?;
                    continue;
                }
                Err(e) => return Err(to_stream_error("GetRecords", e)),
            };
            let next = out.next_shard_iterator().map(str::to_owned);
            tracing::trace!(shard_id = %id, records = out.records().len(), open = next.is_some(), "GetRecords");
            let mut last = None;
            for record in out.records() {
                last = record.dynamodb().and_then(|d| d.sequence_number()).map(str::to_owned).or(last);
                records.push(record_to_lambda_json(record, &self.stream_arn, &self.region));
            }
            let found = last.is_some();
            if let Some(cursor) = self.shards.get_mut(&id) {
                if next.is_none() {
                    tracing::debug!(shard_id = %id, "stream shard closed and read to its end");
                }
                cursor.iterator = next;
                if found {
                    cursor.last_sequence = last;
                }
            }
            if !found && self.fresh_iterator_when_idle {
                self.renew_iterator(&id).await?;
            }
        }
        Ok(records)
    }

    /// Replaces an open shard's iterator by a fresh one positioned after the last
    /// record handed over (or at the shard's start position when none was). A shard
    /// opened at `LATEST` that has handed nothing over keeps its iterator: a new
    /// `LATEST` one would skip what was written in between.
    async fn renew_iterator(&mut self, id: &str) -> Result<(), StreamError> {
        let Some(cursor) = self.shards.get(id) else { return Ok(()) };
        if cursor.iterator.is_none() {
            return Ok(());
        }
        let (kind, after) = match &cursor.last_sequence {
            Some(seq) => (ShardIteratorType::AfterSequenceNumber, Some(seq.clone())),
            None if cursor.start == ShardIteratorType::Latest => return Ok(()),
            None => (cursor.start.clone(), None),
        };
        let fresh = self.shard_iterator(id, kind, after.as_deref()).await?;
        if let Some(cursor) = self.shards.get_mut(id) {
            cursor.iterator = fresh;
        }
        Ok(())
    }

    /// Polls until at least one record is there or `wait` has passed (then answers
    /// an empty batch), sleeping the poll interval between empty polls: an emulator has no push.
    pub async fn next_batch(&mut self, wait: Duration) -> Result<Vec<Value>, StreamError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let records = self.poll().await?;
            let now = tokio::time::Instant::now();
            if !records.is_empty() || now >= deadline {
                return Ok(records);
            }
            tokio::time::sleep(self.poll_interval.min(deadline - now)).await;
        }
    }
}

/// One stream record in the shape Lambda hands a function (and `aws_lambda_events`
/// reads): `eventID`, `eventName`, `eventVersion`, `eventSource: "aws:dynamodb"`,
/// `awsRegion`, `eventSourceARN` and `dynamodb` with `Keys`, `NewImage` / `OldImage`
/// (when the stream view has them), `SequenceNumber`, `SizeBytes`, `StreamViewType`
/// and `ApproximateCreationDateTime` (epoch seconds); attribute values in DynamoDB JSON.
pub fn record_to_lambda_json(record: &Record, stream_arn: &str, region: &str) -> Value {
    let mut dynamodb = Map::new();
    if let Some(d) = record.dynamodb() {
        if let Some(t) = d.approximate_creation_date_time() {
            dynamodb.insert("ApproximateCreationDateTime".into(), json!(t.secs()));
        }
        dynamodb.insert("Keys".into(), item_to_json(d.keys()));
        if let Some(image) = d.new_image() {
            dynamodb.insert("NewImage".into(), item_to_json(Some(image)));
        }
        if let Some(image) = d.old_image() {
            dynamodb.insert("OldImage".into(), item_to_json(Some(image)));
        }
        if let Some(seq) = d.sequence_number() {
            dynamodb.insert("SequenceNumber".into(), json!(seq));
        }
        dynamodb.insert("SizeBytes".into(), json!(d.size_bytes().unwrap_or(0)));
        if let Some(view) = d.stream_view_type() {
            dynamodb.insert("StreamViewType".into(), json!(view.as_str()));
        }
    }
    json!({
        "eventID": record.event_id().unwrap_or_default(),
        "eventName": record.event_name().map(|n| n.as_str()).unwrap_or_default(),
        "eventVersion": record.event_version().unwrap_or("1.1"),
        "eventSource": record.event_source().unwrap_or("aws:dynamodb"),
        "awsRegion": record.aws_region().unwrap_or(region),
        "eventSourceARN": stream_arn,
        "dynamodb": Value::Object(dynamodb),
    })
}

fn item_to_json(item: Option<&HashMap<String, AttributeValue>>) -> Value {
    // Sorted keys: the same record always renders the same text.
    let mut names: Vec<&String> = item.map(|i| i.keys().collect()).unwrap_or_default();
    names.sort();
    let mut out = Map::new();
    for name in names {
        if let Some(v) = item.and_then(|i| i.get(name)) {
            out.insert(name.clone(), attribute_to_json(v));
        }
    }
    Value::Object(out)
}

/// One attribute value in DynamoDB JSON (`{"S": ..}`, `{"N": ..}`, `{"SS": [..]}`, `{"M": {..}}`,
/// `{"L": [..]}`, `{"BOOL": ..}`, `{"NULL": true}`, binaries base64-encoded).
pub fn attribute_to_json(value: &AttributeValue) -> Value {
    match value {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::Ss(v) => json!({ "SS": v }),
        AttributeValue::Ns(v) => json!({ "NS": v }),
        AttributeValue::B(b) => json!({ "B": base64(b.as_ref()) }),
        AttributeValue::Bs(v) => json!({ "BS": v.iter().map(|b| base64(b.as_ref())).collect::<Vec<_>>() }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(_) => json!({ "NULL": true }),
        AttributeValue::L(items) => json!({ "L": items.iter().map(attribute_to_json).collect::<Vec<_>>() }),
        AttributeValue::M(map) => json!({ "M": item_to_json(Some(map)) }),
        // A type newer than this SDK: kept visible rather than dropped.
        _ => json!({ "UNKNOWN": true }),
    }
}

/// Binary attributes in Lambda's stream JSON: standard alphabet, padded.
fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;
    use crate::platform::filter::matches_aggregator_filter;
    use aws_sdk_dynamodbstreams::primitives::{Blob, DateTime};
    use aws_sdk_dynamodbstreams::types::{OperationType, StreamRecord, StreamViewType};

    #[test]
    fn sdk_record_becomes_lambda_stream_json_with_every_attribute_type() {
        let mut map = HashMap::new();
        map.insert("inner".to_owned(), AttributeValue::N("7".into()));
        let record = Record::builder()
            .event_id("e1")
            .event_name(OperationType::Modify)
            .event_version("1.1")
            .event_source("aws:dynamodb")
            .aws_region("us-east-1")
            .dynamodb(
                StreamRecord::builder()
                    .approximate_creation_date_time(DateTime::from_secs(1_735_689_631))
                    .keys("PK", AttributeValue::S("CONV#x".into()))
                    .keys("SK", AttributeValue::S("META".into()))
                    .new_image("PK", AttributeValue::S("CONV#x".into()))
                    .new_image("SK", AttributeValue::S("META".into()))
                    .new_image("remaining", AttributeValue::N("0".into()))
                    .new_image("status", AttributeValue::S("RUNNING".into()))
                    .new_image("finished", AttributeValue::Ss(vec!["w01".into(), "w02".into()]))
                    .new_image("m", AttributeValue::M(map))
                    .new_image("l", AttributeValue::L(vec![AttributeValue::Bool(true), AttributeValue::Null(true)]))
                    .new_image("b", AttributeValue::B(Blob::new(b"hello".to_vec())))
                    .sequence_number("100")
                    .size_bytes(123)
                    .stream_view_type(StreamViewType::NewImage)
                    .build(),
            )
            .build();
        let v = record_to_lambda_json(&record, "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/s", "us-east-1");
        assert_eq!(v["eventID"], "e1");
        assert_eq!(v["eventName"], "MODIFY");
        assert_eq!(v["eventSource"], "aws:dynamodb");
        assert_eq!(v["eventSourceARN"], "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/s");
        let d = &v["dynamodb"];
        assert_eq!(d["Keys"], json!({ "PK": { "S": "CONV#x" }, "SK": { "S": "META" } }));
        assert_eq!(d["NewImage"]["finished"], json!({ "SS": ["w01", "w02"] }));
        assert_eq!(d["NewImage"]["m"], json!({ "M": { "inner": { "N": "7" } } }));
        assert_eq!(d["NewImage"]["l"], json!({ "L": [{ "BOOL": true }, { "NULL": true }] }));
        assert_eq!(d["NewImage"]["b"], json!({ "B": "aGVsbG8=" }));
        assert_eq!(d["SequenceNumber"], "100");
        assert_eq!(d["SizeBytes"], 123);
        assert_eq!(d["StreamViewType"], "NEW_IMAGE");
        assert_eq!(d["ApproximateCreationDateTime"], 1_735_689_631);
        assert!(d.get("OldImage").is_none());
        assert!(matches_aggregator_filter(&v));
    }

    #[test]
    fn base64_pads_like_the_standard_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(&[0xff, 0xfe]), "//4=");
    }
}
