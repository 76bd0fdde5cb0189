//! The public conversation object: the body of `GET /conversations/{id}` and of `swarm-local ask --json`, and the approvals' views; each with its JSON Schema (the API's OpenAPI document is checked against them).
//!
//! Times are epoch milliseconds in the `*_ms` fields clients read today, and RFC 3339
//! (UTC, milliseconds) in the `*_at` fields beside them; a field is only ever added, never renamed.
//! The conversations' and subtasks' `status` is upper case (`DONE`) where the approvals' `status`
//! and the side effects' `state` are lower case (`pending`): each upper-case `status` has a
//! `state` beside it, the same value in lower case ([`LowerCase`]). Fields added after the first
//! release read as absent from an older body.

use schemars::JsonSchema;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::approval::{Approval, ApprovalStatus};
use crate::domain::{
    Conversation, ConversationStatus, FailureKind, HandoffReason, SubtaskId, SubtaskRecord, SubtaskResult,
    SubtaskStatus, TurnAuthor, TurnRecord, Usage,
};
use crate::effects::{Effect, EffectState};
use crate::ports::ConversationHistory;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Progress {
    pub finished: u32,
    pub total: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubtaskView {
    pub id: String,
    pub instruction: String,
    pub depends_on: Vec<String>,
    /// Tool names called, in call order (repeats kept).
    pub tools_used: Vec<String>,
    /// `PENDING | QUEUED | RUNNING | SUCCEEDED | FAILED | SKIPPED`.
    pub status: SubtaskStatus,
    /// Why the subtask failed or was skipped, in words we wrote: a failure shows
    /// [`FailureKind::customer_message`], never the recorded reason (provider or gateway text
    /// stays in the logs and the item).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The stable code of a `FAILED` subtask's cause ([`FailureKind::code`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<FailureKind>,
    /// Its side-effecting calls, in call order, as the journal has them now (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<EffectView>,
    /// When its first attempt started (RFC 3339); absent until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub started_at: Option<String>,
    /// When it got its final status (RFC 3339); absent until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub finished_at: Option<String>,
    /// `status` in lower case (`succeeded`, `awaiting_approval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<LowerCase<SubtaskStatus>>,
    /// The model's tokens and cost for this subtask's attempts so far, as recorded when it finished
    /// (absent until then, or when no provider reported usage; fields not reported are `null`, not 0).
    /// The turn's `usage` is the planner's, these and the reply writer's together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl SubtaskView {
    /// The view of one subtask record.
    pub fn build(r: &SubtaskRecord) -> Self {
        SubtaskView {
            id: r.subtask.id.to_string(),
            instruction: r.subtask.instruction.clone(),
            depends_on: r.subtask.depends_on.iter().map(SubtaskId::to_string).collect(),
            tools_used: r.tools_used.clone(),
            status: r.status,
            error: match &r.result {
                Some(SubtaskResult::Failed { kind, .. }) => Some(kind.customer_message().to_owned()),
                Some(SubtaskResult::Skipped { dependency }) => {
                    Some(format!("skipped: dependency {dependency} did not succeed"))
                }
                _ => None,
            },
            error_code: r.result.as_ref().and_then(SubtaskResult::failure_kind),
            effects: r.effects.iter().map(EffectView::build).collect(),
            started_at: r.started_at_ms.map(rfc3339),
            finished_at: r.finished_at_ms.filter(|_| r.status.is_terminal()).map(rfc3339),
            state: Some(LowerCase(r.status)),
            usage: if r.usage.is_empty() { None } else { Some(r.usage) },
        }
    }
}

/// One side-effecting call of a subtask, as customers see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EffectView {
    pub tool: String,
    /// `intent` (submitted, being confirmed), `done`, `awaiting_approval`, `rejected`, `expired`.
    pub state: EffectState,
    /// Whether the tool did it (`done` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// What the tool answered when it did it (a receipt); a refusal's text is not shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

impl EffectView {
    pub fn build(e: &Effect) -> Self {
        let ok = (e.state == EffectState::Done).then(|| e.outcome.as_ref().is_some_and(|o| !o.is_error));
        let result = e.outcome.as_ref().filter(|o| ok == Some(true) && !o.is_error).map(|o| o.text.clone());
        Self { tool: e.tool.clone(), state: e.state, ok, result }
    }
}

/// An approval of one of the conversation's side effects, as the customer sees it (who decided is not shown).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalView {
    pub approval_id: String,
    pub subtask_id: String,
    pub tool: String,
    pub order_id: String,
    /// Decimal text with two places, e.g. `1874.00`.
    pub amount: String,
    /// `pending`, `approved`, `rejected`, `expired`, `executed` (a pending one past its expiry reads `expired`).
    pub status: ApprovalStatus,
    pub expires_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at_ms: Option<i64>,
    /// Whether it was done, once it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// What the tool answered when it did it (a receipt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// `expires_at_ms` as RFC 3339.
    #[schemars(extend("format" = "date-time"))]
    pub expires_at: String,
    /// `decided_at_ms` as RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub decided_at: Option<String>,
    /// When it was asked for (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<i64>,
    /// `created_at_ms` as RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub created_at: Option<String>,
    /// Its last change (epoch ms): asked, decided, run, or — pending — expired ([`approval_updated_at_ms`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at_ms: Option<i64>,
    /// `updated_at_ms` as RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub updated_at: Option<String>,
}

