//! Domain values of the swarm: conversations, plans, subtasks, results, usage, and the status machines.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::ids::{ConversationId, SubtaskId};

/// Upper bound on subtasks in one plan (DESIGN.md "up to 100 independent subtasks").
pub const MAX_SUBTASKS: usize = 100;
/// Default message limit in characters (DESIGN.md API section).
pub const MAX_MESSAGE_CHARS: usize = 8_000;
/// Default deadline of a conversation, in seconds after creation (the timing table's `conversation.deadline_secs`).
pub const DEFAULT_DEADLINE_SECS: u64 = crate::timings::Timings::STANDARD.conversation.deadline.as_secs();
/// Longest text kept inline in a result; longer text is truncated so items stay
/// far below DynamoDB's 400 KB item limit.
pub const MAX_RESULT_CHARS: usize = 16_000;
/// Longest reply kept, in bytes of UTF-8 (not characters: CJK text takes 3 bytes a character).
///
/// The reply lives on the conversation item, and DynamoDB refuses an item over 400 KB
/// (`ValidationException: Item size has exceeded the maximum allowed size`), attribute names
/// included. The rest of the item stays far below the remaining 200 KB: the query (8,000
/// characters, 32 KB at most), the finished set (100 ids), notes, the failure reason (2,000
/// characters), usage, lease and keys. [`crate::reply::compose_reply`] and the aggregator
/// bound every reply to this, however many subtasks answered at length.
pub const MAX_REPLY_BYTES: usize = 200_000;
/// Longest subtask instruction kept from a plan, in characters.
pub const MAX_INSTRUCTION_CHARS: usize = 2_000;
/// Largest checkpoint (an interrupted attempt's progress, JSON) kept on a subtask
/// item, in bytes of UTF-8. The worker saves no larger checkpoint (the subtask
/// restarts instead); a store cuts anything larger at a character boundary, so
/// the item stays far below DynamoDB's 400 KB item limit.
pub const MAX_CHECKPOINT_BYTES: usize = 100_000;

/// Lifecycle of a conversation: `PLANNING → RUNNING → AGGREGATING → DONE`, or `FAILED`, or
/// `HANDOFF` (answered, and handed to a person: [`Handoff`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConversationStatus {
    Planning,
    Running,
    Aggregating,
    Done,
    Failed,
    /// Answered, and a person takes over (the customer asked, tools kept failing, or policy).
    Handoff,
}

impl ConversationStatus {
    /// Whether `self → next` is an allowed transition.
    pub fn can_become(self, next: Self) -> bool {
        use ConversationStatus::*;
        matches!(
            (self, next),
            (Planning, Running)
                | (Planning, Failed)
                | (Running, Aggregating)
                | (Running, Failed)
                | (Aggregating, Done)
                | (Aggregating, Failed)
                | (Aggregating, Handoff)
        )
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Done | Self::Failed | Self::Handoff)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Planning => "PLANNING",
            Self::Running => "RUNNING",
            Self::Aggregating => "AGGREGATING",
            Self::Done => "DONE",
            Self::Failed => "FAILED",
            Self::Handoff => "HANDOFF",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PLANNING" => Self::Planning,
            "RUNNING" => Self::Running,
            "AGGREGATING" => Self::Aggregating,
            "DONE" => Self::Done,
            "FAILED" => Self::Failed,
            "HANDOFF" => Self::Handoff,
            _ => return None,
        })
    }
}

impl fmt::Display for ConversationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Lifecycle of a subtask: `PENDING` (waits for dependencies) or `QUEUED` →
/// `RUNNING` → `SUCCEEDED | FAILED | SKIPPED | AWAITING_APPROVAL | SUBMITTED`.
///
/// `AWAITING_APPROVAL` and `SUBMITTED` are terminal for the conversation's accounting (it
/// answers without waiting for a person or a slow tool); what happens to their side effects
/// afterwards is recorded in the subtask's journal ([`crate::effects`]) and its approvals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SubtaskStatus {
    Pending,
    Queued,
    Running,
    Succeeded,
    Failed,
    Skipped,
    /// A side effect waits for a person's approval (consent above the gateway's threshold).
    AwaitingApproval,
    /// A side effect was dispatched and its outcome is not known yet: "submitted, being confirmed".
    Submitted,
}

