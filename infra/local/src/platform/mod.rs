//! The local platform, and nothing a Lambda links: what Lambda's event source mappings, SQS and DynamoDB Streams do on AWS, over one small [`Backend`] trait with an embedded and an emulator implementation.
//!
//! - [`Backend`]: the conversation store, the four queues (tasks, refund and their
//!   DLQs; each a sending [`TaskQueue`] and a receiving [`QueueConsumer`]), the table's
//!   [`ChangeFeed`], teardown. Provisioned from the timing table by
//!   [`embedded::EmbeddedBackend::provision`] (in memory) or
//!   [`emulator::EmulatorBackend::provision`] (DynamoDB + stream + SQS on moto).
//! - [`mapping::EventSourceMapping`]: SQS → worker handler, one for every queue, on both backends.
//! - [`stream::StreamTrigger`]: the table's stream → filter → aggregator handler, on both backends,
//!   with its on-failure destination.
//! - [`sweeper::Sweeper`]: the periodic sweep, as EventBridge Scheduler invokes it on AWS.
//! - [`invoke::invoke`]: one invocation as Lambda runs it — cut at the function's
//!   timeout, or killed at a crash point of [`swarm_core::faults`].

pub mod chaos;
pub mod counters;
pub mod dynamo_stream;
pub mod dynamo_table;
pub mod embedded;
pub mod emulator;
pub mod filter;
pub mod handoff;
pub mod iam;
pub mod invoke;
pub mod mapping;
pub mod sqs;
pub mod store_faults;
pub mod stream;
pub mod sweeper;
pub mod tool_faults;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use swarm_adapters::embedded::InMemoryQueue;
use swarm_core::access::AccessStore;
use swarm_core::ports::{ConversationStore, QueueError, StoreError, TaskQueue};

pub use dynamo_stream::StreamError;

/// Messages of a queue by state (`ApproximateNumberOfMessages`, `…NotVisible`, `…Delayed`).
pub use swarm_adapters::embedded::QueueDepth;
/// One received message, as an event source mapping hands it to a function
/// (`messageId`, `receiptHandle`, `body`, `ApproximateReceiveCount`, `SentTimestamp`).
pub use swarm_adapters::embedded::ReceivedMessage as Delivery;

/// The receiving side of a queue: what an event source mapping (or the local
/// stack's poller) uses. Semantics as SQS: a received message is invisible for
/// the visibility timeout, reappears unless deleted, and after `maxReceiveCount`
/// receives moves to the DLQ (redrive policy).
#[async_trait]
pub trait QueueConsumer: Send + Sync {
    /// Receives up to `max` (1..=10) messages, waiting up to `wait` for the first (long poll).
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, QueueError>;
    /// Deletes a received message (acknowledge).
    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError>;
    /// Makes a received message visible again after `seconds` (0..=43200).
    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError>;
    /// Messages stored, by state (`GetQueueAttributes`).
    async fn depth(&self) -> Result<QueueDepth, QueueError>;
}

#[async_trait]
impl QueueConsumer for InMemoryQueue {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, QueueError> {
        InMemoryQueue::receive(self, max, wait).await
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        InMemoryQueue::delete(self, receipt_handle).await
    }

    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        InMemoryQueue::change_visibility(self, receipt_handle, seconds).await
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        Ok(self.approximate_depth())
    }
}

/// The table's stream as the stream trigger reads it: a record for every write of every
/// item, in write order, in the JSON shape of a Lambda DynamoDB stream event record
/// (`eventName`, `dynamodb.Keys`, `dynamodb.NewImage`, `SequenceNumber` …). Lossless.
#[async_trait]
pub trait ChangeFeed: Send + Sync {
    /// The records written since the last call, waiting up to `wait` for the first
    /// (an empty answer when none came).
    async fn next_records(&mut self, wait: Duration) -> Result<Vec<Value>, StreamError>;
}

/// The swarm's queues, each with its dead-letter queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Queue {
    /// Ordinary subtasks and deadline messages.
    Tasks,
    TasksDeadLetters,
    /// Subtasks of the refund role.
    Refund,
    RefundDeadLetters,
}

