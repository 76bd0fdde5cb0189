//! The OpenAI chat-completions wire format: request and response types, `parse_chat_response` for 2xx bodies, `classify_error` and `parse_retry_after` for the rest.
//!
//! Responses are read into lenient types ([`super::lenient`]): missing, null and
//! extra fields are tolerated, ids kept verbatim, usage fields of every known
//! provider read; error bodies of any shape are classified with the HTTP status kept.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde::{Deserialize, Serialize};
use swarm_core::domain::Usage;
use swarm_core::ports::{ChatMessage, ChatResponse, FinishReason, LlmError, Rejection, ToolCall, ToolSpec};

use super::lenient;
use super::profile::ReasoningField;

/// Longest provider message kept in an error, characters.
const MAX_ERROR_MESSAGE_CHARS: usize = 300;

// ---------------------------------------------------------------- request

#[derive(Serialize)]
pub(super) struct WireRequest<'a> {
    pub(super) model: &'a str,
    pub(super) messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tools: Option<Vec<WireTool<'a>>>,
    /// `"none"` on a tool loop's forced last round; absent (the default, `auto`) otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_completion_tokens: Option<u32>,
    pub(super) stream: bool,
}

/// How reasoning goes back on assistant messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ReasoningOut {
    /// Send the reasoning a message kept.
    pub(super) send: bool,
    /// On a tool-call message, send the field even when no reasoning was kept (as `""`).
    pub(super) require: bool,
    pub(super) field: ReasoningField,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub(super) enum WireMessage<'a> {
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
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning: Option<&'a str>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

impl<'a> WireMessage<'a> {
    pub(super) fn from_message(m: &'a ChatMessage, reasoning: ReasoningOut) -> Self {
        match m {
            ChatMessage::System { content } => Self::System { content },
            ChatMessage::User { content } => Self::User { content },
            ChatMessage::Assistant { content, tool_calls, reasoning_content } => {
                let kept = reasoning_content.as_deref();
                let sent = match (kept, reasoning.send, reasoning.require && !tool_calls.is_empty()) {
                    (Some(r), true, _) | (Some(r), _, true) => Some(r),
                    (None, _, true) => Some(""),
                    _ => None,
                };
                let (reasoning_content, reasoning) = match reasoning.field {
                    ReasoningField::ReasoningContent => (sent, None),
                    ReasoningField::Reasoning => (None, sent),
                };
                Self::assistant(content.as_deref(), tool_calls, reasoning_content, reasoning)
            }
            ChatMessage::Tool { tool_call_id, content } => Self::Tool { tool_call_id, content },
        }
    }

    fn assistant(
        content: Option<&'a str>,
        tool_calls: &'a [ToolCall],
        reasoning_content: Option<&'a str>,
        reasoning: Option<&'a str>,
    ) -> Self {
        Self::Assistant {
            content: content.filter(|c| !c.is_empty()),
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
            reasoning_content,
            reasoning,
        }
    }
}

#[derive(Serialize)]
pub(super) struct WireOutCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireOutFunction<'a>,
}

#[derive(Serialize)]
pub(super) struct WireOutFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
pub(super) struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Serialize)]
pub(super) struct WireToolFunction<'a> {
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
    #[serde(default, deserialize_with = "lenient::opt_string")]
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
    #[serde(default, deserialize_with = "lenient::opt_string")]
    finish_reason: Option<String>,
}

#[derive(Default, Deserialize)]
struct WireInMessage {
    #[serde(default, deserialize_with = "lenient::content_text")]
    content: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    reasoning_content: Option<String>,
    /// OpenRouter and Ollama name it `reasoning`.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireInCall>>,
    /// The pre-tools OpenAI shape, still sent by some servers.
    #[serde(default)]
    function_call: Option<WireInFunction>,
}

#[derive(Deserialize)]
struct WireInCall {
    #[serde(default, deserialize_with = "lenient::opt_string")]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireInFunction>,
}

#[derive(Deserialize)]
struct WireInFunction {
    #[serde(default, deserialize_with = "lenient::opt_string")]
    name: Option<String>,
    #[serde(default, deserialize_with = "lenient::arguments_text")]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    completion_tokens: Option<u64>,
    /// Moonshot (Kimi).
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    cached_tokens: Option<u64>,
    /// DeepSeek.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    prompt_cache_hit_tokens: Option<u64>,
    /// OpenAI, vLLM.
    #[serde(default)]
    prompt_tokens_details: Option<WireTokenDetails>,
}

#[derive(Deserialize)]
struct WireTokenDetails {
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    cached_tokens: Option<u64>,
}

