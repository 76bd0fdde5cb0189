//! One upstream MCP server as the gateway reaches it: an rmcp client session kept open, re-initialized when the upstream forgets it; its credential (a configured header, or SigV4 for an `AWS_IAM` function URL) on every request, and the caller's identity headers on each call.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::Duration,
};

use http::{HeaderName, HeaderValue};
use rmcp::{
    ServiceError, ServiceExt,
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification, CancelledNotificationParam,
        ClientConfig, ClientRequest, ErrorData, GetExtensions, Implementation, JsonObject, ListToolsRequest,
        ListToolsResult, PaginatedRequestParams, ServerResult, Tool,
    },
    service::{PeerRequestOptions, RoleClient, RunningService},
    transport::{
        StreamableHttpClientTransport,
        streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError},
    },
};
use secrecy::ExposeSecret;
use swarm_adapters::mcp::sigv4::SigV4Signer;
use swarm_adapters::mcp::{McpHttpClient, RequestHeaders, TooManyPages, list_all_pages, trace_headers};
use tokio_util::sync::CancellationToken;

use crate::{config::UpstreamConfig, error::GatewayError};

/// Requests one upstream session keeps in flight (rmcp's default is 16; the
/// local stack pushes 100 concurrent subtasks through one upstream).
const MAX_CONCURRENT_REQUESTS: usize = 512;

type Session = RunningService<RoleClient, ClientConfig>;

/// Why a request to an upstream did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No answer within the deadline; a cancellation was sent. Transient.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The upstream no longer knows the session (HTTP 404). Transient: re-initialize.
    #[error("upstream session expired")]
    SessionExpired,
    /// Connection refused, reset, 5xx, closed transport. Transient.
    #[error("upstream unreachable: {0}")]
    Unavailable(String),
    /// The upstream answered with a JSON-RPC error (bad params, unknown tool).
    /// Permanent; the upstream is healthy.
    #[error("upstream answered with an error: {}", .0.message)]
    Protocol(ErrorData),
    /// The caller went away; the upstream was told to cancel. Not the upstream's fault.
    #[error("call cancelled by the caller")]
    Cancelled,
}

/// A listing that never ends: the upstream is not usable as it answers.
impl From<TooManyPages> for UpstreamError {
    fn from(e: TooManyPages) -> Self {
        UpstreamError::Unavailable(e.to_string())
    }
}

impl UpstreamError {
    pub fn is_transient(&self) -> bool {
        !matches!(self, Self::Protocol(_) | Self::Cancelled)
    }

    /// Whether the breaker should count this as an upstream failure.
    /// (An upstream's JSON-RPC internal error counts; bad params or an unknown tool do not.)
    pub fn counts_against_upstream(&self) -> bool {
        match self {
            Self::Timeout(_) | Self::Unavailable(_) | Self::SessionExpired => true,
            Self::Protocol(e) => e.code == rmcp::model::ErrorCode::INTERNAL_ERROR,
            Self::Cancelled => false,
        }
    }
}

fn is_session_expired(error: &ServiceError) -> bool {
    let ServiceError::TransportSend(e) = error else {
        return false;
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e.error.as_ref());
    while let Some(current) = source {
        if let Some(StreamableHttpError::<reqwest::Error>::SessionExpired) =
            current.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return true;
        }
        source = current.source();
    }
    false
}

fn classify(error: ServiceError, timeout: Duration) -> UpstreamError {
    if is_session_expired(&error) {
        return UpstreamError::SessionExpired;
    }
    match error {
        ServiceError::Timeout { .. } => UpstreamError::Timeout(timeout),
        ServiceError::McpError(e) => UpstreamError::Protocol(e),
        ServiceError::Cancelled { .. } => UpstreamError::Cancelled,
        other => UpstreamError::Unavailable(other.to_string()),
    }
}

/// The gateway's client of one upstream. Built once; the session opens on
/// first use and is replaced when it closes or expires.
pub struct UpstreamClient {
    name: Arc<str>,
    url: Arc<str>,
    http: McpHttpClient,
    headers: HashMap<HeaderName, HeaderValue>,
    session: RwLock<Option<Arc<Session>>>,
    connecting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamClient").field("name", &self.name).field("url", &self.url).finish_non_exhaustive()
    }
}

