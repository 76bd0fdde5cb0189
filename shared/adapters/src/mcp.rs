//! `McpToolGateway`: the worker's [`ToolGateway`] over MCP Streamable HTTP (rmcp client) to the tool gateway; [`McpHttpClient`], the HTTP client under it (per-request headers, SigV4 with feature `sigv4`), shared with the gateway's own upstream client.
//!
//! One rmcp client session per worker role (the role decides the bearer
//! token, fixed per session); everything that changes per call — customer,
//! conversation, subtask, idempotency key — travels as HTTP headers attached
//! to the single JSON-RPC request through rmcp's request extensions, so 100
//! concurrent subtasks share one session and one connection pool.

use std::{
    borrow::Cow,
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use http::{HeaderName, HeaderValue};
use rmcp::{
    ServiceError, ServiceExt,
    model::{
        CallToolRequest, CallToolRequestParams, ClientConfig, ClientRequest, GetExtensions, Implementation,
        ListToolsRequest, ListToolsResult, PaginatedRequestParams, ServerResult,
    },
    service::{PeerRequestOptions, RoleClient, RunningService},
    transport::{StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig},
};
use secrecy::{ExposeSecret, SecretString};

use swarm_core::ports::{ToolContext, ToolError, ToolGateway, ToolOutput, ToolSpec};

mod pages;
#[cfg(feature = "sigv4")]
pub mod sigv4;
mod transport;

pub use pages::{MAX_LIST_PAGES, TooManyPages, list_all_pages};
pub use transport::{McpHttpClient, RequestHeaders};

/// Header carrying the customer the call acts for; the gateway writes it into
/// the `customer_id` argument of customer-scoped tools.
pub const HEADER_CUSTOMER_ID: &str = "x-swarm-customer-id";
/// Header carrying the conversation id (logs and tracing only).
pub const HEADER_CONVERSATION_ID: &str = "x-swarm-conversation-id";
/// Header carrying the subtask id (logs and tracing only).
pub const HEADER_SUBTASK_ID: &str = "x-swarm-subtask-id";
/// Header carrying the idempotency key of a side-effecting call; the gateway
/// writes it into the tool's `idempotency_key` argument.
pub const HEADER_IDEMPOTENCY_KEY: &str = "x-swarm-idempotency-key";
/// Header carrying the role's gateway token when `Authorization` holds a SigV4 signature (the
/// gateway behind an `AWS_IAM` function URL); otherwise the token is `Authorization: Bearer`.
pub const HEADER_GATEWAY_TOKEN: &str = "x-swarm-gateway-token";
/// Top-level argument the worker core uses to hand the adapter an idempotency
/// key; stripped from the arguments and sent as [`HEADER_IDEMPOTENCY_KEY`].
pub const IDEMPOTENCY_ARGUMENT: &str = "_idempotency_key";
/// Header carrying the approval token of an approved side effect; the gateway verifies it
/// before dispatch and never passes it upstream.
pub const HEADER_APPROVAL: &str = "x-swarm-approval";
/// Top-level argument the worker core uses to hand the adapter an approval token; stripped
/// from the arguments and sent as [`HEADER_APPROVAL`].
pub const APPROVAL_ARGUMENT: &str = "_approval";
/// `_meta` key of a listed tool the gateway's configuration declares side-effecting (value `true`).
pub const SIDE_EFFECTING_META: &str = "lambda-swarm/side_effecting";
/// `_meta` key of a `tools/call` result the gateway answered itself, refusing the call before
/// dispatch (value `true`): the tool never saw the call ([`swarm_core::ports::ToolOutput::refused`]).
pub const REFUSED_META: &str = "lambda-swarm/refused_before_dispatch";
/// JSON-RPC error code of a consent-gated call refused before dispatch until a person approves
/// it; `data` is the [`swarm_core::approval::ProposedAction`] the gateway validated, without its
/// reason (model text quoting the customer, which an error's data must not carry: it reaches
/// logs) and with [`APPROVAL_REASON_FROM`] naming the call's argument that holds it.
pub const APPROVAL_REQUIRED: i32 = -32012;
/// The field of an [`APPROVAL_REQUIRED`] error's `data` naming the argument of the call that
/// holds the reason; the client reads the reason from the arguments it sent.
pub const APPROVAL_REASON_FROM: &str = "reason_from";
/// JSON-RPC error code of a call whose approval token the gateway refused (expired, or not for this call).
pub const APPROVAL_REFUSED: i32 = -32013;
/// JSON-RPC error code of a side-effecting call dispatched upstream whose answer never came
/// (timeout, upstream unreachable): it may or may not have happened. The caller replays it with
/// the same idempotency key to learn which.
pub const OUTCOME_UNKNOWN: i32 = -32014;

/// Default time one role's `tools/list` answer is reused by the adapter
/// ([`McpToolGateway::with_list_ttl`]): 100 subtasks starting together list once.
pub const DEFAULT_LIST_TTL: Duration = Duration::from_secs(5);

/// Concurrent requests one role session keeps in flight (rmcp's default is 16;
/// the local stack runs 100 subtasks of one role at once).
const MAX_CONCURRENT_REQUESTS: usize = 256;

type Session = RunningService<RoleClient, ClientConfig>;
/// A role's listing and when it was fetched.
type Listing = (tokio::time::Instant, Arc<Vec<ToolSpec>>);

/// The worker's MCP client for the tool gateway.
///
/// - One rmcp session per role, opened on first use and re-opened when its
///   transport closes; the HTTP client is built once and shared by all roles.
/// - Headers on every request: `Authorization: Bearer <token of ctx.role>`,
///   `x-swarm-customer-id`, `x-swarm-conversation-id`, `x-swarm-subtask-id`.
/// - **Idempotency key:** the worker core puts a top-level
///   `"_idempotency_key": "<key>"` string into a call's `arguments`; this
///   adapter removes it and sends it as the `x-swarm-idempotency-key` header,
///   which the gateway writes into the tool's own idempotency argument (the
///   model never sees or writes that argument).
/// - Errors: a call that does not answer within its timeout is
///   [`ToolError::Timeout`] (an MCP `notifications/cancelled` is sent and the
///   HTTP request dropped); transport failures and 5xx/429 are
///   [`ToolError::Unavailable`]; a role this client holds no credential for is
///   [`ToolError::Local`] (nothing sent); a refused credential, an MCP protocol
///   error or bad arguments are [`ToolError::Permanent`]. Refusals of a permitted
///   credential (tool not allowed for the role, rate limit, open breaker) arrive
///   as `ToolOutput { is_error: true, refused: true }` (the gateway marks them
///   with [`REFUSED_META`]).
/// - `tools/list` answers are reused per role for [`DEFAULT_LIST_TTL`]
///   (change with [`McpToolGateway::with_list_ttl`]; zero turns it off); a
///   burst of first listings makes one request. Errors are never cached.
pub struct McpToolGateway {
    url: Arc<str>,
    http: McpHttpClient,
    tokens: HashMap<String, SecretString>,
    /// Deadline for opening a session and for `tools/list`.
    call_timeout: Duration,
    /// role → open session; bounded by the number of configured roles.
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Serialises session opening so a burst of first calls opens one session per role.
    connecting: tokio::sync::Mutex<()>,
    list_ttl: Duration,
    /// role → (fetched at, sorted listing).
    listings: Mutex<HashMap<String, Listing>>,
    /// Serialises listing fetches so a burst of first listings makes one request.
    listing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for McpToolGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut roles: Vec<&String> = self.tokens.keys().collect();
        roles.sort();
        f.debug_struct("McpToolGateway")
            .field("url", &self.url)
            .field("roles", &roles)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl McpToolGateway {
    /// `url`: the gateway's MCP endpoint (e.g. `http://127.0.0.1:8790/mcp`).
    /// `role_tokens`: worker role → bearer token. `call_timeout`: deadline for
    /// session set-up and `tools/list` (`tools/call` takes its own timeout).
    ///
    /// Errors: [`ToolError::Permanent`] for a URL that is not http(s), an empty
    /// token or one that cannot be an HTTP header value, or a zero timeout.
    /// Nothing is contacted here; sessions open on first use.
    pub fn new<T: Into<SecretString>>(
        url: &str,
        role_tokens: HashMap<String, T>,
        call_timeout: Duration,
    ) -> Result<Self, ToolError> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| ToolError::Permanent(format!("gateway URL {url:?} is invalid: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ToolError::Permanent(format!("gateway URL {url:?} must be http or https")));
        }
        if call_timeout.is_zero() {
            return Err(ToolError::Permanent("gateway call timeout must be positive".into()));
        }
        let mut tokens = HashMap::with_capacity(role_tokens.len());
        for (role, token) in role_tokens {
            let token: SecretString = token.into();
            let value = token.expose_secret();
            if value.is_empty() || HeaderValue::from_str(&format!("Bearer {value}")).is_err() {
                return Err(ToolError::Permanent(format!(
                    "gateway token for role {role:?} is empty or not a valid header value"
                )));
            }
            tokens.insert(role, token);
        }
        let inner = reqwest::Client::builder()
            .connect_timeout(call_timeout)
            .build()
            .map_err(|e| ToolError::Permanent(format!("cannot build HTTP client: {e}")))?;
        Ok(Self {
            url: Arc::from(url),
            http: McpHttpClient::new(inner),
            tokens,
            call_timeout,
            sessions: Mutex::new(HashMap::new()),
            connecting: tokio::sync::Mutex::new(()),
            list_ttl: DEFAULT_LIST_TTL,
            listings: Mutex::new(HashMap::new()),
            listing: tokio::sync::Mutex::new(()),
        })
    }

    /// Signs every request with SigV4 (the gateway behind an `AWS_IAM` function URL).
    #[cfg(feature = "sigv4")]
    pub fn signed(mut self, signer: sigv4::SigV4Signer) -> Self {
        self.http = self.http.signed(signer);
        self
    }

    /// How long one role's `tools/list` answer is reused; `Duration::ZERO` asks the gateway every time.
    pub fn with_list_ttl(mut self, ttl: Duration) -> Self {
        self.list_ttl = ttl;
        self
    }

    fn cached_listing(&self, role: &str) -> Option<Arc<Vec<ToolSpec>>> {
        if self.list_ttl.is_zero() {
            return None;
        }
        let listings = self.listings.lock().unwrap_or_else(|e| e.into_inner());
        listings.get(role).filter(|(at, _)| at.elapsed() < self.list_ttl).map(|(_, tools)| tools.clone())
    }

    /// Asks the gateway for every page of the role's tools, sorted by name.
    async fn fetch_listing(&self, ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        let tools = list_all_pages(|cursor| self.list_page(ctx, cursor)).await?;
        let mut specs: Vec<ToolSpec> = tools
            .into_iter()
            .map(|tool| ToolSpec {
                side_effecting: tool
                    .meta
                    .as_ref()
                    .and_then(|m| m.0.get(SIDE_EFFECTING_META))
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false),
                name: tool.name.into_owned(),
                description: tool.description.map(Cow::into_owned).unwrap_or_default(),
                input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
            })
            .collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(specs)
    }

    /// One page of the role's `tools/list`, from `cursor` (`None`: the first).
    async fn list_page(&self, ctx: &ToolContext, cursor: Option<String>) -> Result<ListToolsResult, ToolError> {
        let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let request = ClientRequest::ListToolsRequest(ListToolsRequest {
            method: Default::default(),
            params,
            extensions: Default::default(),
        });
        match self.request(ctx, request, Vec::new(), self.call_timeout, None).await? {
            ServerResult::ListToolsResult(page) => Ok(page),
            _ => Err(ToolError::Permanent("tools/list answered with another result type".into())),
        }
    }

    fn cached_session(&self, role: &str) -> Option<Arc<Session>> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.get(role).filter(|s| !s.is_closed() && !s.peer().is_transport_closed()).cloned()
    }

    /// The open session of `role`, opening one (MCP `initialize`) if needed.
    async fn session(&self, role: &str) -> Result<Arc<Session>, ToolError> {
        if let Some(session) = self.cached_session(role) {
            return Ok(session);
        }
        let token = self
            .tokens
            .get(role)
            .ok_or_else(|| ToolError::Local(format!("no gateway credential configured for role {role:?}")))?;
        let _guard = tokio::time::timeout(self.call_timeout, self.connecting.lock())
            .await
            .map_err(|_| ToolError::Timeout(self.call_timeout))?;
        if let Some(session) = self.cached_session(role) {
            return Ok(session);
        }
        let config = StreamableHttpClientTransportConfig::with_uri(self.url.clone())
            .max_concurrent_requests(MAX_CONCURRENT_REQUESTS);
        // A SigV4 signature takes the Authorization header; the role token then has its own.
        let config = if self.http.signs() {
            let value = HeaderValue::from_str(token.expose_secret())
                .map_err(|_| ToolError::Permanent(format!("gateway token for role {role:?} is not a header value")))?;
            config.custom_headers(HashMap::from([(HeaderName::from_static(HEADER_GATEWAY_TOKEN), value)]))
        } else {
            config.auth_header(token.expose_secret())
        };
        let transport = StreamableHttpClientTransport::with_client(self.http.clone(), config);
        let client_config = ClientConfig::new(
            Default::default(),
            Implementation::new("lambda-swarm-worker", env!("CARGO_PKG_VERSION")),
        );
        let session = tokio::time::timeout(self.call_timeout, client_config.serve(transport))
            .await
            .map_err(|_| ToolError::Timeout(self.call_timeout))?
            .map_err(|e| {
                let text = e.to_string();
                if text.contains("401") || text.contains("403") || text.contains("Auth") {
                    ToolError::Permanent(format!("gateway refused the session: {text}"))
                } else {
                    ToolError::Unavailable(format!("cannot open a gateway session: {text}"))
                }
            })?;
        let session = Arc::new(session);
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).insert(role.to_owned(), session.clone());
        tracing::debug!(role, "opened tool gateway session");
        Ok(session)
    }

    fn forget_session(&self, role: &str, session: &Arc<Session>) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if sessions.get(role).is_some_and(|s| Arc::ptr_eq(s, session)) {
            sessions.remove(role);
        }
    }

    /// Sends one request with the context headers and a deadline; maps errors (a tool call's
    /// `arguments` complete an approval request with its reason).
    async fn request(
        &self,
        ctx: &ToolContext,
        mut request: ClientRequest,
        extra: Vec<(HeaderName, HeaderValue)>,
        timeout: Duration,
        arguments: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<ServerResult, ToolError> {
        let session = self.session(&ctx.role).await?;
        let headers = context_headers(ctx, extra)?;
        request.extensions_mut().insert(headers);
        let outcome = async {
            let handle =
                session.peer().send_request_with_option(request, PeerRequestOptions::with_timeout(timeout)).await?;
            handle.await_response().await
        };
        // The inner timeout sends `notifications/cancelled`; the outer one only
        // guards against a stuck send queue.
        let result = tokio::time::timeout(timeout + Duration::from_millis(250), outcome)
            .await
            .unwrap_or(Err(ServiceError::Timeout { timeout }));
        result.map_err(|e| {
            let error = classify(e, timeout, arguments);
            if matches!(error, ToolError::Unavailable(_)) && session.peer().is_transport_closed() {
                self.forget_session(&ctx.role, &session);
            }
            error
        })
    }
}