impl SubtaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Skipped | Self::AwaitingApproval | Self::Submitted)
    }

    /// Whether `self → next` is an allowed transition.
    pub fn can_become(self, next: Self) -> bool {
        use SubtaskStatus::*;
        match (self, next) {
            (Pending, Queued) | (Queued, Running) | (Running, Running) | (Pending, Running) => true,
            (from, to) if !from.is_terminal() && to.is_terminal() => true,
            _ => false,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Queued => "QUEUED",
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Skipped => "SKIPPED",
            Self::AwaitingApproval => "AWAITING_APPROVAL",
            Self::Submitted => "SUBMITTED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PENDING" => Self::Pending,
            "QUEUED" => Self::Queued,
            "RUNNING" => Self::Running,
            "SUCCEEDED" => Self::Succeeded,
            "FAILED" => Self::Failed,
            "SKIPPED" => Self::Skipped,
            "AWAITING_APPROVAL" => Self::AwaitingApproval,
            "SUBMITTED" => Self::Submitted,
            _ => return None,
        })
    }
}

impl fmt::Display for SubtaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One independent piece of the customer's message, as planned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subtask {
    /// Short id unique within the conversation (`w01`, `w02`, …).
    pub id: SubtaskId,
    /// What the worker should find out or do, in the customer's language.
    pub instruction: String,
    /// Allowlist of tool names (as listed by the gateway) this subtask may use.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Ids of subtasks whose results this one needs first.
    #[serde(default)]
    pub depends_on: Vec<SubtaskId>,
}

/// A validated plan: at most [`MAX_SUBTASKS`] subtasks, plus notes for the reply
/// (e.g. subtasks dropped over the limit).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub subtasks: Vec<Subtask>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One tool call a worker made, for the record (never the tool's output).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    pub name: String,
    /// `true` when the tool answered without error.
    pub ok: bool,
    /// Why the call failed or was refused (denied, timed out, bad arguments…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why a subtask failed: one stable code per cause, the value every decision
/// on a failure reads (never the reason text), and the `error_code` customers
/// see on `GET /conversations/{id}`. Serialised as [`FailureKind::code`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The conversation's deadline passed before the subtask finished.
    DeadlinePassed,
    /// The language model (or the compressing model) refused or kept failing.
    ModelFailed,
    /// The model answered with no text, or gave none within the round limit.
    NoAnswer,
    /// The tool gateway could not be reached (transient).
    ToolsUnavailable,
    /// The tool gateway refused this role or credential (permanent).
    ToolsRefused,
    /// The subtask ran out of invocation time on every hand-back, with nothing found.
    OutOfTime,
    /// The conversation's token budget was used up before the subtask started.
    TokenBudgetExhausted,
    /// The message reached the dead-letter queue: given up after repeated failed deliveries.
    DeadLetter,
    /// A fault of ours (a broken transcript), an item written before kinds
    /// existed, or a kind this version does not know.
    #[default]
    #[serde(other)]
    Internal,
}

impl FailureKind {
    /// Every kind, in declaration order.
    pub const ALL: [Self; 9] = [
        Self::DeadlinePassed,
        Self::ModelFailed,
        Self::NoAnswer,
        Self::ToolsUnavailable,
        Self::ToolsRefused,
        Self::OutOfTime,
        Self::TokenBudgetExhausted,
        Self::DeadLetter,
        Self::Internal,
    ];