impl ApprovalView {
    pub fn build(a: &Approval, now_ms: i64) -> Self {
        let ok = a.outcome.as_ref().map(|o| a.status == ApprovalStatus::Executed && !o.is_error);
        Self {
            approval_id: a.id.clone(),
            subtask_id: a.subtask_id.to_string(),
            tool: a.action.tool.clone(),
            order_id: a.action.order_id.clone(),
            amount: a.action.amount(),
            status: a.status_at(now_ms),
            expires_at_ms: a.expires_at_ms,
            decided_at_ms: a.decided_at_ms,
            ok,
            result: a.outcome.as_ref().filter(|_| ok == Some(true)).map(|o| o.text.clone()),
            expires_at: rfc3339(a.expires_at_ms),
            decided_at: a.decided_at_ms.map(rfc3339),
            created_at_ms: Some(a.created_at_ms),
            created_at: Some(rfc3339(a.created_at_ms)),
            updated_at_ms: Some(approval_updated_at_ms(a, now_ms)),
            updated_at: Some(rfc3339(approval_updated_at_ms(a, now_ms))),
        }
    }
}

/// An approval as operators see it (`GET /approvals`): everything but the token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OperatorApprovalView {
    pub approval_id: String,
    pub conversation_id: String,
    pub subtask_id: String,
    pub customer_id: String,
    pub tool: String,
    pub order_id: String,
    pub amount: String,
    /// Why, as the model put it (cleaned and bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub status: ApprovalStatus,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// What the tool answered when it ran (or why it did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// `created_at_ms` as RFC 3339.
    #[schemars(extend("format" = "date-time"))]
    pub created_at: String,
    /// `expires_at_ms` as RFC 3339.
    #[schemars(extend("format" = "date-time"))]
    pub expires_at: String,
    /// `decided_at_ms` as RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub decided_at: Option<String>,
    /// Its last change (epoch ms): asked, decided, run, or — pending — expired ([`approval_updated_at_ms`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at_ms: Option<i64>,
    /// `updated_at_ms` as RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub updated_at: Option<String>,
}

