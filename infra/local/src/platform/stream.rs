//! The DynamoDB stream event source mapping, as Lambda runs it, over any [`ChangeFeed`]: the template's `FilterCriteria`, `BatchSize`, records in order, the aggregator's timeout, `BisectBatchOnFunctionError` and `MaximumRetryAttempts` — then the batch is dropped, as AWS does without an on-failure destination.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use aggregator::Aggregator;
use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use serde_json::Value;
use swarm_core::faults::FaultPlan;
use tokio::sync::watch;

use super::ChangeFeed;
use super::chaos::{Chaos, FaultKind};
use super::counters::{Counters, add};
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
    /// The chaos run's stream faults: a record the filter passed is dropped, or delivered twice.
    pub chaos: Option<Arc<Chaos>>,
    pub counters: Arc<Counters>,
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
            let matched = match &self.chaos {
                Some(chaos) => with_stream_faults(matched, chaos),
                None => matched,
            };
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
    /// logs what was dropped.
    async fn deliver(&self, batch: Vec<Value>) {
        let s = &self.settings;
        let dropped = deliver_batch(batch, s.max_retry_attempts, s.retry_wait, |records| async move {
            self.invoke_once(&records).await
        })
        .await;
        for records in dropped {
            add(&self.counters.stream_batches_dropped, 1);
            add(&self.counters.stream_records_dropped, records.len() as u64);
            let keys: Vec<&Value> = records.iter().map(|r| &r["dynamodb"]["Keys"]).collect();
            tracing::error!(
                ?keys,
                "stream batch dropped after MaximumRetryAttempts (no on-failure destination): these records are gone"
            );
        }
    }

    /// One aggregator invocation with `records`; `true` when it succeeded.
    async fn invoke_once(&self, records: &[Value]) -> bool {
        add(&self.counters.aggregator_invocations, 1);
        let event: StreamEvent = match serde_json::from_value(serde_json::json!({ "Records": records })) {
            Ok(e) => e,
            Err(e) => {
                // A record the Lambda event type cannot hold would fail the invocation on AWS too.
                tracing::error!(error = %e, "stream records do not parse as a Lambda DynamoDB event");
                add(&self.counters.aggregator_failures, 1);
                return false;
            }
        };
        let context = events::lambda_context("aggregator", self.settings.timeout);
        let handler = aggregator::handler::handle(&self.aggregator, lambda_runtime::LambdaEvent::new(event, context));
        match invoke(self.settings.timeout, self.faults.as_ref(), handler).await {
            Ended::Returned(Ok(())) => true,
            Ended::Returned(Err(e)) => {
                tracing::warn!(error = %e, records = records.len(), "aggregator invocation failed");
                add(&self.counters.aggregator_failures, 1);
                false
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
                false
            }
        }
    }
}

/// The records the aggregator gets under chaos: each may be dropped (as AWS drops a batch after
/// `MaximumRetryAttempts`, or a record is lost) or follow itself a second time.
fn with_stream_faults(records: Vec<Value>, chaos: &Chaos) -> Vec<Value> {
    let mut out = Vec::with_capacity(records.len());
    for record in records {
        if chaos.decide(FaultKind::StreamRecordDropped) {
            tracing::warn!(keys = ?record["dynamodb"]["Keys"], "injected fault: stream record dropped");
            continue;
        }
        if chaos.decide(FaultKind::StreamRecordDuplicated) {
            out.push(record.clone());
        }
        out.push(record);
    }
    out
}

/// Lambda's retry of a stream batch, in order: `invoke` answers whether an invocation with
/// the records succeeded. A failed invocation of several records is split in two and each half
/// delivered on its own, first half first (the split is not a retry); a failed single record
/// is retried up to `max_retry_attempts` times, `retry_wait` apart. Answers the batches given up.
pub async fn deliver_batch<T: Clone, F, Fut>(
    batch: Vec<T>,
    max_retry_attempts: u32,
    retry_wait: Duration,
    mut invoke: F,
) -> Vec<Vec<T>>
where
    F: FnMut(Vec<T>) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut dropped = Vec::new();
    let mut pending: VecDeque<(Vec<T>, u32)> = VecDeque::from([(batch, 0)]);
    while let Some((records, retries)) = pending.pop_front() {
        if invoke(records.clone()).await {
            continue;
        }
        if BISECT_BATCH_ON_FUNCTION_ERROR && records.len() > 1 {
            let mut first = records;
            let second = first.split_off(first.len() / 2);
            pending.push_front((second, 0));
            pending.push_front((first, 0));
        } else if retries < max_retry_attempts {
            tokio::time::sleep(retry_wait).await;
            pending.push_front((records, retries + 1));
        } else {
            dropped.push(records);
        }
    }
    dropped
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Delivers `batch` where `bad` always fails; answers the invocations made and what was dropped.
    async fn run(batch: Vec<u32>, bad: &[u32], retries: u32) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
        let calls = Mutex::new(Vec::new());
        let dropped = deliver_batch(batch, retries, Duration::from_millis(10), |records: Vec<u32>| {
            calls.lock().unwrap().push(records.clone());
            let ok = !records.iter().any(|r| bad.contains(r));
            async move { ok }
        })
        .await;
        (calls.into_inner().unwrap(), dropped)
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
