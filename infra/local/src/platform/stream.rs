//! The DynamoDB stream event source mapping, as Lambda runs it, over any [`ChangeFeed`]: the template's `FilterCriteria`, `BatchSize`, records in order, the aggregator's timeout, partial batch responses (`ReportBatchItemFailures`), `BisectBatchOnFunctionError` and `MaximumRetryAttempts` — then the batch is dropped and a record of it sent to the on-failure destination, as AWS sends one to the template's SQS queue.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use aggregator::Aggregator;
use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use serde_json::{Value, json};
use swarm_core::faults::FaultPlan;
use tokio::sync::watch;

use super::ChangeFeed;
use super::counters::{Counters, RecordLog, add};
use super::filter::matches_aggregator_filter;
use super::invoke::{Ended, invoke};
use crate::events;

/// The template's `BisectBatchOnFunctionError` of the aggregator's stream event (a unit test keeps them equal).
pub const BISECT_BATCH_ON_FUNCTION_ERROR: bool = true;

/// Longest wait for records in one read of the feed (short, so a stopped stack stops promptly).
const FEED_WAIT: Duration = Duration::from_secs(1);

/// How the trigger feeds the aggregator (the template's stream event and the function's timeout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TriggerSettings {
    /// Records per invocation at most (`BatchSize`).
    pub batch_size: usize,
    /// Retries of a failed batch before it is dropped (`MaximumRetryAttempts`).
    pub max_retry_attempts: u32,
    /// The aggregator's timeout: the invocation's deadline, where it is cut.
    pub timeout: Duration,
    /// Wait before a retry, and after a failed read of the feed.
    pub retry_wait: Duration,
}

/// The stream trigger: the table's change feed feeding the aggregator handler.
pub struct StreamTrigger {
    pub feed: Box<dyn ChangeFeed>,
    pub aggregator: Arc<Aggregator>,
    pub settings: TriggerSettings,
    /// Invoke the aggregator twice, concurrently, with every batch (duplicate trigger drills).
    pub duplicate_deliveries: bool,
    /// A fault plan per invocation (crash points), if any.
    pub faults: Option<Arc<dyn FaultPlan>>,
    pub counters: Arc<Counters>,
    /// The on-failure destination: one record per batch given up (the template's SQS queue on AWS).
    pub on_failure: Arc<RecordLog>,
}

/// How one invocation with a batch ended, as the event source mapping reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invoked {
    /// Every record was handled.
    Succeeded,
    /// A partial batch response listed a record: the records from this position on are retried,
    /// the ones before it are done (checkpointed).
    FailedFrom(usize),
    /// The invocation failed (an error, its timeout, a crash, a malformed partial batch response).
    Failed,
}

