//! The local stack: the demo shop, the tool gateway, the orchestrator, workers and aggregator invoked through their Lambda handlers by one event source mapping per queue and one stream trigger, on the embedded or the emulator backend, with the timing table's values scaled only by an explicit factor.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use aggregator::{Aggregator, AggregatorSettings};
use orchestrator::api::OperatorTable;
use orchestrator::{ApiState, Approvals, Auth, OperatorAuth, Orchestrator, OrchestratorSettings};
use swarm_adapters::embedded::{ChangedItem, InMemoryConversationStore};
use swarm_adapters::mcp::McpToolGateway;
use swarm_core::access::{AccessStore, CustomerLimits};
use swarm_core::approval::ApprovalKey;
use swarm_core::domain::{ConversationId, SubtaskId};
use swarm_core::faults::FaultPlan;
use swarm_core::llm::Models;
use swarm_core::obs::{TracedQueue, TracedStore};
use swarm_core::ports::{ConversationStore, ToolContext, ToolGateway};
use swarm_core::roles::{DEFAULT_ROLE, PLANNER_ROLE, REFUND_ROLE, RoleTable, TaskQueues};
use swarm_core::timings::{Timings, seconds_rounded_up};
use swarm_core::view::ConversationView;
use worker::{SweepReport, Worker, WorkerMode, WorkerSettings};

use crate::http;
use crate::platform::chaos::Chaos;
use crate::platform::counters::{Counters, Received, ReceivedLog, RecordLog, add};
use crate::platform::embedded::EmbeddedBackend;
use crate::platform::emulator::{EmulatorBackend, EmulatorOptions};
use crate::platform::handoff::{HandoffEvent, HandoffLog};
use crate::platform::invoke::{Ended, invoke};
use crate::platform::mapping::{EventSourceMapping, MappingSettings};
use crate::platform::stream::{StreamTrigger, TriggerSettings};
use crate::platform::sweeper::Sweeper;
use crate::platform::{Backend, ChangeFeed, Queue, QueueDepth, StreamError, tool_faults};

/// Wraps a port adapter (fault injection, latency) before a function gets it.
pub type WrapTools = Arc<dyn Fn(Arc<dyn ToolGateway>) -> Arc<dyn ToolGateway> + Send + Sync>;
pub type WrapStore = Arc<dyn Fn(Arc<dyn ConversationStore>) -> Arc<dyn ConversationStore> + Send + Sync>;

/// The `db.system.name` and `messaging.system` of a backend's spans.
#[derive(Clone, Copy, Debug)]
struct Systems {
    store: &'static str,
    queue: &'static str,
}

/// Longest wait for one role's `tools/list` while the stack starts.
const WARM_UP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a client polls `GET /conversations/{id}` on the emulator (which notifies nobody).
const CLIENT_POLL: Duration = Duration::from_millis(100);

/// Where the swarm's data lives.
#[derive(Clone, Debug, Default)]
pub enum BackendChoice {
    /// In memory, in this process.
    #[default]
    Embedded,
    /// DynamoDB and SQS on an AWS emulator (moto).
    Emulator(EmulatorOptions),
}

