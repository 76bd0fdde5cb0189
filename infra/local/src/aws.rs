//! The local stack the AWS way: the same cores and Lambda handlers on DynamoDB and SQS of an emulator (moto), with the event source mappings and the stream trigger emulated by polling.
//!
//! [`AwsStack::start`] creates a table (stream `NEW_IMAGE`) and two queue
//! pairs (tasks + DLQ, refund + DLQ) with names unique to this run, and wires
//! the orchestrator, workers and aggregator to them through the AWS adapters.
//! What Lambda's event source mappings do on AWS, background tasks do here:
//!
//! - **SQS** (one per queue): `ReceiveMessage` → an SQS event of the received
//!   messages → `worker::handler::handle` (mode `Tasks`, or `DeadLetters` on a
//!   DLQ) → `DeleteMessage` for every message not listed in
//!   `batchItemFailures`. A listed message is left alone: it becomes visible
//!   again after the queue's visibility timeout, and after `maxReceiveCount`
//!   receives the emulator's redrive policy moves it to the DLQ, as on AWS.
//! - **DynamoDB stream**: [`DynamoStreamReader`] reads the table's stream,
//!   [`matches_aggregator_filter`] applies the template's `FilterCriteria`, and
//!   the records that pass go to `aggregator::handler::handle` as a stream event.
//!
//! An emulator notifies nobody, so the stream reader, the queue pollers and
//! [`AwsStack::wait_finished`] poll, each with a bounded wait between polls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use serde_json::Value;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use aggregator::{Aggregator, AggregatorSettings};
use orchestrator::{Auth, Orchestrator, OrchestratorSettings};
use swarm_adapters::aws::dynamo::DynamoConversationStore;
use swarm_adapters::aws::sqs::SqsTaskQueue;
use swarm_adapters::mcp::McpToolGateway;
use swarm_core::ports::{ConversationStore, TaskQueue, ToolGateway};
use swarm_core::roles::{REFUND_ROLE, RoleTable, TaskQueues};
use swarm_core::view::ConversationView;
use worker::{Worker, WorkerMode};

use crate::platform::dynamo_stream::{DynamoStreamReader, StartPosition, matches_aggregator_filter};
use crate::platform::dynamo_table::create_table;
use crate::platform::sqs::{SqsConsumer, create_queue_with_dlq};
use crate::platform::{Delivery, QueueConsumer};
use crate::{StackOptions, events, loopback};

/// Longest `WaitTimeSeconds` the pollers use: short, so a stopped stack stops promptly.
const RECEIVE_WAIT: Duration = Duration::from_secs(2);
/// Stream records per aggregator invocation (the template's `BatchSize`).
const STREAM_BATCH_SIZE: usize = 10;
/// Retries of a failed aggregator invocation (the template's `MaximumRetryAttempts`).
const STREAM_MAX_RETRIES: u32 = 5;
/// Extra time given to an emulated invocation past its Lambda deadline before it is cut off.
const INVOCATION_GRACE: Duration = Duration::from_secs(2);
/// Longest wait for one clean-up call at shutdown.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the emulator is and how this run uses it.
#[derive(Clone)]
pub struct AwsOptions {
    /// The emulator's endpoint, e.g. `http://127.0.0.1:5000`.
    pub endpoint: String,
    /// `AWS_REGION`, else `us-east-1`.
    pub region: String,
    /// Prefix of the table and queue names; a unique suffix is added per run.
    pub name_prefix: String,
    /// Wait between two empty stream polls, and between two `GET`s of [`AwsStack::wait_finished`].
    pub poll_interval: Duration,
    /// Leave the table and queues on the emulator at shutdown (to inspect them).
    pub keep_resources: bool,
    /// Concurrency, visibility timeout, redrive, deadline, models and fault wrappers, as for the embedded stack.
    pub stack: StackOptions,
}

impl AwsOptions {
    pub fn new(endpoint: impl Into<String>, stack: StackOptions) -> Self {
        Self {
            endpoint: endpoint.into(),
            region: std::env::var("AWS_REGION")
                .ok()
                .filter(|r| !r.trim().is_empty())
                .unwrap_or_else(|| "us-east-1".into()),
            name_prefix: "swarm-local".into(),
            poll_interval: Duration::from_millis(250),
            keep_resources: false,
            stack,
        }
    }
}

