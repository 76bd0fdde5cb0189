//! What the local platform did, on either backend: invocations by outcome, messages deleted and retried, stream records read, filtered and dropped, and every message an event source mapping received.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

/// Counts of the platform's work (tests, the summary line, the chaos run).
#[derive(Default, Debug)]
pub struct Counters {
    /// Worker invocations on the tasks and refund queues (a duplicated delivery counts twice).
    pub worker_invocations: AtomicU64,
    /// Messages handed to those invocations (an invocation carries up to `BatchSize`).
    pub worker_records: AtomicU64,
    /// Worker invocations in `DeadLetters` mode (on a DLQ).
    pub dead_letter_invocations: AtomicU64,
    /// Messages listed in a `batchItemFailures` (left for SQS to make visible again).
    pub batch_item_failures: AtomicU64,
    /// SQS-fed invocations that returned an error (their whole batch is left to return).
    pub failed_invocations: AtomicU64,
    /// Invocations of any function cut at the function's timeout.
    pub timed_out_invocations: AtomicU64,
    /// Invocations of any function killed at a crash point ([`swarm_core::faults`]).
    pub killed_invocations: AtomicU64,
    /// Messages deleted after a successful invocation.
    pub messages_deleted: AtomicU64,
    /// Records read from the table's stream.
    pub stream_records: AtomicU64,
    /// Of those, records the aggregator's filter let through.
    pub stream_records_matched: AtomicU64,
    /// Aggregator invocations, retries included.
    pub aggregator_invocations: AtomicU64,
    /// Aggregator invocations that failed, timed out or were killed (each retried or dropped).
    pub aggregator_failures: AtomicU64,
    /// Stream batches given up after `MaximumRetryAttempts` (a record of each goes to the on-failure destination).
    pub stream_batches_dropped: AtomicU64,
    /// Records in those batches.
    pub stream_records_dropped: AtomicU64,
    /// Most worker invocations (tasks and refund queues) in flight at once.
    pub max_concurrent_workers: AtomicU64,
    /// Sweep invocations (the scheduler's timer).
    pub sweep_invocations: AtomicU64,
    in_flight: AtomicU64,
    /// Per function fed by an event source mapping: invocations in flight now, and the most at once.
    by_function: Mutex<BTreeMap<String, (u64, u64)>>,
}

/// The counters at one moment, as plain numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    pub worker_invocations: u64,
    pub worker_records: u64,
    pub dead_letter_invocations: u64,
    pub batch_item_failures: u64,
    pub failed_invocations: u64,
    pub timed_out_invocations: u64,
    pub killed_invocations: u64,
    pub messages_deleted: u64,
    pub stream_records: u64,
    pub stream_records_matched: u64,
    pub aggregator_invocations: u64,
    pub aggregator_failures: u64,
    pub stream_batches_dropped: u64,
    pub stream_records_dropped: u64,
    pub max_concurrent_workers: u64,
    pub sweep_invocations: u64,
}

impl CounterSnapshot {
    /// Two stacks' counters as one run's (a stack killed and started again on the same stack):
    /// the sums, and the larger peak.
    pub fn plus(self, o: Self) -> Self {
        Self {
            worker_invocations: self.worker_invocations + o.worker_invocations,
            worker_records: self.worker_records + o.worker_records,
            dead_letter_invocations: self.dead_letter_invocations + o.dead_letter_invocations,
            batch_item_failures: self.batch_item_failures + o.batch_item_failures,
            failed_invocations: self.failed_invocations + o.failed_invocations,
            timed_out_invocations: self.timed_out_invocations + o.timed_out_invocations,
            killed_invocations: self.killed_invocations + o.killed_invocations,
            messages_deleted: self.messages_deleted + o.messages_deleted,
            stream_records: self.stream_records + o.stream_records,
            stream_records_matched: self.stream_records_matched + o.stream_records_matched,
            aggregator_invocations: self.aggregator_invocations + o.aggregator_invocations,
            aggregator_failures: self.aggregator_failures + o.aggregator_failures,
            stream_batches_dropped: self.stream_batches_dropped + o.stream_batches_dropped,
            stream_records_dropped: self.stream_records_dropped + o.stream_records_dropped,
            max_concurrent_workers: self.max_concurrent_workers.max(o.max_concurrent_workers),
            sweep_invocations: self.sweep_invocations + o.sweep_invocations,
        }
    }
}