    /// The stable code (`snake_case`), as stored and as customers see it.
    pub fn code(self) -> &'static str {
        match self {
            Self::DeadlinePassed => "deadline_passed",
            Self::ModelFailed => "model_failed",
            Self::NoAnswer => "no_answer",
            Self::ToolsUnavailable => "tools_unavailable",
            Self::ToolsRefused => "tools_refused",
            Self::OutOfTime => "out_of_time",
            Self::TokenBudgetExhausted => "token_budget_exhausted",
            Self::DeadLetter => "dead_letter",
            Self::Internal => "internal",
        }
    }

    /// The short text a customer sees for this kind (`GET … subtasks[].error`): written by us,
    /// never a provider's, a gateway's or a tool's text, which stays in the logs and the item's `reason`.
    pub fn customer_message(self) -> &'static str {
        match self {
            Self::DeadlinePassed => "This part could not be finished before the conversation's time limit.",
            Self::ModelFailed => "Our assistant could not work on this part right now.",
            Self::NoAnswer => "Our assistant found no answer for this part.",
            Self::ToolsUnavailable => "The shop's systems could not be reached for this part; please try again later.",
            Self::ToolsRefused => "This part needs an action our assistant may not take.",
            Self::OutOfTime => "This part took too long and was stopped.",
            Self::TokenBudgetExhausted => "This conversation reached its processing limit before this part.",
            Self::DeadLetter => "This part failed repeatedly and was given up.",
            Self::Internal => "Something went wrong on our side with this part.",
        }
    }

    /// Whether the subtask failed for lack of time (the conversation's deadline or its own hand-backs).
    pub fn is_lack_of_time(self) -> bool {
        matches!(self, Self::DeadlinePassed | Self::OutOfTime)
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.code())
    }
}

/// A subtask's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SubtaskResult {
    Succeeded {
        text: String,
        #[serde(default)]
        tool_calls: Vec<ToolCallRecord>,
    },
    Failed {
        /// The decision readers take: the reply's plain problem, the customer's `error_code`.
        /// Items written before kinds existed have none and read as [`FailureKind::Internal`].
        #[serde(default)]
        kind: FailureKind,
        /// What happened, for operators (logs, `GET`'s `error`); never decided on.
        reason: String,
    },
    Skipped {
        dependency: SubtaskId,
    },
    /// Side effects wait for a person's approval: exactly what would be done, one per approval.
    AwaitingApproval {
        approvals: Vec<crate::approval::PendingApproval>,
    },
    /// Side effects were dispatched and their outcome is not known yet ("submitted, being
    /// confirmed"); the outcome lands in the journal when it is learned.
    Submitted {
        /// The tools whose calls are being confirmed, in call order.
        tools: Vec<String>,
    },
}

impl SubtaskResult {
    /// A failed result of `kind`, with the operator's `reason`.
    pub fn failed(kind: FailureKind, reason: impl Into<String>) -> Self {
        Self::Failed { kind, reason: reason.into() }
    }

    /// The failure kind, when the result is a failure.
    pub fn failure_kind(&self) -> Option<FailureKind> {
        match self {
            Self::Failed { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    pub fn status(&self) -> SubtaskStatus {
        match self {
            Self::Succeeded { .. } => SubtaskStatus::Succeeded,
            Self::Failed { .. } => SubtaskStatus::Failed,
            Self::Skipped { .. } => SubtaskStatus::Skipped,
            Self::AwaitingApproval { .. } => SubtaskStatus::AwaitingApproval,
            Self::Submitted { .. } => SubtaskStatus::Submitted,
        }
    }

    /// The result with its text cut to at most [`MAX_RESULT_CHARS`] characters (a reason to 2,000),
    /// display control characters removed.
    pub fn bounded(self) -> Self {
        // Model and tool output on its way to an item, a terminal and a reply: no display controls.
        match self {
            Self::Succeeded { text, tool_calls } => {
                Self::Succeeded { text: crate::untrusted::clean_text(&text, MAX_RESULT_CHARS), tool_calls }
            }
            Self::Failed { kind, reason } => {
                Self::Failed { kind, reason: crate::untrusted::clean_text(&reason, 2_000) }
            }
            other => other,
        }
    }
}

/// Cuts `s` to at most `max` characters (not bytes), marking the cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(14)).collect();
    out.push_str(" …[truncated]");
    out
}

/// The marker a cut text ends with.
pub const TRUNCATION_MARK: &str = " …[truncated]";

/// Cuts `s` to at most `max_bytes` bytes of UTF-8, at a character boundary, marking the cut
/// (the mark counts against `max_bytes`; below its length the text is cut without it).
pub fn truncate_bytes(s: &str, max_bytes: usize) -> String {
    if s.len() <= max_bytes {
        return s.to_owned();
    }
    let (room, mark) = if max_bytes >= TRUNCATION_MARK.len() {
        (max_bytes - TRUNCATION_MARK.len(), TRUNCATION_MARK)
    } else {
        (max_bytes, "")
    };
    let mut end = room;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + mark.len());
    out.push_str(&s[..end]);
    out.push_str(mark);
    out
}

/// Token usage and cost. A field the provider did not report stays `None`
/// (shown as `null`), never 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Field-wise sum; unknown + unknown stays unknown, unknown + n is n.
    pub fn add(&self, other: &Usage) -> Usage {
        fn add_u(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            }
        }
        Usage {
            prompt_tokens: add_u(self.prompt_tokens, other.prompt_tokens),
            completion_tokens: add_u(self.completion_tokens, other.completion_tokens),
            cached_tokens: add_u(self.cached_tokens, other.cached_tokens),
            cost_usd: match (self.cost_usd, other.cost_usd) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.prompt_tokens.is_none()
            && self.completion_tokens.is_none()
            && self.cached_tokens.is_none()
            && self.cost_usd.is_none()
    }

