//! Tolerant OpenAI-compatible chat-completions client over reqwest.
//!
//! `POST {base_url}/chat/completions` with `stream: false`. Responses are read
//! into lenient serde types straight from the body bytes: missing, null and
//! extra fields are tolerated, ids are kept verbatim, usage fields of every
//! known provider are read (`cached_tokens`, `prompt_tokens_details.cached_tokens`,
//! `prompt_cache_hit_tokens`), and error bodies of any shape are classified
//! with the HTTP status kept (see [`classify_error`]). An AIMD cap bounds the
//! calls in flight per instance, so a fan-out of 100 workers does not turn
//! one 429 into a storm.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};
use serde::de::{Deserializer, IgnoredAny};
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::domain::Usage;
use crate::llm::config::{LlmConfigError, LlmEndpoint};
use crate::llm::pricing::PriceTable;
use crate::ports::{ChatMessage, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Purpose, ToolSpec};

/// Connection set-up bound, within the per-request timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Successes in a row after which the in-flight cap grows by one.
pub const AIMD_GROWTH_SUCCESSES: u32 = 8;
/// Longest provider message kept in an error, characters.
const MAX_ERROR_MESSAGE_CHARS: usize = 300;

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
        let mut r = parse_success(status, &bytes, &self.model)?;
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

// ---------------------------------------------------------------- request

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<WireTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    stream: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        /// `null` when empty: several providers reject `""` next to tool calls.
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireOutCall<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<&'a str>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

impl<'a> WireMessage<'a> {
    fn from_message(m: &'a ChatMessage, send_reasoning: bool) -> Self {
        match m {
            ChatMessage::System { content } => Self::System { content },
            ChatMessage::User { content } => Self::User { content },
            ChatMessage::Assistant { content, tool_calls, reasoning_content } => Self::Assistant {
                content: content.as_deref().filter(|c| !c.is_empty()),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| WireOutCall {
                        id: &c.id,
                        kind: "function",
                        function: WireOutFunction {
                            name: &c.name,
                            // Providers that template arguments as JSON reject an empty string.
                            arguments: if c.arguments.trim().is_empty() { "{}" } else { &c.arguments },
                        },
                    })
                    .collect(),
                reasoning_content: if send_reasoning { reasoning_content.as_deref() } else { None },
            },
            ChatMessage::Tool { tool_call_id, content } => Self::Tool { tool_call_id, content },
        }
    }
}

#[derive(Serialize)]
struct WireOutCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireOutFunction<'a>,
}

#[derive(Serialize)]
struct WireOutFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    parameters: &'a serde_json::Value,
}

impl<'a> From<&'a ToolSpec> for WireTool<'a> {
    fn from(t: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: WireToolFunction { name: &t.name, description: &t.description, parameters: &t.input_schema },
        }
    }
}

// ---------------------------------------------------------------- response

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default, deserialize_with = "opt_string")]
    model: Option<String>,
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    message: Option<WireInMessage>,
    #[serde(default, deserialize_with = "opt_string")]
    finish_reason: Option<String>,
}

#[derive(Default, Deserialize)]
struct WireInMessage {
    #[serde(default, deserialize_with = "content_text")]
    content: Option<String>,
    #[serde(default, deserialize_with = "opt_string")]
    reasoning_content: Option<String>,
    /// OpenRouter and Ollama name it `reasoning`.
    #[serde(default, deserialize_with = "opt_string")]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireInCall>>,
    /// The pre-tools OpenAI shape, still sent by some servers.
    #[serde(default)]
    function_call: Option<WireInFunction>,
}

#[derive(Deserialize)]
struct WireInCall {
    #[serde(default, deserialize_with = "opt_string")]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireInFunction>,
}

#[derive(Deserialize)]
struct WireInFunction {
    #[serde(default, deserialize_with = "opt_string")]
    name: Option<String>,
    #[serde(default, deserialize_with = "arguments_text")]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "opt_u64")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "opt_u64")]
    completion_tokens: Option<u64>,
    /// Moonshot (Kimi).
    #[serde(default, deserialize_with = "opt_u64")]
    cached_tokens: Option<u64>,
    /// DeepSeek.
    #[serde(default, deserialize_with = "opt_u64")]
    prompt_cache_hit_tokens: Option<u64>,
    /// OpenAI, vLLM.
    #[serde(default)]
    prompt_tokens_details: Option<WireTokenDetails>,
}