/// Settings of a local stack.
#[derive(Clone)]
pub struct StackOptions {
    pub backend: BackendChoice,
    /// Every timing and capacity (standard by default); tests change single values explicitly.
    pub timings: Timings,
    /// Every duration of `timings` is multiplied by this (1.0 by default): the only way the
    /// local platform runs faster than AWS. Must be a positive finite number.
    pub time_scale: f64,
    /// The tasks queue mapping's `MaximumConcurrency` instead of the table's `worker.max_concurrency`.
    pub worker_concurrency: Option<usize>,
    /// Deliver every queue batch and every stream batch twice (at-least-once delivery drills).
    pub duplicate_deliveries: bool,
    /// Models to use instead of the ones named by `LLM_*` (tests).
    pub models: Option<Models>,
    /// Wraps the worker's tool gateway (fault injection in tests).
    pub wrap_tools: Option<WrapTools>,
    /// Wraps the worker's view of the store (fault injection in tests).
    pub wrap_store: Option<WrapStore>,
    /// Wraps the aggregator's view of the store (fault injection in tests).
    pub wrap_aggregator_store: Option<WrapStore>,
    /// A fault plan every invocation runs under (crash points; [`swarm_core::faults`]).
    pub faults: Option<Arc<dyn FaultPlan>>,
    /// A chaos run's faults ([`Chaos`]): crashes at every named point (the plan of every
    /// invocation unless `faults` is set), delivery and stream faults in the mappings and the
    /// trigger, and, when it asks for tool faults, a fault proxy between the gateway and the shop.
    pub chaos: Option<Arc<Chaos>>,
    /// Refunds above this amount (in the order's currency) need an operator's approval; `None`:
    /// every refund does (the demo gateway's consent).
    pub refund_approval_above: Option<f64>,
    /// Per-customer limits (conversations per minute, subtasks per conversation), counted in the store.
    pub limits: CustomerLimits,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Embedded,
            timings: Timings::standard().clone(),
            time_scale: 1.0,
            worker_concurrency: None,
            duplicate_deliveries: false,
            models: None,
            wrap_tools: None,
            wrap_store: None,
            wrap_aggregator_store: None,
            faults: None,
            chaos: None,
            refund_approval_above: None,
            limits: CustomerLimits::DEFAULT,
        }
    }
}

/// Everything the swarm needs, running in this process on one backend.
pub struct LocalStack {
    backend: Arc<dyn Backend>,
    /// The embedded store, for waiting on its stream instead of polling.
    memory: Option<Arc<InMemoryConversationStore>>,
    timings: Timings,
    api: ApiInvoker,
    sweeper: Arc<Sweeper>,
    approvals: Arc<Approvals>,
    /// The operators of [`LocalStack::api`] (one: the stack's own, see [`LocalStack::approve`]).
    operators: OperatorAuth,
    operator_token: String,
    handoffs: Arc<HandoffLog>,
    pub shop: Arc<shop_tools::Shop>,
    pub shop_url: String,
    pub gateway_url: String,
    pub model_label: String,
    pub offline: bool,
    shutdown: watch::Sender<bool>,
    background: Vec<JoinHandle<()>>,
    counters: Arc<Counters>,
    received: Arc<ReceivedLog>,
    on_failure: Arc<RecordLog>,
}

impl LocalStack {
    /// Provisions the backend from the scaled timing table, starts the demo shop, the
    /// gateway in front of it, the functions, one event source mapping per queue and the
    /// stream trigger.
    ///
    /// Errors: a time scale that is not a positive finite number; the emulator does not
    /// answer; the LLM settings are invalid; a server cannot bind.
    pub async fn start(options: StackOptions) -> anyhow::Result<Self> {
        anyhow::ensure!(
            options.time_scale.is_finite() && options.time_scale > 0.0,
            "time scale must be a positive number, not {}",
            options.time_scale
        );
        let timings = options.timings.scaled(options.time_scale);
        let systems = match &options.backend {
            BackendChoice::Embedded => Systems { store: "memory", queue: "memory" },
            BackendChoice::Emulator(_) => Systems { store: "aws.dynamodb", queue: "aws_sqs" },
        };
        let (backend, memory): (Arc<dyn Backend>, _) = match &options.backend {
            BackendChoice::Embedded => {
                let embedded = EmbeddedBackend::provision(&timings);
                let memory = embedded.memory_store();
                (Arc::new(embedded), Some(memory))
            }
            BackendChoice::Emulator(e) => (Arc::new(EmulatorBackend::provision(e, &timings).await?), None),
        };
        match Self::assemble(options, timings, backend.clone(), memory, systems).await {
            Ok(stack) => Ok(stack),
            Err(e) => {
                // What was provisioned goes: an emulator keeps no half-started run's table or queues.
                backend.teardown().await;
                Err(e)
            }
        }
    }

