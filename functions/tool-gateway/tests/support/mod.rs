//! Test support: a fake upstream MCP server with fault injection (hang, fail, forget sessions), and helpers to start a gateway in front of it.
#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
    transport::{
        StreamableHttpServerConfig, StreamableHttpService,
        streamable_http_server::session::{local::LocalSessionManager, never::NeverSessionManager},
    },
};
use secrecy::SecretString;
use serde_json::json;
use swarm_adapters::mcp::McpToolGateway;
use swarm_core::domain::ConversationId;
use swarm_core::ports::ToolContext;
use tool_gateway::config::{ConsentConfig, SideEffectConfig};
use tool_gateway::{Gateway, GatewayConfig, RoleConfig, UpstreamConfig};

/// One call the fake upstream received.
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    pub tool: String,
    pub arguments: JsonObject,
}

/// Shared, inspectable state of a fake upstream.
#[derive(Default)]
pub struct FakeState {
    pub calls: Mutex<Vec<Received>>,
    pub lists: AtomicUsize,
    /// `slow` hangs until cancelled while this is set.
    pub hang: AtomicBool,
    /// Every call fails with an internal error while set.
    pub fail: AtomicBool,
    pub cancellations: AtomicUsize,
    /// `tools/list` hangs (until cancelled) while this is set.
    pub hang_list: AtomicBool,
}

impl FakeState {
    pub fn calls_of(&self, tool: &str) -> Vec<Received> {
        self.calls.lock().unwrap().iter().filter(|c| c.tool == tool).cloned().collect()
    }
}

/// A small shop-like upstream: `get_order(customer_id, order_id)`,
/// `get_product(sku)`, `refund(customer_id, order_id, idempotency_key)`,
/// `slow()` (hangs while `hang` is set), plus any extra tool names.
#[derive(Clone)]
pub struct FakeUpstream {
    pub state: Arc<FakeState>,
    pub tools: Arc<Vec<Tool>>,
}

fn schema(v: serde_json::Value) -> Arc<JsonObject> {
    match v {
        serde_json::Value::Object(o) => Arc::new(o),
        _ => unreachable!("schemas are objects"),
    }
}