#[derive(Deserialize)]
struct WireTokenDetails {
    #[serde(default, deserialize_with = "opt_u64")]
    cached_tokens: Option<u64>,
}

/// Parses a 2xx chat-completions body. Errors (all `Transient`, status kept):
/// not JSON or not the expected shape, no choices, or an unknown/absent
/// finish reason with neither text nor tool calls. A 2xx body that carries an
/// `error` object instead of choices is classified like an error response.
pub fn parse_chat_response(status: u16, body: &[u8], configured_model: &str) -> Result<ChatResponse, LlmError> {
    parse_success(status, body, configured_model)
}

fn parse_success(status: u16, body: &[u8], configured_model: &str) -> Result<ChatResponse, LlmError> {
    let wire: WireResponse = serde_json::from_slice(body).map_err(|e| LlmError::Transient {
        status: Some(status),
        message: format!("response is not chat-completions JSON ({e})"),
    })?;
    let Some(choice) = wire.choices.and_then(|c| c.into_iter().next()) else {
        if let Some(err) = &wire.error {
            let code = err.get("code").and_then(serde_json::Value::as_u64).filter(|c| (400..600).contains(c));
            return Err(classify_parts(
                code.map_or(502, |c| c as u16),
                None,
                error_parts_from_value(&serde_json::json!({ "error": err })),
            ));
        }
        return Err(LlmError::Transient { status: Some(status), message: "response has no choices".into() });
    };
    let message = choice.message.unwrap_or_default();
    let content = message.content.filter(|c| !c.trim().is_empty());
    let reasoning_content = message.reasoning_content.or(message.reasoning).filter(|r| !r.trim().is_empty());
    let mut tool_calls: Vec<crate::ports::ToolCall> = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let f = c.function;
            crate::ports::ToolCall {
                // A missing id is made up: the id only has to pair the call with its result.
                id: c.id.filter(|id| !id.is_empty()).unwrap_or_else(|| format!("call_{i}")),
                name: f.as_ref().and_then(|f| f.name.clone()).unwrap_or_default(),
                arguments: f.and_then(|f| f.arguments).unwrap_or_default(),
            }
        })
        .collect();
    if tool_calls.is_empty()
        && let Some(f) = message.function_call
    {
        tool_calls.push(crate::ports::ToolCall {
            id: "call_0".into(),
            name: f.name.unwrap_or_default(),
            arguments: f.arguments.unwrap_or_default(),
        });
    }
    let finish_reason = match choice.finish_reason.as_deref() {
        Some("stop" | "end_turn" | "eos" | "stop_sequence") => FinishReason::Stop,
        Some("tool_calls" | "function_call" | "tool_use") => FinishReason::ToolCalls,
        Some("length" | "max_tokens" | "model_length") => FinishReason::Length,
        Some("content_filter" | "sensitive") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_owned()),
        None if !tool_calls.is_empty() => FinishReason::ToolCalls,
        None if content.is_some() => FinishReason::Stop,
        None => FinishReason::Other(String::new()),
    };
    if matches!(finish_reason, FinishReason::Other(_)) && content.is_none() && tool_calls.is_empty() {
        return Err(LlmError::Transient {
            status: Some(status),
            message: format!(
                "empty answer with finish_reason {:?}",
                choice.finish_reason.as_deref().unwrap_or("(none)")
            ),
        });
    }
    let usage = wire.usage.map_or_else(Usage::default, |u| Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        cached_tokens: u
            .cached_tokens
            .or(u.prompt_tokens_details.and_then(|d| d.cached_tokens))
            .or(u.prompt_cache_hit_tokens),
        cost_usd: None,
    });
    Ok(ChatResponse {
        content,
        tool_calls,
        finish_reason,
        reasoning_content,
        usage,
        model: wire.model.filter(|m| !m.is_empty()).unwrap_or_else(|| configured_model.to_owned()),
    })
}

// ---------------------------------------------------------------- errors

/// Message and code/type text of an error body.
struct ErrorParts {
    message: String,
    /// `code` and `type` fields, lower-cased, for classification.
    hint: String,
}

