//! The gateway core: authenticates the caller's role, serves the federated catalogue, and guards every `tools/call` (permissions, customer scoping, rate limits, breaker, timeout) before dispatch.

use std::{
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ErrorCode, Implementation, JsonObject,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
};
use secrecy::ExposeSecret;
use swarm_adapters::mcp::{
    APPROVAL_REQUIRED, HEADER_CONVERSATION_ID, HEADER_GATEWAY_TOKEN, HEADER_SUBTASK_ID, OUTCOME_UNKNOWN, RequestHeaders,
};
use swarm_core::approval::ApprovalKey;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    catalog::{Catalog, ExposedTool, RolePolicy, expose_tools, merge},
    config::{GatewayConfig, SideEffectConfig, UpstreamConfig},
    error::GatewayError,
    guard::{self, CallerHeaders, Forward, Refusal, error_result, refused_result},
    metrics::{CallLabels, Metrics, MetricsSnapshot, Outcome},
    protect::{Breaker, BreakerState, RateLimits},
    upstream::{UpstreamClient, UpstreamError, upstream_http_client},
};

/// JSON-RPC error code answered for a missing or unknown credential.
pub const UNAUTHORIZED: ErrorCode = ErrorCode(-32001);

/// Discovery state of one upstream.
#[derive(Debug, Default)]
struct Discovery {
    /// Tools of the last successful listing (kept while later attempts fail,
    /// so a flapping upstream is never silently missing).
    tools: Option<Vec<Arc<ExposedTool>>>,
    fetched_at: Option<Instant>,
    /// Set while the latest attempt failed.
    failed_at: Option<Instant>,
    last_error: Option<String>,
}

struct UpstreamSlot {
    config: UpstreamConfig,
    client: UpstreamClient,
    breaker: Mutex<Breaker>,
    discovery: Mutex<Discovery>,
    refreshing: tokio::sync::Mutex<()>,
    /// A background re-discovery of this (failing) upstream is running.
    retrying: std::sync::atomic::AtomicBool,
}

struct RoleEntry {
    token: Vec<u8>,
    policy: RolePolicy,
}

struct Inner {
    upstreams: Vec<UpstreamSlot>,
    roles: Vec<RoleEntry>,
    anonymous: Option<usize>,
    catalog: RwLock<Arc<Catalog>>,
    limits: RateLimits,
    metrics: Metrics,
    list_ttl: Duration,
    discovery_retry: Duration,
    allowed_hosts: Vec<String>,
    side_effects: std::collections::BTreeMap<String, SideEffectConfig>,
    approval_key: Option<ApprovalKey>,
}

/// Health of one upstream, as [`Gateway::upstream_status`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamStatus {
    pub name: String,
    /// Tools currently exposed from it.
    pub tools: usize,
    /// The error of the latest discovery attempt, while it is failing.
    pub last_error: Option<String>,
    pub breaker: BreakerState,
}