fn header_value(name: &str, value: &str) -> Result<HeaderValue, ToolError> {
    HeaderValue::from_str(value)
        .map_err(|_| ToolError::Permanent(format!("{name} {value:?} cannot be sent as an HTTP header")))
}

fn context_headers(ctx: &ToolContext, extra: Vec<(HeaderName, HeaderValue)>) -> Result<RequestHeaders, ToolError> {
    let mut headers = Vec::with_capacity(5);
    headers.push((HeaderName::from_static(HEADER_CUSTOMER_ID), header_value("customer id", &ctx.customer_id)?));
    headers.push((
        HeaderName::from_static(HEADER_CONVERSATION_ID),
        header_value("conversation id", ctx.conversation_id.as_str())?,
    ));
    headers.push((HeaderName::from_static(HEADER_SUBTASK_ID), header_value("subtask id", ctx.subtask_id.as_str())?));
    headers.extend(extra);
    headers.extend(trace_headers());
    Ok(RequestHeaders(Arc::new(headers)))
}

/// The current span's W3C `traceparent` (and `tracestate`, when it has one) as request headers,
/// when spans are recorded: the gateway's span of this request joins the caller's trace.
pub fn trace_headers() -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = http::HeaderMap::new();
    crate::telemetry::propagation::inject_headers(&mut headers);
    headers.into_iter().filter_map(|(name, value)| Some((name?, value))).collect()
}