impl OperatorApprovalView {
    pub fn build(a: &Approval, now_ms: i64) -> Self {
        Self {
            approval_id: a.id.clone(),
            conversation_id: a.conversation_id.to_string(),
            subtask_id: a.subtask_id.to_string(),
            customer_id: a.customer_id.clone(),
            tool: a.action.tool.clone(),
            order_id: a.action.order_id.clone(),
            amount: a.action.amount(),
            reason: a.action.reason.clone(),
            status: a.status_at(now_ms),
            created_at_ms: a.created_at_ms,
            expires_at_ms: a.expires_at_ms,
            decided_by: a.decided_by.clone(),
            decided_at_ms: a.decided_at_ms,
            ok: a.outcome.as_ref().map(|o| a.status == ApprovalStatus::Executed && !o.is_error),
            outcome: a.outcome.as_ref().map(|o| o.text.clone()),
            created_at: rfc3339(a.created_at_ms),
            expires_at: rfc3339(a.expires_at_ms),
            decided_at: a.decided_at_ms.map(rfc3339),
            updated_at_ms: Some(approval_updated_at_ms(a, now_ms)),
            updated_at: Some(rfc3339(approval_updated_at_ms(a, now_ms))),
        }
    }
}

/// An approval's last change as of `now_ms` (epoch ms): the latest of its creation, decision
/// and run, or its expiry when it reads `expired` without a decision (a pending one past it).
pub fn approval_updated_at_ms(a: &Approval, now_ms: i64) -> i64 {
    let expired = (a.status == ApprovalStatus::Pending && a.status_at(now_ms) == ApprovalStatus::Expired)
        .then_some(a.expires_at_ms);
    [Some(a.created_at_ms), a.decided_at_ms, a.finished_at_ms, expired]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(a.created_at_ms)
}

/// Why a conversation went to a person, as `GET` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HandoffView {
    pub reason: HandoffReason,
    pub at_ms: i64,
    /// `at_ms` as RFC 3339.
    #[schemars(extend("format" = "date-time"))]
    pub at: String,
}

/// `GET /conversations/{id}` (DESIGN.md API section).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConversationView {
    pub conversation_id: String,
    pub customer_id: String,
    /// `PLANNING | RUNNING | AGGREGATING | DONE | FAILED`.
    pub status: ConversationStatus,
    pub progress: Progress,
    pub subtasks: Vec<SubtaskView>,
    pub reply: Option<String>,
    /// `null` when no provider reported usage; fields not reported are `null`, not 0.
    pub usage: Option<Usage>,
    /// The approvals of its side effects: what waits for a person, the decisions and outcomes (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalView>,
    /// Set when a person takes (or is to take) the conversation over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffView>,
    /// When the conversation was created (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub created_at: String,
    /// Its deadline (RFC 3339): past it, it is answered with what it has.
    #[schemars(extend("format" = "date-time"))]
    pub deadline_at: String,
    /// `status` in lower case (`done`, `handoff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<LowerCase<ConversationStatus>>,
    /// When the conversation was created (epoch ms; `created_at` in RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<i64>,
    /// The latest change its records time (epoch ms): its creation, a subtask's start or end, a
    /// hand-off, an approval's decision or run. The reply's write has no time of its own: once
    /// answered, this is when the last subtask ended (or the hand-off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at_ms: Option<i64>,
    /// `updated_at_ms` as RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub updated_at: Option<String>,
    /// The turn the top-level fields are of: the latest (0: the first message).
    #[serde(default)]
    pub turn: u32,
    /// Every turn, oldest first, the latest included (its fields repeat the top-level ones): each
    /// follow-up message (`POST /conversations/{id}/messages`) is a turn.
    #[serde(default)]
    pub turns: Vec<TurnView>,
}

/// One turn of a conversation: the customer's message, its subtasks and its reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnView {
    pub turn: u32,
    /// The customer's message of this turn.
    pub message: String,
    pub status: ConversationStatus,
    pub progress: Progress,
    pub subtasks: Vec<SubtaskView>,
    pub reply: Option<String>,
    /// `null` when no provider reported usage for this turn.
    pub usage: Option<Usage>,
    /// When the turn started (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub started_at: String,
    /// Who wrote the turn's message: `customer`, or `swarm` (a turn telling what a person decided
    /// on an approval; `message` is empty) or `operator` (a person's answer to a handed-off
    /// conversation; `message` is empty, `reply` is the answer). Absent reads as `customer`.
    #[serde(default)]
    pub author: TurnAuthor,
}