/// The MCP tool gateway. Cheap to clone (shared state).
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("upstreams", &self.inner.upstreams.iter().map(|u| &u.config.name).collect::<Vec<_>>())
            .field("roles", &self.inner.roles.iter().map(|r| &r.policy.name).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Gateway {
    /// Validates `config`, opens a client per upstream and discovers every
    /// upstream concurrently (each within its discovery timeout, one retry).
    /// An upstream that is down is reported (log + metric) and retried on
    /// later listings; it does not stop the start.
    /// Errors: [`GatewayError::Config`] for an invalid configuration,
    /// [`GatewayError::Collision`] when two upstreams expose the same name.
    pub async fn start(config: GatewayConfig) -> Result<Gateway, GatewayError> {
        Self::start_with_metrics(config, false).await
    }

    /// [`Gateway::start`]. Metrics go through the `metrics` facade to whichever recorder the
    /// binary installed (CloudWatch EMF on Lambda); `_emf` is kept for callers of the old
    /// EMF switch and changes nothing.
    pub async fn start_with_metrics(config: GatewayConfig, _emf: bool) -> Result<Gateway, GatewayError> {
        config.validate()?;
        let http = upstream_http_client(config.upstream_keep_alive)?;
        let mut upstreams = Vec::with_capacity(config.upstreams.len());
        for u in &config.upstreams {
            upstreams.push(UpstreamSlot {
                client: UpstreamClient::new(u, http.clone())?,
                breaker: Mutex::new(Breaker::new(&u.breaker, u.call_timeout() + Duration::from_secs(1))),
                discovery: Mutex::new(Discovery::default()),
                refreshing: tokio::sync::Mutex::new(()),
                retrying: std::sync::atomic::AtomicBool::new(false),
                config: u.clone(),
            });
        }
        let roles: Vec<RoleEntry> = config
            .roles
            .iter()
            .map(|(name, role)| RoleEntry {
                token: role.token.expose_secret().as_bytes().to_vec(),
                policy: RolePolicy::from_config(name, role),
            })
            .collect();
        let anonymous = config.anonymous_role.as_ref().and_then(|a| roles.iter().position(|r| &r.policy.name == a));
        let inner = Inner {
            limits: RateLimits::new(
                config.global_rate_limit_per_sec,
                config.upstreams.iter().map(|u| u.rate_limit_per_sec),
            ),
            upstreams,
            roles,
            anonymous,
            catalog: RwLock::new(Arc::new(Catalog::default())),
            metrics: Metrics::new(),
            list_ttl: Duration::from_secs_f64(config.list_ttl_secs),
            discovery_retry: Duration::from_secs_f64(config.discovery_retry_secs),
            allowed_hosts: config.allowed_hosts.clone(),
            side_effects: config.side_effects.clone(),
            approval_key: match &config.approval_key {
                Some(key) => Some(ApprovalKey::new(key.expose_secret()).map_err(GatewayError::Config)?),
                None => None,
            },
        };
        let gateway = Gateway { inner: Arc::new(inner) };
        let all: Vec<usize> = (0..gateway.inner.upstreams.len()).collect();
        futures::future::join_all(all.iter().map(|&i| gateway.refresh_upstream(i, true))).await;
        let collisions = gateway.rebuild_catalog();
        if !collisions.is_empty() {
            let text: Vec<String> = collisions.iter().map(ToString::to_string).collect();
            return Err(GatewayError::Collision(text.join("; ")));
        }
        for status in gateway.upstream_status() {
            match &status.last_error {
                None => tracing::info!(upstream = status.name, tools = status.tools, "upstream discovered"),
                Some(error) => tracing::warn!(
                    upstream = status.name,
                    error = error.as_str(),
                    "upstream down at start; its tools are listed once it answers"
                ),
            }
        }
        Ok(gateway)
    }

    /// The MCP endpoint as an axum router: `POST /mcp` (stateless Streamable
    /// HTTP, JSON responses, `Host` checked against `allowed_hosts`) and `GET /health`.
    pub fn router(&self) -> axum::Router {
        use rmcp::transport::{
            StreamableHttpServerConfig, StreamableHttpService,
            streamable_http_server::session::never::NeverSessionManager,
        };
        let mut server_config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None);
        server_config = if self.inner.allowed_hosts.iter().any(|h| h == "*") {
            server_config.disable_allowed_hosts()
        } else {
            server_config.with_allowed_hosts(self.inner.allowed_hosts.clone())
        };
        let gateway = self.clone();
        let service = StreamableHttpService::new(
            move || Ok(gateway.clone()),
            Arc::new(NeverSessionManager::default()),
            server_config,
        );
        axum::Router::new().route_service("/mcp", service).route("/health", axum::routing::get(|| async { "ok" }))
    }

    /// Every counter (calls, refusals, rate-limit hits, breaker transitions, discovery failures).
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// Discovery and breaker state of every upstream, in configuration order.
    pub fn upstream_status(&self) -> Vec<UpstreamStatus> {
        self.inner
            .upstreams
            .iter()
            .map(|slot| {
                let d = slot.discovery.lock().unwrap_or_else(|e| e.into_inner());
                let breaker = slot.breaker.lock().unwrap_or_else(|e| e.into_inner()).state();
                UpstreamStatus {
                    name: slot.config.name.clone(),
                    tools: d.tools.as_ref().map_or(0, Vec::len),
                    last_error: d.failed_at.and(d.last_error.clone()),
                    breaker,
                }
            })
            .collect()
    }

    fn catalog(&self) -> Arc<Catalog> {
        self.inner.catalog.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn needs_refresh(&self, index: usize, now: Instant) -> bool {
        let slot = &self.inner.upstreams[index];
        let d = slot.discovery.lock().unwrap_or_else(|e| e.into_inner());
        match (d.failed_at, d.fetched_at) {
            (Some(failed), _) => now.saturating_duration_since(failed) >= self.inner.discovery_retry,
            (None, Some(fetched)) => now.saturating_duration_since(fetched) >= self.inner.list_ttl,
            (None, None) => true,
        }
    }

    /// Lists one upstream (one retry) and stores the result. Returns whether
    /// its tools changed. `force` skips the freshness check.
    async fn refresh_upstream(&self, index: usize, force: bool) -> bool {
        let slot = &self.inner.upstreams[index];
        let _single_flight = slot.refreshing.lock().await;
        if !force && !self.needs_refresh(index, Instant::now()) {
            return false; // another caller refreshed it while this one waited
        }
        let timeout = slot.config.discovery_timeout();
        let mut result = slot.client.list_tools(timeout).await;
        if let Err(first) = &result
            && first.is_transient()
        {
            tracing::debug!(upstream = slot.config.name, error = %first, "discovery failed; retrying once");
            result = slot.client.list_tools(timeout).await;
        }
        let now = Instant::now();
        match result {
            Ok(tools) => {
                let (exposed, skipped) = expose_tools(index, &slot.config, &self.inner.side_effects, tools);
                for s in &skipped {
                    tracing::warn!(
                        upstream = slot.config.name,
                        tool = s.tool,
                        reason = s.reason,
                        "upstream tool not exposed"
                    );
                }
                let mut d = slot.discovery.lock().unwrap_or_else(|e| e.into_inner());
                let changed = d.tools.as_ref() != Some(&exposed);
                d.tools = Some(exposed);
                d.fetched_at = Some(now);
                d.failed_at = None;
                d.last_error = None;
                changed
            }
            Err(error) => {
                let text = error.to_string();
                self.inner.metrics.record_discovery_failure(&slot.config.name, &text);
                let mut d = slot.discovery.lock().unwrap_or_else(|e| e.into_inner());
                d.failed_at = Some(now);
                d.last_error = Some(text);
                false
            }
        }
    }

    /// Refreshes every upstream whose listing is stale, concurrently, before
    /// answering. An upstream whose last discovery failed is retried in the
    /// background instead (one attempt at a time), so a hanging upstream
    /// never slows every listing down; its tools appear as soon as it answers.
    async fn ensure_fresh(&self) {
        use std::sync::atomic::Ordering;
        let now = Instant::now();
        let mut blocking = Vec::new();
        for (i, slot) in self.inner.upstreams.iter().enumerate() {
            if !self.needs_refresh(i, now) {
                continue;
            }
            let failing = slot.discovery.lock().unwrap_or_else(|e| e.into_inner()).failed_at.is_some();
            if !failing {
                blocking.push(i);
            } else if slot.retrying.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                let gateway = self.clone();
                tokio::spawn(async move {
                    let changed = gateway.refresh_upstream(i, false).await;
                    gateway.inner.upstreams[i].retrying.store(false, Ordering::Release);
                    if changed {
                        gateway.rebuild_and_report();
                    }
                });
            }
        }
        if blocking.is_empty() {
            return;
        }
        let changed = futures::future::join_all(blocking.iter().map(|&i| self.refresh_upstream(i, false))).await;
        if changed.into_iter().any(|c| c) {
            self.rebuild_and_report();
        }
    }

    fn rebuild_and_report(&self) {
        for collision in self.rebuild_catalog() {
            tracing::error!(%collision, "tool name collision after a refresh; the later upstream's tool is not exposed");
        }
    }

    /// Merges the upstreams' tools into a new catalogue; returns the collisions.
    fn rebuild_catalog(&self) -> Vec<crate::catalog::Collision> {
        let lists: Vec<Vec<Arc<ExposedTool>>> = self
            .inner
            .upstreams
            .iter()
            .map(|slot| slot.discovery.lock().unwrap_or_else(|e| e.into_inner()).tools.clone().unwrap_or_default())
            .collect();
        let refs: Vec<&[Arc<ExposedTool>]> = lists.iter().map(Vec::as_slice).collect();
        let policies: Vec<RolePolicy> = self.inner.roles.iter().map(|r| r.policy.clone()).collect();
        let (catalog, collisions) = merge(&refs, &policies);
        *self.inner.catalog.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(catalog);
        collisions
    }

    /// The caller's role from `x-swarm-gateway-token: <token>` (when `Authorization` carries a
    /// SigV4 signature: the gateway behind an `AWS_IAM` function URL) or `Authorization: Bearer <token>`.
    fn authenticate(&self, parts: Option<&http::request::Parts>) -> Result<usize, ErrorData> {
        let headers = parts.map(|p| &p.headers);
        let own = headers.and_then(|h| h.get(HEADER_GATEWAY_TOKEN));
        let bearer = headers.and_then(|h| h.get(http::header::AUTHORIZATION));
        if own.is_none() && bearer.is_none() {
            return self.inner.anonymous.ok_or_else(|| {
                ErrorData::new(UNAUTHORIZED, "unauthorized: send Authorization: Bearer <role token>", None)
            });
        }
        let token = match own {
            Some(value) => value.to_str().ok().map(str::trim).unwrap_or_default(),
            None => bearer
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
                .map(str::trim)
                .unwrap_or_default(),
        };
        let mut found = None;
        for (i, role) in self.inner.roles.iter().enumerate() {
            if constant_time_eq(&role.token, token.as_bytes()) {
                found = Some(i);
            }
        }
        found.ok_or_else(|| {
            tracing::warn!("request with an unknown gateway token refused");
            ErrorData::new(UNAUTHORIZED, "unauthorized: unknown gateway token", None)
        })
    }

    /// The tools `role` may see (sorted by name).
    pub async fn list_for_role(&self, role: &str) -> Vec<rmcp::model::Tool> {
        self.ensure_fresh().await;
        self.catalog().listings.get(role).map(|l| (**l).clone()).unwrap_or_default()
    }

    /// Runs one `tools/call` for the caller with role index `role`: the guard
    /// chain, then dispatch. Always an answer the model can read; protocol
    /// errors only for an unknown tool name and for consent.
    async fn call(
        &self,
        role: usize,
        headers: Option<&http::HeaderMap>,
        request: CallToolRequestParams,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let policy = &self.inner.roles[role].policy;
        let name = request.name.as_ref();
        let headers = CallerHeaders(headers);
        let mut labels = CallLabels {
            tool: name,
            upstream: "-",
            role: &policy.name,
            conversation: headers.get(HEADER_CONVERSATION_ID).unwrap_or("-"),
            subtask: headers.get(HEADER_SUBTASK_ID).unwrap_or("-"),
            known_tool: self.catalog().tools.contains_key(name),
        };
        let arguments = request.arguments.unwrap_or_default();
        match self.guard(policy, name, &headers, arguments, &mut labels).await {
            Ok(admitted) => {
                let (outcome, answer) = self.dispatch(admitted, name, cancel).await;
                self.inner.metrics.record_call(&labels, outcome, started.elapsed());
                answer
            }
            Err(refusal) => {
                refusal.log(name, &policy.name);
                if let Some(outcome) = refusal.outcome() {
                    self.inner.metrics.record_call(&labels, outcome, started.elapsed());
                }
                refusal.answer()
            }
        }
    }

    /// The guard chain of one call, in order: permission, lookup, customer scoping, idempotency
    /// key, consent, rate limit, breaker. Sets the labels' upstream once the tool is known.
    async fn guard<'a>(
        &'a self,
        policy: &RolePolicy,
        name: &str,
        headers: &CallerHeaders<'_>,
        mut arguments: JsonObject,
        labels: &mut CallLabels<'a>,
    ) -> Result<Admitted<'a>, Refusal> {
        guard::permission(policy, name)?;
        let tool = self.lookup(name).await?;
        let slot = &self.inner.upstreams[tool.upstream];
        labels.upstream = &slot.config.name;
        let mut forward = Forward::identity(headers);
        let config = &slot.config;
        guard::customer_scope(&tool, &config.customer_scoped_arg, headers, &mut arguments, &mut forward, &policy.name)?;
        guard::idempotency(&tool, &config.idempotency_arg, headers, &mut arguments, &mut forward)?;
        let mut asks_for = None;
        if let Some(consent) = tool.consent.as_ref().filter(|_| tool.side_effecting) {
            let granted = guard::consent(name, consent, self.inner.approval_key.as_ref(), &arguments, headers)?;
            asks_for = granted.apply(&consent.limit_arg, &mut arguments, &mut forward);
        }
        guard::rate_limit(&self.inner.limits, &tool)?;
        guard::breaker(&slot.breaker, &config.name, name, &self.inner.metrics)?;
        Ok(Admitted { slot, tool, arguments, headers: forward.into_headers(), asks_for })
    }

    /// The tool `name` from the catalogue, refreshed once when it is not there.
    async fn lookup(&self, name: &str) -> Result<Arc<ExposedTool>, Refusal> {
        if let Some(tool) = self.catalog().tools.get(name).cloned() {
            return Ok(tool);
        }
        self.ensure_fresh().await;
        self.catalog().tools.get(name).cloned().ok_or_else(|| Refusal::UnknownTool(name.to_owned()))
    }

    /// Sends an admitted call upstream within the upstream's call timeout, records the answer in
    /// its breaker, and maps it to the caller's answer.
    async fn dispatch(
        &self,
        call: Admitted<'_>,
        name: &str,
        cancel: &CancellationToken,
    ) -> (Outcome, Result<CallToolResult, ErrorData>) {
        let Admitted { slot, tool, arguments, headers, asks_for } = call;
        let upstream = slot.config.name.as_str();
        let upstream_span = tracing::info_span!(
            "upstream_call",
            otel.name = %format_args!("tools/call {}", tool.original),
            otel.kind = "client",
            mcp.method.name = "tools/call",
            gen_ai.tool.name = %tool.original,
            server.address = upstream,
        );
        let result = slot
            .client
            .call_tool(&tool.original, arguments, headers, slot.config.call_timeout(), !tool.side_effecting, cancel)
            .instrument(upstream_span)
            .await;
        let transition = {
            let mut breaker = slot.breaker.lock().unwrap_or_else(|e| e.into_inner());
            match &result {
                Err(e) if e.counts_against_upstream() => breaker.record_failure(Instant::now()),
                Ok(_) | Err(UpstreamError::Protocol(_)) => breaker.record_success(),
                Err(_) => None,
            }
        };
        if let Some(state) = transition {
            self.inner.metrics.record_breaker(upstream, state);
        }
        if let (Err(UpstreamError::Protocol(e)), Some(refusal)) = (&result, asks_for)
            && e.code.0 == APPROVAL_REQUIRED
        {
            // The upstream held the consent limit against the order's refunds so far.
            tracing::info!(
                tool = name,
                upstream,
                code = APPROVAL_REQUIRED,
                "side effect needs approval: the order's consent limit"
            );
            return (Outcome::Refused, refusal.answer());
        }
        answer_of(result, tool.side_effecting, name, upstream)
    }
}

