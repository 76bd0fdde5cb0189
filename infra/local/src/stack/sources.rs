//! What invokes the functions, as the template's event sources do: one SQS event source mapping per queue (tasks → worker, refund → refund worker, both DLQs → DLQ consumer), the stream trigger (→ aggregator), the sweep's schedule (→ sweeper) and the hand-off pipe (the stream's second reader).

use std::sync::Arc;

use anyhow::Context as _;
use swarm_core::faults::FaultPlan;
use swarm_core::timings::{Timings, seconds_rounded_up};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::functions::{Functions, WorkerFunction};
use super::lambda_timeout;
use super::options::StackOptions;
use crate::platform::chaos::Chaos;
use crate::platform::counters::{Counters, ReceivedLog, RecordLog};
use crate::platform::handoff::HandoffLog;
use crate::platform::mapping::{EventSourceMapping, MappingSettings};
use crate::platform::stream::{StreamTrigger, TriggerSettings};
use crate::platform::sweeper::Sweeper;
use crate::platform::{Backend, ChangeFeed, Queue};
use crate::wiring::Function;

/// What the platform saw: counters, every message a mapping received, the stream's on-failure
/// destination, the hand-off pipe's output.
#[derive(Default)]
pub struct Observed {
    pub counters: Arc<Counters>,
    pub received: Arc<ReceivedLog>,
    pub on_failure: Arc<RecordLog>,
    pub handoffs: Arc<HandoffLog>,
}

/// The running event sources.
pub struct Running {
    /// The sweep's schedule (a sweep can also be invoked now).
    pub sweeper: Arc<Sweeper>,
    pub tasks: Vec<JoinHandle<()>>,
}

/// Everything the event sources are started with.
pub struct Sources<'a> {
    pub backend: &'a dyn Backend,
    pub functions: &'a Functions,
    pub options: &'a StackOptions,
    /// The scaled timing table.
    pub timings: &'a Timings,
    /// The plan every invocation runs under, if any.
    pub faults: Option<Arc<dyn FaultPlan>>,
    pub observed: &'a Observed,
    pub shutdown: watch::Receiver<bool>,
}

impl Sources<'_> {
    /// Starts the mappings, the trigger on `feed`, the schedule and the pipe (on a feed of its own).
    /// Error: the pipe's stream reader does not open.
    pub async fn start(self, feed: Box<dyn ChangeFeed>) -> anyhow::Result<Running> {
        let mut tasks: Vec<JoinHandle<()>> = self.mappings().into_iter().map(tokio::spawn).collect();
        tasks.push(tokio::spawn(self.trigger(feed).run(self.shutdown.clone())));
        let t = self.timings;
        let sweeper = Arc::new(Sweeper {
            worker: self.functions.sweeper.clone(),
            period: t.sweep.period,
            timeout: lambda_timeout(t.sweep.timeout),
            faults: self.faults.clone(),
            counters: self.observed.counters.clone(),
        });
        tasks.push(tokio::spawn(sweeper.clone().run(self.shutdown.clone())));
        // The hand-off pipe reads the stream too (on AWS an EventBridge pipe, the table's second reader).
        let pipe_feed = self.backend.change_feed().await.context("opening the table's stream for hand-offs")?;
        let handoffs = self.observed.handoffs.clone();
        tasks.push(tokio::spawn(crate::platform::handoff::run(pipe_feed, handoffs, self.shutdown.clone())));
        Ok(Running { sweeper, tasks })
    }

    /// One mapping per queue, each feeding the function the template names, with that function's
    /// timeout, batch size and maximum concurrency.
    fn mappings(&self) -> Vec<impl Future<Output = ()> + Send + 'static> {
        let (t, f) = (self.timings, self.functions);
        let tasks_concurrency = self.options.worker_concurrency.unwrap_or(t.worker.max_concurrency);
        let (w, r, d) = (&t.worker, &t.refund_worker, &t.dlq_consumer);
        [
            (Queue::Tasks, Function::Worker, &f.worker, (w.timeout, w.batch_size, tasks_concurrency)),
            (Queue::Refund, Function::RefundWorker, &f.refund_worker, (r.timeout, r.batch_size, r.max_concurrency)),
            (
                Queue::TasksDeadLetters,
                Function::DlqConsumer,
                &f.dlq_consumer,
                (d.timeout, d.batch_size, d.max_concurrency),
            ),
            (
                Queue::RefundDeadLetters,
                Function::DlqConsumer,
                &f.dlq_consumer,
                (d.timeout, d.batch_size, d.max_concurrency),
            ),
        ]
        .into_iter()
        .map(|(queue, function, fed, (timeout, batch_size, max_concurrency))| {
            let settings = MappingSettings {
                batch_size,
                max_concurrency,
                timeout: lambda_timeout(timeout),
                receive_wait: t.local.receive_wait,
            };
            self.mapping(queue, function, fed, settings).run(self.shutdown.clone())
        })
        .collect()
    }

    fn mapping(
        &self,
        queue: Queue,
        function: Function,
        fed: &WorkerFunction,
        settings: MappingSettings,
    ) -> EventSourceMapping {
        let handles = self.backend.queue(queue);
        EventSourceMapping {
            queue: handles.name.clone(),
            function: function.label().to_owned(),
            consumer: handles.consumer.clone(),
            mode: fed.mode,
            worker: fed.worker.clone(),
            settings,
            duplicate_deliveries: self.options.duplicate_deliveries,
            faults: self.faults.clone(),
            chaos: self.chaos(),
            // The refund queue carries confirmations too; the chaos poisons subtasks' messages only.
            poison_visibility_secs: (queue == Queue::Tasks)
                .then(|| u32::try_from(seconds_rounded_up(self.timings.worker.retry_visibility)).unwrap_or(u32::MAX)),
            counters: self.observed.counters.clone(),
            received: self.observed.received.clone(),
        }
    }

    /// The aggregator's stream event source: its filter, batch size, retries, on-failure destination.
    fn trigger(&self, feed: Box<dyn ChangeFeed>) -> StreamTrigger {
        let a = &self.timings.aggregator;
        StreamTrigger {
            feed,
            aggregator: self.functions.aggregator.clone(),
            settings: TriggerSettings {
                batch_size: a.stream.batch_size,
                max_retry_attempts: a.stream.max_retry_attempts,
                timeout: lambda_timeout(a.timeout),
                retry_wait: self.timings.local.stream_poll,
            },
            duplicate_deliveries: self.options.duplicate_deliveries,
            faults: self.faults.clone(),
            chaos: self.chaos(),
            counters: self.observed.counters.clone(),
            on_failure: self.observed.on_failure.clone(),
        }
    }

    fn chaos(&self) -> Option<Arc<Chaos>> {
        self.options.chaos.clone()
    }
}
