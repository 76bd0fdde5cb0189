//! `HttpChatModel`: the tolerant OpenAI-compatible chat-completions client over reqwest.
//!
//! `POST {base_url}/chat/completions` with `stream: false`. Responses are read
//! into lenient serde types straight from the body bytes: missing, null and
//! extra fields are tolerated, ids are kept verbatim, usage fields of every
//! known provider are read (`cached_tokens`, `prompt_tokens_details.cached_tokens`,
//! `prompt_cache_hit_tokens`), and error bodies of any shape are classified
//! with the HTTP status kept (see [`classify_error`], in [`super::wire`]). An
//! AIMD cap ([`super::limiter`]) bounds the calls in flight per instance, so a
//! fan-out of 100 workers does not turn one 429 into a storm.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::HeaderValue;
use swarm_core::llm::pricing::PriceTable;
use swarm_core::ports::{ChatModel, ChatRequest, ChatResponse, LlmError, Purpose};

use super::config::{LlmConfigError, LlmEndpoint};
use super::limiter::{AimdLimiter, Outcome};
use super::wire::{WireMessage, WireRequest, WireTool, classify_error, parse_chat_response};

/// Connection set-up bound, within the per-request timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An OpenAI-compatible chat model at one endpoint: one reqwest client (one
/// connection pool), built once, and an in-flight cap shared by all callers.
pub struct HttpChatModel {
    client: reqwest::Client,
    url: String,
    auth: Option<HeaderValue>,
    model: String,
    label: String,
    send_reasoning: bool,
    timeout: Duration,
    prices: PriceTable,
    limiter: Arc<AimdLimiter>,
}

impl std::fmt::Debug for HttpChatModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpChatModel")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.auth.as_ref().map(|_| "***"))
            .field("timeout", &self.timeout)
            .field("in_flight_limit", &self.limiter.limit())
            .finish()
    }
}

impl HttpChatModel {
    /// A client for `endpoint`: `timeout` bounds each request (connect,
    /// send, body); at most `max_in_flight` (≥ 1) calls run at once, fewer
    /// after 429s. The wait for a place has no bound of its own: callers
    /// bound it with their deadline (`complete_with_retry` does). Errors when
    /// the key is not a valid header value or the TLS client cannot be built.
    pub fn new(
        endpoint: &LlmEndpoint,
        timeout: Duration,
        max_in_flight: usize,
        prices: PriceTable,
    ) -> Result<Self, LlmConfigError> {
        let auth = match &endpoint.api_key {
            Some(k) => {
                let mut v =
                    HeaderValue::from_str(&format!("Bearer {}", k.expose())).map_err(|_| LlmConfigError::Invalid {
                        var: "LLM_API_KEY",
                        message: "contains characters not allowed in an HTTP header".into(),
                    })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT.min(timeout))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| LlmConfigError::Client(e.to_string()))?;
        let base = endpoint.base_url.trim_end_matches('/');
        let host = reqwest::Url::parse(base)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| base.to_owned());
        Ok(Self {
            client,
            url: format!("{base}/chat/completions"),
            auth,
            model: endpoint.model.clone(),
            label: format!("{} @ {host}", endpoint.model),
            send_reasoning: endpoint.send_reasoning,
            timeout,
            prices,
            limiter: Arc::new(AimdLimiter::new(max_in_flight)),
        })
    }

    /// The current in-flight cap (1..=max_in_flight).
    pub fn in_flight_limit(&self) -> usize {
        self.limiter.limit()
    }

    /// The JSON body sent for `request` (OpenAI chat-completions shape).
    pub fn request_body(&self, request: &ChatRequest) -> Result<Vec<u8>, LlmError> {
        let tools = (request.purpose == Purpose::Work && !request.tools.is_empty())
            .then(|| request.tools.iter().map(WireTool::from).collect::<Vec<_>>());
        let body = WireRequest {
            model: &self.model,
            messages: request.messages.iter().map(|m| WireMessage::from_message(m, self.send_reasoning)).collect(),
            tools,
            max_tokens: request.max_tokens,
            stream: false,
        };
        serde_json::to_vec(&body)
            .map_err(|e| LlmError::Permanent { status: 0, message: format!("request not serialisable: {e}") })
    }

    /// One HTTP exchange: send, read the body, parse or classify.
    async fn exchange(&self, body: Vec<u8>) -> Result<ChatResponse, LlmError> {
        let mut req = self
            .client
            .post(&self.url)
            .timeout(self.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body);
        if let Some(auth) = &self.auth {
            req = req.header(reqwest::header::AUTHORIZATION, auth.clone());
        }
        let resp = req.send().await.map_err(|e| self.transport_error(&e, None))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let headers = resp.headers().clone();
            let bytes = resp.bytes().await.unwrap_or_default();
            return Err(classify_error(status, &headers, &bytes));
        }
        let bytes = resp.bytes().await.map_err(|e| self.transport_error(&e, Some(status)))?;
        let mut r = parse_chat_response(status, &bytes, &self.model)?;
        let priced = if self.prices.price(&self.model).is_some() { self.model.as_str() } else { r.model.as_str() };
        r.usage.cost_usd = self.prices.cost(priced, &r.usage);
        Ok(r)
    }

    fn transport_error(&self, e: &reqwest::Error, status: Option<u16>) -> LlmError {
        let message = if e.is_timeout() {
            format!("no answer within {:?}", self.timeout)
        } else if e.is_connect() {
            "connection failed".to_owned()
        } else {
            "request failed".to_owned()
        };
        // The error's source chain names the cause (DNS, refused, reset…) without the URL's secrets.
        let cause = std::error::Error::source(e).map(|s| format!(": {s}")).unwrap_or_default();
        LlmError::Transient { status, message: format!("{message}{cause}") }
    }
}

#[async_trait]
impl ChatModel for HttpChatModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let body = self.request_body(request)?;
        let slot = self.limiter.acquire().await;
        let started = Instant::now();
        let result = self.exchange(body).await;
        let latency_ms = started.elapsed().as_millis() as u64;
        slot.finish(match &result {
            Ok(_) => Outcome::Success,
            Err(LlmError::RateLimited { .. }) => Outcome::RateLimited,
            Err(_) => Outcome::Neutral,
        });
        match &result {
            Ok(r) => tracing::debug!(
                model = %self.model,
                purpose = ?request.purpose,
                status = 200u16,
                latency_ms,
                prompt_tokens = r.usage.prompt_tokens,
                completion_tokens = r.usage.completion_tokens,
                cached_tokens = r.usage.cached_tokens,
                tool_calls = r.tool_calls.len(),
                finish_reason = ?r.finish_reason,
                "llm call"
            ),
            Err(e) => tracing::warn!(
                model = %self.model,
                purpose = ?request.purpose,
                latency_ms,
                in_flight_limit = self.limiter.limit(),
                error = %e,
                "llm call failed"
            ),
        }
        result
    }

    fn label(&self) -> String {
        self.label.clone()
    }
}
