//! The template's functions as the local stack wires them: each one's variables (template.yaml's names, with local values for its `!Ref`s), the queues it may send to and the role token it holds — one table the stack builds every function from, and that `swarm-local wiring --json` prints for `infra/aws/check_template.py` to hold against the template.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aggregator::AggregatorConfig;
use orchestrator::OrchestratorConfig;
use orchestrator::api::cors::DEFAULT_ALLOWED_ORIGINS;
use serde_json::{Value, json};
use swarm_adapters::config::{ConfigError, GatewayClientConfig, QueueUrls, SecretSource, SecretString};
use swarm_core::domain::TaskMessage;
use swarm_core::ports::{QueueError, TaskQueue};
use worker::WorkerConfig;

/// A function of `template.yaml` the local stack runs from its own config (its logical id).
/// The gateway, the demo shop and the streaming API are served by the stack directly ([`SERVERS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Function {
    Orchestrator,
    /// The tasks worker (`WORKER_MODE=tasks`, role `support`).
    Worker,
    RefundWorker,
    DlqConsumer,
    Sweeper,
    Aggregator,
}

/// The template's functions the stack does not build from an environment: it configures the gateway
/// (`tool_gateway::demo_config`) and the demo shop in process, and the streaming API is the
/// orchestrator's own router on `serve`'s port (its long-running routes cut at their own maximum,
/// `orchestrator::stream::LONG_RUNNING_ROUTES`), so they are not compared (the template lint holds the
/// streaming API's variables to the orchestrator's).
pub const SERVERS: [&str; 3] = ["ToolGateway", "ShopTools", "StreamingApi"];

impl Function {
    pub const ALL: [Function; 6] = [
        Function::Orchestrator,
        Function::Worker,
        Function::RefundWorker,
        Function::DlqConsumer,
        Function::Sweeper,
        Function::Aggregator,
    ];
    /// The four functions of the worker binary.
    pub const WORKERS: [Function; 4] =
        [Function::Worker, Function::RefundWorker, Function::DlqConsumer, Function::Sweeper];
    /// The functions that call tools through the gateway (each with its own role's token).
    pub const TOOL_CALLERS: [Function; 3] = [Function::Orchestrator, Function::Worker, Function::RefundWorker];