/// What the emulated platform did (tests and the summary line).
#[derive(Default, Debug)]
pub struct AwsCounters {
    /// Worker invocations on the tasks and refund queues.
    pub worker_invocations: AtomicU64,
    /// Worker invocations in `DeadLetters` mode (on a DLQ).
    pub dead_letter_invocations: AtomicU64,
    /// Messages listed in a `batchItemFailures` (left for SQS to redeliver).
    pub batch_item_failures: AtomicU64,
    pub messages_deleted: AtomicU64,
    /// Records read from the table's stream.
    pub stream_records: AtomicU64,
    /// Of those, records the aggregator's filter let through.
    pub stream_records_matched: AtomicU64,
    pub aggregator_invocations: AtomicU64,
    pub max_concurrent_workers: AtomicU64,
    in_flight: AtomicU64,
}

/// One message as an event source mapping received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The queue's name.
    pub queue: String,
    pub message_id: String,
    pub body: String,
    /// `ApproximateReceiveCount` as SQS reported it.
    pub receive_count: u32,
    /// Listed in the invocation's `batchItemFailures` (or the invocation failed).
    pub retried: bool,
}

/// The names of what [`AwsStack::start`] created on the emulator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwsResources {
    pub table: String,
    pub stream_arn: String,
    pub tasks_queue_url: String,
    pub tasks_dlq_url: String,
    pub refund_queue_url: String,
    pub refund_dlq_url: String,
}

/// Messages of a queue, as `GetQueueAttributes` counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueDepth {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
}

impl QueueDepth {
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight + self.delayed
    }
}

/// The swarm on an AWS emulator: same API as [`crate::LocalStack`] (`post_conversation`, `view`, `wait_finished`).
pub struct AwsStack {
    pub resources: AwsResources,
    pub shop: Arc<shop_tools::Shop>,
    pub shop_url: String,
    pub gateway_url: String,
    pub model_label: String,
    pub offline: bool,
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    store: Arc<DynamoConversationStore>,
    orchestrator: Arc<Orchestrator>,
    poll_interval: Duration,
    keep_resources: bool,
    shutdown: watch::Sender<bool>,
    background: Vec<JoinHandle<()>>,
    counters: Arc<AwsCounters>,
    received: Arc<Mutex<Vec<Received>>>,
}

/// A DynamoDB, DynamoDB Streams and SQS client for `endpoint`: credentials from
/// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`, else the emulator's `test` / `test`.
pub fn emulator_clients(
    endpoint: &str,
    region: &str,
) -> (aws_sdk_dynamodb::Client, aws_sdk_dynamodbstreams::Client, aws_sdk_sqs::Client) {
    let var = |k: &str, default: &str| {
        std::env::var(k).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_owned())
    };
    let credentials = aws_sdk_dynamodb::config::Credentials::new(
        var("AWS_ACCESS_KEY_ID", "test"),
        var("AWS_SECRET_ACCESS_KEY", "test"),
        None,
        None,
        "swarm-local",
    );
    let region = aws_sdk_dynamodb::config::Region::new(region.to_owned());
    let dynamodb = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(region.clone())
        .credentials_provider(credentials.clone())
        .build();
    let streams = aws_sdk_dynamodbstreams::Config::builder()
        .behavior_version(aws_sdk_dynamodbstreams::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(region.clone())
        .credentials_provider(credentials.clone())
        .build();
    let sqs = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(region)
        .credentials_provider(credentials)
        .build();
    (
        aws_sdk_dynamodb::Client::from_conf(dynamodb),
        aws_sdk_dynamodbstreams::Client::from_conf(streams),
        aws_sdk_sqs::Client::from_conf(sqs),
    )
}

/// The last path segment of a queue URL: its name.
fn queue_name(url: &str) -> String {
    url.rsplit('/').next().unwrap_or(url).to_owned()
}