impl UpstreamClient {
    /// `http` is shared by all upstreams (built with `pool_max_idle_per_host(0)`); an upstream
    /// with `sigv4` signs every request with the function's credentials (the default provider chain).
    /// Errors: [`GatewayError::Config`] for a header that is not valid HTTP.
    pub fn new(config: &UpstreamConfig, http: reqwest::Client) -> Result<Self, GatewayError> {
        let mut headers = HashMap::with_capacity(config.headers.len());
        for (name, value) in &config.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                GatewayError::Config(format!("upstream {} header name {name:?} is invalid", config.name))
            })?;
            let mut value = HeaderValue::from_str(value.expose_secret())
                .map_err(|_| GatewayError::Config(format!("upstream {} header {name} is invalid", config.name)))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let mut client = McpHttpClient::new(http);
        if let Some(sigv4) = &config.sigv4 {
            client = client.signed(SigV4Signer::from_env(&sigv4.service, &sigv4.region));
        }
        Ok(Self {
            name: Arc::from(config.name.as_str()),
            url: Arc::from(config.url.as_str()),
            http: client,
            headers,
            session: RwLock::new(None),
            connecting: tokio::sync::Mutex::new(()),
        })
    }

    fn current(&self) -> Option<Arc<Session>> {
        let guard = self.session.read().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().filter(|s| !s.is_closed() && !s.peer().is_transport_closed()).cloned()
    }

    /// The open session, opening one (MCP `initialize`) within `timeout`.
    async fn session(&self, timeout: Duration) -> Result<Arc<Session>, UpstreamError> {
        if let Some(s) = self.current() {
            return Ok(s);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let _guard = tokio::time::timeout_at(deadline, self.connecting.lock())
            .await
            .map_err(|_| UpstreamError::Timeout(timeout))?;
        if let Some(s) = self.current() {
            return Ok(s);
        }
        // rmcp's own re-initialization would also retry side-effecting calls;
        // the gateway decides per call instead (see `call_tool`).
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.clone())
            .custom_headers(self.headers.clone())
            .max_concurrent_requests(MAX_CONCURRENT_REQUESTS);
        config.reinit_on_expired_session = false;
        let transport = StreamableHttpClientTransport::with_client(self.http.clone(), config);
        let info = ClientConfig::new(
            Default::default(),
            Implementation::new("lambda-swarm-tool-gateway", env!("CARGO_PKG_VERSION")),
        );
        let session = tokio::time::timeout_at(deadline, info.serve(transport))
            .await
            .map_err(|_| UpstreamError::Timeout(timeout))?
            .map_err(|e| UpstreamError::Unavailable(format!("initialize failed: {e}")))?;
        let session = Arc::new(session);
        *self.session.write().unwrap_or_else(|e| e.into_inner()) = Some(session.clone());
        tracing::info!(upstream = &*self.name, "upstream session opened");
        Ok(session)
    }

    /// Drops `session` if it is still the current one, so the next request re-initializes.
    fn forget(&self, session: &Arc<Session>) {
        let mut guard = self.session.write().unwrap_or_else(|e| e.into_inner());
        if guard.as_ref().is_some_and(|s| Arc::ptr_eq(s, session)) {
            *guard = None;
        }
    }

    /// One request on the current session, answered within `timeout` (an MCP
    /// cancellation is sent on expiry or when `cancel` fires).
    async fn request(
        &self,
        mut request: ClientRequest,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<ServerResult, UpstreamError> {
        let session = self.session(timeout).await?;
        // The caller's trace context travels on to the upstream, beside the call's own headers.
        let trace = trace_headers();
        if !trace.is_empty() {
            let mut headers: Vec<(HeaderName, HeaderValue)> =
                request.extensions().get::<RequestHeaders>().map(|h| h.0.as_ref().clone()).unwrap_or_default();
            headers.extend(trace);
            request.extensions_mut().insert(RequestHeaders(Arc::new(headers)));
        }
        let handle = session
            .peer()
            .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
            .await
            .map_err(|e| classify(e, timeout));
        let handle = match handle {
            Ok(h) => h,
            Err(e) => {
                self.forget(&session);
                return Err(e);
            }
        };
        let id = handle.id.clone();
        let result = tokio::select! {
            r = handle.await_response() => r.map_err(|e| classify(e, timeout)),
            _ = cancel.cancelled() => {
                let note = CancelledNotification::new(CancelledNotificationParam::new(
                    Some(id),
                    Some("caller cancelled".into()),
                ));
                let _ = session.peer().send_notification(note.into()).await;
                Err(UpstreamError::Cancelled)
            }
        };
        if matches!(&result, Err(UpstreamError::SessionExpired | UpstreamError::Unavailable(_))) {
            self.forget(&session);
        }
        result
    }

    /// Every tool of the upstream (all pages). On an expired session it
    /// re-initializes once and retries: listing is always safe to repeat.
    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<Tool>, UpstreamError> {
        match self.list_once(timeout).await {
            Err(UpstreamError::SessionExpired) => {
                tracing::info!(upstream = &*self.name, "upstream session expired; re-initializing for tools/list");
                self.list_once(timeout).await
            }
            other => other,
        }
    }

    async fn list_once(&self, timeout: Duration) -> Result<Vec<Tool>, UpstreamError> {
        let never = CancellationToken::new();
        list_all_pages(|cursor| self.list_page(cursor, timeout, &never)).await
    }

    /// One page of the upstream's `tools/list`, from `cursor` (`None`: the first).
    async fn list_page(
        &self,
        cursor: Option<String>,
        timeout: Duration,
        never: &CancellationToken,
    ) -> Result<ListToolsResult, UpstreamError> {
        let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let request = ClientRequest::ListToolsRequest(ListToolsRequest {
            method: Default::default(),
            params,
            extensions: Default::default(),
        });
        match self.request(request, timeout, never).await? {
            ServerResult::ListToolsResult(page) => Ok(page),
            _ => Err(UpstreamError::Unavailable("tools/list answered with another result type".into())),
        }
    }

    /// Calls `name` with `arguments` within `timeout`, sending `headers` (the caller's
    /// customer, the idempotency key…) on this request only. On an expired session
    /// the session is re-initialized; the call is retried only when
    /// `retry_safe` (never for a side-effecting tool, which returns the error).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: JsonObject,
        headers: RequestHeaders,
        timeout: Duration,
        retry_safe: bool,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, UpstreamError> {
        let make = |arguments: JsonObject| {
            let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(
                CallToolRequestParams::new(name.to_owned()).with_arguments(arguments),
            ));
            request.extensions_mut().insert(headers.clone());
            request
        };
        let first = if retry_safe {
            self.request(make(arguments.clone()), timeout, cancel).await
        } else {
            return self.request(make(arguments), timeout, cancel).await.and_then(expect_call_result);
        };
        match first {
            Err(UpstreamError::SessionExpired) => {
                tracing::info!(
                    upstream = &*self.name,
                    tool = name,
                    "upstream session expired; re-initializing and retrying"
                );
                self.request(make(arguments), timeout, cancel).await.and_then(expect_call_result)
            }
            other => other.and_then(expect_call_result),
        }
    }
}

fn expect_call_result(result: ServerResult) -> Result<CallToolResult, UpstreamError> {
    match result {
        ServerResult::CallToolResult(r) => Ok(r),
        _ => Err(UpstreamError::Unavailable("tools/call answered with an unsupported result type".into())),
    }
}

/// The one HTTP client all upstream sessions share. By default idle
/// connections are not kept (`pool_max_idle_per_host(0)`), so a restarted
/// upstream or a frozen Lambda never leaves a dead pooled socket behind;
/// `keep_alive` keeps up to 64 per upstream host (about 0.1 CPU-ms less per
/// call, see infra/gateway/README.md).
pub fn upstream_http_client(keep_alive: bool) -> Result<reqwest::Client, GatewayError> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(if keep_alive { 64 } else { 0 })
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| GatewayError::HttpClient(e.to_string()))
}