    /// Total tokens known (prompt + completion).
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.unwrap_or(0) + self.completion_tokens.unwrap_or(0)
    }
}

/// A lease on a conversation's current phase: planning (held by its creator, or a retry that took it
/// over) or aggregating one turn (held by whoever won `RUNNING → AGGREGATING`). A later trigger
/// takes the phase over once `until_ms` has passed, never while the lease is live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds it (`aggregator:<uuid>`, `deadline:<uuid>`, `orchestrator:<uuid>`): for logs and takeovers.
    pub holder: String,
    /// Unix epoch milliseconds after which another trigger may take over.
    pub until_ms: i64,
    /// The turn it was taken for: a later turn of the conversation gets its own.
    pub turn: u32,
}

/// The shard of the sweep index a conversation id falls in (FNV-1a of the id, modulo `shards`):
/// stable, spread evenly, so no single partition of the index is hot.
pub fn sweep_shard(id: &ConversationId, shards: u32) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in id.as_str().bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % shards.max(1)
}

/// A hash of what a create request asked for (customer and message, 16 hex digits, FNV-1a 64): an
/// `Idempotency-Key` reused with another request is told apart from a retry of the same one.
pub fn request_hash(customer_id: &str, message: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in customer_id.bytes().chain([0u8]).chain(message.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The conversation item (`PK = CONV#<id>`, `SK = META`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub id: ConversationId,
    pub customer_id: String,
    pub status: ConversationStatus,
    /// The customer's message.
    pub query: String,
    /// Creation time, Unix epoch milliseconds.
    pub created_at_ms: i64,
    /// After this instant (Unix epoch milliseconds) the conversation is aggregated with what it has.
    pub deadline_ms: i64,
    /// Subtasks planned.
    pub total: u32,
    /// Subtasks not yet finished; 0 triggers the aggregator.
    pub remaining: u32,
    /// Ids of subtasks already counted (the exactly-once guard).
    #[serde(default)]
    pub finished: BTreeSet<String>,
    #[serde(default)]
    pub reply: Option<String>,
    #[serde(default)]
    pub usage: Usage,
    /// Plan notes for the reply (e.g. subtasks dropped over the limit).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Why the conversation failed, when it did.
    #[serde(default)]
    pub error: Option<String>,
    /// The `Idempotency-Key` it was created with, if any.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// The W3C `traceparent` of the request that created it: the stream-triggered aggregator
    /// continues the conversation's trace from it (it has no message to carry one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
    /// Why a person takes over: requested while it runs (the customer asked), set with the
    /// final `HANDOFF` status otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Handoff>,
    /// [`request_hash`] of the request that created it (stored with the idempotency key's claim).
    #[serde(default)]
    pub request_hash: Option<String>,
    /// The turn being answered (0: the first message).
    #[serde(default)]
    pub turn: u32,
    /// The lease on the current phase (planning or aggregating), if one was taken.
    #[serde(default)]
    pub lease: Option<Lease>,
    /// Shard of the sweep index while the conversation is not terminal; removed in the write that
    /// makes it terminal, so the sparse index holds only conversations that may still need the sweep.
    #[serde(default)]
    pub sweep_shard: Option<u32>,
    /// DynamoDB TTL attribute: Unix epoch seconds after which the item may be deleted.
    pub ttl: i64,
}

/// Why a conversation is handed to a person.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandoffReason {
    /// The customer asked for a person.
    CustomerAsked,
    /// The tools kept failing ([`crate::handoff::TOOL_FAILURES_FOR_HANDOFF`]).
    ToolFailures,
    /// The gateway's policy refused what was asked.
    Policy,
}

impl HandoffReason {
    pub fn code(self) -> &'static str {
        match self {
            Self::CustomerAsked => "customer_asked",
            Self::ToolFailures => "tool_failures",
            Self::Policy => "policy",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "customer_asked" => Self::CustomerAsked,
            "tool_failures" => Self::ToolFailures,
            "policy" => Self::Policy,
            _ => return None,
        })
    }
}