    /// Its logical id in `template.yaml`.
    pub fn name(self) -> &'static str {
        match self {
            Function::Orchestrator => "Orchestrator",
            Function::Worker => "Worker",
            Function::RefundWorker => "RefundWorker",
            Function::DlqConsumer => "DlqConsumer",
            Function::Sweeper => "Sweeper",
            Function::Aggregator => "Aggregator",
        }
    }

    /// The short name its invocations carry (the Lambda context's function ARN, the counters).
    pub fn label(self) -> &'static str {
        match self {
            Function::Orchestrator => "orchestrator",
            Function::Worker => "worker",
            Function::RefundWorker => "refund-worker",
            Function::DlqConsumer => "dlq-consumer",
            Function::Sweeper => "sweeper",
            Function::Aggregator => "aggregator",
        }
    }

    /// The variables `template.yaml` gives this function, each with where its local value comes from.
    pub fn env(self) -> &'static [(&'static str, Local)] {
        use Local::{GatewayUrl, Literal, Param, Queue, Secret, Table};
        const LLM: [(&str, Local); 4] = [
            ("LLM_BASE_URL", Param("LlmBaseUrl")),
            ("LLM_MODEL", Param("LlmModel")),
            ("LLM_AUTH", Param("LlmAuth")),
            ("LLM_API_KEY_SECRET_ARN", Secret(LocalSecret::LlmApiKey)),
        ];
        const BASE: [(&str, Local); 2] = [("TRACE_EXPORT", Param("TraceExport")), ("TABLE_NAME", Table)];
        const GATEWAY: [(&str, Local); 2] =
            [("GATEWAY_URL", GatewayUrl), ("GATEWAY_URL_AUTH", Param("GatewayUrlAuth"))];
        const ORCHESTRATOR: [(&str, Local); 22] = [
            BASE[0],
            BASE[1],
            ("DEADLINE_SECS", Param("DeadlineSecs")),
            ("CONVERSATION_IDLE_EXPIRY_SECS", Param("ConversationIdleExpirySecs")),
            LLM[0],
            LLM[1],
            LLM[2],
            LLM[3],
            ("AUTH_MODE", Param("AuthMode")),
            ("JWT_CUSTOMER_CLAIM", Param("JwtCustomerClaim")),
            ("JWT_CUSTOMER_MAPPING", Param("JwtCustomerMapping")),
            ("CUSTOMER_CONVERSATIONS_PER_MINUTE", Param("CustomerConversationsPerMinute")),
            ("CUSTOMER_MAX_SUBTASKS", Param("CustomerMaxSubtasks")),
            ("TASKS_QUEUE_URL", Queue(QueueRef::Tasks)),
            ("REFUND_QUEUE_URL", Queue(QueueRef::Refund)),
            GATEWAY[0],
            GATEWAY[1],
            ("GATEWAY_TOKEN_SECRET_ARN", Secret(LocalSecret::PlannerToken)),
            ("WORKER_ROLE", Literal("planner")),
            ("APPROVAL_KEY_SECRET_ARN", Secret(LocalSecret::ApprovalKey)),
            ("OPERATOR_PRINCIPALS", Param("OperatorPrincipalArns")),
            ("CORS_ALLOWED_ORIGINS", Param("CorsAllowOrigins")),
        ];
        const WORKER: [(&str, Local); 12] = [
            BASE[0],
            BASE[1],
            LLM[0],
            LLM[1],
            LLM[2],
            LLM[3],
            ("WORKER_MODE", Literal("tasks")),
            ("WORKER_ROLE", Literal("support")),
            ("TASKS_QUEUE_URL", Queue(QueueRef::Tasks)),
            GATEWAY[0],
            GATEWAY[1],
            ("GATEWAY_TOKEN_SECRET_ARN", Secret(LocalSecret::SupportToken)),
        ];
        const REFUND_WORKER: [(&str, Local); 13] = [
            BASE[0],
            BASE[1],
            LLM[0],
            LLM[1],
            LLM[2],
            LLM[3],
            ("WORKER_MODE", Literal("tasks")),
            ("WORKER_ROLE", Literal("refund")),
            ("TASKS_QUEUE_URL", Queue(QueueRef::Tasks)),
            ("REFUND_QUEUE_URL", Queue(QueueRef::Refund)),
            GATEWAY[0],
            GATEWAY[1],
            ("GATEWAY_TOKEN_SECRET_ARN", Secret(LocalSecret::RefundToken)),
        ];
        const DLQ_CONSUMER: [(&str, Local); 5] = [
            BASE[0],
            BASE[1],
            ("WORKER_MODE", Literal("dlq")),
            ("TASKS_QUEUE_URL", Queue(QueueRef::Tasks)),
            ("REFUND_QUEUE_URL", Queue(QueueRef::Refund)),
        ];
        const SWEEPER: [(&str, Local); 5] = [
            BASE[0],
            BASE[1],
            ("WORKER_MODE", Literal("sweep")),
            ("REFUND_QUEUE_URL", Queue(QueueRef::Refund)),
            ("APPROVAL_KEY_SECRET_ARN", Secret(LocalSecret::ApprovalKey)),
        ];
        const AGGREGATOR: [(&str, Local); 6] = [BASE[0], BASE[1], LLM[0], LLM[1], LLM[2], LLM[3]];
        match self {
            Function::Orchestrator => &ORCHESTRATOR,
            Function::Worker => &WORKER,
            Function::RefundWorker => &REFUND_WORKER,
            Function::DlqConsumer => &DLQ_CONSUMER,
            Function::Sweeper => &SWEEPER,
            Function::Aggregator => &AGGREGATOR,
        }
    }
}