impl AwsStack {
    /// Creates the table and queues on the emulator, starts the demo shop, the
    /// gateway, the cores, the queue pollers and the stream reader.
    pub async fn start(options: AwsOptions) -> anyhow::Result<Self> {
        let stack_options = options.stack.clone();
        let (dynamodb, streams, sqs) = emulator_clients(&options.endpoint, &options.region);

        // Names unique to this run: several runs (and tests) share one emulator.
        let run = uuid::Uuid::now_v7().simple().to_string();
        let base = format!("{}-{}", options.name_prefix, &run[run.len() - 12..]);
        let table = base.clone();
        create_table(&dynamodb, &table).await.with_context(|| {
            format!("creating table {table} on {} (is the emulator running? infra/aws/moto.sh start)", options.endpoint)
        })?;
        let visibility = u32::try_from(stack_options.visibility_timeout.as_secs()).unwrap_or(u32::MAX).max(1);
        let (tasks_queue_url, tasks_dlq_url) =
            create_queue_with_dlq(&sqs, &format!("{base}-tasks"), visibility, stack_options.max_receive_count).await?;
        let (refund_queue_url, refund_dlq_url) =
            create_queue_with_dlq(&sqs, &format!("{base}-refund"), visibility, stack_options.max_receive_count).await?;
        // The stream is read from its start: the table is new, so nothing before this run is replayed.
        let reader = DynamoStreamReader::open(&dynamodb, streams, &table, &options.region, StartPosition::TrimHorizon)
            .await?
            .with_poll_interval(options.poll_interval);
        let resources = AwsResources {
            table: table.clone(),
            stream_arn: reader.stream_arn().to_owned(),
            tasks_queue_url,
            tasks_dlq_url,
            refund_queue_url,
            refund_dlq_url,
        };
        tracing::info!(?resources, endpoint = %options.endpoint, "emulator resources ready");

        let shop = Arc::new(shop_tools::Shop::demo().context("loading the demo shop")?);
        let (shop_addr, shop_task) =
            shop_tools::serve(loopback(), shop.clone()).await.context("starting the demo shop tool server")?;
        let shop_url = format!("http://{shop_addr}/mcp");
        let tokens = tool_gateway::DemoTokens::generate();
        let (gateway_addr, gateway_task) =
            tool_gateway::serve(loopback(), tool_gateway::demo_config(&shop_url, &tokens))
                .await
                .context("starting the tool gateway")?;
        let gateway_url = format!("http://{gateway_addr}/mcp");
        let role_tokens: HashMap<String, String> =
            tokens.role_tokens().into_iter().map(|(role, token)| (role, token.expose().to_owned())).collect();
        let base_tools: Arc<dyn ToolGateway> = Arc::new(
            McpToolGateway::new(&gateway_url, role_tokens, Duration::from_secs(10))
                .context("connecting to the tool gateway")?,
        );
        let worker_tools = match &stack_options.wrap_tools {
            Some(wrap) => wrap(base_tools.clone()),
            None => base_tools.clone(),
        };
        let models = match stack_options.models.clone() {
            Some(m) => m,
            None => crate::models::models_from_env().context("reading the LLM settings")?,
        };

        let store = Arc::new(DynamoConversationStore::new(dynamodb.clone(), table.clone()));
        let dyn_store: Arc<dyn ConversationStore> = store.clone();
        let queues = TaskQueues::new(
            Arc::new(SqsTaskQueue::new(sqs.clone(), resources.tasks_queue_url.clone())) as Arc<dyn TaskQueue>
        )
        .with_role(
            REFUND_ROLE,
            Arc::new(SqsTaskQueue::new(sqs.clone(), resources.refund_queue_url.clone())) as Arc<dyn TaskQueue>,
        );
        let orchestrator = Arc::new(Orchestrator::new(
            dyn_store.clone(),
            queues.clone(),
            models.main.clone(),
            base_tools,
            RoleTable::demo(),
            OrchestratorSettings { deadline_secs: stack_options.deadline_secs, ..OrchestratorSettings::default() },
        ));
        let worker_store = match &stack_options.wrap_store {
            Some(wrap) => wrap(dyn_store.clone()),
            None => dyn_store.clone(),
        };
        let worker = Arc::new(Worker::new(
            worker_store,
            queues,
            models.main.clone(),
            models.sub.clone(),
            worker_tools,
            stack_options.worker_settings.clone(),
        ));
        let aggregator = Arc::new(Aggregator::new(dyn_store, models.main.clone(), AggregatorSettings::default()));

        let (shutdown, shutdown_rx) = watch::channel(false);
        let counters = Arc::new(AwsCounters::default());
        let received = Arc::new(Mutex::new(Vec::new()));
        let mut background = vec![shop_task, gateway_task];
        // Batch sizes and concurrency as template.yaml's event sources (DLQs: BatchSize 10, MaximumConcurrency 2).
        for (url, mode, batch, concurrency) in [
            (&resources.tasks_queue_url, WorkerMode::Tasks, 1, stack_options.worker_concurrency.max(1)),
            (&resources.refund_queue_url, WorkerMode::Tasks, 1, stack_options.worker_concurrency.clamp(1, 5)),
            (&resources.tasks_dlq_url, WorkerMode::DeadLetters, 10, 2),
            (&resources.refund_dlq_url, WorkerMode::DeadLetters, 10, 2),
        ] {
            let mapping = EventSourceMapping {
                consumer: Arc::new(SqsConsumer::new(sqs.clone(), url.clone())),
                queue: queue_name(url),
                mode,
                batch_size: batch,
                concurrency,
                invocation_timeout: stack_options.invocation_timeout,
                duplicate: stack_options.duplicate_deliveries,
                worker: worker.clone(),
                counters: counters.clone(),
                received: received.clone(),
            };
            background.push(tokio::spawn(mapping.run(shutdown_rx.clone())));
        }
        background.push(tokio::spawn(stream_trigger(
            reader,
            aggregator,
            options.poll_interval,
            stack_options.duplicate_deliveries,
            counters.clone(),
            shutdown_rx,
        )));

        Ok(Self {
            resources,
            shop,
            shop_url,
            gateway_url,
            model_label: models.main.label(),
            offline: models.main.is_offline(),
            dynamodb,
            sqs,
            store,
            orchestrator,
            poll_interval: options.poll_interval,
            keep_resources: options.keep_resources,
            shutdown,
            background,
            counters,
            received,
        })
    }