    /// Everything after provisioning: servers, functions, mappings, trigger.
    async fn assemble(
        options: StackOptions,
        timings: Timings,
        backend: Arc<dyn Backend>,
        memory: Option<Arc<InMemoryConversationStore>>,
        systems: Systems,
    ) -> anyhow::Result<Self> {
        // The stream trigger's feed opens before the first write, so it misses nothing.
        let feed = backend.change_feed().await.context("opening the table's stream")?;

        // The shop answers the gateway only: it gets the gateway's upstream credential, fresh per stack.
        let tokens = tool_gateway::DemoTokens::generate();
        let shop_token = shop_tools::UpstreamToken::new(tokens.shop_upstream().expose())
            .map_err(|e| anyhow::anyhow!("the demo shop's upstream token: {e}"))?;
        let shop = Arc::new(shop_tools::Shop::demo().context("loading the demo shop")?);
        let (shop_addr, shop_task) =
            shop_tools::serve(loopback(), shop.clone(), shop_tools::ShopAccess::local(shop_token))
                .await
                .context("starting the demo shop tool server")?;
        let shop_url = format!("http://{shop_addr}/mcp");
        let mut background = vec![shop_task];
        // Under chaos with tool faults the gateway federates the fault proxy in the shop's place.
        let upstream_url = match options.chaos.as_ref().filter(|c| c.settings().tools.any()) {
            Some(chaos) => {
                let (url, task) =
                    tool_faults::start(&shop_url, chaos.clone()).await.context("starting the tool fault proxy")?;
                background.push(task);
                url
            }
            None => shop_url.clone(),
        };
        let mut gateway_config = tool_gateway::demo_config(&upstream_url, &tokens);
        // The demo shop lives in this process and never restarts: keep its connections.
        gateway_config.upstream_keep_alive = true;
        if let Some(above) = options.refund_approval_above {
            for effect in gateway_config.side_effects.values_mut() {
                if let Some(consent) = &mut effect.consent {
                    consent.above = above;
                }
            }
        }
        // The gateway's own waits are the (scaled) table's, like every other timing here.
        for upstream in &mut gateway_config.upstreams {
            upstream.call_timeout_secs = timings.gateway.call_timeout.as_secs_f64();
            upstream.discovery_timeout_secs = timings.gateway.discovery_timeout.as_secs_f64();
        }
        scale_gateway(&mut gateway_config, options.time_scale);
        let (gateway_addr, gateway_task) =
            tool_gateway::serve(loopback(), gateway_config).await.context("starting the tool gateway")?;
        let gateway_url = format!("http://{gateway_addr}/mcp");
        let role_tokens: HashMap<String, String> =
            tokens.role_tokens().into_iter().map(|(role, token)| (role, token.expose().to_owned())).collect();
        let base_tools: Arc<dyn ToolGateway> = Arc::new(
            McpToolGateway::new(&gateway_url, role_tokens, timings.worker.tool_timeout)
                .context("connecting to the tool gateway")?,
        );
        warm_up(base_tools.as_ref()).await;
        let worker_tools = match &options.wrap_tools {
            Some(wrap) => wrap(base_tools.clone()),
            None => base_tools.clone(),
        };
        let models = match options.models.clone() {
            Some(m) => m,
            None => crate::models::models_from_env().context("reading the LLM settings")?,
        };

        // As the functions' AWS clients do: every store and queue operation in its own span.
        let store = TracedStore::wrap(backend.store(), systems.store);
        let wrapped = |wrap: &Option<WrapStore>| match wrap {
            Some(wrap) => wrap(store.clone()),
            None => store.clone(),
        };
        let traced = |queue: Queue, name: &'static str| {
            TracedQueue::wrap(backend.queue(queue).sender.clone(), systems.queue, name)
        };
        let queues =
            TaskQueues::new(traced(Queue::Tasks, "tasks")).with_role(REFUND_ROLE, traced(Queue::Refund, "refund"));
        let approval_key = ApprovalKey::new(tokens.approval_key()).map_err(anyhow::Error::msg)?;
        let approvals = Arc::new(Approvals::new(store.clone(), queues.clone(), approval_key, &timings));
        let (_, operator_token) = ApprovalKey::generate();
        let operators = OperatorAuth::Tokens(Arc::new(
            OperatorTable::from_pairs([(operator_token.clone(), "local-operator".to_owned())])
                .map_err(anyhow::Error::msg)?,
        ));
        let orchestrator = Arc::new(
            Orchestrator::new(
                store.clone(),
                queues.clone(),
                models.main.clone(),
                base_tools,
                RoleTable::demo(),
                OrchestratorSettings::from_timings(&timings),
            )
            .with_limits(backend.access(), options.limits),
        );
        let worker = Arc::new(Worker::new(
            wrapped(&options.wrap_store),
            queues,
            models.main.clone(),
            models.sub.clone(),
            worker_tools,
            WorkerSettings::from_timings(&timings),
        ));
        let aggregator = Arc::new(Aggregator::new(
            wrapped(&options.wrap_aggregator_store),
            models.main.clone(),
            AggregatorSettings::from_timings(&timings),
        ));