impl Queue {
    pub const ALL: [Queue; 4] = [Queue::Tasks, Queue::TasksDeadLetters, Queue::Refund, Queue::RefundDeadLetters];

    /// Whether this is a dead-letter queue (consumed by the worker in `DeadLetters` mode).
    pub fn is_dead_letters(self) -> bool {
        matches!(self, Queue::TasksDeadLetters | Queue::RefundDeadLetters)
    }
}

/// Both sides of one provisioned queue.
#[derive(Clone)]
pub struct QueueHandles {
    /// The queue's name (its URL's last segment on SQS).
    pub name: String,
    /// Its URL, as a function's `*_QUEUE_URL` variable holds it (on the embedded backend one that
    /// only names it: [`EMBEDDED_QUEUE_BASE`]).
    pub url: String,
    /// What the functions send with.
    pub sender: Arc<dyn TaskQueue>,
    /// What the event source mapping receives with.
    pub consumer: Arc<dyn QueueConsumer>,
}

/// The four queues of a backend.
#[derive(Clone)]
pub struct QueueSet {
    pub tasks: QueueHandles,
    pub tasks_dead_letters: QueueHandles,
    pub refund: QueueHandles,
    pub refund_dead_letters: QueueHandles,
}

impl QueueSet {
    pub fn get(&self, queue: Queue) -> &QueueHandles {
        match queue {
            Queue::Tasks => &self.tasks,
            Queue::TasksDeadLetters => &self.tasks_dead_letters,
            Queue::Refund => &self.refund,
            Queue::RefundDeadLetters => &self.refund_dead_letters,
        }
    }
}

/// What one function reaches of a backend: the table and a sender for each queue by URL (it keeps
/// only those its variables name). On the emulator with IAM on, each signed with the function's own
/// access key; else the backend's own.
#[derive(Clone)]
pub struct FunctionClients {
    pub store: Arc<dyn ConversationStore>,
    /// Identity mappings and per-customer counters (the same table).
    pub access: Arc<dyn AccessStore>,
    /// Queue URL → a sender.
    pub senders: HashMap<String, Arc<dyn TaskQueue>>,
}

impl FunctionClients {
    /// The backend's own clients, for a function that signs nothing of its own.
    pub fn shared(backend: &dyn Backend) -> Self {
        let senders = Queue::ALL.iter().map(|q| backend.queue(*q)).map(|h| (h.url.clone(), h.sender.clone())).collect();
        Self { store: backend.store(), access: backend.access(), senders }
    }
}

/// The base of the embedded queues' URLs (`<base>/<name>`): the reserved `.invalid` name says
/// nothing is ever sent to that address; the stack finds the queue by its URL.
pub const EMBEDDED_QUEUE_BASE: &str = "http://embedded-sqs.invalid/000000000000";

/// Where the swarm's data lives locally: provisioned from the (scaled) timing table by
/// its constructor (table with stream `NEW_IMAGE`; queues with their visibility timeouts
/// and a redrive policy of `queues.max_receive_count` receives), torn down by [`Backend::teardown`].
#[async_trait]
pub trait Backend: Send + Sync {
    /// One line for people: which backend, and where.
    fn describe(&self) -> String;
    /// The table's name (the functions' `TABLE_NAME`).
    fn table(&self) -> &str;
    /// The conversation store, as the platform reaches it (the administrator's on the emulator).
    fn store(&self) -> Arc<dyn ConversationStore>;
    /// What `function` (a template logical id) reaches, signed as itself where IAM is enforced;
    /// `None` when the backend has no identity for it.
    fn clients(&self, function: &str) -> Option<FunctionClients>;
    /// Identity mappings and per-customer counters (the same table).
    fn access(&self) -> Arc<dyn AccessStore>;
    /// Both sides of `queue`.
    fn queue(&self, queue: Queue) -> &QueueHandles;
    /// The table's stream from now on (open it before the first write).
    async fn change_feed(&self) -> Result<Box<dyn ChangeFeed>, StreamError>;
    /// Conversation items in the table ("bad input writes nothing").
    async fn conversation_count(&self) -> Result<usize, StoreError>;
    /// Deletes what provisioning created (a no-op in memory); failures are logged.
    async fn teardown(&self);
}