/// Adds `n` to a counter.
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::SeqCst);
}

impl Counters {
    pub fn snapshot(&self) -> CounterSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        CounterSnapshot {
            worker_invocations: get(&self.worker_invocations),
            worker_records: get(&self.worker_records),
            dead_letter_invocations: get(&self.dead_letter_invocations),
            batch_item_failures: get(&self.batch_item_failures),
            failed_invocations: get(&self.failed_invocations),
            timed_out_invocations: get(&self.timed_out_invocations),
            killed_invocations: get(&self.killed_invocations),
            messages_deleted: get(&self.messages_deleted),
            stream_records: get(&self.stream_records),
            stream_records_matched: get(&self.stream_records_matched),
            aggregator_invocations: get(&self.aggregator_invocations),
            aggregator_failures: get(&self.aggregator_failures),
            stream_batches_dropped: get(&self.stream_batches_dropped),
            stream_records_dropped: get(&self.stream_records_dropped),
            max_concurrent_workers: get(&self.max_concurrent_workers),
            sweep_invocations: get(&self.sweep_invocations),
        }
    }

    /// A worker invocation starts: in flight + 1, and the peak kept.
    pub(crate) fn worker_started(&self) {
        let now_in = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_concurrent_workers.fetch_max(now_in, Ordering::SeqCst);
    }

    pub(crate) fn worker_ended(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// An invocation of `function` starts (a duplicated delivery is two): in flight + 1, its peak kept.
    pub(crate) fn function_started(&self, function: &str) {
        let mut by = self.by_function.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (now, peak) = by.entry(function.to_owned()).or_default();
        *now += 1;
        *peak = (*peak).max(*now);
    }

    pub(crate) fn function_ended(&self, function: &str) {
        let mut by = self.by_function.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((now, _)) = by.get_mut(function) {
            *now = now.saturating_sub(1);
        }
    }

    /// The most invocations in flight at once, per function fed by an event source mapping
    /// (`worker`, `refund-worker`, `dlq-consumer`).
    pub fn peak_concurrency(&self) -> BTreeMap<String, u64> {
        let by = self.by_function.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        by.iter().map(|(f, (_, peak))| (f.clone(), *peak)).collect()
    }
}

/// Records sent to a destination, in order (the stream mapping's on-failure destination).
#[derive(Default, Debug)]
pub struct RecordLog(Mutex<Vec<serde_json::Value>>);

impl RecordLog {
    pub(crate) fn push(&self, record: serde_json::Value) {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(record);
    }

    pub fn all(&self) -> Vec<serde_json::Value> {
        self.0.lock().map(|r| r.clone()).unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }
}

/// One message as an event source mapping received it, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The queue's name.
    pub queue: String,
    pub message_id: String,
    pub body: String,
    /// `ApproximateReceiveCount` as the queue reported it.
    pub receive_count: u32,
    /// When the `ReceiveMessage` call that returned it was sent: no later than the
    /// moment the queue started the message's visibility timeout.
    pub polled_at: Instant,
    /// When that call returned: no earlier than the moment the message became visible.
    pub received_at: Instant,
    /// Left for redelivery: listed in `batchItemFailures`, or the invocation failed, timed out or was killed.
    pub retried: bool,
}

/// Every message received so far, in order.
#[derive(Default, Debug)]
pub struct ReceivedLog(Mutex<Vec<Received>>);

impl ReceivedLog {
    pub(crate) fn push(&self, entries: impl IntoIterator<Item = Received>) {
        let mut log = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        log.extend(entries);
    }

    pub fn all(&self) -> Vec<Received> {
        self.0.lock().map(|r| r.clone()).unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }
}
