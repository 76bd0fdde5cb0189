//! The local stack: API, orchestrator, queues with event source mappings, workers, aggregator, gateway and demo shop in one process.
//!
//! Workers and the aggregator are invoked through the same handler functions
//! Lambda calls, with real-shaped events: an SQS event per received message,
//! a DynamoDB stream event per conversation item that matches the
//! aggregator's filter (`SK = META`, `remaining = 0`, `status = RUNNING`).

pub mod aws;
pub mod events;
pub mod http;
pub mod models;
pub mod platform;

pub use aws::{AwsOptions, AwsStack};
pub use models::{models_from_env, models_from_lookup};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{Semaphore, broadcast, watch};
use tokio::task::JoinHandle;

use aggregator::{Aggregator, AggregatorSettings};
use orchestrator::{Auth, Orchestrator, OrchestratorSettings};
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, ItemChange, QueueSettings};
use swarm_adapters::mcp::McpToolGateway;
use swarm_core::domain::{ConversationStatus, SubtaskRecord};
use swarm_core::llm::Models;
use swarm_core::ports::{ConversationStore, TaskQueue, ToolGateway};
use swarm_core::roles::{REFUND_ROLE, RoleTable, TaskQueues};
use swarm_core::view::ConversationView;
use worker::{Worker, WorkerMode, WorkerSettings};

/// Wraps a port adapter (fault injection, latency) before the worker gets it.
pub type WrapTools = Arc<dyn Fn(Arc<dyn ToolGateway>) -> Arc<dyn ToolGateway> + Send + Sync>;
pub type WrapStore = Arc<dyn Fn(Arc<dyn ConversationStore>) -> Arc<dyn ConversationStore> + Send + Sync>;

/// Settings of a local stack.
#[derive(Clone)]
pub struct StackOptions {
    /// Concurrent worker invocations per queue (the event source mapping's `MaximumConcurrency`).
    pub worker_concurrency: usize,
    /// Tasks queue visibility timeout.
    pub visibility_timeout: Duration,
    /// Redrive policy: receives before a message moves to the DLQ.
    pub max_receive_count: u32,
    /// Seconds from creation to a conversation's deadline.
    pub deadline_secs: u64,
    /// Emulated Lambda timeout of one worker invocation.
    pub invocation_timeout: Duration,
    /// Deliver every queue message twice (at-least-once delivery drills).
    pub duplicate_deliveries: bool,
    /// Models to use instead of the ones named by `LLM_*` (tests).
    pub models: Option<Models>,
    /// Wraps the worker's tool gateway (fault injection in tests).
    pub wrap_tools: Option<WrapTools>,
    /// Wraps the worker's view of the store (fault injection in tests).
    pub wrap_store: Option<WrapStore>,
    pub worker_settings: WorkerSettings,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            worker_concurrency: 10,
            visibility_timeout: Duration::from_secs(90),
            max_receive_count: 3,
            deadline_secs: swarm_core::domain::DEFAULT_DEADLINE_SECS,
            invocation_timeout: Duration::from_secs(60),
            duplicate_deliveries: false,
            models: None,
            wrap_tools: None,
            wrap_store: None,
            worker_settings: WorkerSettings { min_round_time: Duration::from_secs(1), ..WorkerSettings::default() },
        }
    }
}

/// Everything the swarm needs, running in this process.
pub struct LocalStack {
    store: Arc<InMemoryConversationStore>,
    orchestrator: Arc<Orchestrator>,
    pub shop: Arc<shop_tools::Shop>,
    pub shop_url: String,
    pub gateway_url: String,
    pub model_label: String,
    pub offline: bool,
    pub tasks_queue: InMemoryQueue,
    pub tasks_dlq: InMemoryQueue,
    pub refund_queue: InMemoryQueue,
    pub refund_dlq: InMemoryQueue,
    shutdown: watch::Sender<bool>,
    background: Vec<JoinHandle<()>>,
    counters: Arc<Counters>,
}