pub fn shop_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "get_order",
            "Look up one order",
            schema(json!({"type": "object",
                "properties": {"customer_id": {"type": "string"}, "order_id": {"type": "string"}},
                "required": ["customer_id", "order_id"]})),
        ),
        Tool::new(
            "get_product",
            "Look up a product",
            schema(json!({"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]})),
        ),
        Tool::new(
            "refund",
            "Refund an order",
            schema(json!({"type": "object",
                "properties": {"customer_id": {"type": "string"}, "order_id": {"type": "string"},
                               "idempotency_key": {"type": "string"}},
                "required": ["customer_id", "order_id", "idempotency_key"]})),
        ),
        Tool::new("slow", "Hangs while told to", schema(json!({"type": "object", "properties": {}}))),
    ]
}

/// [`shop_tools`] whose `refund` also takes the consent limit (what a tool with consent must take).
pub fn consent_shop_tools() -> Vec<Tool> {
    let mut tools = shop_tools();
    for tool in tools.iter_mut().filter(|t| t.name == "refund") {
        let mut schema = (*tool.input_schema).clone();
        if let Some(serde_json::Value::Object(properties)) = schema.get_mut("properties") {
            properties.insert("consent_limit_cents".into(), json!({"type": "integer"}));
        }
        tool.input_schema = Arc::new(schema);
    }
    tools
}

impl FakeUpstream {
    pub fn new(tools: Vec<Tool>) -> Self {
        Self { state: Arc::default(), tools: Arc::new(tools) }
    }
}

impl ServerHandler for FakeUpstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("fake-upstream", "0.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.state.lists.fetch_add(1, Ordering::SeqCst);
        while self.state.hang_list.load(Ordering::SeqCst) {
            tokio::select! {
                _ = context.ct.cancelled() => return Err(ErrorData::internal_error("cancelled", None)),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        Ok(ListToolsResult::with_all_items((*self.tools).clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        self.state
            .calls
            .lock()
            .unwrap()
            .push(Received { tool: request.name.to_string(), arguments: arguments.clone() });
        if self.state.fail.load(Ordering::SeqCst) {
            return Err(ErrorData::internal_error("injected failure", None));
        }
        // The consent contract, per call (no ledger here): past the limit nothing happens.
        let limit = arguments.get("consent_limit_cents").and_then(serde_json::Value::as_i64);
        let amount = arguments.get("amount").and_then(serde_json::Value::as_f64).map(|a| (a * 100.0).round() as i64);
        if let (Some(limit), Some(amount)) = (limit, amount)
            && amount > limit
        {
            return Err(ErrorData::new(rmcp::model::ErrorCode(-32012), "needs a person's approval", None));
        }
        if request.name == "slow" && self.state.hang.load(Ordering::SeqCst) {
            tokio::select! {
                _ = context.ct.cancelled() => {
                    self.state.cancellations.fetch_add(1, Ordering::SeqCst);
                    return Err(ErrorData::internal_error("cancelled", None));
                }
                _ = tokio::time::sleep(Duration::from_secs(60)) => {}
            }
        }
        let text = json!({"tool": request.name, "arguments": arguments}).to_string();
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![ContentBlock::text(text)])))
    }
}

/// A running fake upstream.
pub struct RunningUpstream {
    pub url: String,
    pub addr: SocketAddr,
    pub fake: FakeUpstream,
    /// Set for stateful servers: clearing its sessions makes the server forget them.
    pub sessions: Option<Arc<LocalSessionManager>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl RunningUpstream {
    pub async fn forget_sessions(&self) {
        if let Some(m) = &self.sessions {
            m.sessions.write().await.clear();
        }
    }
}

/// Starts `fake` on a free port; `stateful` keeps MCP sessions (legacy mode).
pub async fn start_upstream(fake: FakeUpstream, stateful: bool) -> RunningUpstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    start_upstream_on(fake, stateful, listener, addr)
}

pub fn start_upstream_on(
    fake: FakeUpstream,
    stateful: bool,
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
) -> RunningUpstream {
    let config = StreamableHttpServerConfig::default()
        .with_sse_keep_alive(None)
        .with_legacy_session_mode(stateful)
        .with_json_response(!stateful);
    let factory_fake = fake.clone();
    let (router, sessions) = if stateful {
        let sessions = Arc::new(LocalSessionManager::default());
        let service = StreamableHttpService::new(move || Ok(factory_fake.clone()), sessions.clone(), config);
        (axum::Router::new().route_service("/mcp", service), Some(sessions))
    } else {
        let service = StreamableHttpService::new(
            move || Ok(factory_fake.clone()),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        (axum::Router::new().route_service("/mcp", service), None)
    };
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    RunningUpstream { url: format!("http://{addr}/mcp"), addr, fake, sessions, task }
}

pub const SUPPORT_TOKEN: &str = "support-token-0123456789abcdef";
pub const REFUND_TOKEN: &str = "refund-token-0123456789abcdef";
pub const PLANNER_TOKEN: &str = "planner-token-0123456789abcdef";

/// Roles like the demo configuration's, for an upstream named `shop`.
pub fn roles() -> BTreeMap<String, RoleConfig> {
    let mut roles = BTreeMap::new();
    roles.insert(
        "support".into(),
        RoleConfig {
            token: SecretString::from(SUPPORT_TOKEN),
            tools: vec!["*".into()],
            deny: vec!["shop__refund".into()],
            call: true,
        },
    );
    roles.insert(
        "refund".into(),
        RoleConfig {
            token: SecretString::from(REFUND_TOKEN),
            tools: vec!["shop__refund".into(), "shop__get_order".into()],
            deny: vec![],
            call: true,
        },
    );
    roles.insert(
        "planner".into(),
        RoleConfig { token: SecretString::from(PLANNER_TOKEN), tools: vec!["*".into()], deny: vec![], call: false },
    );
    roles
}

/// A gateway config with the given upstreams and the test roles; `shop__refund` is declared
/// side-effecting (without consent: see [`with_consent`]).
pub fn config(upstreams: Vec<UpstreamConfig>) -> GatewayConfig {
    GatewayConfig {
        upstreams,
        roles: roles(),
        list_ttl_secs: 60.0,
        discovery_retry_secs: 0.05,
        global_rate_limit_per_sec: None,
        allowed_hosts: vec!["127.0.0.1".into(), "localhost".into()],
        anonymous_role: None,
        upstream_keep_alive: false,
        side_effects: BTreeMap::from([("shop__refund".to_owned(), SideEffectConfig::default())]),
        approval_key: None,
    }
}

/// The approval key of [`with_consent`].
pub const APPROVAL_KEY: &str = "test-approval-key-0123456789abcdef0123456789";

/// `config` with consent on `shop__refund` for refunds above `above_cents`.
pub fn with_consent(mut config: GatewayConfig, above_cents: i64) -> GatewayConfig {
    let consent = ConsentConfig { above_cents, ..ConsentConfig::every_call() };
    config.side_effects.insert("shop__refund".to_owned(), SideEffectConfig { consent: Some(consent) });
    config.approval_key = Some(SecretString::from(APPROVAL_KEY));
    config
}

/// An upstream entry with short timeouts for tests.
pub fn upstream(name: &str, url: &str) -> UpstreamConfig {
    let mut u = UpstreamConfig::new(name, url);
    u.call_timeout_secs = 0.5;
    u.discovery_timeout_secs = 0.5;
    u
}

/// A started gateway served on a free port, and its MCP URL.
pub async fn start_gateway(config: GatewayConfig) -> (Gateway, String) {
    let gateway = Gateway::start(config).await.unwrap();
    let (addr, _task) = tool_gateway::serve_gateway("127.0.0.1:0".parse().unwrap(), &gateway).await.unwrap();
    (gateway, format!("http://{addr}/mcp"))
}

/// The worker adapter with the test roles' tokens.
pub fn adapter(url: &str) -> McpToolGateway {
    let tokens: HashMap<String, String> = HashMap::from([
        ("support".to_owned(), SUPPORT_TOKEN.to_owned()),
        ("refund".to_owned(), REFUND_TOKEN.to_owned()),
        ("planner".to_owned(), PLANNER_TOKEN.to_owned()),
        ("intruder".to_owned(), "intruder-token-0123456789abcdef".to_owned()),
    ]);
    // Listings uncached, so every test listing reaches the gateway.
    McpToolGateway::new(url, tokens, Duration::from_secs(5)).unwrap().with_list_ttl(Duration::ZERO)
}

pub fn ctx(role: &str, customer: &str) -> ToolContext {
    ToolContext {
        role: role.into(),
        customer_id: customer.into(),
        conversation_id: ConversationId::from_trusted("conv-test"),
        subtask_id: "w01".into(),
    }
}

/// The JSON a fake upstream echoes (`{"tool", "arguments"}`).
pub fn echoed(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Waits (at most 5 s) until `check` holds.
pub async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
