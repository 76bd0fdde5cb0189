//! Port traits: the conversation store, the task queue (sending side), the chat model and the tool gateway.
//!
//! The function cores talk only to these traits (`Arc<dyn Trait>`), so the same
//! code runs on Lambda (AWS adapters), in the local stack (embedded adapters)
//! and in tests. Every error says whether it is transient (retry may help) or
//! permanent. The receiving side of a queue is the event source mapping's
//! business, not a function's: it belongs to the local platform (`infra/local`).

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::approval::{Approval, ApprovalDecision, ApprovalStatus, DecideOutcome, ProposedAction};
use crate::domain::{
    Conversation, ConversationId, ConversationStatus, Handoff, Lease, SubtaskRecord, SubtaskResult, SubtaskStatus,
    TaskMessage, Usage,
};
use crate::effects::{AttemptLease, Effect, EffectChange, EffectOutcome};

/// Errors of a [`ConversationStore`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Throttling, contention (`TransactionConflict`), timeouts: retry with backoff.
    #[error("store temporarily unavailable: {0}")]
    Transient(String),
    /// Validation, missing table, access denied, corrupt item: retrying will not help.
    #[error("store error: {0}")]
    Permanent(String),
}

impl StoreError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
}

/// Outcome of [`ConversationStore::create_conversation`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    Created,
    /// The customer's `Idempotency-Key` was already used by the same request: this is the conversation it created.
    Existing(ConversationId),
    /// The customer's `Idempotency-Key` was already used by another request (its
    /// [`request_hash`](crate::domain::request_hash) differs): nothing written; this is the conversation it created.
    KeyReused(ConversationId),
}

/// What a lease is taken for (see [`ConversationStore::acquire_lease`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeasePhase {
    /// Planning a `PLANNING` conversation (its creator died, or is still at it).
    Planning,
    /// Aggregating `turn`: `RUNNING` with nothing remaining becomes `AGGREGATING`.
    Aggregating { turn: u32 },
}

/// Outcome of [`ConversationStore::acquire_lease`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// This call holds the lease now. `taken_over`: the expired lease it replaced (its holder died or stalled).
    Acquired {
        taken_over: Option<Lease>,
    },
    /// Another holder's lease is live: it moves the conversation on; do nothing now.
    Held(Lease),
    /// The conversation is not in the phase (e.g. `RUNNING` with subtasks open, already `DONE`): nothing written.
    NotInPhase {
        status: ConversationStatus,
        remaining: u32,
    },
    Missing,
}

/// Outcome of [`ConversationStore::begin_attempt`].
// Returned once per store call, never stored in bulk: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum AttemptStart {
    /// The subtask is now `RUNNING` under the caller's lease with `attempts` incremented; the record after the update.
    Started(SubtaskRecord),
    /// The subtask already has a terminal result (a duplicate delivery); the stored record.
    AlreadyFinished(SubtaskRecord),
    /// Another attempt holds a live lease: the stored record (its `lease` says until when).
    Leased(SubtaskRecord),
    /// No such conversation or subtask (a poison message).
    Missing,
}

/// Outcome of [`ConversationStore::record_intent`].
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum IntentOutcome {
    /// The intent is the journal's entry `ordinal - 1` now: dispatch may follow.
    Recorded,
    /// The journal already has this entry (a re-run): the stored one, to replay as recorded.
    Existing(Effect),
    /// The subtask is terminal (the deadline path or a duplicate closed it): do not dispatch.
    Closed(SubtaskRecord),
    /// Another attempt holds the lease now (this one's expired): do not dispatch.
    LeaseLost,
    Missing,
}

/// Outcome of [`ConversationStore::close_subtask`].
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum CloseOutcome {
    Recorded,
    /// Already terminal; the stored record.
    AlreadyFinished(SubtaskRecord),
    /// The journal no longer has the number of entries the caller read: read again and decide again.
    JournalChanged,
    Missing,
}

/// Outcome of [`ConversationStore::record_result`].
// Returned once per store call, never stored in bulk: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum RecordOutcome {
    Recorded,
    /// Another delivery (or the deadline path) recorded a result first; the stored record.
    AlreadyFinished(SubtaskRecord),
    Missing,
}

