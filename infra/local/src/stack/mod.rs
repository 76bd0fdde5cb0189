//! The local stack: the demo shop, the tool gateway, and every function of the template as its own instance from its own config (orchestrator, tasks worker, refund worker, DLQ consumer, sweeper, aggregator), invoked through their Lambda handlers by one event source mapping per queue, the stream trigger and the sweep's schedule, on the embedded or the emulator backend, with the timing table's values scaled only by an explicit factor.
//!
//! Assembled from parts: [`servers`] (shop, fault proxy, gateway, the run's secrets),
//! [`functions`] (each function built by its crate's `wiring`, from [`crate::wiring`]'s table),
//! [`sources`] (mappings, trigger, schedule, hand-off pipe), [`api`] (the HTTP API's invocations)
//! and [`client`] (the stack as a client uses it).

mod api;
mod client;
mod functions;
mod options;
mod servers;
mod sources;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use orchestrator::api::TokenTable;
use orchestrator::{ApiState, Approvals, Auth, OperatorAuth, Orchestrator};
use serde_json::Value;
use swarm_adapters::embedded::InMemoryConversationStore;
use swarm_core::access::AccessStore;
use swarm_core::approval::ApprovalKey;
use swarm_core::faults::FaultPlan;
use swarm_core::ports::ConversationStore;
use swarm_core::timings::{Timings, seconds_rounded_up};
use tokio::sync::watch;
use worker::SweepReport;

pub use api::ApiInvoker;
pub use functions::Systems;
pub use options::{BackendChoice, Carried, StackOptions, WrapStore, WrapTools, Wraps};

use crate::platform::counters::{Counters, Received};
use crate::platform::embedded::EmbeddedBackend;
use crate::platform::emulator::EmulatorBackend;
use crate::platform::handoff::HandoffEvent;
use crate::platform::{Backend, ChangeFeed, Queue, QueueDepth, StreamError};
use crate::wiring::{LOCAL_MODELS_URL, LocalValues};
use functions::Builder;
use servers::Servers;
use sources::{Observed, Running, Sources};

/// Everything the swarm needs, running in this process on one backend.
pub struct LocalStack {
    backend: Arc<dyn Backend>,
    /// The embedded store, for waiting on its stream instead of polling.
    memory: Option<Arc<InMemoryConversationStore>>,
    timings: Timings,
    /// The HTTP API and its operator.
    front: Front,
    /// The event sources and servers, stopped by `shutdown`.
    running: Running,
    shutdown: watch::Sender<bool>,
    observed: Observed,
    pub shop: Arc<shop_tools::Shop>,
    /// The secrets this stack's functions and gateway hold ([`Self::carried`]).
    tokens: tool_gateway::DemoTokens,
    pub shop_url: String,
    pub gateway_url: String,
    pub model_label: String,
    pub offline: bool,
}

/// The API side: the orchestrator's invocations, its approvals API and the stack's own operator.
struct Front {
    api: ApiInvoker,
    approvals: Arc<Approvals>,
    /// The operators of [`LocalStack::api`] (one: the stack's own, see [`LocalStack::decide`]).
    operators: OperatorAuth,
    operator_token: String,
}

impl LocalStack {
    /// Provisions the backend from the scaled timing table, starts the demo shop, the
    /// gateway in front of it, the functions, one event source mapping per queue and the
    /// stream trigger.
    ///
    /// Errors: a time scale that is not a positive finite number; the emulator does not
    /// answer; the LLM settings are invalid; a function's config does not parse; a server cannot bind.
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