/// A call every guard admitted: where it goes, what it carries.
struct Admitted<'a> {
    slot: &'a UpstreamSlot,
    tool: Arc<ExposedTool>,
    arguments: JsonObject,
    headers: RequestHeaders,
    /// The refusal to answer should the upstream find the order's consent limit reached.
    asks_for: Option<Refusal>,
}

/// The caller's answer to what the upstream did, and how the call is counted.
fn answer_of(
    result: Result<CallToolResult, UpstreamError>,
    side_effecting: bool,
    name: &str,
    upstream: &str,
) -> (Outcome, Result<CallToolResult, ErrorData>) {
    match result {
        Ok(r) if r.is_error == Some(true) => (Outcome::ToolError, Ok(r)),
        Ok(r) => (Outcome::Ok, Ok(r)),
        // Dispatched and never answered: it may have happened. Typed, so the caller replays it
        // with the same key instead of reading "unavailable" as "not done". (A lost session is
        // an answer: the upstream refused the call unseen.)
        Err(e @ (UpstreamError::Timeout(_) | UpstreamError::Unavailable(_))) if side_effecting => (
            if matches!(e, UpstreamError::Timeout(_)) { Outcome::Timeout } else { Outcome::UpstreamError },
            Err(ErrorData::new(
                rmcp::model::ErrorCode(OUTCOME_UNKNOWN),
                format!("tool {name} was dispatched and did not answer ({e}); its outcome is not known"),
                None,
            )),
        ),
        Err(UpstreamError::Timeout(t)) => (
            Outcome::Timeout,
            Ok(error_result(&format!("tool {name} did not answer within {:.1}s and was cancelled", t.as_secs_f64()))),
        ),
        Err(UpstreamError::Protocol(e)) => {
            (Outcome::ToolError, Ok(error_result(&format!("tool {name} failed: {}", e.message))))
        }
        Err(UpstreamError::Cancelled) => {
            (Outcome::UpstreamError, Err(ErrorData::internal_error("request cancelled", None)))
        }
        // A lost session: the upstream refused the call unseen, so it is marked refused (never a
        // side effect's outcome). Otherwise a read-only call that may have been seen: an error result.
        Err(e) => {
            let text = format!("upstream {upstream} is unavailable ({e}); try {name} again later");
            let unseen = matches!(e, UpstreamError::SessionExpired);
            (Outcome::UpstreamError, Ok(if unseen { refused_result(&text) } else { error_result(&text) }))
        }
    }
}