/// The `data` of an [`APPROVAL_REQUIRED`] error: the action, and where its reason is.
#[derive(serde::Deserialize)]
struct ApprovalRequest {
    #[serde(flatten)]
    action: swarm_core::approval::ProposedAction,
    #[serde(default)]
    reason_from: Option<String>,
}

impl ApprovalRequest {
    /// The action, its reason read (cleaned, bounded) from the call's own `arguments` when the
    /// gateway named where it is.
    fn into_action(
        self,
        arguments: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> swarm_core::approval::ProposedAction {
        let mut action = self.action;
        if action.reason.is_none()
            && let (Some(arg), Some(arguments)) = (self.reason_from, arguments)
        {
            let text = arguments.get(&arg).and_then(serde_json::Value::as_str);
            action.reason = swarm_core::approval::ProposedAction::clean_reason(text);
        }
        action
    }
}

/// Maps an rmcp client error to the port's classification; `arguments` are the call's.
fn classify(
    error: ServiceError,
    timeout: Duration,
    arguments: Option<&serde_json::Map<String, serde_json::Value>>,
) -> ToolError {
    match error {
        ServiceError::Timeout { .. } | ServiceError::Cancelled { .. } => ToolError::Timeout(timeout),
        ServiceError::McpError(e) if e.code.0 == APPROVAL_REQUIRED => {
            match e.data.clone().map(serde_json::from_value::<ApprovalRequest>) {
                Some(Ok(request)) => ToolError::ApprovalRequired(request.into_action(arguments)),
                _ => ToolError::Permanent(format!(
                    "gateway asked for an approval without saying for what: {}",
                    e.message
                )),
            }
        }
        ServiceError::McpError(e) if e.code.0 == APPROVAL_REFUSED => ToolError::ApprovalRefused(e.message.into_owned()),
        ServiceError::McpError(e) if e.code.0 == OUTCOME_UNKNOWN => {
            ToolError::Unavailable(format!("the side effect's outcome is not known: {}", e.message))
        }
        ServiceError::McpError(e) => ToolError::Permanent(format!("gateway refused the request: {}", e.message)),
        ServiceError::UnexpectedResponse => {
            ToolError::Permanent("gateway answered with an unexpected response type".into())
        }
        ServiceError::TransportClosed => ToolError::Unavailable("gateway session closed".into()),
        e @ ServiceError::TransportSend(_) => {
            let text = e.to_string();
            if e.is_authorization_required() || text.contains("401") || text.contains("403") {
                ToolError::Permanent(format!("gateway refused the credential: {text}"))
            } else {
                ToolError::Unavailable(text)
            }
        }
        other => ToolError::Unavailable(other.to_string()),
    }
}

/// A tool result as text the model can use, one part per content block (blank-line separated):
/// - `text`: as is;
/// - an embedded `resource`: `[resource <uri> (<type>)]` and its text, or for binary contents a
///   note of its type and size (`[resource <uri>: application/pdf, 1.2 KB of binary data, not shown]`);
/// - a `resource_link`: `[resource link: <name> <uri> (<type>, <size>) — <description>]`;
/// - `image` and `audio`: a note of their type and size;
/// - `structuredContent`: as JSON text when no text block already says the same (a text block
///   that parses as the same JSON) — alone when there is nothing else, after the text otherwise.
///
/// Never empty: a result with nothing usable says so.
pub fn result_text(result: &rmcp::model::CallToolResult) -> String {
    use rmcp::model::{ContentBlock, ResourceContents};
    let mut parts: Vec<String> = Vec::with_capacity(result.content.len() + 1);
    let mut texts: Vec<&str> = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(t) => {
                texts.push(&t.text);
                parts.push(t.text.clone());
            }
            ContentBlock::Resource(r) => parts.push(match &r.resource {
                ResourceContents::TextResourceContents { uri, mime_type, text, .. } => {
                    texts.push(text);
                    format!("[resource {uri} ({})]\n{text}", mime_type.as_deref().unwrap_or("text"))
                }
                ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => format!(
                    "[resource {uri}: {}, {} of binary data, not shown]",
                    mime_type.as_deref().unwrap_or("unknown type"),
                    size_text(base64_len(blob))
                ),
                other => format!(
                    "[resource {}, not shown]",
                    serde_json::to_value(other)
                        .ok()
                        .and_then(|v| v["uri"].as_str().map(str::to_owned))
                        .unwrap_or_default()
                ),
            }),
            ContentBlock::ResourceLink(link) => {
                let mut note = format!("[resource link: {} {}", link.title.as_deref().unwrap_or(&link.name), link.uri);
                let kind = link.mime_type.as_deref();
                let size = link.size.map(size_text);
                match (kind, size) {
                    (Some(k), Some(sz)) => note.push_str(&format!(" ({k}, {sz})")),
                    (Some(k), None) => note.push_str(&format!(" ({k})")),
                    (None, Some(sz)) => note.push_str(&format!(" ({sz})")),
                    (None, None) => {}
                }
                if let Some(d) = link.description.as_deref().filter(|d| !d.trim().is_empty()) {
                    note.push_str(" — ");
                    note.push_str(d.trim());
                }
                note.push(']');
                parts.push(note);
            }
            ContentBlock::Image(i) => {
                parts.push(format!("[image: {}, {}, not shown]", i.mime_type, size_text(base64_len(&i.data))));
            }
            ContentBlock::Audio(a) => {
                parts.push(format!("[audio: {}, {}, not shown]", a.mime_type, size_text(base64_len(&a.data))));
            }
            // A content type newer than this client: its kind, so the model knows something came back.
            other => parts.push(format!(
                "[{} content, not shown]",
                serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v["type"].as_str().map(str::to_owned))
                    .unwrap_or_default()
            )),
        }
    }
    if let Some(structured) = result.structured_content.as_ref().filter(|v| !v.is_null()) {
        let repeated =
            texts.iter().any(|t| serde_json::from_str::<serde_json::Value>(t).ok().as_ref() == Some(structured));
        if !repeated {
            let json = structured.to_string();
            parts.push(if parts.is_empty() { json } else { format!("structuredContent: {json}") });
        }
    }
    parts.retain(|p| !p.trim().is_empty());
    if parts.is_empty() {
        return if result.is_error == Some(true) {
            "(the tool reported an error without a message)".to_owned()
        } else {
            "(the tool returned no content)".to_owned()
        };
    }
    parts.join("\n\n")
}

