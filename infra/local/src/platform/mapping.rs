//! The SQS event source mapping, as Lambda runs it, over any [`QueueConsumer`]: long poll, `BatchSize`, `MaximumConcurrency`, the function's timeout, and partial batch responses — failed messages are left for the queue's visibility timeout and redrive policy, never hurried back.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsBatchResponse;
use swarm_core::domain::TaskMessage;
use swarm_core::faults::FaultPlan;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use worker::{MessageHandler, WorkerMode};

use super::chaos::{Chaos, FaultKind};
use super::counters::{Counters, Received, ReceivedLog, add};
use super::invoke::{Ended, invoke};
use super::{Delivery, QueueConsumer};
use crate::events;

/// Wait after a failed `ReceiveMessage` before polling again.
const RECEIVE_ERROR_BACKOFF: Duration = Duration::from_millis(500);

/// How a mapping feeds its function (the template's event source and the function's timeout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappingSettings {
    /// Messages per invocation at most (`BatchSize`).
    pub batch_size: usize,
    /// Invocations in flight at once at most (`MaximumConcurrency`).
    pub max_concurrency: usize,
    /// The function's timeout: the invocation's deadline, where it is cut.
    pub timeout: Duration,
    /// `WaitTimeSeconds` of a receive (the emulator's SQS rounds it up to whole seconds).
    pub receive_wait: Duration,
}

/// One event source mapping: a queue feeding the worker handler.
pub struct EventSourceMapping {
    /// The queue's name (its ARN's last part in the event).
    pub queue: String,
    /// The function's name (its ARN in the Lambda context).
    pub function: String,
    pub consumer: Arc<dyn QueueConsumer>,
    pub mode: WorkerMode,
    /// The function: the tasks worker on a tasks queue, the closer on a DLQ.
    pub worker: Arc<dyn MessageHandler>,
    pub settings: MappingSettings,
    /// Invoke the function twice with every batch (at-least-once delivery drills).
    pub duplicate_deliveries: bool,
    /// A fault plan per invocation (crash points), if any.
    pub faults: Option<Arc<dyn FaultPlan>>,
    /// The chaos run's delivery faults: a batch held before its invocation, or handed to two at
    /// once, and poisoned messages (where [`Self::poison_visibility_secs`] is set).
    pub chaos: Option<Arc<Chaos>>,
    /// On the tasks queue only: the visibility timeout, whole seconds, a poisoned message is given
    /// back with (the worker's `retry_visibility`, as it sets it for a record it lists in
    /// `batchItemFailures`); `None`: no message of this queue is poisoned.
    pub poison_visibility_secs: Option<u32>,
    pub counters: Arc<Counters>,
    pub received: Arc<ReceivedLog>,
}

