//! The swarm as an OpenAI-compatible model, pure: an OpenAI chat request checked and reduced to the customer's message, and a turn's outcome and progress written in OpenAI's `chat.completion` / `chat.completion.chunk` shapes and its error shape.
//!
//! The swarm keeps its own memory of a conversation (its turns), so only the **last `user`
//! message** of a request is read: earlier messages, `system` prompts and sampling parameters
//! (`temperature`, `max_tokens`…) are accepted and ignored. What the swarm cannot honour is
//! refused with a 400 in OpenAI's shape: another model than [`MODEL_ID`], `tools` or `functions`
//! sent by the client (the swarm's tools are its own), `n` other than 1, content parts other
//! than text, no user message.

pub mod from_log;
pub mod progress;

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarm_core::domain::{ConversationStatus, Usage};

pub use from_log::LogProgress;
pub use progress::{ProgressLine, ProgressSource, TurnEnd, TurnEvent, WatchError};

/// The one model this API serves (`GET /v1/models`, a request's `model`).
pub const MODEL_ID: &str = "lambda-swarm";

/// `created` of the model in `GET /v1/models` (epoch seconds): when the route was added.
pub const MODEL_CREATED: i64 = 1_764_633_600;

/// The request and response header naming the conversation a message belongs to: absent on a
/// request, the message starts a new conversation; present, it is the conversation's next turn.
pub const CONVERSATION_HEADER: &str = "x-swarm-conversation-id";

/// `finish_reason` of a turn that ended `FAILED`: its reply (or our sentence) is the content.
/// `stop` is every other end (`DONE`, and `HANDOFF`: answered, and a person takes over).
pub const FINISH_FAILED: &str = "error";

/// What a `FAILED` turn with no reply is answered with.
pub const NO_REPLY: &str = "The swarm could not answer this message. Please try again.";

/// The longest a `POST /v1/chat/completions` runs for a swarm whose conversations' deadline is
/// `deadline`: the turn is followed for [`progress::PollPlan::patience`], and 10 s more answer it.
/// The function serving the route needs a timeout above it (a streaming function URL on AWS,
/// not the HTTP API's 30 s); `swarm-local serve` cuts the route there.
pub fn max_duration(deadline: std::time::Duration) -> std::time::Duration {
    progress::PollPlan::for_deadline(deadline).patience + std::time::Duration::from_secs(10)
}

/// An OpenAI chat request as read: every field the swarm looks at, the rest ignored.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Option<Vec<Value>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default)]
    pub tools: Option<Value>,
    #[serde(default)]
    pub functions: Option<Value>,
    /// With authentication off: the customer the message is from (as `customer_id` elsewhere);
    /// with it on, ignored (OpenAI's end-user tag, not an identity).
    #[serde(default)]
    pub user: Option<String>,
}

/// `stream_options`: only `include_usage` is read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// A chat request the swarm can answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatAsk {
    /// The last user message's text (text parts joined by newlines), as sent (validated later
    /// with the API's message rules).
    pub message: String,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with `usage` and no choices.
    pub include_usage: bool,
    pub user: Option<String>,
}

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with its status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OpenAiError {
    pub status: StatusCode,
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `permission_error`, `not_found_error`,
    /// `conflict_error`, `rate_limit_error`, `timeout_error` or `server_error`.
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<&'static str>,
    pub code: &'static str,
    /// `Retry-After` of a 429 or a 409 in progress, in whole seconds.
    pub retry_after_secs: Option<u64>,
}

impl OpenAiError {
    /// 400 `invalid_request_error` about `param`.
    pub fn invalid(param: Option<&'static str>, code: &'static str, message: impl Into<String>) -> Self {
        let kind = "invalid_request_error";
        Self { status: StatusCode::BAD_REQUEST, message: message.into(), kind, param, code, retry_after_secs: None }
    }

    /// An error of another status: its `type` follows the status ([`error_type`]).
    pub fn of_status(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), kind: error_type(status), param: None, code, retry_after_secs: None }
    }

    /// Whether a client may send the same request again later (429, 409 in progress, 5xx).
    pub fn is_transient(&self) -> bool {
        self.status == StatusCode::TOO_MANY_REQUESTS
            || self.status == StatusCode::CONFLICT
            || self.status.is_server_error()
    }

    /// The body.
    pub fn body(&self) -> Value {
        serde_json::json!({"error": {
            "message": self.message, "type": self.kind, "param": self.param, "code": self.code,
        }})
    }
}

/// OpenAI's error `type` for an HTTP status.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 | 410 => "not_found_error",
        409 => "conflict_error",
        429 => "rate_limit_error",
        504 => "timeout_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