/// Outcome of [`ConversationStore::count_finished`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountOutcome {
    /// This call counted the subtask; `remaining` after the decrement.
    Counted {
        remaining: u32,
    },
    /// The subtask id was already in the finished set: nothing changed.
    AlreadyCounted,
    Missing,
}

/// The single table keyed by conversation (DESIGN.md "Data").
///
/// Every mutating call is one conditional write (or one transaction), so the
/// invariants hold under at-least-once delivery and concurrent workers.
#[async_trait]
pub trait ConversationStore: Send + Sync {
    /// Writes the conversation item, conditional on the id being new. When
    /// `conversation.idempotency_key` is set, atomically claims
    /// `(customer_id, key)`; a key already claimed returns
    /// [`CreateOutcome::Existing`] and writes nothing.
    async fn create_conversation(&self, conversation: &Conversation) -> Result<CreateOutcome, StoreError>;

    async fn get_conversation(&self, id: &ConversationId) -> Result<Option<Conversation>, StoreError>;

    /// Writes all subtask items and flips the conversation `PLANNING → RUNNING`
    /// with `total = remaining = subtasks.len()`, `notes`, and `usage` added.
    /// Returns `false` (and writes nothing) when the conversation is not in `PLANNING`.
    /// DynamoDB: at most 100 items per transaction, so large plans write the
    /// subtasks first and flip the conversation last.
    async fn start_run(
        &self,
        id: &ConversationId,
        subtasks: &[SubtaskRecord],
        notes: &[String],
        usage: &Usage,
    ) -> Result<bool, StoreError>;

    /// Flips a conversation `from → to` if it is in `from` (a terminal `to` takes it out of the sweep
    /// index). Returns whether this call made the flip. The aggregation flip is [`Self::acquire_lease`].
    async fn transition_conversation(
        &self,
        id: &ConversationId,
        from: ConversationStatus,
        to: ConversationStatus,
    ) -> Result<bool, StoreError>;

    /// Takes the lease of `phase` for `holder` until `until_ms`, in one conditional write:
    /// - [`LeasePhase::Planning`]: the conversation is `PLANNING` and holds no live lease;
    /// - [`LeasePhase::Aggregating`]: the conversation is on `turn` and either `RUNNING` with
    ///   `remaining = 0` (it becomes `AGGREGATING`: the aggregation flip) or `AGGREGATING` under a
    ///   lease that expired before `now_ms` (a takeover).
    ///
    /// A live lease is never taken over ([`LeaseOutcome::Held`]).
    async fn acquire_lease(
        &self,
        id: &ConversationId,
        phase: LeasePhase,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<LeaseOutcome, StoreError>;

    /// `AGGREGATING → DONE` with the reply, adding `usage`; the conversation leaves the sweep index.
    /// Returns whether this call made the flip.
    async fn finish_conversation(&self, id: &ConversationId, reply: &str, usage: &Usage) -> Result<bool, StoreError>;

    /// `PLANNING | RUNNING | AGGREGATING → FAILED` with a reason; the conversation leaves the sweep index.
    /// Returns whether this call made the flip.
    async fn fail_conversation(&self, id: &ConversationId, reason: &str) -> Result<bool, StoreError>;

    /// Conversations of sweep shard `shard` whose deadline is before `now_ms` and that are not terminal,
    /// earliest deadline first, at most `limit`. DynamoDB: a query of the sparse sweep index
    /// (`sweep_shard`, `deadline_ms`), which only non-terminal conversations carry; eventually consistent.
    async fn overdue_conversations(
        &self,
        shard: u32,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<ConversationId>, StoreError>;

    async fn get_subtask(&self, id: &ConversationId, subtask_id: &str) -> Result<Option<SubtaskRecord>, StoreError>;

    /// All subtasks of a conversation, strongly consistent, in id order.
    async fn list_subtasks(&self, id: &ConversationId) -> Result<Vec<SubtaskRecord>, StoreError>;

    /// Flips a subtask's status if it is currently one of `from`. Returns whether this call made the flip.
    async fn transition_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        from: &[SubtaskStatus],
        to: SubtaskStatus,
    ) -> Result<bool, StoreError>;

    /// Marks a non-terminal subtask `RUNNING` under `lease`, increments `attempts` and sets
    /// `started_at_ms` on the first attempt — conditional on no other holder's lease being live
    /// at `now_ms` ([`AttemptStart::Leased`] then, and nothing written).
    async fn begin_attempt(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        lease: &AttemptLease,
        now_ms: i64,
    ) -> Result<AttemptStart, StoreError>;

    /// Ends `holder`'s lease early (a hand-back or a wait): the next delivery need not wait for
    /// it to expire. Nothing happens when another holder has it.
    async fn release_attempt(&self, id: &ConversationId, subtask_id: &str, holder: &str) -> Result<(), StoreError>;

    /// Appends `effect` (its intent, before dispatch) to the subtask's journal as entry
    /// `effect.ordinal - 1` — one conditional write, on the subtask being non-terminal, `holder`
    /// holding its lease and the journal holding exactly `ordinal - 1` entries.
    async fn record_intent(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        holder: &str,
        effect: &Effect,
    ) -> Result<IntentOutcome, StoreError>;

    /// Applies `change` to journal entry `ordinal` unless it is already final (also on a terminal
    /// subtask: an outcome may land after the deadline closed it). Answers the stored entry after
    /// the call (`None`: no such subtask or entry).
    async fn record_effect_outcome(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        ordinal: u32,
        change: &EffectChange,
    ) -> Result<Option<Effect>, StoreError>;

    /// [`ConversationStore::record_result`] for a subtask someone else was running (the deadline
    /// path, the dead-letter consumer), conditional also on its journal still holding
    /// `journal_len` entries: an intent recorded since the caller read it wins
    /// ([`CloseOutcome::JournalChanged`]), so a side effect is never reported as not done.
    async fn close_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        result: &SubtaskResult,
        journal_len: usize,
        now_ms: i64,
    ) -> Result<CloseOutcome, StoreError>;