    /// Everything after provisioning: servers, functions, event sources, the API.
    async fn assemble(
        options: StackOptions,
        timings: Timings,
        backend: Arc<dyn Backend>,
        memory: Option<Arc<InMemoryConversationStore>>,
        systems: Systems,
    ) -> anyhow::Result<Self> {
        // The stream trigger's feed opens before the first write, so it misses nothing.
        let feed = backend.change_feed().await.context("opening the table's stream")?;
        let mut servers = Servers::start(&options, &timings).await?;
        let models = match options.models.clone() {
            Some(m) => m,
            None => crate::models::models_from_env().context("reading the LLM settings")?,
        };
        let values = local_values(backend.as_ref(), &servers.gateway_url, &options, &timings);
        let functions = Builder {
            backend: backend.as_ref(),
            systems,
            values: &values,
            secrets: &servers.secrets,
            models: &models,
            timings: &timings,
            wraps: &options.wraps,
            chaos: options.chaos.clone(),
        }
        .build()
        .await?;
        let faults = options.faults.clone().or_else(|| options.chaos.clone().map(|c| c as Arc<dyn FaultPlan>));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let observed = Observed::default();
        let sources = Sources {
            backend: backend.as_ref(),
            functions: &functions,
            options: &options,
            timings: &timings,
            faults: faults.clone(),
            observed: &observed,
            shutdown: shutdown_rx,
        };
        let mut running = sources.start(feed).await?;
        running.tasks.append(&mut servers.tasks);
        let api = ApiInvoker {
            orchestrator: functions.orchestrator.clone(),
            timeout: lambda_timeout(timings.orchestrator.timeout),
            faults,
            counters: observed.counters.clone(),
            // As the streaming function on AWS: a stream ends by the deadline + 70 s (`stream_main.rs`).
            events: orchestrator::api::EventStreamSettings::from_env().capped(orchestrator::openai::max_duration(
                std::time::Duration::from_secs(functions.orchestrator.settings().deadline_secs),
            )),
        };
        let front = Front::new(api, functions.approvals.clone())?;
        tracing::info!(backend = %backend.describe(), time_scale = options.time_scale, "local stack started");
        Ok(Self {
            backend,
            memory,
            timings,
            front,
            running,
            shutdown,
            observed,
            shop: servers.shop,
            tokens: servers.tokens,
            shop_url: servers.shop_url,
            gateway_url: servers.gateway_url,
            model_label: models.main.label(),
            offline: models.main.is_offline(),
        })
    }

    /// Whether the state lives in this process (the embedded backend): gone when it stops.
    pub fn is_embedded(&self) -> bool {
        self.memory.is_some()
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
        &self.observed.counters
    }

    /// Every message the event source mappings received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.observed.received.all()
    }

    /// What the stream mapping's on-failure destination received so far: one record per stream
    /// batch given up after `MaximumRetryAttempts` (sequence numbers, never items), in order.
    pub fn stream_on_failure(&self) -> Vec<Value> {
        self.observed.on_failure.all()
    }

    /// One sweep now, as the scheduler would invoke it (the timer runs one every `sweep.period`
    /// anyway); `None` when the invocation did not return.
    pub async fn sweep_now(&self) -> Option<SweepReport> {
        self.running.sweeper.invoke_once().await
    }

    /// The HTTP API as API Gateway serves it: each request one orchestrator invocation, cut at
    /// its timeout, under the fault plan ([`ApiInvoker`]); callers identified by `auth`.
    /// The approvals API is on it, its operators identified by `operators` (`None`: the stack's own).
    pub fn api_router(&self, auth: Auth, operators: Option<OperatorAuth>) -> axum::Router {
        self.front.api.router(self.api_state(auth, operators))
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
        self.front.api.orchestrator.clone()
    }

    /// The API's state: the orchestrator with `auth` for customers and the approvals API, its
    /// operators identified by `operators` (`None`: the stack's own operator, [`LocalStack::approve`]).
    pub fn api_state(&self, auth: Auth, operators: Option<OperatorAuth>) -> ApiState {
        ApiState::new(self.front.api.orchestrator.clone(), auth)
            .with_event_stream(self.front.api.events)
            .with_approvals(self.front.approvals.clone(), operators.unwrap_or_else(|| self.front.operators.clone()))
    }

    /// The hand-off events seen so far (the pipe's output), in stream order.
    pub fn handoffs(&self) -> Vec<HandoffEvent> {
        self.observed.handoffs.all()
    }

    /// What a start on the same stack after this one dies takes over ([`StackOptions::carried`]):
    /// its secrets and its shop.
    pub fn carried(&self) -> Carried {
        Carried { tokens: self.tokens.clone(), shop: self.shop.clone() }
    }

    /// Dies the way `kill -9` kills the process: every mapping, invocation, trigger, schedule and
    /// server is dropped at its next await, with no drain and no teardown. A message in flight comes
    /// back after its visibility timeout; on a named emulator stack the next start carries on.
    pub async fn kill(self) {
        for t in self.running.tasks {
            t.abort();
            let _ = t.await;
        }
    }

    /// Stops the mappings, the trigger and the servers, then tears the backend down.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.running.tasks {
            t.abort();
            let _ = t.await;
        }
        self.backend.teardown().await;
    }
}