/// Classifies a non-2xx response (status kept in every variant):
/// - 429 → `RateLimited` (`retry_after` from `retry-after-ms`, or `retry-after`
///   in seconds or as an HTTP date) — except an exhausted quota, `Permanent`;
/// - 529, and 503 with a `Retry-After` (overloaded) → `RateLimited`;
/// - 400/413 mentioning the context length (`context_length_exceeded`,
///   "maximum context length", "too many tokens"…), and any 413 → `ContextLength`;
/// - other 5xx, 408, 409, 425, non-HTTP-error codes → `Transient`;
/// - 401/402/403/404 and other 4xx → `Permanent` with the provider's message.
///
/// A body is parsed as JSON only when it looks like JSON and is not declared
/// HTML; otherwise the message quotes its start.
pub fn classify_error(status: u16, headers: &HeaderMap, body: &[u8]) -> LlmError {
    let retry_after = parse_retry_after(headers);
    let content_type =
        headers.get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    let text = String::from_utf8_lossy(body);
    let trimmed = text.trim_start();
    let json = if content_type.contains("html") || !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        None
    } else {
        serde_json::from_str::<serde_json::Value>(trimmed).ok()
    };
    let parts = match json {
        Some(v) => error_parts_from_value(&v),
        None => {
            let snippet: String = trimmed.split_whitespace().collect::<Vec<_>>().join(" ");
            let kind =
                if content_type.is_empty() { "non-JSON".to_owned() } else { format!("non-JSON ({content_type})") };
            ErrorParts { message: format!("{kind} body: {}", clip(&snippet, 120)), hint: String::new() }
        }
    };
    classify_parts(status, retry_after, parts)
}

fn classify_parts(status: u16, retry_after: Option<Duration>, parts: ErrorParts) -> LlmError {
    let ErrorParts { message, hint } = parts;
    let message = if message.is_empty() {
        format!("HTTP {status} without a message")
    } else {
        clip(&message, MAX_ERROR_MESSAGE_CHARS)
    };
    let lower = format!("{} {hint}", message.to_ascii_lowercase());
    const CONTEXT_MARKERS: &[&str] = &[
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "context window",
        "too many tokens",
        "token limit",
        "prompt is too long",
        "input is too long",
        "reduce the length",
    ];
    // A spent balance or quota answered as 429 (OpenAI, Moonshot) will not heal by waiting.
    const QUOTA_MARKERS: &[&str] =
        &["insufficient_quota", "exceeded your current quota", "exceeded_current_quota", "insufficient balance"];
    match status {
        429 if QUOTA_MARKERS.iter().any(|m| lower.contains(m)) => LlmError::Permanent { status, message },
        429 | 529 => LlmError::RateLimited { status, retry_after, message },
        503 if retry_after.is_some() => LlmError::RateLimited { status, retry_after, message },
        413 => LlmError::ContextLength { status, message },
        400 if CONTEXT_MARKERS.iter().any(|m| lower.contains(m)) => LlmError::ContextLength { status, message },
        408 | 409 | 425 => LlmError::Transient { status: Some(status), message },
        400..=499 => LlmError::Permanent { status, message },
        _ => LlmError::Transient { status: Some(status), message },
    }
}

/// Reads `{"error": {"message", "code", "type"}}`, `{"error": "..."}`,
/// `{"message", "type", "code"}` (vLLM), `{"detail": ...}` (FastAPI) and `[{...}]`.
fn error_parts_from_value(v: &serde_json::Value) -> ErrorParts {
    use serde_json::Value;
    let v = match v {
        Value::Array(a) => a.first().unwrap_or(&Value::Null),
        other => other,
    };
    let as_text = |x: Option<&Value>| -> Option<String> {
        match x? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    let err = v.get("error");
    let message = match err {
        Some(Value::String(s)) => Some(s.clone()),
        Some(e) => as_text(e.get("message")).or_else(|| as_text(e.get("msg"))),
        None => None,
    }
    .or_else(|| as_text(v.get("message")))
    .or_else(|| as_text(v.get("msg")))
    .or_else(|| match v.get("detail") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(items)) => items.first().and_then(|i| as_text(i.get("msg"))),
        _ => None,
    })
    .unwrap_or_default();
    let mut hint = String::new();
    for src in [err, Some(v)].into_iter().flatten() {
        for key in ["code", "type"] {
            if let Some(t) = as_text(src.get(key)) {
                hint.push_str(&t.to_ascii_lowercase());
                hint.push(' ');
            }
        }
    }
    ErrorParts { message, hint }
}

/// `retry-after-ms` (milliseconds, OpenAI/Azure) or `retry-after` (seconds,
/// decimals allowed, or an HTTP date). `None` when absent or unreadable.
pub fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let v = header("retry-after")?;
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)));
    }
    let date = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