/// Where a variable's local value comes from: what stands for the template's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// Written out in the template (`WORKER_MODE: tasks`).
    Literal(&'static str),
    /// `!Ref <Parameter>`: the local value of that parameter ([`LocalValues::params`]).
    Param(&'static str),
    /// `!Ref Table`: the run's table.
    Table,
    /// `!Ref TasksQueue` or `!Ref RefundQueue`: the run's queue URL.
    Queue(QueueRef),
    /// `!Sub ${ToolGatewayUrl.FunctionUrl}mcp`: the local gateway's MCP endpoint.
    GatewayUrl,
    /// `!Ref <Secret>`: the local stand-in of the secret's ARN ([`LocalSecrets`]).
    Secret(LocalSecret),
}

/// The queues a function may be given the URL of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueRef {
    Tasks,
    Refund,
}

impl QueueRef {
    /// The label `QueueUrls::task_queues` gives its sender (`tasks`, `refund`).
    pub fn label(self) -> &'static str {
        match self {
            QueueRef::Tasks => "tasks",
            QueueRef::Refund => "refund",
        }
    }

    /// Its logical id in `template.yaml`.
    pub fn name(self) -> &'static str {
        match self {
            QueueRef::Tasks => "TasksQueue",
            QueueRef::Refund => "RefundQueue",
        }
    }

    fn of_label(label: &str) -> Option<Self> {
        [QueueRef::Tasks, QueueRef::Refund].into_iter().find(|q| q.label() == label)
    }
}

/// The stack's secrets a function may be given the ARN of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LocalSecret {
    LlmApiKey,
    SupportToken,
    RefundToken,
    PlannerToken,
    ApprovalKey,
}

impl LocalSecret {
    pub const ALL: [LocalSecret; 5] = [
        LocalSecret::LlmApiKey,
        LocalSecret::SupportToken,
        LocalSecret::RefundToken,
        LocalSecret::PlannerToken,
        LocalSecret::ApprovalKey,
    ];

    /// Its logical id in `template.yaml`.
    pub fn name(self) -> &'static str {
        match self {
            LocalSecret::LlmApiKey => "LlmApiKeySecret",
            LocalSecret::SupportToken => "SupportTokenSecret",
            LocalSecret::RefundToken => "RefundTokenSecret",
            LocalSecret::PlannerToken => "PlannerTokenSecret",
            LocalSecret::ApprovalKey => "ApprovalKeySecret",
        }
    }

    /// The ARN a function's variable holds locally (no Secrets Manager: the stack resolves it itself).
    pub fn arn(self) -> String {
        format!("arn:aws:secretsmanager:local:000000000000:secret:{}", self.name())
    }

    /// The gateway role whose bearer token this secret holds, if it is a role token.
    pub fn role(self) -> Option<&'static str> {
        match self {
            LocalSecret::SupportToken => Some("support"),
            LocalSecret::RefundToken => Some("refund"),
            LocalSecret::PlannerToken => Some("planner"),
            LocalSecret::LlmApiKey | LocalSecret::ApprovalKey => None,
        }
    }
}

/// The local values of the run: the backend's table and queue URLs, the gateway's endpoint and the
/// template parameters' values (`DeadlineSecs` and `ConversationIdleExpirySecs` from the scaled
/// table, `AuthMode=none`, …).
#[derive(Clone, Debug)]
pub struct LocalValues {
    pub table: String,
    pub tasks_queue_url: String,
    pub refund_queue_url: String,
    pub gateway_url: String,
    /// Parameter name → its local value.
    pub params: BTreeMap<&'static str, String>,
}