/// Checks `request` against what the swarm can answer. Pure.
///
/// Errors (all 400 `invalid_request_error`): `model` missing (`missing_model`) or not
/// [`MODEL_ID`] (`model_not_found`); `tools` or `functions` non-empty (`tools_not_supported`);
/// `n` not 1 (`n_not_supported`); no `user` message (`no_user_message`); a user message whose
/// content is neither a string nor text parts (`unsupported_content`).
pub fn check_request(request: &ChatRequest) -> Result<ChatAsk, OpenAiError> {
    match request.model.as_deref() {
        None | Some("") => {
            return Err(OpenAiError::invalid(Some("model"), "missing_model", "you must provide a model parameter"));
        }
        Some(MODEL_ID) => {}
        Some(other) => {
            return Err(OpenAiError::invalid(
                Some("model"),
                "model_not_found",
                format!("the model `{}` does not exist; this API serves `{MODEL_ID}`", bounded(other)),
            ));
        }
    }
    for (param, value) in [("tools", &request.tools), ("functions", &request.functions)] {
        if value.as_ref().is_some_and(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty())) {
            return Err(OpenAiError::invalid(
                Some(param),
                "tools_not_supported",
                format!("`{param}` are not supported: the swarm calls its own tools; send the message alone"),
            ));
        }
    }
    if let Some(n) = request.n
        && n != 1
    {
        return Err(OpenAiError::invalid(
            Some("n"),
            "n_not_supported",
            format!("n must be 1 (got {n}): the swarm answers each message once"),
        ));
    }
    let last_user = request
        .messages
        .iter()
        .flatten()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .ok_or_else(|| {
            OpenAiError::invalid(
                Some("messages"),
                "no_user_message",
                "messages must hold at least one message of role `user`",
            )
        })?;
    let message = user_text(last_user.get("content"))?;
    Ok(ChatAsk {
        message,
        stream: request.stream.unwrap_or(false),
        include_usage: request.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false),
        user: request.user.clone(),
    })
}

/// A user message's text: a string, or the `text` of its parts of type `text` joined by newlines.
fn user_text(content: Option<&Value>) -> Result<String, OpenAiError> {
    let unsupported = || {
        OpenAiError::invalid(
            Some("messages"),
            "unsupported_content",
            "the last user message's content must be a string or parts of type `text`",
        )
    };
    match content {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(text)) => texts.push(text),
                    _ => return Err(unsupported()),
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(unsupported()),
    }
}

/// At most 64 characters of a client's value, for an error message.
fn bounded(value: &str) -> String {
    value.chars().take(64).collect()
}

/// Which conversation and turn an answer is of (the `swarm` member OpenAI clients ignore).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwarmTurn {
    pub conversation_id: String,
    pub turn: u32,
    /// The turn's status when the answer was written (`RUNNING` on a stream's first chunk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ConversationStatus>,
}

impl SwarmTurn {
    /// The completion's `id`: one per turn, so a retried request answers with the same id.
    pub fn completion_id(&self) -> String {
        format!("chatcmpl-{}-{}", self.conversation_id, self.turn)
    }
}

/// OpenAI's `usage` from the turn's recorded usage: tokens a provider did not report count 0.
pub fn openai_usage(usage: Option<&Usage>) -> Value {
    let usage = usage.copied().unwrap_or_default();
    let prompt = usage.prompt_tokens.unwrap_or(0);
    let completion = usage.completion_tokens.unwrap_or(0);
    let mut value = serde_json::json!({
        "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
    });
    if let Some(cached) = usage.cached_tokens {
        value["prompt_tokens_details"] = serde_json::json!({"cached_tokens": cached});
    }
    value
}

/// The `finish_reason` and content of a turn that ended as `end` says.
pub fn finish(end: &TurnEnd) -> (&'static str, String) {
    let reason = if end.status == ConversationStatus::Failed { FINISH_FAILED } else { "stop" };
    (reason, end.reply.clone().unwrap_or_else(|| NO_REPLY.to_owned()))
}

/// The non-streamed answer (`chat.completion`) of a turn that ended as `end`; `created` in epoch seconds.
pub fn completion(turn: &SwarmTurn, end: &TurnEnd, created: i64) -> Value {
    let (reason, content) = finish(end);
    let swarm = SwarmTurn { status: Some(end.status), ..turn.clone() };
    serde_json::json!({
        "id": turn.completion_id(),
        "object": "chat.completion",
        "created": created,
        "model": MODEL_ID,
        "system_fingerprint": null,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": null},
            "logprobs": null,
            "finish_reason": reason,
        }],
        "usage": openai_usage(end.usage.as_ref()),
        "swarm": swarm,
    })
}

/// One `chat.completion.chunk` of a stream with `delta` and `finish_reason` (the `swarm` member
/// when given: the first chunk's).
pub fn chunk(turn: &SwarmTurn, created: i64, delta: Value, finish_reason: Option<&str>, swarm: bool) -> Value {
    let mut value = serde_json::json!({
        "id": turn.completion_id(),
        "object": "chat.completion.chunk",
        "created": created,
        "model": MODEL_ID,
        "system_fingerprint": null,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    });
    if swarm {
        value["swarm"] = serde_json::json!(turn);
    }
    value
}

/// The last chunk of a stream with `stream_options.include_usage`: no choices, the turn's usage.
pub fn usage_chunk(turn: &SwarmTurn, created: i64, usage: Option<&Usage>) -> Value {
    serde_json::json!({
        "id": turn.completion_id(),
        "object": "chat.completion.chunk",
        "created": created,
        "model": MODEL_ID,
        "system_fingerprint": null,
        "choices": [],
        "usage": openai_usage(usage),
    })
}

/// `GET /v1/models`: OpenAI's list with the one model.
pub fn models() -> Value {
    serde_json::json!({"object": "list", "data": [
        {"id": MODEL_ID, "object": "model", "created": MODEL_CREATED, "owned_by": "lambda-swarm"},
    ]})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests;