fn request_parts(context: &RequestContext<RoleServer>) -> Option<&http::request::Parts> {
    context.extensions.get::<http::request::Parts>()
}

/// The span of one MCP request to the gateway: `{method} {tool}`, kind server, a child of the
/// caller's `traceparent` header. Records the method, the tool (when the catalogue holds it)
/// and the caller's role — never arguments.
fn server_span(method: &'static str, tool: Option<&str>, parts: Option<&http::request::Parts>) -> tracing::Span {
    let span = tracing::info_span!(
        "mcp_request",
        otel.name = %format_args!("{method}{}{}", if tool.is_some() { " " } else { "" }, tool.unwrap_or("")),
        otel.kind = "server",
        mcp.method.name = method,
        gen_ai.tool.name = tracing::field::Empty,
        swarm.role = tracing::field::Empty,
    );
    if let Some(tool) = tool {
        span.record("gen_ai.tool.name", tool);
    }
    if let Some(parts) = parts {
        swarm_adapters::telemetry::propagation::set_parent_from_headers(&span, &parts.headers);
    }
    span
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("lambda-swarm-tool-gateway", env!("CARGO_PKG_VERSION")))
            .with_instructions("Federated MCP tool gateway: tools are listed and callable per worker role.")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let span = server_span("tools/list", None, request_parts(&context));
        async {
            let role = self.authenticate(request_parts(&context))?;
            let name = self.inner.roles[role].policy.name.clone();
            tracing::Span::current().record("swarm.role", name.as_str());
            Ok(ListToolsResult::with_all_items(self.list_for_role(&name).await))
        }
        .instrument(span)
        .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parts = request_parts(&context);
        // A name the catalogue does not hold is the caller's text: not recorded.
        let tool = self.catalog().tools.contains_key(request.name.as_ref()).then(|| request.name.to_string());
        let span = server_span("tools/call", tool.as_deref(), parts);
        async {
            let role = self.authenticate(parts)?;
            tracing::Span::current().record("swarm.role", self.inner.roles[role].policy.name.as_str());
            self.call(role, parts.map(|p| &p.headers), request, &context.ct).await.map(CallToolResponse::Complete)
        }
        .instrument(span)
        .await
    }
}