        let faults = options.faults.clone().or_else(|| options.chaos.clone().map(|c| c as Arc<dyn FaultPlan>));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let received = Arc::new(ReceivedLog::default());
        let on_failure = Arc::new(RecordLog::default());
        background.push(gateway_task);
        let t = &timings;
        let sqs_fed = |function: &str, timeout, batch_size, max_concurrency| {
            let timeout = lambda_timeout(timeout);
            let settings = MappingSettings { batch_size, max_concurrency, timeout, receive_wait: t.local.receive_wait };
            (function.to_owned(), settings)
        };
        let tasks_concurrency = options.worker_concurrency.unwrap_or(t.worker.max_concurrency);
        for (queue, mode, (function, settings)) in [
            (
                Queue::Tasks,
                WorkerMode::Tasks,
                sqs_fed("worker", t.worker.timeout, t.worker.batch_size, tasks_concurrency),
            ),
            (Queue::Refund, WorkerMode::Tasks, {
                let r = &t.refund_worker;
                sqs_fed("refund-worker", r.timeout, r.batch_size, r.max_concurrency)
            }),
            (Queue::TasksDeadLetters, WorkerMode::DeadLetters, {
                let d = &t.dlq_consumer;
                sqs_fed("dlq-consumer", d.timeout, d.batch_size, d.max_concurrency)
            }),
            (Queue::RefundDeadLetters, WorkerMode::DeadLetters, {
                let d = &t.dlq_consumer;
                sqs_fed("dlq-consumer", d.timeout, d.batch_size, d.max_concurrency)
            }),
        ] {
            let handles = backend.queue(queue);
            let mapping = EventSourceMapping {
                queue: handles.name.clone(),
                function,
                consumer: handles.consumer.clone(),
                mode,
                worker: worker.clone(),
                settings,
                duplicate_deliveries: options.duplicate_deliveries,
                faults: faults.clone(),
                chaos: options.chaos.clone(),
                counters: counters.clone(),
                received: received.clone(),
            };
            background.push(tokio::spawn(mapping.run(shutdown_rx.clone())));
        }
        let trigger = StreamTrigger {
            feed,
            aggregator,
            settings: TriggerSettings {
                batch_size: t.aggregator.stream.batch_size,
                max_retry_attempts: t.aggregator.stream.max_retry_attempts,
                timeout: lambda_timeout(t.aggregator.timeout),
                retry_wait: t.local.stream_poll,
            },
            duplicate_deliveries: options.duplicate_deliveries,
            faults: faults.clone(),
            chaos: options.chaos.clone(),
            counters: counters.clone(),
            on_failure: on_failure.clone(),
        };
        background.push(tokio::spawn(trigger.run(shutdown_rx.clone())));
        let sweeper = Arc::new(Sweeper {
            worker: worker.clone(),
            period: timings.sweep.period,
            timeout: lambda_timeout(timings.sweep.timeout),
            faults: faults.clone(),
            counters: counters.clone(),
        });
        background.push(tokio::spawn(sweeper.clone().run(shutdown_rx.clone())));
        let api = ApiInvoker {
            orchestrator,
            timeout: lambda_timeout(timings.orchestrator.timeout),
            faults: faults.clone(),
            counters: counters.clone(),
        };
        // The hand-off pipe reads the stream too (on AWS an EventBridge pipe, the table's second reader).
        let handoffs = Arc::new(HandoffLog::default());
        let handoff_feed = backend.change_feed().await.context("opening the table's stream for hand-offs")?;
        background.push(tokio::spawn(crate::platform::handoff::run(handoff_feed, handoffs.clone(), shutdown_rx)));
        tracing::info!(backend = %backend.describe(), time_scale = options.time_scale, "local stack started");