impl Front {
    /// The API with the stack's own operator (a fresh token): [`LocalStack::approvals`] and [`LocalStack::decide`] use it.
    fn new(api: ApiInvoker, approvals: Arc<Approvals>) -> anyhow::Result<Self> {
        let (_, operator_token) = ApprovalKey::generate();
        let operators = OperatorAuth::Tokens(Arc::new(
            TokenTable::operators([(operator_token.clone(), "local-operator".to_owned())])
                .map_err(anyhow::Error::msg)?,
        ));
        Ok(Self { api, approvals, operators, operator_token })
    }
}

/// The run's values for the template's `!Ref`s: the backend's table and queues, the gateway's
/// endpoint, the scaled deadline and idle expiry (`DeadlineSecs`, `ConversationIdleExpirySecs`:
/// whole seconds as the template holds them), the
/// stack's customer limits, and the LLM endpoint of this process (`LLM_BASE_URL`, `LLM_MODEL`,
/// `LLM_AUTH`) when the stack's models come from it, else [`LOCAL_MODELS_URL`] — the models are a
/// port either way.
fn local_values(backend: &dyn Backend, gateway_url: &str, options: &StackOptions, timings: &Timings) -> LocalValues {
    let process = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let (llm_url, llm_model, llm_auth) = match (&options.models, process("LLM_BASE_URL")) {
        (None, Some(url)) => (url, process("LLM_MODEL").unwrap_or_default(), process("LLM_AUTH")),
        _ => (LOCAL_MODELS_URL.to_owned(), "local".to_owned(), None),
    };
    let mut params = LocalValues::fixed_params();
    if let Some(auth) = llm_auth {
        params.insert("LlmAuth", auth);
    }
    params.extend([
        ("DeadlineSecs", seconds_rounded_up(timings.conversation.deadline).to_string()),
        ("ConversationIdleExpirySecs", seconds_rounded_up(timings.conversation.idle_expiry).to_string()),
        ("LlmBaseUrl", llm_url),
        ("LlmModel", llm_model),
        ("CustomerConversationsPerMinute", options.limits.conversations_per_minute.to_string()),
        ("CustomerMaxSubtasks", options.limits.subtasks_per_conversation.to_string()),
    ]);
    LocalValues {
        table: backend.table().to_owned(),
        tasks_queue_url: backend.queue(Queue::Tasks).url.clone(),
        refund_queue_url: backend.queue(Queue::Refund).url.clone(),
        gateway_url: gateway_url.to_owned(),
        params,
    }
}

/// A function's timeout as Lambda holds it: whole seconds (the template's `Timeout`), at least 1.
/// A scaled table's fraction of a second is rounded up, never down.
pub fn lambda_timeout(timeout: Duration) -> Duration {
    Duration::from_secs(seconds_rounded_up(timeout).max(1))
}