/// A hand-off to a person: why, and when it was decided (Unix epoch milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    pub reason: HandoffReason,
    pub at_ms: i64,
}

impl Conversation {
    /// A new conversation in `PLANNING`, with the default deadline and a 7-day TTL.
    pub fn new(customer_id: &str, query: &str, now_ms: i64, deadline_secs: u64) -> Self {
        Self {
            id: ConversationId::new(),
            customer_id: customer_id.to_owned(),
            status: ConversationStatus::Planning,
            query: query.to_owned(),
            created_at_ms: now_ms,
            deadline_ms: now_ms + (deadline_secs as i64) * 1000,
            total: 0,
            remaining: 0,
            finished: BTreeSet::new(),
            reply: None,
            usage: Usage::default(),
            notes: Vec::new(),
            error: None,
            idempotency_key: None,
            trace_parent: None,
            handoff: None,
            request_hash: None,
            turn: 0,
            lease: None,
            sweep_shard: None,
            ttl: now_ms / 1000 + 7 * 24 * 3600,
        }
    }
}

/// A subtask item (`PK = CONV#<id>`, `SK = TASK#<subtask id>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubtaskRecord {
    pub conversation_id: ConversationId,
    pub subtask: Subtask,
    /// Worker role, decided by code from the tool → role table, never by the model.
    pub role: String,
    /// Ids of the subtasks that depend on this one (the inverse of `depends_on`,
    /// set at planning), so a finishing subtask without dependents skips the sibling read.
    #[serde(default)]
    pub dependents: Vec<SubtaskId>,
    pub status: SubtaskStatus,
    /// Worker attempts started (each delivery that began work).
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub result: Option<SubtaskResult>,
    #[serde(default)]
    pub usage: Usage,
    /// Names of the tools called, in call order.
    #[serde(default)]
    pub tools_used: Vec<String>,
    /// Saved progress of an interrupted attempt (JSON), bounded in size.
    #[serde(default)]
    pub checkpoint: Option<String>,
    #[serde(default)]
    pub started_at_ms: Option<i64>,
    #[serde(default)]
    pub finished_at_ms: Option<i64>,
    /// The journal of side-effecting calls, in call order (entry `n - 1` is the `n`-th call):
    /// each intent is recorded before dispatch, its outcome after ([`crate::effects`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<crate::effects::Effect>,
    /// Who runs the subtask now and until when: a second delivery waits for it to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<crate::effects::AttemptLease>,
    /// Same as the conversation's TTL.
    pub ttl: i64,
}