fn clip(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

// ---------------------------------------------------------------- lenient fields

/// A string, number or bool as text; `null`, objects and arrays as `None`.
fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_owned()))
        }
        fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(self)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// A non-negative integer (also from a float or a numeric string); anything else `None`.
fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a token count")
        }
        fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
            Ok(u64::try_from(v).ok())
        }
        fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
            Ok((v.is_finite() && v >= 0.0).then(|| v.round() as u64))
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.trim().parse().ok())
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(self)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// Message content: a string, `null`, or an array of parts whose `text`s are joined.
fn content_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    struct Part {
        #[serde(default, deserialize_with = "opt_string")]
        text: Option<String>,
    }
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("message content")
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_owned()))
        }
        fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(self)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = String::new();
            while let Some(part) = seq.next_element::<serde_json::Value>()? {
                let text = match part {
                    serde_json::Value::String(s) => Some(s),
                    other => Part::deserialize(other).ok().and_then(|p| p.text),
                };
                if let Some(t) = text {
                    out.push_str(&t);
                }
            }
            Ok(Some(out))
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// Tool arguments: the JSON text as sent, or an object (Ollama) re-serialised.
fn arguments_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(other) => Ok(Some(other.to_string())),
    }
}

// ---------------------------------------------------------------- in-flight cap

/// What a finished call tells the limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Success,
    RateLimited,
    Neutral,
}

/// AIMD cap on calls in flight: halve on a 429 (once per "window": a 429 of a
/// call that started before the last decrease does not count again), +1 after
/// [`AIMD_GROWTH_SUCCESSES`] successes, floor 1, ceiling `max_in_flight`.
/// Shrinking takes idle permits at once and forgets permits coming back while there is still debt.
#[derive(Debug)]
struct AimdLimiter {
    sem: Arc<Semaphore>,
    state: Mutex<AimdState>,
    ceiling: usize,
}

#[derive(Debug)]
struct AimdState {
    limit: usize,
    /// Permits to forget as they come back.
    debt: usize,
    successes: u32,
    /// Bumped on every decrease.
    epoch: u64,
}

/// One call's place under the cap; dropping it (also on cancellation) frees the place.
struct Slot {
    limiter: Arc<AimdLimiter>,
    permit: Option<OwnedSemaphorePermit>,
    epoch: u64,
}