    /// The DynamoDB store the cores use (reads in tests).
    pub fn store(&self) -> Arc<DynamoConversationStore> {
        self.store.clone()
    }

    pub fn counters(&self) -> &AwsCounters {
        &self.counters
    }

    /// Every message the emulated event source mappings received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().map(|r| r.clone()).unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    /// Sends one HTTP API (payload 2.0) event, e.g. a fixture of `events/`,
    /// through `lambda_http`'s conversion into the orchestrator's router, as on
    /// Lambda (authentication off); answers `(status, JSON body)`.
    pub async fn api_event(&self, event: &Value) -> anyhow::Result<(u16, Value)> {
        let request = lambda_http::request::from_str(&event.to_string()).context("converting the API Gateway event")?;
        crate::http::call(crate::http::router(self.orchestrator.clone(), Auth::None), request).await
    }

    /// `method path` through the orchestrator's router; answers `(status, JSON body)`.
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(u16, Value)> {
        let router = crate::http::router(self.orchestrator.clone(), Auth::None);
        crate::http::call(router, crate::http::request(method, path, body, headers)?).await
    }

    /// `POST /conversations`; answers `(status, body)`.
    pub async fn post_conversation(
        &self,
        message: &str,
        customer_id: &str,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<(u16, Value)> {
        let body = serde_json::json!({ "message": message, "customer_id": customer_id }).to_string();
        let headers: Vec<(&str, &str)> = idempotency_key.map(|k| vec![("idempotency-key", k)]).unwrap_or_default();
        self.api("POST", "/conversations", Some(&body), &headers).await
    }

    /// `GET /conversations/{id}` as the API answers it.
    pub async fn view(&self, id: &str) -> anyhow::Result<ConversationView> {
        let (status, body) = self.api("GET", &format!("/conversations/{id}"), None, &[]).await?;
        anyhow::ensure!(status == 200, "GET /conversations/{id} answered {status}: {body}");
        Ok(serde_json::from_value(body)?)
    }

    /// Polls `GET /conversations/{id}` every poll interval until the conversation is
    /// `DONE` or `FAILED`, or `timeout` passes. Polling, not waiting for a change:
    /// the emulator notifies nobody (on AWS a client polls the same way).
    pub async fn wait_finished(&self, id: &str, timeout: Duration) -> anyhow::Result<ConversationView> {
        self.wait_until(id, timeout, |_| {}).await
    }

    /// As [`Self::wait_finished`], calling `seen` with every view polled (progress output).
    pub async fn wait_until(
        &self,
        id: &str,
        timeout: Duration,
        mut seen: impl FnMut(&ConversationView),
    ) -> anyhow::Result<ConversationView> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let view = self.view(id).await?;
            seen(&view);
            if view.status.is_terminal() {
                return Ok(view);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                anyhow::bail!(
                    "conversation {id} did not finish within {timeout:?} (last status {}, {}/{} subtasks finished)",
                    view.status,
                    view.progress.finished,
                    view.progress.total
                );
            }
            tokio::time::sleep(self.poll_interval.min(deadline - now)).await;
        }
    }

    /// Messages in a queue (visible, in flight, delayed) as `GetQueueAttributes` reports them.
    pub async fn queue_depth(&self, queue_url: &str) -> anyhow::Result<QueueDepth> {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let out = tokio::time::timeout(
            CLEANUP_TIMEOUT,
            self.sqs
                .get_queue_attributes()
                .queue_url(queue_url)
                .attribute_names(A::ApproximateNumberOfMessages)
                .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
                .attribute_names(A::ApproximateNumberOfMessagesDelayed)
                .send(),
        )
        .await
        .context("GetQueueAttributes gave no answer")?
        .with_context(|| format!("GetQueueAttributes {queue_url}"))?;
        let attrs = out.attributes.unwrap_or_default();
        let get = |a: A| attrs.get(&a).and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok(QueueDepth {
            visible: get(A::ApproximateNumberOfMessages),
            in_flight: get(A::ApproximateNumberOfMessagesNotVisible),
            delayed: get(A::ApproximateNumberOfMessagesDelayed),
        })
    }

    /// Stops the pollers and the servers, then deletes the table and the queues
    /// (unless kept); clean-up failures are logged, not returned.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.background {
            t.abort();
            let _ = t.await;
        }
        if self.keep_resources {
            tracing::info!(resources = ?self.resources, "emulator resources kept");
            return;
        }
        let r = &self.resources;
        for url in [&r.tasks_queue_url, &r.tasks_dlq_url, &r.refund_queue_url, &r.refund_dlq_url] {
            match tokio::time::timeout(CLEANUP_TIMEOUT, self.sqs.delete_queue().queue_url(url).send()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(queue_url = %url, error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "could not delete queue")
                }
                Err(_) => tracing::warn!(queue_url = %url, "DeleteQueue gave no answer"),
            }
        }
        match tokio::time::timeout(CLEANUP_TIMEOUT, self.dynamodb.delete_table().table_name(&r.table).send()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(table = %r.table, error = %aws_sdk_dynamodb::error::DisplayErrorContext(&e), "could not delete table")
            }
            Err(_) => tracing::warn!(table = %r.table, "DeleteTable gave no answer"),
        }
    }
}