impl LocalValues {
    /// The parameters every run gives the same value: as the template's defaults for a dev stack
    /// (authentication off, the gateway URL not signed, a bearer key for the LLM, the browser
    /// origins of `swarm-local serve`'s default), no span export from the functions' own config.
    pub fn fixed_params() -> BTreeMap<&'static str, String> {
        let mut params: BTreeMap<&'static str, String> = [
            ("TraceExport", "off"),
            ("AuthMode", "none"),
            ("JwtCustomerClaim", "sub"),
            ("JwtCustomerMapping", "table"),
            ("GatewayUrlAuth", "NONE"),
            // Locally operators hold the stack's operator token; nobody is an IAM operator.
            ("OperatorPrincipalArns", ""),
            ("LlmAuth", "bearer"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_owned()))
        .collect();
        // The template joins the CommaDelimitedList with commas (`!Join [",", !Ref CorsAllowOrigins]`).
        params.insert("CorsAllowOrigins", DEFAULT_ALLOWED_ORIGINS.join(","));
        params
    }

    /// Values of the right shape for parsing the configs without a running stack (`describe`).
    pub fn placeholder() -> Self {
        let mut params = Self::fixed_params();
        params.extend([
            ("DeadlineSecs", "120".to_owned()),
            ("ConversationIdleExpirySecs", "87300".to_owned()),
            ("LlmBaseUrl", LOCAL_MODELS_URL.to_owned()),
            ("LlmModel", "local".to_owned()),
            ("CustomerConversationsPerMinute", "20".to_owned()),
            ("CustomerMaxSubtasks", "100".to_owned()),
        ]);
        Self {
            table: "swarm-local".into(),
            tasks_queue_url: "http://127.0.0.1:1/000000000000/tasks".into(),
            refund_queue_url: "http://127.0.0.1:1/000000000000/refund".into(),
            gateway_url: "http://127.0.0.1:1/mcp".into(),
            params,
        }
    }

    /// The value `local` stands for here; `None` for a parameter without a local value.
    pub fn value(&self, local: Local) -> Option<String> {
        match local {
            Local::Literal(v) => Some(v.to_owned()),
            Local::Param(name) => self.params.get(name).cloned(),
            Local::Table => Some(self.table.clone()),
            Local::Queue(QueueRef::Tasks) => Some(self.tasks_queue_url.clone()),
            Local::Queue(QueueRef::Refund) => Some(self.refund_queue_url.clone()),
            Local::GatewayUrl => Some(self.gateway_url.clone()),
            // As the template's `!If [LlmSigV4, "", …]`: a signed request reads no key, so none is named.
            Local::Secret(LocalSecret::LlmApiKey) if self.llm_signed() => Some(String::new()),
            Local::Secret(secret) => Some(secret.arn()),
        }
    }

    /// `LlmAuth` is `sigv4` (the template's `LlmSigV4` condition).
    fn llm_signed(&self) -> bool {
        self.params.get("LlmAuth").is_some_and(|auth| auth.eq_ignore_ascii_case("sigv4"))
    }

    /// `function`'s environment: exactly its variables of [`Function::env`], nothing else.
    pub fn environment(&self, function: Function) -> HashMap<&'static str, String> {
        function.env().iter().filter_map(|(var, local)| self.value(*local).map(|v| (*var, v))).collect()
    }
}

/// The `LLM_BASE_URL` functions are given when the stack's model is not an HTTP endpoint (the offline
/// model, a test's, the chaos run's): the reserved `.invalid` name says no function contacts it —
/// the stack hands every function its models as a port.
pub const LOCAL_MODELS_URL: &str = "http://local-models.invalid/v1";

/// One function's parsed config.
pub enum FunctionConfig {
    Orchestrator(Box<OrchestratorConfig>),
    Worker(Box<WorkerConfig>),
    Aggregator(Box<AggregatorConfig>),
}

impl FunctionConfig {
    /// `function`'s config from `environment` (its variables only), parsed as on Lambda.
    pub fn parse(function: Function, environment: &HashMap<&'static str, String>) -> Result<Self, ConfigError> {
        let lookup = |k: &str| environment.get(k).cloned();
        Ok(match function {
            Function::Orchestrator => Self::Orchestrator(Box::new(OrchestratorConfig::from_lookup(lookup)?)),
            Function::Aggregator => Self::Aggregator(Box::new(AggregatorConfig::from_lookup(lookup)?)),
            _ => Self::Worker(Box::new(WorkerConfig::from_lookup(lookup)?)),
        })
    }