    /// Writes `approval` unless one with its id exists; answers the stored approval (the
    /// existing one when it did).
    async fn create_approval(&self, approval: &Approval) -> Result<Approval, StoreError>;

    async fn get_approval(&self, approval_id: &str) -> Result<Option<Approval>, StoreError>;

    /// At most `limit` approvals, newest conversation first.
    async fn list_approvals(&self, limit: usize) -> Result<Vec<Approval>, StoreError>;

    /// `PENDING → APPROVED | REJECTED` with who and when (and the token of an approval),
    /// conditional on it being pending and not expired at `decision.at_ms`; a pending approval
    /// past its expiry is marked `EXPIRED` instead.
    async fn decide_approval(
        &self,
        approval_id: &str,
        decision: &ApprovalDecision,
    ) -> Result<DecideOutcome, StoreError>;

    /// `APPROVED → EXECUTED | EXPIRED` with what happened. Returns whether this call made the change.
    async fn finish_approval(
        &self,
        approval_id: &str,
        status: ApprovalStatus,
        outcome: &EffectOutcome,
        at_ms: i64,
    ) -> Result<bool, StoreError>;

    /// Records on a non-terminal conversation that it goes to a person when it ends. Returns
    /// whether the conversation was non-terminal.
    async fn request_handoff(&self, id: &ConversationId, handoff: &Handoff) -> Result<bool, StoreError>;

    /// `AGGREGATING → HANDOFF` with the reply and why, adding `usage`. Returns whether this call made the flip.
    async fn hand_off(
        &self,
        id: &ConversationId,
        reply: &str,
        usage: &Usage,
        handoff: &Handoff,
    ) -> Result<bool, StoreError>;

    /// Saves an interrupted attempt's progress (JSON) on a non-terminal subtask.
    async fn save_checkpoint(&self, id: &ConversationId, subtask_id: &str, checkpoint: &str) -> Result<(), StoreError>;

    /// Writes the subtask's terminal result, usage and tools used, conditional
    /// on the subtask not being terminal yet.
    async fn record_result(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        result: &SubtaskResult,
        usage: &Usage,
        tools_used: &[String],
        now_ms: i64,
    ) -> Result<RecordOutcome, StoreError>;