/// Parses a 2xx chat-completions body. Errors (all `Transient`, status kept):
/// not JSON or not the expected shape, no choices, or an unknown/absent
/// finish reason with neither text nor tool calls. A 2xx body that carries an
/// `error` object instead of choices is classified like an error response.
///
/// Reasoning is read from `reasoning_content`, else `reasoning`; a field sent
/// as `""` is kept as `Some("")` (a provider that sends it wants it back), a
/// `null` one is absent.
pub fn parse_chat_response(status: u16, body: &[u8], configured_model: &str) -> Result<ChatResponse, LlmError> {
    parse_with_reasoning_field(status, body, configured_model).map(|(r, _)| r)
}

/// [`parse_chat_response`], also naming the field the reasoning came in (`None` without reasoning).
pub(super) fn parse_with_reasoning_field(
    status: u16,
    body: &[u8],
    configured_model: &str,
) -> Result<(ChatResponse, Option<ReasoningField>), LlmError> {
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
    let (reasoning_content, reasoning_field) = match (message.reasoning_content, message.reasoning) {
        (Some(r), _) => (Some(r), Some(ReasoningField::ReasoningContent)),
        (None, Some(r)) => (Some(r), Some(ReasoningField::Reasoning)),
        (None, None) => (None, None),
    };
    let mut tool_calls: Vec<ToolCall> = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let f = c.function;
            ToolCall {
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
        tool_calls.push(ToolCall {
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
    let response = ChatResponse {
        content,
        tool_calls,
        finish_reason,
        reasoning_content,
        usage,
        model: wire.model.filter(|m| !m.is_empty()).unwrap_or_else(|| configured_model.to_owned()),
    };
    Ok((response, reasoning_field))
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
/// - 400/422 naming a request shape the client can fix → `Rejected` with its
///   [`Rejection`]: reasoning missing on an assistant tool-call message (Kimi,
///   DeepSeek thinking), tool definitions missing next to tool history
///   (Bedrock's `toolConfig`, Anthropic's "must define tools"), or the wrong
///   output-limit field (OpenAI: "Unsupported parameter: 'max_tokens'");
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
    // Classified on the whole text; only the kept message is clipped.
    let lower = format!("{} {hint}", message.to_ascii_lowercase());
    let message = if message.is_empty() {
        format!("HTTP {status} without a message")
    } else {
        clip(&message, MAX_ERROR_MESSAGE_CHARS)
    };
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
    let context = CONTEXT_MARKERS.iter().any(|m| lower.contains(m));
    if matches!(status, 400 | 422)
        && !context
        && let Some(kind) = rejection(&lower)
    {
        return LlmError::Rejected { status, kind, message };
    }
    match status {
        429 if QUOTA_MARKERS.iter().any(|m| lower.contains(m)) => LlmError::Permanent { status, message },
        429 | 529 => LlmError::RateLimited { status, retry_after, message },
        503 if retry_after.is_some() => LlmError::RateLimited { status, retry_after, message },
        413 => LlmError::ContextLength { status, message },
        400 if context => LlmError::ContextLength { status, message },
        408 | 409 | 425 => LlmError::Transient { status: Some(status), message },
        400..=499 => LlmError::Permanent { status, message },
        _ => LlmError::Transient { status: Some(status), message },
    }
}

/// The fixable request shape a 400's text (lower-cased message, code and type) names, if any.
fn rejection(lower: &str) -> Option<Rejection> {
    let reasoning = lower.contains("reasoning_content") || lower.contains("reasoning content");
    let absent = ["missing", "required", "must be", "must include", "must contain", "not found"];
    if reasoning && absent.iter().any(|m| lower.contains(m)) {
        return Some(Rejection::ReasoningMissing);
    }
    const TOOLS_MISSING: &[&str] =
        &["toolconfig field must be defined", "must define tools", "tools must be defined", "tool definitions must"];
    if TOOLS_MISSING.iter().any(|m| lower.contains(m)) || (lower.contains("toolconfig") && lower.contains("toolresult"))
    {
        return Some(Rejection::ToolsMissing);
    }
    let names_limit = lower.contains("max_tokens") || lower.contains("max_completion_tokens");
    let refused = ["unsupported parameter", "not supported", "unsupported_parameter", "instead"];
    if names_limit && refused.iter().any(|m| lower.contains(m)) {
        return Some(Rejection::OutputLimitField);
    }
    None
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

/// `s` cut to `max_chars`, control characters as spaces: provider text goes into log fields.
fn clip(s: &str, max_chars: usize) -> String {
    let cut = match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    };
    cut.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

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
        let r = parse_chat_response(200, body, "cfg").unwrap();
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