        Ok(Self {
            backend,
            memory,
            timings,
            api,
            sweeper,
            approvals,
            operators,
            operator_token,
            handoffs,
            shop,
            shop_url,
            gateway_url,
            model_label: models.main.label(),
            offline: models.main.is_offline(),
            shutdown,
            background,
            counters,
            received,
            on_failure,
        })
    }

    /// Which backend, and where (one line).
    pub fn describe_backend(&self) -> String {
        self.backend.describe()
    }

    /// The timing table in effect: the options' table scaled by their time scale.
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// The conversation store the functions use (unwrapped).
    pub fn store(&self) -> Arc<dyn ConversationStore> {
        self.backend.store()
    }

    /// Identity mappings and per-customer counters (the same table).
    pub fn access(&self) -> Arc<dyn AccessStore> {
        self.backend.access()
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Every message the event source mappings received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received.all()
    }

    /// What the stream mapping's on-failure destination received so far: one record per stream
    /// batch given up after `MaximumRetryAttempts` (sequence numbers, never items), in order.
    pub fn stream_on_failure(&self) -> Vec<Value> {
        self.on_failure.all()
    }

    /// One sweep now, as the scheduler would invoke it (the timer runs one every `sweep.period`
    /// anyway); `None` when the invocation did not return.
    pub async fn sweep_now(&self) -> Option<SweepReport> {
        self.sweeper.invoke_once().await
    }

    /// The HTTP API as API Gateway serves it: each request one orchestrator invocation, cut at
    /// its timeout, under the fault plan ([`ApiInvoker`]); callers identified by `auth`.
    /// The approvals API is on it, its operators identified by `operators` (`None`: the stack's own).
    pub fn api_router(&self, auth: Auth, operators: Option<OperatorAuth>) -> axum::Router {
        self.api.router(self.api_state(auth, operators))
    }

    /// The name of `queue` (as `Received::queue` holds it).
    pub fn queue_name(&self, queue: Queue) -> &str {
        &self.backend.queue(queue).name
    }

    /// Messages in `queue` by state.
    pub async fn queue_depth(&self, queue: Queue) -> anyhow::Result<QueueDepth> {
        let name = self.queue_name(queue).to_owned();
        self.backend.queue(queue).consumer.depth().await.with_context(|| format!("depth of queue {name}"))
    }

    /// A reader of the table's stream of its own, beside the stream trigger's (an audit of
    /// every write): on the emulator from the stream's start, in memory from now on.
    pub async fn change_feed(&self) -> Result<Box<dyn ChangeFeed>, StreamError> {
        self.backend.change_feed().await
    }

    /// Conversation items in the table.
    pub async fn conversation_count(&self) -> anyhow::Result<usize> {
        Ok(self.backend.conversation_count().await?)
    }

    /// The orchestrator behind the API (`swarm-local serve` mounts [`Self::api_router`], which invokes it).
    pub fn orchestrator(&self) -> Arc<Orchestrator> {
        self.api.orchestrator.clone()
    }

    /// The API's state: the orchestrator with `auth` for customers and the approvals API, its
    /// operators identified by `operators` (`None`: the stack's own operator, [`LocalStack::approve`]).
    pub fn api_state(&self, auth: Auth, operators: Option<OperatorAuth>) -> ApiState {
        ApiState::new(self.api.orchestrator.clone(), auth)
            .with_approvals(self.approvals.clone(), operators.unwrap_or_else(|| self.operators.clone()))
    }

    /// The hand-off events seen so far (the pipe's output), in stream order.
    pub fn handoffs(&self) -> Vec<HandoffEvent> {
        self.handoffs.all()
    }

    /// `GET /approvals?status=<status>&limit=100` as the stack's operator; answers the listed approvals (newest first, at most 100).
    pub async fn approvals(&self, status: &str) -> anyhow::Result<Vec<Value>> {
        let auth = format!("Bearer {}", self.operator_token);
        let (code, body) = self
            .api("GET", &format!("/approvals?status={status}&limit=100"), None, &[("authorization", auth.as_str())])
            .await?;
        anyhow::ensure!(code == 200, "GET /approvals answered {code}: {body}");
        Ok(body["approvals"].as_array().cloned().unwrap_or_default())
    }

    /// `POST /approvals/{id}` with `decision` (`approve` or `reject`) as the stack's operator; answers `(status, body)`.
    pub async fn decide(&self, approval_id: &str, decision: &str) -> anyhow::Result<(u16, Value)> {
        let auth = format!("Bearer {}", self.operator_token);
        let body = serde_json::json!({ "decision": decision }).to_string();
        self.api("POST", &format!("/approvals/{approval_id}"), Some(&body), &[("authorization", auth.as_str())]).await
    }

    /// Sends one HTTP API (payload 2.0) event, e.g. a fixture of `events/`, through
    /// `lambda_http`'s conversion into the orchestrator's router, as on Lambda
    /// (authentication off); answers `(status, JSON body)`. Cut at the orchestrator's timeout.
    pub async fn api_event(&self, event: &Value) -> anyhow::Result<(u16, Value)> {
        let request = lambda_http::request::from_str(&event.to_string()).context("converting the API Gateway event")?;
        self.invoke_api(request).await
    }

    /// `method path` through the orchestrator's router (authentication off: the body names
    /// the customer); answers `(status, JSON body)`. Cut at the orchestrator's timeout.
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(u16, Value)> {
        self.invoke_api(http::request(method, path, body, headers)?).await
    }

    /// One orchestrator invocation: the router answers, unless the invocation passes the
    /// function's timeout or dies at a crash point — an error then (API Gateway would
    /// answer 500 without a body the API chose).
    async fn invoke_api<B>(&self, request: axum::http::Request<B>) -> anyhow::Result<(u16, Value)>
    where
        B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let router = http::api(self.api_state(Auth::None, None));
        match self.api.invoke(http::call(router, request)).await {
            Ended::Returned(answer) => answer,
            ended => anyhow::bail!("the orchestrator invocation {} (timeout {:?})", ended.describe(), self.api.timeout),
        }
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

    /// Waits until the conversation is `DONE` or `FAILED`, or `timeout` passes; answers its view.
    pub async fn wait_finished(&self, id: &str, timeout: Duration) -> anyhow::Result<ConversationView> {
        self.follow(id, timeout, None).await
    }

    /// As [`Self::wait_finished`], calling `seen` with the conversation's view whenever it
    /// may have changed (progress output).
    pub async fn wait_until(
        &self,
        id: &str,
        timeout: Duration,
        mut seen: impl FnMut(&ConversationView),
    ) -> anyhow::Result<ConversationView> {
        self.follow(id, timeout, Some(&mut seen)).await
    }

    /// Embedded: wakes on the store's stream (no polling). Emulator: polls `GET` every
    /// [`CLIENT_POLL`], as a client on AWS would.
    async fn follow(
        &self,
        id: &str,
        timeout: Duration,
        mut seen: Option<&mut dyn FnMut(&ConversationView)>,
    ) -> anyhow::Result<ConversationView> {
        let conversation_id = ConversationId::parse(id).context("bad conversation id")?;
        let deadline = tokio::time::Instant::now() + timeout;
        let not_finished = |view: &ConversationView| {
            anyhow::anyhow!(
                "conversation {id} did not finish within {timeout:?} (last status {}, {}/{} subtasks finished)",
                view.status,
                view.progress.finished,
                view.progress.total
            )
        };
        let mut changes = self.memory.as_ref().map(|m| m.subscribe());
        loop {
            let view = self.view(id).await?;
            if let Some(seen) = seen.as_mut() {
                seen(&view);
            }
            if view.status.is_terminal() {
                return Ok(view);
            }
            let Some(changes) = changes.as_mut() else {
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Err(not_finished(&view));
                }
                tokio::time::sleep(CLIENT_POLL.min(deadline - now)).await;
                continue;
            };
            // The next change of this conversation worth a new view: any, with a progress
            // callback; the conversation item reaching a terminal status, without.
            loop {
                match tokio::time::timeout_at(deadline, changes.recv()).await {
                    Err(_) => return Err(not_finished(&view)),
                    Ok(None) => anyhow::bail!("the stack stopped"),
                    Ok(Some(change)) if change.conversation_id() != &conversation_id => continue,
                    Ok(Some(change)) => match &change.item {
                        ChangedItem::Conversation(c) if c.status.is_terminal() => break,
                        _ if seen.is_some() => break,
                        _ => continue,
                    },
                }
            }
        }
    }

    /// Stops the mappings, the trigger and the servers, then tears the backend down.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.background {
            t.abort();
            let _ = t.await;
        }
        self.backend.teardown().await;
    }
}