    /// Exactly-once accounting: one conditional update of the conversation
    /// item adds `subtask_id` to the finished set, decrements `remaining` and
    /// adds `usage`, guarded by "id not yet in the set" (DESIGN.md invariant 1).
    async fn count_finished(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        usage: &Usage,
    ) -> Result<CountOutcome, StoreError>;
}

/// Errors of a [`TaskQueue`].
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue temporarily unavailable: {0}")]
    Transient(String),
    #[error("queue error: {0}")]
    Permanent(String),
}

impl QueueError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
}

/// Longest SQS `DelaySeconds` (15 minutes).
pub const MAX_DELAY_SECONDS: u32 = 900;
/// Most entries in one `SendMessageBatch` call.
pub const SQS_BATCH_LIMIT: usize = 10;

/// Longest visibility timeout of an SQS message (12 hours).
pub const MAX_VISIBILITY_SECONDS: u32 = 43_200;

/// A tasks queue as a function uses it (SQS on AWS): sending, and setting when a message it
/// received comes back.
#[async_trait]
pub trait TaskQueue: Send + Sync {
    /// The queue's name: the last part of its URL and of its ARN (an SQS event record names its
    /// queue by ARN, `eventSourceARN`).
    fn name(&self) -> &str;

    /// Sends every message, delayed by `delay_seconds` (0..=900, SQS `DelaySeconds`).
    /// Adapters send in chunks of at most 10 ([`SQS_BATCH_LIMIT`]) and retry
    /// failed entries; an error means some message may not have been sent.
    /// Each message carries the sending span's trace context as its W3C `traceparent`
    /// message attribute ([`crate::obs::context::current_traceparent`]; none without
    /// telemetry), which the consumer's record span continues.
    async fn send(&self, messages: &[TaskMessage], delay_seconds: u32) -> Result<(), QueueError>;

    /// `ChangeMessageVisibility`: the received message of `receipt_handle` becomes visible again
    /// `seconds` (0..=[`MAX_VISIBILITY_SECONDS`]) from now, instead of after the queue's visibility
    /// timeout. Errors: a stale or unknown receipt handle, or more than the maximum, is permanent.
    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError>;
}

// ---------------------------------------------------------------- chat model

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

// ---------------------------------------------------------------- tool gateway

/// Who is calling: decides which tools are visible and whose data they act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolContext {
    /// Worker role; the gateway credential is chosen from it.
    pub role: String,
    /// Sent to the gateway as a header the model cannot write; overrides any
    /// customer id in the arguments of customer-scoped tools.
    pub customer_id: String,
    pub conversation_id: ConversationId,
    pub subtask_id: String,
}

/// What a tool returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// Text content (JSON text for structured results).
    pub text: String,
    /// The tool (or the gateway, for refusals and fallbacks) reported an error.
    pub is_error: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("tool call timed out after {0:?}")]
    Timeout(Duration),
    /// Gateway or upstream unreachable, 5xx, session lost: retry may help.
    #[error("tool gateway unavailable: {0}")]
    Unavailable(String),
    /// Bad credential, protocol error, unknown tool: retry will not help.
    #[error("tool gateway error: {0}")]
    Permanent(String),
    /// The gateway refused a consent-gated call before dispatch: a person must approve exactly
    /// this action first (typed, from the gateway's error code; never read from text).
    #[error("approval required: {} {} on order {}", .0.tool, .0.amount(), .0.order_id)]
    ApprovalRequired(ProposedAction),
    /// The gateway refused the approval the call carried (expired, or not for this call).
    #[error("approval refused: {0}")]
    ApprovalRefused(String),
}

impl ToolError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Timeout(_) | Self::Unavailable(_))
    }
}

/// The MCP tool gateway as a worker sees it (`tools/list`, `tools/call`).
#[async_trait]
pub trait ToolGateway: Send + Sync {
    /// Tools visible to `ctx.role`, in a stable order.
    async fn list_tools(&self, ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError>;
    /// Calls one tool with JSON-object `arguments`, giving up after `timeout`.
    async fn call_tool(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: serde_json::Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError>;
}