impl EventSourceMapping {
    /// Receives and invokes until `shutdown`: at most `max_concurrency` invocations at once;
    /// a receive waits for a free slot first, so nothing is received that cannot run.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let this = Arc::new(self);
        let slots = Arc::new(Semaphore::new(this.settings.max_concurrency.max(1)));
        // The invocations in flight die with the mapping (dropping the set aborts them): a stack
        // stopped or killed leaves no invocation of its own running on.
        let mut invocations = tokio::task::JoinSet::new();
        loop {
            while invocations.try_join_next().is_some() {}
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
                _ = shutdown.changed() => return,
            };
            let polled_at = Instant::now();
            let received = tokio::select! {
                r = this.consumer.receive(this.settings.batch_size, this.settings.receive_wait) => r,
                _ = shutdown.changed() => return,
            };
            let deliveries = match received {
                Ok(d) if d.is_empty() => continue,
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(queue = %this.queue, error = %e, "ReceiveMessage failed");
                    tokio::time::sleep(RECEIVE_ERROR_BACKOFF).await;
                    continue;
                }
            };
            let received_at = Instant::now();
            let this = this.clone();
            let slots = slots.clone();
            invocations.spawn(async move {
                this.deliver(deliveries, polled_at, received_at, &slots).await;
                drop(permit);
            });
        }
    }

    /// One batch: invokes the function (twice with duplicate deliveries), then deletes
    /// every message the last invocation did not report as failed. A failed, timed-out or
    /// killed invocation deletes nothing: the whole batch comes back after the visibility timeout.
    /// Under chaos, a batch may first be held (its messages stay in flight), or be handed to a
    /// second invocation as well, beside the first when a second of the `slots` is free, else after
    /// it (a duplicate counts against `MaximumConcurrency` like any invocation); a message either of
    /// them leaves for redelivery is not deleted.
    async fn deliver(
        &self,
        deliveries: Vec<Delivery>,
        polled_at: Instant,
        received_at: Instant,
        slots: &Arc<Semaphore>,
    ) {
        let chaos = self.chaos.as_deref();
        if let Some(chaos) = chaos.filter(|c| c.decide(FaultKind::DelayedDelivery)) {
            tokio::time::sleep(chaos.delivery_delay()).await;
        }
        let is_worker = self.mode == WorkerMode::Tasks;
        if is_worker {
            self.counters.worker_started();
        }
        let (poisoned, healthy) = self.poisoned(&deliveries).await;
        let mut failed: HashSet<String> = HashSet::new();
        if healthy.is_empty() {
            // Every message of the batch was poisoned: nothing is left to invoke with.
        } else if chaos.is_some_and(|c| c.decide(FaultKind::DuplicateDelivery)) {
            let (first, second) = with_duplicate(slots, || self.invoke_once(&healthy)).await;
            failed.extend(first);
            failed.extend(second);
        } else {
            let times = if self.duplicate_deliveries { 2 } else { 1 };
            for _ in 0..times {
                failed = self.invoke_once(&healthy).await;
            }
        }
        failed.extend(poisoned);
        if is_worker {
            self.counters.worker_ended();
        }
        self.received.push(deliveries.iter().map(|d| Received {
            queue: self.queue.clone(),
            message_id: d.message_id.clone(),
            body: d.body.clone(),
            receive_count: d.receive_count,
            polled_at,
            received_at,
            retried: failed.contains(&d.message_id),
        }));
        for d in &deliveries {
            if failed.contains(&d.message_id) {
                // As on AWS: left in flight; the queue makes it visible again after its visibility timeout.
                tracing::info!(queue = %self.queue, message_id = %d.message_id, receive_count = d.receive_count, "left for redelivery");
                continue;
            }
            match self.consumer.delete(&d.receipt_handle).await {
                Ok(()) => add(&self.counters.messages_deleted, 1),
                Err(e) => {
                    tracing::warn!(queue = %self.queue, message_id = %d.message_id, error = %e, "DeleteMessage failed: the message will be delivered again")
                }
            }
        }
    }

    /// Under chaos, where poisoning is on: the batch's poisoned messages ([`Chaos::poisoned`]), each
    /// given back with the worker's retry visibility as the worker would (`ChangeMessageVisibility`),
    /// and the rest, which the invocation gets.
    async fn poisoned(&self, deliveries: &[Delivery]) -> (HashSet<String>, Vec<Delivery>) {
        let (Some(chaos), Some(visibility)) = (self.chaos.as_deref(), self.poison_visibility_secs) else {
            return (HashSet::new(), deliveries.to_vec());
        };
        let mut poisoned = HashSet::new();
        let mut healthy = Vec::new();
        for d in deliveries {
            if !chaos.poisoned(&d.message_id, d.receive_count) {
                healthy.push(d.clone());
                continue;
            }
            if let Ok(TaskMessage::Run { conversation_id, subtask_id, .. }) = serde_json::from_str(&d.body) {
                chaos.tag(FaultKind::PoisonMessage, conversation_id.as_str(), subtask_id.as_str());
            }
            add(&self.counters.batch_item_failures, 1);
            if let Err(e) = self.consumer.change_visibility(&d.receipt_handle, visibility).await {
                tracing::warn!(queue = %self.queue, message_id = %d.message_id, error = %e, "ChangeMessageVisibility of a poisoned message failed");
            }
            poisoned.insert(d.message_id.clone());
        }
        (poisoned, healthy)
    }

    /// One invocation; answers the ids of the messages to leave for redelivery.
    async fn invoke_once(&self, deliveries: &[Delivery]) -> HashSet<String> {
        match self.mode {
            WorkerMode::Tasks => {
                add(&self.counters.worker_invocations, 1);
                add(&self.counters.worker_records, deliveries.len() as u64);
            }
            WorkerMode::DeadLetters | WorkerMode::Sweep => add(&self.counters.dead_letter_invocations, 1),
        }
        let (event, context) = events::sqs_event(&self.queue, &self.function, deliveries, self.settings.timeout);
        let handler = worker::handler::handle(self.worker.as_ref(), lambda_runtime::LambdaEvent::new(event, context));
        self.counters.function_started(&self.function);
        let ended = invoke(self.settings.timeout, self.faults.as_ref(), handler).await;
        self.counters.function_ended(&self.function);
        let all = || deliveries.iter().map(|d| d.message_id.clone()).collect::<HashSet<_>>();
        match ended {
            Ended::Returned(Ok(response)) => match listed_failures(&response, deliveries) {
                Some(failed) => {
                    add(&self.counters.batch_item_failures, failed.len() as u64);
                    failed
                }
                None => {
                    tracing::error!(queue = %self.queue, ?response, "malformed partial batch response: the whole batch is a failure");
                    add(&self.counters.failed_invocations, 1);
                    all()
                }
            },
            Ended::Returned(Err(e)) => {
                tracing::error!(queue = %self.queue, error = %e, "invocation failed: the whole batch returns after the visibility timeout");
                add(&self.counters.failed_invocations, 1);
                all()
            }
            Ended::TimedOut => {
                tracing::error!(queue = %self.queue, timeout = ?self.settings.timeout, "invocation timed out: the whole batch returns after the visibility timeout");
                add(&self.counters.timed_out_invocations, 1);
                all()
            }
            Ended::Killed => {
                tracing::warn!(queue = %self.queue, "invocation killed at a crash point: the whole batch returns after the visibility timeout");
                add(&self.counters.killed_invocations, 1);
                all()
            }
        }
    }
}