/// The orchestrator as API Gateway invokes it: one invocation per request, cut at the function's
/// timeout, under the fault plan. `swarm-local serve` and [`LocalStack::api`] both go through it.
#[derive(Clone)]
pub struct ApiInvoker {
    orchestrator: Arc<Orchestrator>,
    /// The orchestrator's timeout (whole seconds, as Lambda holds it).
    timeout: Duration,
    faults: Option<Arc<dyn FaultPlan>>,
    counters: Arc<Counters>,
}

impl ApiInvoker {
    /// Runs `handler` as one orchestrator invocation; a timed-out or killed one is counted.
    async fn invoke<F: Future>(&self, handler: F) -> Ended<F::Output> {
        let ended = invoke(self.timeout, self.faults.as_ref(), handler).await;
        match ended {
            Ended::Killed => add(&self.counters.killed_invocations, 1),
            Ended::TimedOut => add(&self.counters.timed_out_invocations, 1),
            Ended::Returned(_) => {}
        }
        ended
    }

    /// The API over the orchestrator's router with `state` (callers, approvals), every request one
    /// invocation: past the timeout the client gets API Gateway's 503, after a crash its 500.
    pub fn router(&self, state: ApiState) -> axum::Router {
        let invoker = self.clone();
        let inner = http::api(state);
        axum::Router::new().fallback(move |request: axum::extract::Request| {
            let invoker = invoker.clone();
            let inner = inner.clone();
            async move {
                use axum::response::IntoResponse as _;
                use tower::ServiceExt as _;
                let call = async move {
                    match inner.oneshot(request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    }
                };
                match invoker.invoke(call).await {
                    Ended::Returned(response) => response,
                    Ended::TimedOut => (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        axum::Json(serde_json::json!({"message": "Service Unavailable"})),
                    )
                        .into_response(),
                    Ended::Killed => (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        axum::Json(serde_json::json!({"message": "Internal Server Error"})),
                    )
                        .into_response(),
                }
            }
        })
    }
}