impl TurnView {
    /// An archived turn, with its subtasks (from `all`, every subtask of the conversation: those of
    /// its plan, or with no plan kept, those whose id is of its turn).
    pub fn archived(t: &TurnRecord, all: &[SubtaskRecord]) -> Self {
        let mine = |r: &&SubtaskRecord| {
            if t.plan.is_empty() { r.subtask.id.turn() == t.turn } else { t.plan.contains(r.subtask.id.as_str()) }
        };
        let subtasks: Vec<SubtaskView> = all.iter().filter(mine).map(SubtaskView::build).collect();
        let finished = subtasks.iter().filter(|v| v.status.is_terminal()).count() as u32;
        Self {
            turn: t.turn,
            message: t.query.clone(),
            status: t.status,
            progress: Progress { finished, total: t.total },
            subtasks,
            reply: t.reply.clone(),
            usage: if t.usage.is_empty() { None } else { Some(t.usage) },
            started_at: rfc3339(t.started_at_ms),
            author: t.author,
        }
    }
}

impl ConversationView {
    /// With the conversation's earlier turns (`history`'s archived turns) before the latest.
    pub fn with_history(mut self, history: &ConversationHistory) -> Self {
        let mut turns: Vec<TurnView> = history
            .turns
            .iter()
            .filter(|t| t.turn < self.turn)
            .map(|t| TurnView::archived(t, &history.subtasks))
            .collect();
        turns.append(&mut self.turns);
        self.turns = turns;
        self
    }

    pub fn build(conversation: &Conversation, subtasks: &[SubtaskRecord]) -> Self {
        let updated = subtasks_updated_at_ms(conversation, subtasks);
        let subtasks = subtasks.iter().map(SubtaskView::build).collect();
        Self {
            conversation_id: conversation.id.to_string(),
            customer_id: conversation.customer_id.clone(),
            status: conversation.status,
            progress: Progress { finished: conversation.finished.len() as u32, total: conversation.total },
            subtasks,
            reply: conversation.reply.clone(),
            usage: if conversation.usage.is_empty() { None } else { Some(conversation.usage) },
            approvals: Vec::new(),
            handoff: conversation.handoff.map(|h| HandoffView {
                reason: h.reason,
                at_ms: h.at_ms,
                at: rfc3339(h.at_ms),
            }),
            created_at: rfc3339(conversation.created_at_ms),
            deadline_at: rfc3339(conversation.deadline_ms),
            state: Some(LowerCase(conversation.status)),
            created_at_ms: Some(conversation.created_at_ms),
            updated_at_ms: Some(updated),
            updated_at: Some(rfc3339(updated)),
            turn: conversation.turn,
            turns: Vec::new(),
        }
        .with_latest_turn(conversation)
    }

    /// `turns` holding the latest turn alone (its fields are the top-level ones).
    fn with_latest_turn(mut self, conversation: &Conversation) -> Self {
        self.turns = vec![TurnView {
            turn: conversation.turn,
            message: conversation.query.clone(),
            status: self.status,
            progress: self.progress.clone(),
            subtasks: self.subtasks.clone(),
            reply: self.reply.clone(),
            usage: self.usage,
            started_at: rfc3339(conversation.turn_started_at()),
            author: conversation.author,
        }];
        self
    }

    /// The view with the approvals of its side effects, as of `now_ms` (their changes count
    /// towards `updated_at`).
    pub fn with_approvals(mut self, approvals: &[Approval], now_ms: i64) -> Self {
        self.approvals = approvals.iter().map(|a| ApprovalView::build(a, now_ms)).collect();
        let latest = approvals.iter().map(|a| approval_updated_at_ms(a, now_ms)).chain(self.updated_at_ms).max();
        self.updated_at_ms = latest;
        self.updated_at = latest.map(rfc3339);
        self
    }
}

/// The latest instant `conversation` and its subtask records hold (epoch ms).
fn subtasks_updated_at_ms(conversation: &Conversation, subtasks: &[SubtaskRecord]) -> i64 {
    let times = subtasks.iter().flat_map(|r| [r.started_at_ms, r.finished_at_ms]).flatten();
    times.chain(conversation.handoff.map(|h| h.at_ms)).fold(conversation.created_at_ms, i64::max)
}