/// What the emulated platform did (for tests and the summary line).
#[derive(Default, Debug)]
pub struct Counters {
    pub worker_invocations: std::sync::atomic::AtomicU64,
    pub aggregator_invocations: std::sync::atomic::AtomicU64,
    pub max_concurrent_workers: std::sync::atomic::AtomicU64,
    in_flight: std::sync::atomic::AtomicU64,
}

impl LocalStack {
    /// Starts the demo shop, the gateway in front of it, the cores, the
    /// event source mappings and the stream trigger.
    pub async fn start(options: StackOptions) -> anyhow::Result<Self> {
        let shop = Arc::new(shop_tools::Shop::demo().context("loading the demo shop")?);
        let (shop_addr, shop_task) =
            shop_tools::serve(loopback(), shop.clone()).await.context("starting the demo shop tool server")?;
        let shop_url = format!("http://{shop_addr}/mcp");
        let tokens = tool_gateway::DemoTokens::generate();
        let mut gateway_config = tool_gateway::demo_config(&shop_url, &tokens);
        // The demo shop lives in this process and never restarts: keep its connections.
        gateway_config.upstream_keep_alive = true;
        let (gateway_addr, gateway_task) =
            tool_gateway::serve(loopback(), gateway_config).await.context("starting the tool gateway")?;
        let gateway_url = format!("http://{gateway_addr}/mcp");
        let role_tokens: HashMap<String, String> =
            tokens.role_tokens().into_iter().map(|(role, token)| (role, token.expose().to_owned())).collect();
        let base_tools: Arc<dyn ToolGateway> = Arc::new(
            McpToolGateway::new(&gateway_url, role_tokens, Duration::from_secs(10))
                .context("connecting to the tool gateway")?,
        );
        let worker_tools = match &options.wrap_tools {
            Some(wrap) => wrap(base_tools.clone()),
            None => base_tools.clone(),
        };

        let models = match options.models.clone() {
            Some(m) => m,
            None => crate::models::models_from_env().context("reading the LLM settings")?,
        };
        let model_label = models.main.label();
        let offline = models.main.is_offline();

        let store = Arc::new(InMemoryConversationStore::new());
        let dyn_store: Arc<dyn ConversationStore> = store.clone();
        let settings = |name: &str| QueueSettings {
            name: name.into(),
            visibility_timeout: options.visibility_timeout,
            max_receive_count: options.max_receive_count,
        };
        let tasks_dlq = InMemoryQueue::new(settings("tasks-dlq"));
        let tasks_queue = InMemoryQueue::with_dlq(settings("tasks"), tasks_dlq.clone());
        let refund_dlq = InMemoryQueue::new(settings("refund-dlq"));
        let refund_queue = InMemoryQueue::with_dlq(settings("refund-tasks"), refund_dlq.clone());
        let queues = TaskQueues::new(Arc::new(tasks_queue.clone()) as Arc<dyn TaskQueue>)
            .with_role(REFUND_ROLE, Arc::new(refund_queue.clone()) as Arc<dyn TaskQueue>);

        let orchestrator = Arc::new(Orchestrator::new(
            dyn_store.clone(),
            queues.clone(),
            models.main.clone(),
            base_tools.clone(),
            RoleTable::demo(),
            OrchestratorSettings { deadline_secs: options.deadline_secs, ..OrchestratorSettings::default() },
        ));
        let worker_store = match &options.wrap_store {
            Some(wrap) => wrap(dyn_store.clone()),
            None => dyn_store.clone(),
        };
        let worker = Arc::new(Worker::new(
            worker_store,
            queues.clone(),
            models.main.clone(),
            models.sub.clone(),
            worker_tools,
            options.worker_settings.clone(),
        ));
        let aggregator =
            Arc::new(Aggregator::new(dyn_store.clone(), models.main.clone(), AggregatorSettings::default()));

        let (shutdown, shutdown_rx) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let mut background = vec![shop_task, gateway_task];
        // The aggregator's stream subscription is taken before any write.
        let stream = store.subscribe();
        for (queue, mode, concurrency) in [
            (tasks_queue.clone(), WorkerMode::Tasks, options.worker_concurrency),
            (refund_queue.clone(), WorkerMode::Tasks, options.worker_concurrency.clamp(1, 5)),
            (tasks_dlq.clone(), WorkerMode::DeadLetters, 2),
            (refund_dlq.clone(), WorkerMode::DeadLetters, 1),
        ] {
            background.push(tokio::spawn(event_source_mapping(
                queue,
                mode,
                concurrency,
                worker.clone(),
                options.invocation_timeout,
                options.duplicate_deliveries,
                counters.clone(),
                shutdown_rx.clone(),
            )));
        }
        background.push(tokio::spawn(stream_trigger(
            stream,
            aggregator,
            options.duplicate_deliveries,
            counters.clone(),
            shutdown_rx,
        )));

        Ok(Self {
            store,
            orchestrator,
            shop,
            shop_url,
            gateway_url,
            model_label,
            offline,
            tasks_queue,
            tasks_dlq,
            refund_queue,
            refund_dlq,
            shutdown,
            background,
            counters,
        })
    }