impl SubtaskRecord {
    /// A fresh record: `QUEUED` when it has no dependencies, else `PENDING`.
    pub fn new(conversation: &Conversation, subtask: Subtask, role: String) -> Self {
        let status = if subtask.depends_on.is_empty() { SubtaskStatus::Queued } else { SubtaskStatus::Pending };
        Self {
            conversation_id: conversation.id.clone(),
            subtask,
            role,
            dependents: Vec::new(),
            status,
            attempts: 0,
            result: None,
            usage: Usage::default(),
            tools_used: Vec::new(),
            checkpoint: None,
            started_at_ms: None,
            finished_at_ms: None,
            effects: Vec::new(),
            lease: None,
            ttl: conversation.ttl,
        }
    }
}

/// Fills each record's `dependents` from the others' `depends_on`.
pub fn link_dependents(records: &mut [SubtaskRecord]) {
    let pairs: Vec<(SubtaskId, SubtaskId)> = records
        .iter()
        .flat_map(|r| r.subtask.depends_on.iter().map(move |d| (d.clone(), r.subtask.id.clone())))
        .collect();
    for r in records.iter_mut() {
        r.dependents =
            pairs.iter().filter(|(parent, _)| *parent == r.subtask.id).map(|(_, child)| child.clone()).collect();
    }
}

/// The body of a tasks-queue message: ids only, never results (SQS 256 KB limit).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskMessage {
    /// Run one subtask.
    Run {
        conversation_id: ConversationId,
        subtask_id: SubtaskId,
        /// How often this subtask was handed back for lack of time (0 on first send).
        #[serde(default)]
        handbacks: u32,
    },
    /// The conversation's deadline passed: aggregate with what it has.
    Deadline { conversation_id: ConversationId },
    /// Run an approved side effect exactly as recorded, with its approval attached (the
    /// approvals API sends it to the role's queue; no model is involved).
    Execute { conversation_id: ConversationId, approval_id: String },
    /// Replay a subtask's side effects whose outcome is not known yet (same call, same key) and
    /// record what they answer; `attempt` counts these replays.
    Confirm {
        conversation_id: ConversationId,
        subtask_id: SubtaskId,
        #[serde(default)]
        attempt: u32,
    },
}

impl TaskMessage {
    pub fn run(conversation_id: &ConversationId, subtask_id: &SubtaskId) -> Self {
        Self::Run { conversation_id: conversation_id.clone(), subtask_id: subtask_id.clone(), handbacks: 0 }
    }

    pub fn conversation_id(&self) -> &ConversationId {
        match self {
            Self::Run { conversation_id, .. }
            | Self::Deadline { conversation_id }
            | Self::Execute { conversation_id, .. }
            | Self::Confirm { conversation_id, .. } => conversation_id,
        }
    }
}

