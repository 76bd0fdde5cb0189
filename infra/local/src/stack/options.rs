//! The settings of a local stack: the backend, the (scaled) timing table, the models, the faults, and the wrappers a test puts around one function's ports.

use std::collections::BTreeMap;
use std::sync::Arc;

use swarm_core::access::CustomerLimits;
use swarm_core::faults::FaultPlan;
use swarm_core::llm::Models;
use swarm_core::ports::{ConversationStore, ToolGateway};
use swarm_core::timings::Timings;

use crate::platform::chaos::Chaos;
use crate::platform::emulator::EmulatorOptions;
use crate::wiring::Function;

/// Wraps a port adapter (fault injection, latency) before a function gets it.
pub type WrapTools = Arc<dyn Fn(Arc<dyn ToolGateway>) -> Arc<dyn ToolGateway> + Send + Sync>;
pub type WrapStore = Arc<dyn Fn(Arc<dyn ConversationStore>) -> Arc<dyn ConversationStore> + Send + Sync>;

/// Where the swarm's data lives.
#[derive(Clone, Debug, Default)]
pub enum BackendChoice {
    /// In memory, in this process.
    #[default]
    Embedded,
    /// DynamoDB and SQS on an AWS emulator (moto).
    Emulator(EmulatorOptions),
}

/// The wrappers of each function's ports: its store (every function) and its gateway client (the
/// functions that call tools: [`Function::TOOL_CALLERS`]). A function without one gets its port as it is.
#[derive(Clone, Default)]
pub struct Wraps {
    store: BTreeMap<Function, WrapStore>,
    tools: BTreeMap<Function, WrapTools>,
}

impl Wraps {
    /// Wraps the store of each of `functions` with `wrap` (one call per function: each gets its own wrapper).
    pub fn store(mut self, functions: &[Function], wrap: WrapStore) -> Self {
        self.store.extend(functions.iter().map(|f| (*f, wrap.clone())));
        self
    }

    /// Wraps the gateway client of each of `functions` with `wrap`.
    pub fn tools(mut self, functions: &[Function], wrap: WrapTools) -> Self {
        self.tools.extend(functions.iter().map(|f| (*f, wrap.clone())));
        self
    }

    /// `function`'s store, wrapped if a wrapper was given for it.
    pub fn wrap_store(&self, function: Function, store: Arc<dyn ConversationStore>) -> Arc<dyn ConversationStore> {
        match self.store.get(&function) {
            Some(wrap) => wrap(store),
            None => store,
        }
    }

    /// `function`'s gateway client, wrapped if a wrapper was given for it.
    pub fn wrap_tools(&self, function: Function, tools: Arc<dyn ToolGateway>) -> Arc<dyn ToolGateway> {
        match self.tools.get(&function) {
            Some(wrap) => wrap(tools),
            None => tools,
        }
    }

    /// The functions given a tools wrapper that call no tool (a wrapper that would never apply).
    pub fn tools_of_non_callers(&self) -> Vec<Function> {
        self.tools.keys().copied().filter(|f| !Function::TOOL_CALLERS.contains(f)).collect()
    }
}

/// What a stack started again on the same named emulator stack takes over from the one that died
/// ([`crate::LocalStack::carried`]): its secrets — the role tokens, the gateway's credential for the
/// shop and the approval key (on AWS they live in Secrets Manager, outside every function), so an
/// approval token signed before the restart is still accepted — and the demo shop with its ledger
/// (a tool server of its own, not part of the stack).
#[derive(Clone)]
pub struct Carried {
    pub tokens: tool_gateway::DemoTokens,
    pub shop: Arc<shop_tools::Shop>,
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
    /// Models to use instead of the ones named by `LLM_*` (tests). One set serves every function.
    pub models: Option<Models>,
    /// Wrappers of single functions' ports (fault injection in tests, latency in benchmarks).
    pub wraps: Wraps,
    /// A fault plan every invocation runs under (crash points; [`swarm_core::faults`]).
    pub faults: Option<Arc<dyn FaultPlan>>,
    /// A chaos run's faults ([`Chaos`]): crashes at every named point (the plan of every
    /// invocation unless `faults` is set), delivery and stream faults in the mappings and the
    /// trigger, and, when it asks for tool faults, a fault proxy between the gateway and the shop.
    pub chaos: Option<Arc<Chaos>>,
    /// Refunds above this amount (in cents of the order's currency) need an operator's approval;
    /// `None`: every refund does (the demo gateway's consent).
    pub refund_approval_above_cents: Option<i64>,
    /// Per-customer limits (conversations per minute, subtasks per conversation), counted in the
    /// store; given to the orchestrator as its `CUSTOMER_*` variables (1-100000 and 1-100).
    pub limits: CustomerLimits,
    /// The secrets and the shop of an earlier start on the same stack (`None`: fresh secrets, a new shop).
    pub carried: Option<Carried>,
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
            wraps: Wraps::default(),
            faults: None,
            chaos: None,
            refund_approval_above_cents: None,
            limits: CustomerLimits::DEFAULT,
            carried: None,
        }
    }
}