/// A status in lower case: the `state` beside an upper-case `status`, for clients that read
/// every status and state of the API in the casing the approvals and side effects use. Writes
/// the serde name of `T` in lower case (`AWAITING_APPROVAL` → `awaiting_approval`); reads only
/// lower case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LowerCase<T>(pub T);

impl<T: Serialize> Serialize for LowerCase<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match serde_json::to_value(&self.0) {
            Ok(serde_json::Value::String(name)) => serializer.serialize_str(&name.to_ascii_lowercase()),
            _ => Err(serde::ser::Error::custom("a status serialises as a string")),
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for LowerCase<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        if name != name.to_ascii_lowercase() {
            return Err(D::Error::custom(format!("{name:?} is not in lower case")));
        }
        serde_json::from_value(serde_json::Value::String(name.to_ascii_uppercase()))
            .map(LowerCase)
            .map_err(|_| D::Error::custom(format!("{name:?} is not a known value")))
    }
}

/// Epoch milliseconds as RFC 3339 in UTC with milliseconds (`2026-01-01T00:00:00.000Z`); empty
/// for an instant chrono cannot represent (never one the swarm writes).
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// One conversation in a customer's list (`GET /conversations`): where it stands, without its
/// subtasks, message or reply (its `GET /conversations/{id}` has them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConversationSummary {
    pub conversation_id: String,
    /// `PLANNING | RUNNING | AGGREGATING | DONE | FAILED | HANDOFF`.
    pub status: ConversationStatus,
    pub progress: Progress,
    /// Whether its reply is written.
    pub replied: bool,
    pub created_at_ms: i64,
    /// `created_at_ms` as RFC 3339.
    #[schemars(extend("format" = "date-time"))]
    pub created_at: String,
    /// Its deadline (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub deadline_at: String,
    /// Set when a person takes (or is to take) the conversation over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffView>,
    /// `status` in lower case (`done`, `handoff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<LowerCase<ConversationStatus>>,
}

impl ConversationSummary {
    pub fn build(c: &Conversation) -> Self {
        Self {
            conversation_id: c.id.to_string(),
            status: c.status,
            progress: Progress { finished: c.finished.len() as u32, total: c.total },
            replied: c.reply.is_some(),
            created_at_ms: c.created_at_ms,
            created_at: rfc3339(c.created_at_ms),
            deadline_at: rfc3339(c.deadline_ms),
            handoff: c.handoff.map(|h| HandoffView { reason: h.reason, at_ms: h.at_ms, at: rfc3339(h.at_ms) }),
            state: Some(LowerCase(c.status)),
        }
    }
}