/// Current time, Unix epoch milliseconds.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversation_status_allows_only_forward_transitions() {
        use ConversationStatus::*;
        assert!(Planning.can_become(Running));
        assert!(Running.can_become(Aggregating));
        assert!(Aggregating.can_become(Done));
        assert!(!Done.can_become(Running));
        assert!(!Running.can_become(Planning));
        assert!(!Aggregating.can_become(Running));
        assert!(!Planning.can_become(Done));
    }

    #[test]
    fn terminal_subtask_never_changes() {
        use SubtaskStatus::*;
        for t in [Succeeded, Failed, Skipped] {
            for n in [Pending, Queued, Running, Succeeded, Failed, Skipped] {
                assert!(!t.can_become(n), "{t:?} -> {n:?}");
            }
        }
        assert!(Pending.can_become(Queued));
        assert!(Queued.can_become(Failed));
    }

    #[test]
    fn usage_sum_keeps_unknown_as_none() {
        let a = Usage { prompt_tokens: Some(10), ..Default::default() };
        let b = Usage::default();
        let s = a.add(&b);
        assert_eq!(s.prompt_tokens, Some(10));
        assert_eq!(s.completion_tokens, None);
        assert_eq!(s.cost_usd, None);
    }

    #[test]
    fn conversation_id_rejects_key_separators() {
        assert!(ConversationId::parse("CONV#x").is_none());
        let id = ConversationId::new();
        assert_eq!(ConversationId::parse(id.as_str()), Some(id));
    }

    #[test]
    fn task_message_carries_ids_only() {
        let m = TaskMessage::run(&ConversationId::from_trusted("c1"), &SubtaskId::from("w01"));
        let j = serde_json::to_string(&m).unwrap();
        assert_eq!(j, r#"{"kind":"run","conversation_id":"c1","subtask_id":"w01","handbacks":0}"#);
    }

    #[test]
    fn byte_truncation_keeps_whole_characters_and_the_mark_inside_the_bound() {
        let s = "订单".repeat(100);
        for max in [0, 5, 14, 15, 16, 17, 100, 599] {
            let t = truncate_bytes(&s, max);
            assert!(t.len() <= max, "{max}: {} bytes", t.len());
        }
        assert!(truncate_bytes(&s, 100).ends_with(TRUNCATION_MARK));
        assert_eq!(truncate_bytes(&s, 600), s, "a text within the bound is kept whole");
    }

    #[test]
    fn truncation_counts_characters_not_bytes() {
        let s = "订".repeat(50);
        let t = truncate_chars(&s, 20);
        assert!(t.chars().count() <= 20);
        assert!(t.ends_with("[truncated]"));
    }

    #[test]
    fn sweep_shards_are_stable_and_spread_over_every_shard() {
        let ids: Vec<ConversationId> = (0..400).map(|_| ConversationId::new()).collect();
        let mut seen = [0u32; 8];
        for id in &ids {
            let s = sweep_shard(id, 8);
            assert_eq!(s, sweep_shard(id, 8));
            seen[s as usize] += 1;
        }
        assert!(seen.iter().all(|n| *n > 20), "every shard gets its share: {seen:?}");
        assert_eq!(sweep_shard(&ids[0], 0), 0, "no shards is one shard");
    }

    #[test]
    fn request_hashes_tell_customers_and_messages_apart() {
        assert_eq!(request_hash("C1", "where is A1"), request_hash("C1", "where is A1"));
        assert_ne!(request_hash("C1", "where is A1"), request_hash("C1", "where is A2"));
        assert_ne!(request_hash("C1", "2x"), request_hash("C12", "x"), "the separator keeps fields apart");
        assert_eq!(request_hash("C1", "m").len(), 16);
    }

    #[test]
    fn failure_kinds_serialise_as_their_stable_codes() {
        for kind in FailureKind::ALL {
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{}\"", kind.code()));
            assert_eq!(serde_json::from_str::<FailureKind>(&format!("\"{kind}\"")).unwrap(), kind);
        }
        let codes: BTreeSet<&str> = FailureKind::ALL.iter().map(|k| k.code()).collect();
        assert_eq!(codes.len(), FailureKind::ALL.len(), "codes are distinct");
    }

    #[test]
    fn a_failed_result_stored_without_a_kind_reads_as_internal() {
        let old: SubtaskResult =
            serde_json::from_str(r#"{"outcome":"failed","reason":"the deadline passed"}"#).unwrap();
        assert_eq!(old, SubtaskResult::failed(FailureKind::Internal, "the deadline passed"));
        // A kind written by a newer version is not an error either.
        let newer: SubtaskResult =
            serde_json::from_str(r#"{"outcome":"failed","kind":"approval_expired","reason":"r"}"#).unwrap();
        assert_eq!(newer.failure_kind(), Some(FailureKind::Internal));
        let now = SubtaskResult::failed(FailureKind::DeadLetter, "gave up");
        let json = serde_json::to_string(&now).unwrap();
        assert_eq!(json, r#"{"outcome":"failed","kind":"dead_letter","reason":"gave up"}"#);
        assert_eq!(serde_json::from_str::<SubtaskResult>(&json).unwrap(), now);
    }

    #[test]
    fn bounding_a_failure_keeps_its_kind() {
        let long = SubtaskResult::failed(FailureKind::ModelFailed, "x".repeat(5_000)).bounded();
        assert_eq!(long.failure_kind(), Some(FailureKind::ModelFailed));
        assert!(matches!(long, SubtaskResult::Failed { ref reason, .. } if reason.chars().count() <= 2_000));
    }
}