impl AimdLimiter {
    fn new(max_in_flight: usize) -> Self {
        let ceiling = max_in_flight.max(1);
        Self {
            sem: Arc::new(Semaphore::new(ceiling)),
            state: Mutex::new(AimdState { limit: ceiling, debt: 0, successes: 0, epoch: 0 }),
            ceiling,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AimdState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn limit(&self) -> usize {
        self.lock().limit
    }

    /// Waits (FIFO) for a place; the caller bounds the wait with its deadline.
    async fn acquire(self: &Arc<Self>) -> Slot {
        // The semaphore is never closed, so an error cannot happen; without a
        // permit the call would merely run uncapped.
        let permit = self.sem.clone().acquire_owned().await.ok();
        let epoch = self.lock().epoch;
        Slot { limiter: self.clone(), permit, epoch }
    }

    fn record(&self, outcome: Outcome, epoch: u64) {
        let mut st = self.lock();
        match outcome {
            Outcome::RateLimited if epoch == st.epoch => {
                let halved = (st.limit / 2).max(1);
                st.debt += st.limit - halved;
                st.limit = halved;
                // Idle permits go at once; those in flight as they come back.
                let taken = self.sem.forget_permits(st.debt);
                st.debt -= taken;
                st.successes = 0;
                st.epoch += 1;
            }
            Outcome::Success => {
                st.successes += 1;
                if st.successes >= AIMD_GROWTH_SUCCESSES && st.limit < self.ceiling {
                    st.limit += 1;
                    st.successes = 0;
                    if st.debt > 0 {
                        st.debt -= 1;
                    } else {
                        self.sem.add_permits(1);
                    }
                }
            }
            Outcome::RateLimited | Outcome::Neutral => {}
        }
    }
}

impl Slot {
    fn finish(self, outcome: Outcome) {
        self.limiter.record(outcome, self.epoch);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            let mut st = self.limiter.lock();
            if st.debt > 0 {
                st.debt -= 1;
                permit.forget();
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[tokio::test]
    async fn cap_halves_once_per_window_and_grows_back_slowly() {
        let l = Arc::new(AimdLimiter::new(16));
        let slots: Vec<Slot> = futures::future::join_all((0..16).map(|_| l.acquire())).await;
        assert_eq!(l.sem.available_permits(), 0);
        // All 16 in flight get a 429: one window, one halving.
        for s in slots {
            s.finish(Outcome::RateLimited);
        }
        assert_eq!(l.limit(), 8);
        assert_eq!(l.sem.available_permits(), 8, "8 permits forgotten as they came back");
        // A 429 in the new window halves again.
        l.acquire().await.finish(Outcome::RateLimited);
        assert_eq!(l.limit(), 4);
        assert_eq!(l.sem.available_permits(), 4);
        for _ in 0..AIMD_GROWTH_SUCCESSES {
            l.acquire().await.finish(Outcome::Success);
        }
        assert_eq!(l.limit(), 5);
        assert_eq!(l.sem.available_permits(), 5);
    }

    #[tokio::test]
    async fn cap_never_drops_below_one_nor_grows_past_the_ceiling() {
        let l = Arc::new(AimdLimiter::new(2));
        for _ in 0..5 {
            l.acquire().await.finish(Outcome::RateLimited);
        }
        assert_eq!(l.limit(), 1);
        assert_eq!(l.sem.available_permits(), 1);
        for _ in 0..(AIMD_GROWTH_SUCCESSES * 5) {
            l.acquire().await.finish(Outcome::Success);
        }
        assert_eq!(l.limit(), 2);
        assert_eq!(l.sem.available_permits(), 2);
    }

    #[test]
    fn retry_after_reads_milliseconds_seconds_and_dates() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(1500)));
        let mut h = HeaderMap::new();
        let later = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        h.insert("retry-after", HeaderValue::from_str(&later).unwrap());
        let d = parse_retry_after(&h).unwrap();
        assert!(d > Duration::from_secs(25) && d <= Duration::from_secs(30), "{d:?}");
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(parse_retry_after(&h), None);
    }

    #[test]
    fn quota_exhaustion_on_429_is_permanent() {
        let body = br#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        let e = classify_error(429, &HeaderMap::new(), body);
        assert!(matches!(e, LlmError::Permanent { status: 429, .. }), "{e:?}");
    }

    #[test]
    fn overload_with_retry_after_is_rate_limited_and_without_is_transient() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        let e = classify_error(503, &h, b"{\"error\":\"overloaded\"}");
        assert!(
            matches!(e, LlmError::RateLimited { status: 503, retry_after: Some(d), .. } if d == Duration::from_secs(2)),
            "{e:?}"
        );
        let e = classify_error(503, &HeaderMap::new(), b"{\"error\":\"overloaded\"}");
        assert!(matches!(e, LlmError::Transient { status: Some(503), .. }), "{e:?}");
    }

    #[test]
    fn fastapi_detail_and_array_bodies_give_their_message() {
        let e = classify_error(422, &HeaderMap::new(), br#"{"detail":[{"loc":["body"],"msg":"field required"}]}"#);
        assert_eq!(e.to_string(), "permanent LLM failure (HTTP 422): field required");
        let e = classify_error(400, &HeaderMap::new(), br#"[{"error":{"message":"Invalid request: Your request exceeded model token limit: 8192","type":"invalid_request_error"}}]"#);
        assert!(matches!(e, LlmError::ContextLength { status: 400, .. }), "{e:?}");
    }

    #[test]
    fn content_parts_and_object_arguments_are_read() {
        let body = br#"{"choices":[{"message":{"content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}],
            "tool_calls":[{"function":{"name":"get_order","arguments":{"order_id":"A1"}}}]},"finish_reason":"tool_calls"}],
            "usage":{"prompt_tokens":"12","completion_tokens":3.0,"prompt_tokens_details":{"cached_tokens":8}}}"#;
        let r = parse_success(200, body, "cfg").unwrap();
        assert_eq!(r.content.as_deref(), Some("Hi there"));
        assert_eq!(r.tool_calls[0].id, "call_0");
        assert_eq!(r.tool_calls[0].arguments, r#"{"order_id":"A1"}"#);
        assert_eq!(r.model, "cfg");
        assert_eq!(
            (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.cached_tokens),
            (Some(12), Some(3), Some(8))
        );
    }
}
