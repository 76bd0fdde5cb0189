//! The swarm's functions, each its own instance as on AWS: built by its crate's `wiring` from its own config, parsed from exactly the variables `template.yaml` gives it ([`crate::wiring`]), over its own ports — its view of the store, a sender only for the queues it is given, its own gateway client with its own role's token.
//!
//! One local instance stands for every execution environment Lambda would run of a function, and
//! serves all of its concurrent invocations. A crash (an invocation killed at a crash point of the
//! fault plan) drops that invocation and nothing else: the instance's memory — its gateway sessions,
//! its cached `tools/list` and argument schemas, its model client — stays, as the other warm
//! environments' memory does on AWS when one of them dies. Wiping it would cool every concurrent
//! invocation of the function at once, which AWS never does; and no guarantee may rest on that
//! memory anyway: it holds only connections and caches, everything the guarantees need is in the
//! table. The gateway's own state (breakers, rate limits) lives in the gateway, which no fault plan kills.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aggregator::Aggregator;
use aggregator::wiring::AggregatorPorts;
use anyhow::Context as _;
use orchestrator::wiring::OrchestratorPorts;
use orchestrator::{Approvals, Orchestrator};
use swarm_adapters::config::{ExposeSecret as _, GatewayClientConfig, QueueUrls, SecretString};
use swarm_adapters::mcp::McpToolGateway;
use swarm_core::approval::ApprovalKey;
use swarm_core::domain::{ConversationId, SubtaskId};
use swarm_core::llm::Models;
use swarm_core::obs::{TracedQueue, TracedStore};
use swarm_core::ports::{ConversationStore, ToolContext, ToolGateway};
use swarm_core::roles::TaskQueues;
use swarm_core::timings::Timings;
use worker::wiring::{AgentPorts, WorkerPorts};
use worker::{Closer, MessageHandler, WorkerMode};

use super::options::Wraps;
use crate::platform::chaos::Chaos;
use crate::platform::store_faults::{PartialSends, chaotic_store};
use crate::platform::{Backend, FunctionClients};
use crate::wiring::{Function, FunctionConfig, LocalSecrets, LocalValues, RefusingQueue};

/// Longest wait for one function's `tools/list` while the stack starts.
const WARM_UP_TIMEOUT: Duration = Duration::from_secs(10);

/// The `db.system.name` and `messaging.system` of a backend's spans.
#[derive(Clone, Copy, Debug)]
pub struct Systems {
    pub store: &'static str,
    pub queue: &'static str,
}

/// A function of the worker binary an SQS mapping feeds, and the mode its config put it in.
#[derive(Clone)]
pub struct WorkerFunction {
    /// What handles its messages: the tasks worker, or the closer alone (the DLQ consumer).
    pub worker: Arc<dyn MessageHandler>,
    pub mode: WorkerMode,
}

/// Every function of the template the stack runs from its own config.
pub struct Functions {
    pub orchestrator: Arc<Orchestrator>,
    /// The approvals API (the orchestrator function's, with its store and queues).
    pub approvals: Arc<Approvals>,
    pub worker: WorkerFunction,
    pub refund_worker: WorkerFunction,
    pub dlq_consumer: WorkerFunction,
    /// The sweep function: a closer alone.
    pub sweeper: Arc<Closer>,
    pub aggregator: Arc<Aggregator>,
}

/// What every function is built from.
pub struct Builder<'a> {
    pub backend: &'a dyn Backend,
    pub systems: Systems,
    /// The run's values for the template's `!Ref`s.
    pub values: &'a LocalValues,
    pub secrets: &'a LocalSecrets,
    /// The stack's models: one set serves every function (the process's `LLM_*`, offline, or a test's).
    pub models: &'a Models,
    /// The scaled timing table.
    pub timings: &'a Timings,
    pub wraps: &'a Wraps,
    /// A chaos run's store and queue faults, put under every function's store and senders.
    pub chaos: Option<Arc<Chaos>>,
}