    /// The queue URLs it was given (none for the aggregator).
    pub fn queues(&self) -> Option<&QueueUrls> {
        match self {
            Self::Orchestrator(c) => Some(&c.queues),
            Self::Worker(c) => Some(&c.queues),
            Self::Aggregator(_) => None,
        }
    }

    /// Its gateway client settings (role and token), if it calls the gateway.
    pub fn gateway(&self) -> Option<&GatewayClientConfig> {
        match self {
            Self::Orchestrator(c) => Some(&c.gateway),
            Self::Worker(c) => c.gateway.as_ref(),
            Self::Aggregator(_) => None,
        }
    }
}

/// The queues a function given `urls` holds a sender for, by the template's names (the same
/// `QueueUrls::task_queues` the functions' ports are built with).
pub fn held_queues(urls: &QueueUrls) -> Vec<&'static str> {
    let queues = urls.task_queues(|_, label| Arc::new(RefusingQueue(label)) as Arc<dyn TaskQueue>);
    let mut held: Vec<&'static str> =
        queues.held().filter_map(|q| QueueRef::of_label(q.name())).map(QueueRef::name).collect();
    held.sort_unstable();
    held
}

/// A queue that only has a name (its label): every call fails, permanently. What [`held_queues`]
/// counts with, and what a sender the backend does not have would be (the stack checks first).
pub struct RefusingQueue(pub &'static str);

#[async_trait::async_trait]
impl TaskQueue for RefusingQueue {
    fn name(&self) -> &str {
        self.0
    }
    async fn send(&self, _: &[TaskMessage], _: u32) -> Result<(), QueueError> {
        Err(QueueError::Permanent(format!("no local queue {} to send to", self.0)))
    }
    async fn change_visibility(&self, _: &str, _: u32) -> Result<(), QueueError> {
        Err(QueueError::Permanent(format!("no local queue {}", self.0)))
    }
}

/// The secret a stored source names, among the stack's.
fn secret_of(source: &SecretSource) -> Option<LocalSecret> {
    match source {
        SecretSource::Stored { name, .. } => LocalSecret::ALL.into_iter().find(|s| s.arn() == *name),
        SecretSource::Plain { .. } => None,
    }
}

/// The local wiring as `infra/aws/check_template.py` reads it: per function its variable names, the
/// queues it holds a sender for and the role token it holds (role and secret), each taken from the
/// function's config parsed from its environment, as the stack builds it; and the tools each role of
/// the stack's gateway may use (`gateway_roles`).
///
/// Errors: a function's config does not parse from its variables.
pub fn describe() -> Result<Value, ConfigError> {
    let values = LocalValues::placeholder();
    let mut functions = serde_json::Map::new();
    for function in Function::ALL {
        let environment = values.environment(function);
        let config = FunctionConfig::parse(function, &environment)?;
        let mut env: Vec<&str> = function.env().iter().map(|(var, _)| *var).collect();
        env.sort_unstable();
        let sends = config.queues().map(held_queues).unwrap_or_default();
        let token = config.gateway().map(|g| {
            let secret = secret_of(&g.token);
            json!({ "role": g.role, "secret": secret.map(LocalSecret::name), "secret_role": secret.and_then(LocalSecret::role) })
        });
        functions.insert(function.name().to_owned(), json!({ "env": env, "sends": sends, "token": token }));
    }
    let gateway_roles: serde_json::Map<String, Value> = tool_gateway::DEMO_ROLE_TOOLS
        .iter()
        .map(|(role, tools)| ((*role).to_owned(), json!({ "tools": tools })))
        .collect();
    Ok(json!({ "functions": functions, "servers": SERVERS, "gateway_roles": gateway_roles }))
}

/// The stack's secrets by their local ARN ([`LocalSecret::arn`]): the role tokens and the approval
/// key of the run, and the LLM key of this process (`LLM_API_KEY`), when set.
#[derive(Default)]
pub struct LocalSecrets {
    values: HashMap<String, SecretString>,
}

impl LocalSecrets {
    pub fn insert(&mut self, secret: LocalSecret, value: impl Into<String>) {
        self.values.insert(secret.arn(), SecretString::from(value.into()));
    }

    /// The value `source` names: its own (a plain variable), or the stack's secret of that ARN.
    /// Error: an ARN that is not one of the stack's secrets.
    pub fn resolve(&self, source: &SecretSource) -> anyhow::Result<SecretString> {
        match source {
            SecretSource::Plain { value, .. } => Ok(value.clone()),
            SecretSource::Stored { arn_var, name } => self
                .values
                .get(name)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("{arn_var} names {name}, which is not a secret of the local stack")),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use swarm_adapters::config::ExposeSecret as _;

    use super::*;

    #[test]
    fn every_variable_has_a_local_value_and_every_config_parses_from_its_own() {
        let values = LocalValues::placeholder();
        for function in Function::ALL {
            for (var, local) in function.env() {
                assert!(values.value(*local).is_some(), "{}: {var} has no local value", function.name());
            }
            assert!(FunctionConfig::parse(function, &values.environment(function)).is_ok(), "{}", function.name());
        }
    }

    #[test]
    fn each_function_holds_only_the_queues_and_the_token_its_role_may_use() {
        let wiring = describe().unwrap();
        let f = |name: &str| wiring["functions"][name].clone();
        let sends = |name: &str| f(name)["sends"].clone();
        assert_eq!(sends("Orchestrator"), json!(["RefundQueue", "TasksQueue"]));
        assert_eq!(sends("Worker"), json!(["TasksQueue"]));
        assert_eq!(sends("RefundWorker"), json!(["RefundQueue", "TasksQueue"]));
        // Dead-lettered confirmations handed back to the side effects' queue.
        assert_eq!(sends("DlqConsumer"), json!(["RefundQueue", "TasksQueue"]));
        // Approved refunds not run past their token's window, re-enqueued with a fresh token.
        assert_eq!(sends("Sweeper"), json!(["RefundQueue"]));
        assert_eq!(sends("Aggregator"), json!([]));
        let token = |name: &str| (f(name)["token"]["role"].clone(), f(name)["token"]["secret_role"].clone());
        assert_eq!(token("Orchestrator"), (json!("planner"), json!("planner")));
        assert_eq!(token("Worker"), (json!("support"), json!("support")));
        assert_eq!(token("RefundWorker"), (json!("refund"), json!("refund")));
        for closer in ["DlqConsumer", "Sweeper", "Aggregator"] {
            assert_eq!(f(closer)["token"], Value::Null, "{closer} holds no gateway token");
            let env = f(closer)["env"].to_string();
            assert_eq!(env.contains("LLM_") || env.contains("GATEWAY_"), closer == "Aggregator", "{closer}: {env}");
        }
    }

    #[test]
    fn a_secret_of_another_stack_is_refused_naming_the_variable() {
        let mut secrets = LocalSecrets::default();
        secrets.insert(LocalSecret::SupportToken, "tok-support-0123456789");
        let ours =
            SecretSource::Stored { arn_var: "GATEWAY_TOKEN_SECRET_ARN".into(), name: LocalSecret::SupportToken.arn() };
        assert_eq!(secrets.resolve(&ours).unwrap().expose_secret(), "tok-support-0123456789");
        let other =
            SecretSource::Stored { arn_var: "GATEWAY_TOKEN_SECRET_ARN".into(), name: LocalSecret::RefundToken.arn() };
        let e = secrets.resolve(&other).unwrap_err().to_string();
        assert!(e.starts_with("GATEWAY_TOKEN_SECRET_ARN names arn:aws:secretsmanager:local"), "{e}");
    }
}