/// The approval ids the subtasks' journals name, in subtask and call order, each once.
pub fn approval_ids(subtasks: &[SubtaskRecord]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for id in subtasks.iter().flat_map(|r| r.effects.iter()).filter_map(|e| e.approval_id.clone()) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ConversationId, Subtask, ToolCallRecord};

    /// A finished conversation with one subtask in each shape `GET` shows (succeeded, failed, skipped, running).
    fn fixture() -> (Conversation, Vec<SubtaskRecord>) {
        let mut c = Conversation::new("C104", "Where is A1029? Is SAVE20 valid?", 1_767_225_600_000, 120);
        c.id = ConversationId::from_trusted("0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07");
        c.status = ConversationStatus::Done;
        c.total = 4;
        c.finished = ["w01", "w02", "w03"].iter().map(|s| s.to_string()).collect();
        c.reply = Some("Order A1029 is paid.".into());
        c.usage = Usage {
            prompt_tokens: Some(1200),
            completion_tokens: Some(80),
            cached_tokens: None,
            cost_usd: Some(0.0021),
        };
        let mk = |id: &str, deps: &[&str], status: SubtaskStatus, result: Option<SubtaskResult>, tools: &[&str]| {
            let subtask = Subtask {
                id: id.into(),
                instruction: format!("Do {id}."),
                tools: vec![],
                depends_on: deps.iter().map(|d| (*d).into()).collect(),
            };
            let mut r = SubtaskRecord::new(&c, subtask, "support".into());
            r.status = status;
            r.result = result;
            r.tools_used = tools.iter().map(|t| t.to_string()).collect();
            r
        };
        let get_order = ToolCallRecord { name: "shop__get_order".into(), ok: true, error: None, facts: vec![] };
        let subtasks = vec![
            mk(
                "w01",
                &[],
                SubtaskStatus::Succeeded,
                Some(SubtaskResult::Succeeded { text: "paid".into(), tool_calls: vec![get_order] }),
                &["shop__get_order"],
            ),
            mk(
                "w02",
                &[],
                SubtaskStatus::Failed,
                Some(SubtaskResult::failed(
                    FailureKind::DeadlinePassed,
                    "the conversation's deadline passed before it finished",
                )),
                &[],
            ),
            mk("w03", &["w02"], SubtaskStatus::Skipped, Some(SubtaskResult::Skipped { dependency: "w02".into() }), &[]),
            mk("w04", &[], SubtaskStatus::Running, None, &[]),
        ];
        (c, subtasks)
    }

    /// The body `GET /conversations/{id}` answered for [`fixture`] before statuses were enums and failures had kinds.
    const BEFORE: &str = r#"{"conversation_id":"0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07","customer_id":"C104","status":"DONE","progress":{"finished":3,"total":4},"subtasks":[{"id":"w01","instruction":"Do w01.","depends_on":[],"tools_used":["shop__get_order"],"status":"SUCCEEDED"},{"id":"w02","instruction":"Do w02.","depends_on":[],"tools_used":[],"status":"FAILED","error":"the conversation's deadline passed before it finished"},{"id":"w03","instruction":"Do w03.","depends_on":["w02"],"tools_used":[],"status":"SKIPPED","error":"skipped: dependency w02 did not succeed"},{"id":"w04","instruction":"Do w04.","depends_on":[],"tools_used":[],"status":"RUNNING"}],"reply":"Order A1029 is paid.","usage":{"prompt_tokens":1200,"completion_tokens":80,"cached_tokens":null,"cost_usd":0.0021}}"#;

    /// Today's body with the fields added since, appended (issue 21): the times in RFC 3339, then
    /// each status in lower case (`state`, also at the end of each subtask) and the epoch-ms times.
    fn with_times(body: &str) -> String {
        let mut out = String::new();
        let mut rest = body;
        while let Some(at) = rest.find(r#"{"id":""#) {
            let end = at + rest[at..].find('}').unwrap();
            let subtask = &rest[at..end];
            let status = subtask.split(r#""status":""#).nth(1).unwrap().split('"').next().unwrap();
            out.push_str(&rest[..end]);
            out.push_str(&format!(r#","state":"{}""#, status.to_ascii_lowercase()));
            rest = &rest[end..];
        }
        out.push_str(rest);
        let added = concat!(
            r#","created_at":"2026-01-01T00:00:00.000Z","deadline_at":"2026-01-01T00:02:00.000Z","state":"done","#,
            r#""created_at_ms":1767225600000,"updated_at_ms":1767225600000,"updated_at":"2026-01-01T00:00:00.000Z"}"#
        );
        format!("{}{added}", out.strip_suffix('}').unwrap())
    }

    /// A body of [`with_times`] with the turns appended (issue 19): `turn` and `turns`, whose one
    /// entry (the conversation's only turn) repeats the top-level fields after its message.
    fn with_turn(body: &str, message: &str) -> String {
        let top = body.strip_suffix('}').unwrap();
        let from = top.find(r#""status":"#).unwrap();
        let to = top.find(r#","created_at":"#).unwrap();
        let fields = &top[from..to];
        format!(
            r#"{top},"turn":0,"turns":[{{"turn":0,"message":"{message}",{fields},"started_at":"2026-01-01T00:00:00.000Z","author":"customer"}}]}}"#
        )
    }

    #[test]
    fn view_json_is_todays_byte_for_byte_but_a_failure_shows_our_words_and_its_code() {
        let (c, subtasks) = fixture();
        let json = serde_json::to_string(&ConversationView::build(&c, &subtasks)).unwrap();
        // The failed subtask's `error` is the kind's message, followed by `error_code`; the recorded reason is gone.
        let recorded = r#""error":"the conversation's deadline passed before it finished""#;
        let ours = r#""error":"This part could not be finished before the conversation's time limit.","error_code":"deadline_passed""#;
        let expected = BEFORE.replacen(recorded, ours, 1);
        assert_ne!(expected, BEFORE);
        assert_eq!(json, with_turn(&with_times(&expected), &c.query));
        // Without a failed subtask, nothing changed at all.
        let without_failure: Vec<SubtaskRecord> = subtasks.into_iter().filter(|r| r.subtask.id != "w02").collect();
        let json = serde_json::to_string(&ConversationView::build(&c, &without_failure)).unwrap();
        let w02 = r#"{"id":"w02","instruction":"Do w02.","depends_on":[],"tools_used":[],"status":"FAILED","error":"the conversation's deadline passed before it finished"},"#;
        assert!(BEFORE.contains(w02));
        assert_eq!(json, with_turn(&with_times(&BEFORE.replacen(w02, "", 1)), &c.query));
    }

    #[test]
    fn provider_and_gateway_text_never_reaches_the_view() {
        let (c, mut subtasks) = fixture();
        let provider = "HTTP 402 {\"error\":{\"message\":\"Insufficient Balance\",\"type\":\"billing\"}} sk-live-abc";
        let gateway = "upstream shop is unavailable (upstream unreachable: connection refused 10.0.3.7:8931)";
        for (i, (kind, reason)) in
            [(FailureKind::ModelFailed, provider), (FailureKind::ToolsUnavailable, gateway)].into_iter().enumerate()
        {
            subtasks[1].result = Some(SubtaskResult::failed(kind, reason));
            let view = ConversationView::build(&c, &subtasks);
            let json = serde_json::to_string(&view).unwrap();
            for fragment in ["402", "Insufficient", "sk-live", "10.0.3.7", "unreachable", "upstream"] {
                assert!(!json.contains(fragment), "case {i}: {fragment} shows in {json}");
            }
            assert_eq!(view.subtasks[1].error.as_deref(), Some(kind.customer_message()));
            assert_eq!(view.subtasks[1].error_code, Some(kind));
        }
        for kind in FailureKind::ALL {
            let m = kind.customer_message();
            assert!(m.len() < 100 && m.ends_with('.'), "{kind}: {m}");
        }
    }

    #[test]
    fn view_reads_back_with_enum_statuses() {
        let (c, subtasks) = fixture();
        let view = ConversationView::build(&c, &subtasks);
        let back: ConversationView = serde_json::from_str(&serde_json::to_string(&view).unwrap()).unwrap();
        assert_eq!(back, view);
        assert_eq!(back.status, ConversationStatus::Done);
        let statuses: Vec<SubtaskStatus> = back.subtasks.iter().map(|s| s.status).collect();
        use SubtaskStatus::*;
        assert_eq!(statuses, [Succeeded, Failed, Skipped, Running]);
        let codes: Vec<Option<FailureKind>> = back.subtasks.iter().map(|s| s.error_code).collect();
        assert_eq!(codes, [None, Some(FailureKind::DeadlinePassed), None, None]);
    }

    #[test]
    fn each_upper_case_status_has_its_lower_case_state_and_a_body_without_them_still_reads() {
        let (mut c, mut subtasks) = fixture();
        c.status = ConversationStatus::Handoff;
        subtasks[3].status = SubtaskStatus::AwaitingApproval;
        let json = serde_json::to_value(ConversationView::build(&c, &subtasks)).unwrap();
        assert_eq!((&json["status"], &json["state"]), (&serde_json::json!("HANDOFF"), &serde_json::json!("handoff")));
        let states: Vec<&str> =
            json["subtasks"].as_array().unwrap().iter().map(|s| s["state"].as_str().unwrap()).collect();
        assert_eq!(states, ["succeeded", "failed", "skipped", "awaiting_approval"]);
        let summary = serde_json::to_value(ConversationSummary::build(&c)).unwrap();
        assert_eq!(
            (&summary["status"], &summary["state"]),
            (&serde_json::json!("HANDOFF"), &serde_json::json!("handoff"))
        );
        // Only lower case reads back, and only a known value.
        assert!(serde_json::from_value::<LowerCase<SubtaskStatus>>(serde_json::json!("AWAITING_APPROVAL")).is_err());
        assert!(serde_json::from_value::<LowerCase<SubtaskStatus>>(serde_json::json!("sleeping")).is_err());
        let back: ConversationView =
            serde_json::from_str(&with_times(BEFORE).replace(r#""state":"done","#, "")).unwrap();
        assert_eq!(back.state, None, "the body of before the field reads, without it");
        assert_eq!(back.subtasks[3].state, Some(LowerCase(SubtaskStatus::Running)));
    }

    #[test]
    fn updated_at_is_the_latest_change_the_records_and_approvals_time() {
        let (mut c, mut subtasks) = fixture();
        let created = c.created_at_ms;
        subtasks[0].started_at_ms = Some(created + 1_000);
        subtasks[0].finished_at_ms = Some(created + 4_500);
        subtasks[1].started_at_ms = Some(created + 2_000);
        let view = ConversationView::build(&c, &subtasks);
        assert_eq!(view.created_at_ms, Some(created));
        assert_eq!(view.updated_at_ms, Some(created + 4_500));
        assert_eq!(view.updated_at.as_deref(), Some("2026-01-01T00:00:04.500Z"));
        c.handoff = Some(crate::domain::Handoff { reason: HandoffReason::CustomerAsked, at_ms: created + 9_000 });
        assert_eq!(ConversationView::build(&c, &subtasks).updated_at_ms, Some(created + 9_000));

        let approval = |decided: Option<i64>, finished: Option<i64>| Approval {
            id: "ap-1".into(),
            conversation_id: c.id.clone(),
            subtask_id: "w01".into(),
            ordinal: 1,
            customer_id: "C104".into(),
            role: "refund".into(),
            action: crate::approval::ProposedAction {
                tool: "shop__refund".into(),
                order_id: "A1029".into(),
                amount_cents: 4_300,
                reason: None,
            },
            status: if decided.is_some() { ApprovalStatus::Approved } else { ApprovalStatus::Pending },
            created_at_ms: created + 3_000,
            expires_at_ms: created + 60_000,
            decided_by: decided.map(|_| "alice".into()),
            decided_at_ms: decided,
            token: None,
            reissued_at_ms: None,
            outcome: None,
            finished_at_ms: finished,
            ttl: 0,
        };
        let pending = approval(None, None);
        assert_eq!(approval_updated_at_ms(&pending, created + 10_000), created + 3_000, "asked, nothing since");
        assert_eq!(approval_updated_at_ms(&pending, created + 70_000), created + 60_000, "read as expired: its expiry");
        let run = approval(Some(created + 20_000), Some(created + 25_000));
        assert_eq!(approval_updated_at_ms(&run, created + 70_000), created + 25_000);
        let view = ConversationView::build(&c, &subtasks).with_approvals(std::slice::from_ref(&run), created + 70_000);
        assert_eq!(view.updated_at_ms, Some(created + 25_000), "the approval's run is the latest change");
        let a = &view.approvals[0];
        assert_eq!((a.created_at_ms, a.updated_at_ms), (Some(created + 3_000), Some(created + 25_000)));
        assert_eq!(a.updated_at.as_deref(), Some("2026-01-01T00:00:25.000Z"));
        let op = OperatorApprovalView::build(&run, created + 70_000);
        assert_eq!(
            (op.updated_at_ms, op.updated_at.as_deref()),
            (Some(created + 25_000), Some("2026-01-01T00:00:25.000Z"))
        );
    }
}