impl StreamTrigger {
    /// Reads, filters and delivers until `shutdown`. Batches go out one at a time, in stream
    /// order: a batch that keeps failing holds back the ones behind it until it is retried
    /// out, as a shard does on AWS.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        loop {
            let read = tokio::select! {
                r = self.feed.next_records(FEED_WAIT) => r,
                _ = shutdown.changed() => return,
            };
            let records = match read {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, transient = e.is_transient(), "reading the table's stream failed");
                    tokio::time::sleep(self.settings.retry_wait).await;
                    continue;
                }
            };
            if records.is_empty() {
                continue;
            }
            add(&self.counters.stream_records, records.len() as u64);
            let matched: Vec<Value> = records.into_iter().filter(matches_aggregator_filter).collect();
            if matched.is_empty() {
                continue;
            }
            add(&self.counters.stream_records_matched, matched.len() as u64);
            tracing::info!(matched = matched.len(), "stream records passed the aggregator's filter");
            for batch in matched.chunks(self.settings.batch_size.max(1)) {
                let delivery = async {
                    if self.duplicate_deliveries {
                        // Both invocations race for the RUNNING → AGGREGATING flip.
                        tokio::join!(self.deliver(batch.to_vec()), self.deliver(batch.to_vec()));
                    } else {
                        self.deliver(batch.to_vec()).await;
                    }
                };
                tokio::select! {
                    () = delivery => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
    }

    /// Delivers one batch until it succeeds or is given up ([`deliver_batch`]); counts and
    /// logs what was dropped and sends its record to the on-failure destination.
    async fn deliver(&self, batch: Vec<Value>) {
        let s = &self.settings;
        let dropped = deliver_batch(batch, s.max_retry_attempts, s.retry_wait, |records| async move {
            self.invoke_once(&records).await
        })
        .await;
        for (records, invocations) in dropped {
            add(&self.counters.stream_batches_dropped, 1);
            add(&self.counters.stream_records_dropped, records.len() as u64);
            let keys: Vec<&Value> = records.iter().map(|r| &r["dynamodb"]["Keys"]).collect();
            tracing::error!(
                ?keys,
                "stream batch dropped after MaximumRetryAttempts: its sequence numbers go to the on-failure destination"
            );
            self.on_failure.push(on_failure_record(&records, invocations));
        }
    }

    /// One aggregator invocation with `records`.
    async fn invoke_once(&self, records: &[Value]) -> Invoked {
        add(&self.counters.aggregator_invocations, 1);
        let event: StreamEvent = match serde_json::from_value(serde_json::json!({ "Records": records })) {
            Ok(e) => e,
            Err(e) => {
                // A record the Lambda event type cannot hold would fail the invocation on AWS too.
                tracing::error!(error = %e, "stream records do not parse as a Lambda DynamoDB event");
                add(&self.counters.aggregator_failures, 1);
                return Invoked::Failed;
            }
        };
        let context = events::lambda_context("aggregator", self.settings.timeout);
        let handler = aggregator::handler::handle(&self.aggregator, lambda_runtime::LambdaEvent::new(event, context));
        match invoke(self.settings.timeout, self.faults.as_ref(), handler).await {
            Ended::Returned(Ok(response)) => match first_listed(&response, records) {
                Some(Invoked::Succeeded) => Invoked::Succeeded,
                Some(failed) => {
                    tracing::warn!(?failed, records = records.len(), "aggregator reported a batch item failure");
                    add(&self.counters.aggregator_failures, 1);
                    failed
                }
                None => {
                    tracing::error!(?response, "malformed partial batch response: the whole batch is a failure");
                    add(&self.counters.aggregator_failures, 1);
                    Invoked::Failed
                }
            },
            Ended::Returned(Err(e)) => {
                tracing::warn!(error = %e, records = records.len(), "aggregator invocation failed");
                add(&self.counters.aggregator_failures, 1);
                Invoked::Failed
            }
            ended => {
                tracing::warn!(
                    records = records.len(),
                    outcome = ended.describe(),
                    "aggregator invocation did not return"
                );
                let counter = match ended {
                    Ended::Killed => &self.counters.killed_invocations,
                    _ => &self.counters.timed_out_invocations,
                };
                add(counter, 1);
                add(&self.counters.aggregator_failures, 1);
                Invoked::Failed
            }
        }
    }
}

/// What a partial batch response says of `records`: every record handled, or the position of the
/// first one listed (by sequence number) from which the batch is retried. `None` when Lambda would
/// treat the response as a failure of the whole batch: an empty identifier, or one that is not a
/// sequence number of the batch.
pub fn first_listed(response: &DynamoDbEventResponse, records: &[Value]) -> Option<Invoked> {
    let mut first: Option<usize> = None;
    for failure in &response.batch_item_failures {
        let id = failure.item_identifier.as_deref().filter(|id| !id.is_empty())?;
        let at = records.iter().position(|r| r["dynamodb"]["SequenceNumber"].as_str() == Some(id))?;
        first = Some(first.map_or(at, |f| f.min(at)));
    }
    Some(first.map_or(Invoked::Succeeded, Invoked::FailedFrom))
}