impl Builder<'_> {
    /// Builds every function. Errors: a config that does not parse from its variables, a secret
    /// that is not the stack's, a gateway client that cannot be built, ports that do not fit a mode.
    pub async fn build(&self) -> anyhow::Result<Functions> {
        let non_callers = self.wraps.tools_of_non_callers();
        anyhow::ensure!(non_callers.is_empty(), "a tools wrapper for {non_callers:?}, which call no tool");
        let (orchestrator, approvals) = self.orchestrator().await?;
        Ok(Functions {
            orchestrator,
            approvals,
            worker: self.worker(Function::Worker).await?,
            refund_worker: self.worker(Function::RefundWorker).await?,
            dlq_consumer: self.worker(Function::DlqConsumer).await?,
            sweeper: self.sweeper().await?,
            aggregator: self.aggregator()?,
        })
    }

    fn config(&self, function: Function) -> anyhow::Result<FunctionConfig> {
        FunctionConfig::parse(function, &self.values.environment(function))
            .with_context(|| format!("the {} function's config", function.name()))
    }

    /// What `function` reaches of the backend: on the emulator with IAM on, signed with its own key.
    fn clients(&self, function: Function) -> anyhow::Result<FunctionClients> {
        self.backend
            .clients(function.name())
            .with_context(|| format!("the backend has no identity for {}", function.name()))
    }

    /// `function`'s view of the store: under a chaos run its faults (throttles, lost answers, as its
    /// client would see them from DynamoDB), every operation in its own span, as its AWS client's
    /// are, then the test's wrapper for it.
    fn store(&self, function: Function, clients: &FunctionClients) -> Arc<dyn ConversationStore> {
        let store = match &self.chaos {
            Some(chaos) => chaotic_store(clients.store.clone(), chaos.clone()),
            None => clients.store.clone(),
        };
        self.wraps.wrap_store(function, TracedStore::wrap(store, self.systems.store))
    }

    /// A sender for each queue URL in `urls`, none for the others ([`QueueUrls::task_queues`], as on Lambda).
    /// Error: a URL that is not one of the backend's queues.
    fn queues(&self, clients: &FunctionClients, urls: &QueueUrls) -> anyhow::Result<TaskQueues> {
        for url in urls.tasks.iter().chain(&urls.refund) {
            anyhow::ensure!(clients.senders.contains_key(url), "{url} is not a queue of this stack");
        }
        Ok(urls.task_queues(|url, label| {
            let mut sender = clients.senders.get(url).cloned().unwrap_or_else(|| Arc::new(RefusingQueue(label)));
            if let Some(chaos) = &self.chaos {
                sender = Arc::new(PartialSends { inner: sender, chaos: chaos.clone() });
            }
            TracedQueue::wrap(sender, self.systems.queue, label)
        }))
    }

    /// `function`'s gateway client: the gateway's URL with its own role's token only, its session
    /// opened before the first request (as a warm Lambda has it), then the test's wrapper for it.
    async fn tools(&self, function: Function, gateway: &GatewayClientConfig) -> anyhow::Result<Arc<dyn ToolGateway>> {
        let token = self.secrets.resolve(&gateway.token)?;
        let tokens: HashMap<String, SecretString> = [(gateway.role.clone(), token)].into();
        let client: Arc<dyn ToolGateway> = Arc::new(
            McpToolGateway::new(&gateway.url, tokens, self.timings.worker.tool_timeout)
                .with_context(|| format!("the {} function's gateway client", function.name()))?,
        );
        warm_up(client.as_ref(), &gateway.role).await;
        Ok(self.wraps.wrap_tools(function, client))
    }

    async fn worker(&self, function: Function) -> anyhow::Result<WorkerFunction> {
        let (built, mode) = self.worker_function(function).await?;
        Ok(WorkerFunction { worker: built.messages(), mode })
    }

    /// The sweeper: its config's mode builds the closer alone.
    async fn sweeper(&self) -> anyhow::Result<Arc<Closer>> {
        let (built, _) = self.worker_function(Function::Sweeper).await?;
        built.closer().context("the sweeper is not built as a closer")
    }

    /// A function of the worker binary as its crate's wiring builds it from its config, with its mode.
    async fn worker_function(
        &self,
        function: Function,
    ) -> anyhow::Result<(worker::wiring::WorkerFunction, WorkerMode)> {
        let FunctionConfig::Worker(config) = self.config(function)? else {
            anyhow::bail!("{} is not a function of the worker binary", function.name())
        };
        let agent = match &config.gateway {
            Some(gateway) => Some(AgentPorts {
                model: self.models.main.clone(),
                sub_model: self.models.sub.clone(),
                tools: self.tools(function, gateway).await?,
            }),
            None => None,
        };
        let clients = self.clients(function)?;
        let approval_key = match &config.approval_key {
            Some(source) => {
                Some(ApprovalKey::new(self.secrets.resolve(source)?.expose_secret()).map_err(anyhow::Error::msg)?)
            }
            None => None,
        };
        let ports = WorkerPorts {
            store: self.store(function, &clients),
            queues: self.queues(&clients, &config.queues)?,
            agent,
            approval_key,
        };
        let built = worker::wiring::worker(&config, ports, self.timings)
            .with_context(|| format!("building the {} function", function.name()))?;
        Ok((built, config.mode))
    }

    async fn orchestrator(&self) -> anyhow::Result<(Arc<Orchestrator>, Arc<Approvals>)> {
        let function = Function::Orchestrator;
        let FunctionConfig::Orchestrator(config) = self.config(function)? else {
            anyhow::bail!("the orchestrator's config is not an orchestrator's")
        };
        let key = config.approval_key.as_ref().context("the orchestrator is given no approval key")?;
        let key = ApprovalKey::new(self.secrets.resolve(key)?.expose_secret()).map_err(anyhow::Error::msg)?;
        let clients = self.clients(function)?;
        let approvals = orchestrator::wiring::approvals(
            self.store(function, &clients),
            self.queues(&clients, &config.queues)?,
            key,
            self.timings,
        );
        let ports = OrchestratorPorts {
            store: self.store(function, &clients),
            access: clients.access.clone(),
            queues: self.queues(&clients, &config.queues)?,
            model: self.models.main.clone(),
            tools: self.tools(function, &config.gateway).await?,
        };
        let orchestrator = orchestrator::wiring::orchestrator(&config, ports, self.timings);
        Ok((Arc::new(orchestrator), Arc::new(approvals)))
    }

    fn aggregator(&self) -> anyhow::Result<Arc<Aggregator>> {
        let FunctionConfig::Aggregator(_) = self.config(Function::Aggregator)? else {
            anyhow::bail!("the aggregator's config is not an aggregator's")
        };
        let clients = self.clients(Function::Aggregator)?;
        let ports =
            AggregatorPorts { store: self.store(Function::Aggregator, &clients), model: self.models.main.clone() };
        Ok(Arc::new(aggregator::wiring::aggregator(ports, self.timings)))
    }
}

/// Opens `role`'s gateway session (and the gateway's to the demo shop) before the first request:
/// a request's budget — scaled or not — is then spent on the request, not on this process's
/// connection set-up. A failure is only logged: the first request meets it again and handles it.
async fn warm_up(tools: &dyn ToolGateway, role: &str) {
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