/// Bytes encoded by a base64 text (padding and whitespace accounted for).
fn base64_len(data: &str) -> u64 {
    let chars = data.bytes().filter(|b| !b.is_ascii_whitespace()).count() as u64;
    let padding = data.trim_end().bytes().rev().take_while(|b| *b == b'=').count() as u64;
    (chars / 4 * 3 + (chars % 4).saturating_sub(1)).saturating_sub(padding)
}

/// `812 bytes`, `12.3 KB`, `4.0 MB`.
fn size_text(bytes: u64) -> String {
    match bytes {
        0..1_000 => format!("{bytes} bytes"),
        1_000..1_000_000 => format!("{:.1} KB", bytes as f64 / 1_000.0),
        _ => format!("{:.1} MB", bytes as f64 / 1_000_000.0),
    }
}

#[async_trait]
impl ToolGateway for McpToolGateway {
    /// Tools visible to `ctx.role`, sorted by name; follows pagination up to
    /// [`MAX_LIST_PAGES`] pages; reused per role for the list TTL.
    async fn list_tools(&self, ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        if let Some(tools) = self.cached_listing(&ctx.role) {
            return Ok((*tools).clone());
        }
        if self.list_ttl.is_zero() {
            return self.fetch_listing(ctx).await;
        }
        let _guard = tokio::time::timeout(self.call_timeout, self.listing.lock())
            .await
            .map_err(|_| ToolError::Timeout(self.call_timeout))?;
        if let Some(tools) = self.cached_listing(&ctx.role) {
            return Ok((*tools).clone());
        }
        let tools = self.fetch_listing(ctx).await?;
        self.listings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ctx.role.clone(), (tokio::time::Instant::now(), Arc::new(tools.clone())));
        Ok(tools)
    }

    async fn call_tool(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: serde_json::Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        let serde_json::Value::Object(mut arguments) = arguments else {
            return Err(ToolError::Permanent(format!("arguments of {name} must be a JSON object")));
        };
        let mut extra = Vec::with_capacity(2);
        for (argument, header, what) in [
            (IDEMPOTENCY_ARGUMENT, HEADER_IDEMPOTENCY_KEY, "idempotency key"),
            (APPROVAL_ARGUMENT, HEADER_APPROVAL, "approval token"),
        ] {
            match arguments.remove(argument) {
                None => {}
                Some(serde_json::Value::String(value)) if !value.is_empty() => {
                    extra.push((HeaderName::from_static(header), header_value(what, &value)?));
                }
                Some(other) => {
                    let shown =
                        if argument == APPROVAL_ARGUMENT { "a non-string value".to_owned() } else { other.to_string() };
                    return Err(ToolError::Permanent(format!("{argument} must be a non-empty string, got {shown}")));
                }
            }
        }
        let sent = arguments.clone();
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(name.to_owned()).with_arguments(arguments),
        ));
        match self.request(ctx, request, extra, timeout, Some(&sent)).await? {
            ServerResult::CallToolResult(result) => {
                let refused =
                    result.meta.as_ref().and_then(|m| m.0.get(REFUSED_META)).and_then(|v| v.as_bool()).unwrap_or(false);
                let is_error = result.is_error.unwrap_or(false);
                Ok(ToolOutput { text: result_text(&result), is_error: is_error || refused, refused })
            }
            _ => Err(ToolError::Permanent(format!("tools/call {name} answered with an unsupported result type"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case_text(name: &str) -> String {
        let case = swarm_testing::mcp_case(name);
        let result: rmcp::model::CallToolResult = serde_json::from_value(case["result"].clone()).unwrap();
        result_text(&result)
    }

    #[test]
    fn every_mcp_content_type_becomes_text_the_model_can_use() {
        assert_eq!(
            case_text("resource-only-text"),
            "[resource shop://orders/A1029 (application/json)]\n{\"order_id\":\"A1029\",\"status\":\"paid\",\"total\":1299.0}"
        );
        assert_eq!(
            case_text("resource-only-blob"),
            "[resource shop://invoices/A1029.pdf: application/pdf, 129 bytes of binary data, not shown]"
        );
        assert_eq!(
            case_text("resource-link-only"),
            "[resource link: tracking page https://shop.example.com/track/SF1234567890 (text/html) — SF Express tracking for A1031]"
        );
        assert_eq!(
            case_text("image-and-audio"),
            "[image: image/png, 70 bytes, not shown]\n\n[audio: audio/wav, 44 bytes, not shown]"
        );
        assert_eq!(
            case_text("text-and-structured-adding-information"),
            "Order A1029 found.\n\nstructuredContent: {\"order_id\":\"A1029\",\"status\":\"paid\",\"total\":1299.0}"
        );
        assert_eq!(case_text("text-equal-to-structured"), "{\"order_id\": \"A1029\", \"status\": \"paid\"}");
        assert_eq!(case_text("empty-content"), "(the tool returned no content)");
        let structured_only: rmcp::model::CallToolResult =
            serde_json::from_value(serde_json::json!({"content": [], "structuredContent": {"stock": 3}})).unwrap();
        assert_eq!(result_text(&structured_only), "{\"stock\":3}");
    }

    #[test]
    fn base64_sizes_count_the_decoded_bytes() {
        assert_eq!(base64_len("TWFu"), 3);
        assert_eq!(base64_len("TWE="), 2);
        assert_eq!(base64_len("TQ=="), 1);
        assert_eq!(size_text(1_234), "1.2 KB");
    }

    #[test]
    fn token_debug_never_prints_the_value() {
        let tokens = HashMap::from([("support".to_owned(), SecretString::from("s3cr3t-value"))]);
        let gateway = McpToolGateway::new("http://127.0.0.1:1/mcp", tokens, Duration::from_secs(1)).unwrap();
        let printed = format!("{gateway:?} {:?}", gateway.tokens["support"]);
        assert!(!printed.contains("s3cr3t") && printed.contains("support"), "{printed}");
        assert_eq!(gateway.tokens["support"].expose_secret(), "s3cr3t-value");
    }

    #[test]
    fn adapter_rejects_a_non_http_url_and_empty_tokens() {
        let tokens: HashMap<String, String> = HashMap::from([("support".into(), "t".into())]);
        let err = McpToolGateway::new("ftp://x/mcp", tokens, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, ToolError::Permanent(m) if m.contains("http")));
        let empty: HashMap<String, String> = HashMap::from([("support".into(), String::new())]);
        let err = McpToolGateway::new("http://127.0.0.1:1/mcp", empty, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, ToolError::Permanent(m) if m.contains("support")));
    }

    #[test]
    fn request_headers_are_added_only_from_the_request_extensions() {
        let ctx = ToolContext {
            role: "support".into(),
            customer_id: "C104".into(),
            conversation_id: swarm_core::domain::ConversationId::from_trusted("conv-1"),
            subtask_id: "w01".into(),
        };
        let headers = context_headers(
            &ctx,
            vec![(HeaderName::from_static(HEADER_IDEMPOTENCY_KEY), HeaderValue::from_static("k1"))],
        )
        .unwrap();
        let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("x")));
        request.extensions_mut().insert(headers);
        let message = rmcp::model::ClientJsonRpcMessage::request(request, rmcp::model::RequestId::Number(1));
        let out = McpHttpClient::with_request_headers(&message, HashMap::new());
        assert_eq!(out[&HeaderName::from_static(HEADER_CUSTOMER_ID)], "C104");
        assert_eq!(out[&HeaderName::from_static(HEADER_CONVERSATION_ID)], "conv-1");
        assert_eq!(out[&HeaderName::from_static(HEADER_SUBTASK_ID)], "w01");
        assert_eq!(out[&HeaderName::from_static(HEADER_IDEMPOTENCY_KEY)], "k1");
        // The JSON-RPC body carries none of them.
        let body = serde_json::to_string(&message).unwrap();
        assert!(!body.contains("C104"), "{body}");
    }
}