/// One emulated SQS event source mapping.
struct EventSourceMapping {
    consumer: Arc<SqsConsumer>,
    queue: String,
    mode: WorkerMode,
    batch_size: usize,
    /// `MaximumConcurrency`: invocations in flight at once.
    concurrency: usize,
    invocation_timeout: Duration,
    duplicate: bool,
    worker: Arc<Worker>,
    counters: Arc<AwsCounters>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl EventSourceMapping {
    /// Receives and invokes until shutdown: at most `concurrency` invocations at
    /// once; a receive waits for a free slot first, so nothing is received that cannot run.
    async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let this = Arc::new(self);
        let slots = Arc::new(Semaphore::new(this.concurrency.max(1)));
        loop {
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
                _ = shutdown.changed() => return,
            };
            let received = tokio::select! {
                r = this.consumer.receive(this.batch_size, RECEIVE_WAIT) => r,
                _ = shutdown.changed() => return,
            };
            let deliveries = match received {
                Ok(d) if d.is_empty() => continue,
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(queue = %this.queue, error = %e, "ReceiveMessage failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            let this = this.clone();
            tokio::spawn(async move {
                this.invoke(deliveries).await;
                drop(permit);
            });
        }
    }

    /// One invocation of the worker handler with `deliveries`; deletes what succeeded.
    async fn invoke(&self, deliveries: Vec<Delivery>) {
        let now_in = self.counters.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.counters.max_concurrent_workers.fetch_max(now_in, Ordering::SeqCst);
        let times = if self.duplicate { 2 } else { 1 };
        let mut failed: Vec<String> = Vec::new();
        for _ in 0..times {
            match self.mode {
                WorkerMode::Tasks => &self.counters.worker_invocations,
                WorkerMode::DeadLetters => &self.counters.dead_letter_invocations,
            }
            .fetch_add(1, Ordering::SeqCst);
            let (event, context) = events::sqs_event(&self.queue, &deliveries, self.invocation_timeout);
            let call =
                worker::handler::handle(&self.worker, self.mode, lambda_runtime::LambdaEvent::new(event, context));
            failed = match tokio::time::timeout(self.invocation_timeout + INVOCATION_GRACE, call).await {
                Ok(Ok(response)) => response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect(),
                Ok(Err(e)) => {
                    tracing::error!(queue = %self.queue, error = %e, "worker invocation failed: the whole batch returns to the queue");
                    deliveries.iter().map(|d| d.message_id.clone()).collect()
                }
                Err(_) => {
                    tracing::error!(queue = %self.queue, timeout = ?self.invocation_timeout, "worker invocation timed out: the whole batch returns to the queue");
                    deliveries.iter().map(|d| d.message_id.clone()).collect()
                }
            };
        }
        for d in &deliveries {
            let retried = failed.contains(&d.message_id);
            if let Ok(mut log) = self.received.lock() {
                log.push(Received {
                    queue: self.queue.clone(),
                    message_id: d.message_id.clone(),
                    body: d.body.clone(),
                    receive_count: d.receive_count,
                    retried,
                });
            }
            if retried {
                // As on AWS: left in flight; SQS makes it visible again after the visibility timeout.
                self.counters.batch_item_failures.fetch_add(1, Ordering::SeqCst);
                tracing::info!(queue = %self.queue, message_id = %d.message_id, receive_count = d.receive_count, "batch item failure: left for redelivery");
                continue;
            }
            match self.consumer.delete(&d.receipt_handle).await {
                Ok(()) => {
                    self.counters.messages_deleted.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => {
                    tracing::warn!(queue = %self.queue, message_id = %d.message_id, error = %e, "DeleteMessage failed: the message will be delivered again")
                }
            }
        }
        self.counters.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The stream event source: reads the stream, keeps the records the aggregator's
/// filter passes, and invokes the aggregator handler with them (batches of
/// [`STREAM_BATCH_SIZE`]); a failed invocation is retried, at most [`STREAM_MAX_RETRIES`] times.
async fn stream_trigger(
    mut reader: DynamoStreamReader,
    aggregator: Arc<Aggregator>,
    poll_interval: Duration,
    duplicate: bool,
    counters: Arc<AwsCounters>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let batch = tokio::select! {
            b = reader.next_batch(Duration::from_secs(1)) => b,
            _ = shutdown.changed() => return,
        };
        let records = match batch {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, transient = e.is_transient(), "reading the stream failed");
                tokio::time::sleep(if e.is_transient() { poll_interval } else { Duration::from_secs(2) }).await;
                continue;
            }
        };
        counters.stream_records.fetch_add(records.len() as u64, Ordering::SeqCst);
        if !records.is_empty() {
            tracing::debug!(records = records.len(), "stream records read");
        }
        let matched: Vec<Value> = records.into_iter().filter(matches_aggregator_filter).collect();
        if matched.is_empty() {
            continue;
        }
        counters.stream_records_matched.fetch_add(matched.len() as u64, Ordering::SeqCst);
        tracing::info!(matched = matched.len(), "stream records passed the aggregator's filter");
        for chunk in matched.chunks(STREAM_BATCH_SIZE) {
            let event: StreamEvent = match serde_json::from_value(serde_json::json!({ "Records": chunk })) {
                Ok(e) => e,
                Err(e) => {
                    tracing::error!(error = %e, "stream records do not parse as a Lambda DynamoDB event; dropped");
                    continue;
                }
            };
            let times = if duplicate { 2 } else { 1 };
            for _ in 0..times {
                invoke_aggregator(&aggregator, &event, &counters).await;
            }
        }
    }
}

async fn invoke_aggregator(aggregator: &Aggregator, event: &StreamEvent, counters: &AwsCounters) {
    let timeout = Duration::from_secs(60);
    for attempt in 0..=STREAM_MAX_RETRIES {
        counters.aggregator_invocations.fetch_add(1, Ordering::SeqCst);
        let call = aggregator::handler::handle(
            aggregator,
            lambda_runtime::LambdaEvent::new(event.clone(), events::lambda_context(timeout)),
        );
        match tokio::time::timeout(timeout + INVOCATION_GRACE, call).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => tracing::warn!(attempt, error = %e, "aggregator invocation failed; retrying the batch"),
            Err(_) => tracing::warn!(attempt, "aggregator invocation timed out; retrying the batch"),
        }
        tokio::time::sleep(Duration::from_millis(200 << attempt.min(4))).await;
    }
    tracing::error!(records = event.records.len(), "aggregator batch dropped after {STREAM_MAX_RETRIES} retries");
}
