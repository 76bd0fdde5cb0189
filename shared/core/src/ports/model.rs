//! The chat model port: an OpenAI-compatible chat-completions model (or the offline stand-in), its request and response shapes and its errors.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::domain::Usage;

/// What a chat request is for; lets a client pick a model (the sub model compresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// Split the customer's message into subtasks (answer: a JSON plan).
    Plan,
    /// One round of a worker's tool loop.
    Work,
    /// Write the customer's reply from the subtask results.
    Reply,
    /// Summarise older transcript rounds.
    Compress,
}

/// A tool call the model asked for. `id` is echoed back verbatim as `tool_call_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The raw JSON text the model produced; may be invalid.
    pub arguments: String,
}

/// A chat message in OpenAI chat-completions shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        #[serde(default)]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Provider reasoning text (DeepSeek/Kimi thinking); never shown to the customer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<String>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

/// A tool as offered to the model: name, description, JSON Schema of the arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub input_schema: serde_json::Value,
    /// The gateway's configuration says this tool has side effects: the worker journals each
    /// call ([`crate::effects`]) and sends it with a positional idempotency key. Never sent to the model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub side_effecting: bool,
}

/// Whether the model may call the offered tools in this request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (the provider's default; nothing is sent).
    #[default]
    Auto,
    /// No call in this answer (`tool_choice: "none"`): the worker's last round. The tools are still
    /// sent, because providers refuse a transcript with tool calls but no tool definitions.
    None,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub purpose: Purpose,
    pub messages: Vec<ChatMessage>,
    /// Tools offered, in a stable order (prefix caching); empty for no tools.
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// Tokens the answer of this purpose needs (the visible text or tool calls, not the reasoning).
    /// The client turns it into the endpoint's output limit: the field its preset names
    /// (`max_tokens`, `max_completion_tokens` or none), plus a reasoning budget for thinking
    /// models (`LLM_REASONING_BUDGET`); `None` leaves the limit to the endpoint's settings.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub tool_choice: ToolChoice,
}

/// Why the model stopped. Unknown values are kept, not rejected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    Length,
    ContentFilter,
    Other(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// Text for the customer; `None` when empty or absent.
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
    /// Kept aside, never shown to the customer; sent back on the assistant message it came with.
    /// `Some("")` when the provider sent the field empty (Kimi wants it back even then); `None`
    /// when it sent none (or `null`).
    pub reasoning_content: Option<String>,
    pub usage: Usage,
    /// The model that answered (as reported, else as configured).
    pub model: String,
}

/// A request shape a provider refused with a 400 that the client can fix by sending the request
/// once more, differently. Classified once, in the client, from the provider's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// A thinking model wants its reasoning back on assistant tool-call messages (Kimi: "thinking
    /// is enabled but reasoning_content is missing in assistant tool call message").
    ReasoningMissing,
    /// The transcript holds tool calls or results but the request defines no tools (Bedrock-style
    /// gateways: "The toolConfig field must be defined when using toolUse and toolResult content blocks").
    ToolsMissing,
    /// The output-limit field is the wrong one for this model (OpenAI: "Unsupported parameter:
    /// 'max_tokens' … Use 'max_completion_tokens' instead").
    OutputLimitField,
}

impl Rejection {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReasoningMissing => "reasoning missing",
            Self::ToolsMissing => "tool definitions missing",
            Self::OutputLimitField => "wrong output-limit field",
        }
    }
}

/// Errors of a [`ChatModel`], classified as the retry rules need them.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LlmError {
    /// HTTP 429 and the like. `retry_after` from `Retry-After` / `retry-after-ms`.
    #[error("rate limited (HTTP {status}): {message}")]
    RateLimited { status: u16, retry_after: Option<Duration>, message: String },
    /// 5xx, timeouts, overload, non-JSON bodies, unknown finish reasons.
    #[error("transient LLM failure{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Transient { status: Option<u16>, message: String },
    /// The request is too long for the model: compress and retry once, else fail.
    #[error("context length exceeded (HTTP {status}): {message}")]
    ContextLength { status: u16, message: String },
    /// Auth, balance, bad request: no retry.
    #[error("permanent LLM failure (HTTP {status}): {message}")]
    Permanent { status: u16, message: String },
    /// A request shape the provider refused; the client resends once fixed, so a caller sees
    /// this only when the fixed request was refused too. Permanent.
    #[error("request refused (HTTP {status}, {}): {message}", kind.as_str())]
    Rejected { status: u16, kind: Rejection, message: String },
}

impl LlmError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::RateLimited { .. } | Self::Transient { .. })
    }
}

/// An OpenAI-compatible chat-completions model (or the offline stand-in).
#[async_trait]
pub trait ChatModel: Send + Sync {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;
    /// Human-readable label, e.g. `kimi-k2 @ api.moonshot.cn` or `offline model`.
    fn label(&self) -> String;
    /// The configured model name (`gen_ai.request.model`, the `model` label of the LLM
    /// metrics): a value of configuration, never of a response. Defaults to [`Self::label`].
    fn model_name(&self) -> String {
        self.label()
    }
    /// `true` for the deterministic offline model; replies then say so.
    fn is_offline(&self) -> bool {
        false
    }
}
