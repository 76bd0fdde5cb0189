//! A subtask's result: what it answered, why it failed (one stable kind per cause), what it waits for, and the record of its tool calls.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::approval::PendingApproval;
use crate::ids::SubtaskId;
use crate::lifecycle::SubtaskStatus;
use crate::untrusted::clean_text;

/// Longest text kept inline in a result; longer text is truncated so items stay
/// far below DynamoDB's 400 KB item limit.
pub const MAX_RESULT_CHARS: usize = 16_000;
/// Longest failure reason kept in a result, characters.
pub const MAX_FAILURE_REASON_CHARS: usize = 2_000;

/// One tool call a worker made, for the record (never the tool's output).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    pub name: String,
    /// `true` when the tool answered without error.
    pub ok: bool,
    /// Why the call failed or was refused (denied, timed out, bad arguments…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the tool's structured result said, as typed facts (at most
    /// [`crate::memory::MAX_FACTS_PER_CALL`], each value ≤ 64 characters): what the conversation's
    /// memory reads in later turns instead of the output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<crate::memory::Fact>,
}

impl ToolCallRecord {
    /// A call that failed or was refused, and `why` (no facts).
    pub fn failed(name: impl Into<String>, why: impl Into<String>) -> Self {
        Self { name: name.into(), ok: false, error: Some(why.into()), facts: Vec::new() }
    }
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
    /// A person rejected the subtask's side effect, or its approval expired: it was not done.
    NotApproved,
    /// A person approved the subtask's side effect and it ran, but the shop refused it.
    ActionFailed,
    /// A fault of ours (a broken transcript), an item written before kinds
    /// existed, or a kind this version does not know.
    #[default]
    #[serde(other)]
    Internal,
}

impl FailureKind {
    /// Every kind, in declaration order.
    pub const ALL: [Self; 11] = [
        Self::DeadlinePassed,
        Self::ModelFailed,
        Self::NoAnswer,
        Self::ToolsUnavailable,
        Self::ToolsRefused,
        Self::OutOfTime,
        Self::TokenBudgetExhausted,
        Self::DeadLetter,
        Self::NotApproved,
        Self::ActionFailed,
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
            Self::NotApproved => "not_approved",
            Self::ActionFailed => "action_failed",
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
            Self::NotApproved => "A person reviewed this part's action and did not approve it: it was not done.",
            Self::ActionFailed => "This part's action was approved, but the shop could not carry it out.",
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
        approvals: Vec<PendingApproval>,
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

    /// The result with its text cut to at most [`MAX_RESULT_CHARS`] characters (a reason to [`MAX_FAILURE_REASON_CHARS`]),
    /// display control characters removed.
    pub fn bounded(self) -> Self {
        // Model and tool output on its way to an item, a terminal and a reply: no display controls.
        match self {
            Self::Succeeded { text, tool_calls } => {
                Self::Succeeded { text: clean_text(&text, MAX_RESULT_CHARS), tool_calls }
            }
            Self::Failed { kind, reason } => {
                Self::Failed { kind, reason: clean_text(&reason, MAX_FAILURE_REASON_CHARS) }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

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