/// One batch's invocation and its duplicate (the caller holds one of `slots` for the first): the
/// duplicate runs beside the first on a free slot, or — every slot taken — after it, on its slot,
/// as a later receive of the same messages would. Waiting for a second slot while holding one
/// would hold the mapping up for good once every slot's batch waits so (two at `MaximumConcurrency` 2).
async fn with_duplicate<T, F: Future<Output = T>>(slots: &Arc<Semaphore>, invoke: impl Fn() -> F) -> (T, T) {
    match slots.clone().try_acquire_owned() {
        Ok(slot) => {
            let duplicate = async {
                let _slot = slot;
                invoke().await
            };
            tokio::join!(invoke(), duplicate)
        }
        Err(_) => {
            let first = invoke().await;
            (first, invoke().await)
        }
    }
}

/// The message ids a partial batch response lists, or `None` when Lambda would treat it as
/// a failure of the whole batch: an empty identifier, or one that is not a message of the batch.
pub fn listed_failures(response: &SqsBatchResponse, deliveries: &[Delivery]) -> Option<HashSet<String>> {
    let ids: HashSet<&str> = deliveries.iter().map(|d| d.message_id.as_str()).collect();
    response
        .batch_item_failures
        .iter()
        .map(|f| Some(f.item_identifier.clone()).filter(|id| ids.contains(id.as_str())))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    fn delivery(id: &str) -> Delivery {
        Delivery {
            message_id: id.into(),
            receipt_handle: format!("r-{id}"),
            body: "{}".into(),
            receive_count: 1,
            sent_at_ms: 0,
            trace_parent: None,
        }
    }

    fn response(ids: &[&str]) -> SqsBatchResponse {
        let mut r = SqsBatchResponse::default();
        for id in ids {
            r.add_failure(*id);
        }
        r
    }

    #[test]
    fn a_partial_batch_response_lists_the_messages_to_retry() {
        let batch = [delivery("m1"), delivery("m2"), delivery("m3")];
        assert_eq!(listed_failures(&response(&[]), &batch), Some(HashSet::new()));
        assert_eq!(listed_failures(&response(&["m2"]), &batch), Some(HashSet::from(["m2".to_owned()])));
    }

    /// Two batches at once on a mapping of `MaximumConcurrency` 2, both drawn for a duplicate
    /// delivery: each holds one slot and its duplicate needs another. Both must end (on AWS a
    /// duplicate is one more receive; it never holds the mapping up).
    #[tokio::test(start_paused = true)]
    async fn duplicates_of_batches_holding_every_slot_still_run_and_never_hold_the_mapping_up() {
        let slots = Arc::new(Semaphore::new(2));
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        // As the mapping's loop does: a batch is received only once it holds a slot.
        let (first, second) = (slots.clone().try_acquire_owned().unwrap(), slots.clone().try_acquire_owned().unwrap());
        let batch = |mine: tokio::sync::OwnedSemaphorePermit, runs: Arc<std::sync::atomic::AtomicU32>| {
            let slots = slots.clone();
            async move {
                let _mine = mine;
                with_duplicate(&slots, || async {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                })
                .await
            }
        };
        let both = futures::future::join(batch(first, runs.clone()), batch(second, runs.clone()));
        let ended = tokio::time::timeout(Duration::from_secs(60), both).await;
        assert!(ended.is_ok(), "the two batches and their duplicates did not end: the mapping is held up");
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 4, "two invocations per batch");
        assert_eq!(slots.available_permits(), 2, "every slot is given back");
    }

    #[test]
    fn an_identifier_outside_the_batch_or_empty_fails_the_whole_batch() {
        let batch = [delivery("m1"), delivery("m2")];
        assert_eq!(listed_failures(&response(&["m9"]), &batch), None);
        assert_eq!(listed_failures(&response(&["m1", ""]), &batch), None);
    }
}