    pub fn store(&self) -> Arc<InMemoryConversationStore> {
        self.store.clone()
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Changes of every item (progress display, tests).
    pub fn subscribe(&self) -> broadcast::Receiver<ItemChange> {
        self.store.subscribe()
    }

    /// The orchestrator behind the API (`swarm-local serve` mounts its router with the chosen auth).
    pub fn orchestrator(&self) -> Arc<Orchestrator> {
        self.orchestrator.clone()
    }

    /// Sends one request through the orchestrator's router (authentication
    /// off: the body names the customer); answers `(status, JSON body)`.
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(u16, serde_json::Value)> {
        let router = http::router(self.orchestrator.clone(), Auth::None);
        http::call(router, http::request(method, path, body, headers)?).await
    }

    /// `POST /conversations`; answers `(status, body)`.
    pub async fn post_conversation(
        &self,
        message: &str,
        customer_id: &str,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<(u16, serde_json::Value)> {
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

    /// Waits (by notification, not polling) until the conversation is `DONE`
    /// or `FAILED`, or `timeout` passes.
    pub async fn wait_finished(&self, id: &str, timeout: Duration) -> anyhow::Result<ConversationView> {
        let conversation_id = swarm_core::domain::ConversationId::parse(id).context("bad conversation id")?;
        let mut changes = self.store.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(c) = self.store.get_conversation(&conversation_id).await?
                && c.status.is_terminal()
            {
                return self.view(id).await;
            }
            loop {
                match tokio::time::timeout_at(deadline, changes.recv()).await {
                    Err(_) => anyhow::bail!("conversation {id} did not finish within {timeout:?}"),
                    Ok(Ok(ItemChange::Conversation(c))) if c.id == conversation_id && c.status.is_terminal() => break,
                    Ok(Ok(_)) => continue,
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) => break,
                    Ok(Err(broadcast::error::RecvError::Closed)) => anyhow::bail!("the stack stopped"),
                }
            }
        }
    }

    /// Stops the background tasks.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.background {
            t.abort();
            let _ = t.await;
        }
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The event source mapping: receives messages and invokes the worker handler
/// with an SQS event, at most `concurrency` invocations at once
/// (`MaximumConcurrency`); deletes what the partial batch response does not list.
#[allow(clippy::too_many_arguments)]
async fn event_source_mapping(
    queue: InMemoryQueue,
    mode: WorkerMode,
    concurrency: usize,
    worker: Arc<Worker>,
    invocation_timeout: Duration,
    duplicate: bool,
    counters: Arc<Counters>,
    mut shutdown: watch::Receiver<bool>,
) {
    use std::sync::atomic::Ordering;
    let slots = Arc::new(Semaphore::new(concurrency.max(1)));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
            _ = shutdown.changed() => return,
        };
        let received = tokio::select! {
            r = queue.receive(1, Duration::from_secs(20)) => r,
            _ = shutdown.changed() => return,
        };
        let deliveries = match received {
            Ok(d) if d.is_empty() => continue,
            Ok(d) => d,
            Err(e) => {
                tracing::error!(queue = queue.name(), error = %e, "receive failed");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let queue = queue.clone();
        let worker = worker.clone();
        let counters = counters.clone();
        tokio::spawn(async move {
            let now_in = counters.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            counters.max_concurrent_workers.fetch_max(now_in, Ordering::SeqCst);
            let times = if duplicate { 2 } else { 1 };
            let mut failed_ids: Vec<String> = Vec::new();
            for _ in 0..times {
                counters.worker_invocations.fetch_add(1, Ordering::SeqCst);
                let (event, context) = events::sqs_event(queue.name(), &deliveries, invocation_timeout);
                let response =
                    worker::handler::handle(&worker, mode, lambda_runtime::LambdaEvent::new(event, context)).await;
                failed_ids = match response {
                    Ok(r) => r.batch_item_failures.into_iter().map(|f| f.item_identifier).collect(),
                    Err(e) => {
                        tracing::error!(error = %e, "worker invocation failed: the whole batch returns to the queue");
                        deliveries.iter().map(|d| d.message_id.clone()).collect()
                    }
                };
            }
            for d in &deliveries {
                if !failed_ids.contains(&d.message_id) {
                    let _ = queue.delete(&d.receipt_handle).await;
                } else {
                    // As Lambda does, a failed item becomes visible again after the visibility timeout;
                    // the local stack shortens that wait so retries are prompt.
                    let _ = queue.change_visibility(&d.receipt_handle, 1).await;
                }
            }
            counters.in_flight.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
        });
    }
}

/// The DynamoDB stream event source with the aggregator's filter criteria.
async fn stream_trigger(
    mut stream: broadcast::Receiver<ItemChange>,
    aggregator: Arc<Aggregator>,
    duplicate: bool,
    counters: Arc<Counters>,
    mut shutdown: watch::Receiver<bool>,
) {
    use std::sync::atomic::Ordering;
    loop {
        let change = tokio::select! {
            c = stream.recv() => c,
            _ = shutdown.changed() => return,
        };
        let conversation = match change {
            Ok(ItemChange::Conversation(c)) => c,
            Ok(ItemChange::Subtask(_)) => continue,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "stream reader lagged");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        // FilterCriteria: {"dynamodb": {"Keys": {"SK": {"S": ["META"]}}, "NewImage": {"remaining": {"N": ["0"]}, "status": {"S": ["RUNNING"]}}}}
        if conversation.remaining != 0 || conversation.status != ConversationStatus::Running {
            continue;
        }
        // With duplicates on, both invocations race for the RUNNING → AGGREGATING flip.
        let times = if duplicate { 2 } else { 1 };
        for _ in 0..times {
            counters.aggregator_invocations.fetch_add(1, Ordering::SeqCst);
            let aggregator = aggregator.clone();
            let event = events::stream_event(&conversation);
            tokio::spawn(async move {
                let context = events::lambda_context(Duration::from_secs(60));
                if let Err(e) =
                    aggregator::handler::handle(&aggregator, lambda_runtime::LambdaEvent::new(event, context)).await
                {
                    tracing::error!(error = %e, "aggregator invocation failed");
                }
            });
        }
    }
}

/// A one-line description of a subtask for progress output.
pub fn describe(rec: &SubtaskRecord) -> String {
    let mut tools: Vec<&str> = rec.tools_used.iter().map(String::as_str).collect();
    tools.dedup();
    format!(
        "{} {:<9} {}{}",
        rec.subtask.id,
        rec.status.as_str(),
        rec.subtask.instruction,
        if tools.is_empty() { String::new() } else { format!("  [{}]", tools.join(", ")) }
    )
}