/// A function's timeout as Lambda holds it: whole seconds (the template's `Timeout`), at least 1.
/// A scaled table's fraction of a second is rounded up, never down.
pub fn lambda_timeout(timeout: Duration) -> Duration {
    Duration::from_secs(seconds_rounded_up(timeout).max(1))
}

/// Scales the gateway's windows of time — breaker window and open time, `tools/list` cache and
/// discovery retry — by the stack's time scale, like every other timing: an unscaled breaker
/// would stay open for the equivalent of hours. Its call timeouts stay as they are: the worker's
/// own tool timeout (scaled) already cuts a call, and a scaled discovery timeout would measure
/// this machine's CPU rather than the upstream.
fn scale_gateway(config: &mut tool_gateway::GatewayConfig, factor: f64) {
    config.list_ttl_secs *= factor;
    config.discovery_retry_secs *= factor;
    for u in &mut config.upstreams {
        u.breaker.window_secs *= factor;
        u.breaker.open_secs *= factor;
    }
}

/// Opens the gateway sessions of every role (and the gateway's to the demo shop) before the
/// first request, as a warm Lambda has them: a request's budget — scaled or not — is then
/// spent on the request, not on this process's connection set-up. A failure is only logged:
/// the first request will meet it again and handle it as the functions do.
async fn warm_up(tools: &dyn ToolGateway) {
    for role in [PLANNER_ROLE, DEFAULT_ROLE, REFUND_ROLE] {
        let ctx = ToolContext {
            role: role.to_owned(),
            customer_id: "C100".to_owned(),
            conversation_id: ConversationId::new(),
            subtask_id: SubtaskId::from("warm-up"),
        };
        match tokio::time::timeout(WARM_UP_TIMEOUT, tools.list_tools(&ctx)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(role, error = %e, "warming up the gateway session failed"),
            Err(_) => tracing::warn!(role, "warming up the gateway session timed out"),
        }
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