/// The record Lambda sends to a stream mapping's on-failure destination for a batch given up
/// (`RetryAttemptsExhausted`): the batch's sequence numbers and stream, never its items.
pub fn on_failure_record(records: &[Value], invocations: u32) -> Value {
    let sequence =
        |r: Option<&Value>| r.and_then(|r| r["dynamodb"]["SequenceNumber"].as_str()).unwrap_or_default().to_owned();
    json!({
        "requestContext": {
            "functionArn": "arn:aws:lambda:local:000000000000:function:aggregator",
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": invocations,
        },
        "version": "1.0",
        "DDBStreamBatchInfo": {
            "startSequenceNumber": sequence(records.first()),
            "endSequenceNumber": sequence(records.last()),
            "batchSize": records.len(),
            "streamArn": records.first().and_then(|r| r["eventSourceARN"].as_str()).unwrap_or_default(),
        },
    })
}

/// Lambda's retry of a stream batch, in order: `invoke` answers how an invocation with the
/// records ended. A failed invocation of several records is split in two and each half delivered
/// on its own, first half first (the split is not a retry); a failed single record is retried up
/// to `max_retry_attempts` times, `retry_wait` apart. A partial batch response retries the batch
/// from the record it lists (a retry: it counts), the records before it done. Answers the batches
/// given up, each with the invocations it had.
pub async fn deliver_batch<T: Clone, F, Fut>(
    batch: Vec<T>,
    max_retry_attempts: u32,
    retry_wait: Duration,
    mut invoke: F,
) -> Vec<(Vec<T>, u32)>
where
    F: FnMut(Vec<T>) -> Fut,
    Fut: Future<Output = Invoked>,
{
    let mut dropped = Vec::new();
    let mut pending: VecDeque<(Vec<T>, u32)> = VecDeque::from([(batch, 0)]);
    while let Some((records, retries)) = pending.pop_front() {
        let rest = match invoke(records.clone()).await {
            Invoked::Succeeded => continue,
            Invoked::FailedFrom(at) => records[at.min(records.len())..].to_vec(),
            Invoked::Failed if BISECT_BATCH_ON_FUNCTION_ERROR && records.len() > 1 => {
                let mut first = records;
                let second = first.split_off(first.len() / 2);
                pending.push_front((second, 0));
                pending.push_front((first, 0));
                continue;
            }
            Invoked::Failed => records,
        };
        if rest.is_empty() {
            continue;
        }
        if retries < max_retry_attempts {
            tokio::time::sleep(retry_wait).await;
            pending.push_front((rest, retries + 1));
        } else {
            dropped.push((rest, retries + 1));
        }
    }
    dropped
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Delivers `batch` where `bad` always fails the invocation; answers the invocations made and what was dropped.
    async fn run(batch: Vec<u32>, bad: &[u32], retries: u32) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
        let calls = Mutex::new(Vec::new());
        let dropped = deliver_batch(batch, retries, Duration::from_millis(10), |records: Vec<u32>| {
            calls.lock().unwrap().push(records.clone());
            let ok = !records.iter().any(|r| bad.contains(r));
            async move { if ok { Invoked::Succeeded } else { Invoked::Failed } }
        })
        .await;
        (calls.into_inner().unwrap(), dropped.into_iter().map(|(r, _)| r).collect())
    }

    #[tokio::test(start_paused = true)]
    async fn a_partial_batch_response_retries_from_the_listed_record_only() {
        let calls = Mutex::new(Vec::new());
        // Record 3 fails twice (reported by the function), then succeeds.
        let failures = Mutex::new(2);
        let dropped = deliver_batch(vec![1, 2, 3, 4], 5, Duration::from_millis(10), |records: Vec<u32>| {
            calls.lock().unwrap().push(records.clone());
            let mut left = failures.lock().unwrap();
            let at = records.iter().position(|r| *r == 3).filter(|_| *left > 0);
            if at.is_some() {
                *left -= 1;
            }
            async move { at.map_or(Invoked::Succeeded, Invoked::FailedFrom) }
        })
        .await;
        assert!(dropped.is_empty());
        assert_eq!(
            calls.into_inner().unwrap(),
            vec![vec![1, 2, 3, 4], vec![3, 4], vec![3, 4]],
            "records 1 and 2 are never delivered again"
        );
        // A record that keeps failing is dropped with the rest of its batch after the retries.
        let dropped = deliver_batch(vec![1, 2, 3], 2, Duration::from_millis(10), |records: Vec<u32>| {
            let at = records.iter().position(|r| *r == 2);
            async move { at.map_or(Invoked::Succeeded, Invoked::FailedFrom) }
        })
        .await;
        assert_eq!(dropped, vec![(vec![2, 3], 3)], "three invocations, then given up");
    }

    #[test]
    fn the_partial_batch_response_is_read_by_sequence_number() {
        let records: Vec<Value> =
            ["11", "12", "13"].iter().map(|n| json!({"dynamodb": {"SequenceNumber": n}})).collect();
        let response = |ids: &[Option<&str>]| {
            let mut r = DynamoDbEventResponse::default();
            for id in ids {
                let mut f = aws_lambda_events::event::streams::DynamoDbBatchItemFailure::default();
                f.item_identifier = id.map(str::to_owned);
                r.batch_item_failures.push(f);
            }
            r
        };
        assert_eq!(first_listed(&response(&[]), &records), Some(Invoked::Succeeded));
        assert_eq!(first_listed(&response(&[Some("13"), Some("12")]), &records), Some(Invoked::FailedFrom(1)));
        assert_eq!(first_listed(&response(&[Some("99")]), &records), None);
        assert_eq!(first_listed(&response(&[None]), &records), None);
    }

    #[test]
    fn the_on_failure_record_names_the_batch_by_sequence_numbers() {
        let records: Vec<Value> = ["11", "12"]
            .iter()
            .map(|n| json!({"eventSourceARN": "arn:stream", "dynamodb": {"SequenceNumber": n, "NewImage": {"x": 1}}}))
            .collect();
        let r = on_failure_record(&records, 6);
        assert_eq!(r["requestContext"]["condition"], "RetryAttemptsExhausted");
        assert_eq!(r["requestContext"]["approximateInvokeCount"], 6);
        assert_eq!(r["DDBStreamBatchInfo"]["startSequenceNumber"], "11");
        assert_eq!(r["DDBStreamBatchInfo"]["endSequenceNumber"], "12");
        assert_eq!(r["DDBStreamBatchInfo"]["batchSize"], 2);
        assert_eq!(r["DDBStreamBatchInfo"]["streamArn"], "arn:stream");
        assert!(!r.to_string().contains("NewImage"), "only sequence numbers, never the items");
    }

    #[tokio::test(start_paused = true)]
    async fn a_succeeding_batch_is_invoked_once() {
        assert_eq!(run(vec![1, 2, 3], &[], 5).await, (vec![vec![1, 2, 3]], vec![]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_single_failing_record_is_retried_max_retry_attempts_times_then_dropped() {
        let (calls, dropped) = run(vec![7], &[7], 5).await;
        assert_eq!(calls, vec![vec![7]; 6], "the first invocation and 5 retries");
        assert_eq!(dropped, vec![vec![7]]);
        let (calls, dropped) = run(vec![7], &[7], 0).await;
        assert_eq!((calls.len(), dropped.len()), (1, 1), "MaximumRetryAttempts 0: no retry");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_batch_is_bisected_in_order_until_the_bad_record_alone_is_dropped() {
        let (calls, dropped) = run(vec![1, 2, 3, 4], &[3], 2).await;
        assert_eq!(
            calls,
            vec![vec![1, 2, 3, 4], vec![1, 2], vec![3, 4], vec![3], vec![3], vec![3], vec![4]],
            "halves in stream order; splitting is not a retry"
        );
        assert_eq!(dropped, vec![vec![3]]);
    }

    #[test]
    fn bisecting_is_what_template_yaml_declares_for_the_aggregator() {
        let template = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml")).unwrap();
        let declared: Vec<&str> = template
            .lines()
            .filter_map(|l| l.trim().strip_prefix("BisectBatchOnFunctionError:"))
            .map(str::trim)
            .collect();
        assert_eq!(declared, vec![BISECT_BATCH_ON_FUNCTION_ERROR.to_string()]);
    }
}
