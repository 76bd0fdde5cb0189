//! Side effects at most once: the positional key of a side-effecting call, the journal entry recorded before dispatch and completed after, the attempt lease, and a subtask's result rebuilt from its journal.
//!
//! A side-effecting tool (which ones is the gateway's configuration, carried on each listed
//! tool as [`crate::ports::ToolSpec::side_effecting`]) is called like this:
//!
//! 1. its **intent** — tool, arguments, [`effect_key`] — is appended to the subtask's journal
//!    ([`crate::ports::JournalStore::record_intent`]), conditional on the subtask still
//!    being open and this attempt still holding its lease;
//! 2. the call is **dispatched** with that key (the tool server is idempotent by key);
//! 3. its **outcome** is recorded on the entry ([`crate::ports::JournalStore::record_effect_outcome`]);
//! 4. the subtask's result is recorded.
//!
//! A re-run (duplicate delivery, resend, restart, deadline, a checkpoint too large to save)
//! finds the journal and never asks the model again: entries without an outcome are replayed
//! as recorded (same tool, arguments and key) to learn their outcome, and the result is
//! [`journal_result`]. The key is the conversation, the subtask and the call's position among
//! the subtask's side-effecting calls — never anything the model wrote.

use serde::{Deserialize, Serialize};

use crate::action::ProposedAction;
pub use crate::action::{EffectOutcome, MAX_EFFECT_OUTCOME_CHARS};
use crate::approval::PendingApproval;
use crate::ids::{ConversationId, SubtaskId};
use crate::result::{SubtaskResult, ToolCallRecord};

/// Most side-effecting calls one subtask may make; a further call is refused before dispatch.
/// With [`MAX_EFFECT_ARGUMENT_BYTES`] and [`MAX_EFFECT_OUTCOME_CHARS`] this keeps the journal
/// under 60 KB of the subtask item (DynamoDB's item limit is 400 KB).
pub const MAX_EFFECTS_PER_SUBTASK: usize = 8;
/// Largest arguments (JSON, bytes) a side-effecting call may carry; larger ones are refused.
pub const MAX_EFFECT_ARGUMENT_BYTES: usize = 4_000;

/// The idempotency key of the `ordinal`-th (from 1) side-effecting call of a subtask:
/// `swarm:<conversation>:<subtask>:<ordinal>` (at most 110 characters; safe in a header).
/// The same call of the same subtask has the same key on every delivery; nothing the model
/// wrote (arguments, reasons, amounts) goes into it.
pub fn effect_key(conversation_id: &ConversationId, subtask_id: &SubtaskId, ordinal: u32) -> String {
    format!("swarm:{conversation_id}:{subtask_id}:{ordinal}")
}

/// Where one journal entry stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectState {
    /// Recorded before dispatch; the outcome is not known (not sent yet, or in flight).
    Intent,
    /// The tool answered (success or refusal): [`Effect::outcome`].
    Done,
    /// The gateway refused it before dispatch until a person approves: [`Effect::proposed`].
    AwaitingApproval,
    /// A person rejected it: never dispatched.
    Rejected,
    /// Its approval expired before it ran: never dispatched.
    Expired,
}

impl EffectState {
    /// Whether the entry can no longer change.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Done | Self::Rejected | Self::Expired)
    }

    pub fn code(self) -> &'static str {
        match self {
            Self::Intent => "intent",
            Self::Done => "done",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
        }
    }
}

/// One entry of a subtask's journal: a side-effecting call, recorded before it is dispatched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Effect {
    /// Position among the subtask's side-effecting calls, from 1.
    pub ordinal: u32,
    /// The tool as the gateway lists it (e.g. `shop__refund`).
    pub tool: String,
    /// The arguments dispatched (a JSON object, at most [`MAX_EFFECT_ARGUMENT_BYTES`]); a replay sends exactly these.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// [`effect_key`] of this call.
    pub key: String,
    pub state: EffectState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<EffectOutcome>,
    /// The approval this entry waits for or ran with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// Exactly what would be done, as the gateway validated it (set with `AwaitingApproval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed: Option<ProposedAction>,
    /// When the intent was recorded, Unix epoch milliseconds.
    pub recorded_at_ms: i64,
    /// When the entry last changed state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_at_ms: Option<i64>,
}

impl Effect {
    /// A fresh intent of the `ordinal`-th side-effecting call of `subtask_id`.
    pub fn intent(
        conversation_id: &ConversationId,
        subtask_id: &SubtaskId,
        ordinal: u32,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        now_ms: i64,
    ) -> Self {
        Self {
            ordinal,
            tool: tool.to_owned(),
            arguments,
            key: effect_key(conversation_id, subtask_id, ordinal),
            state: EffectState::Intent,
            outcome: None,
            approval_id: None,
            proposed: None,
            recorded_at_ms: now_ms,
            changed_at_ms: None,
        }
    }
}

/// What [`crate::ports::JournalStore::record_effect_outcome`] writes on an entry that is not final.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectChange {
    pub state: EffectState,
    pub outcome: Option<EffectOutcome>,
    pub approval_id: Option<String>,
    pub proposed: Option<ProposedAction>,
    pub at_ms: i64,
}

impl EffectChange {
    /// The tool answered.
    pub fn done(outcome: EffectOutcome, at_ms: i64) -> Self {
        Self { state: EffectState::Done, outcome: Some(outcome), approval_id: None, proposed: None, at_ms }
    }

    /// `change` applied to `effect` (the approval and proposal kept when the change has none).
    pub fn apply(&self, effect: &Effect) -> Effect {
        Effect {
            state: self.state,
            outcome: self.outcome.clone().or_else(|| effect.outcome.clone()),
            approval_id: self.approval_id.clone().or_else(|| effect.approval_id.clone()),
            proposed: self.proposed.clone().or_else(|| effect.proposed.clone()),
            changed_at_ms: Some(self.at_ms),
            ..effect.clone()
        }
    }
}

/// The lease of a subtask attempt: who runs it and until when (Unix epoch milliseconds).
/// A delivery that finds a live lease of another holder does not run the subtask; one that
/// finds an expired lease (its holder died) takes over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptLease {
    /// Unique per attempt (a UUIDv7).
    pub holder: String,
    /// The attempt's invocation cannot outlive this (its Lambda deadline).
    pub until_ms: i64,
}

impl AttemptLease {
    /// A fresh holder id, holding until `until_ms`.
    pub fn new(until_ms: i64) -> Self {
        Self { holder: uuid::Uuid::now_v7().to_string(), until_ms }
    }

    /// Whether `other` may start an attempt at `now_ms` while this lease is stored.
    pub fn admits(&self, other: &str, now_ms: i64) -> bool {
        self.holder == other || self.until_ms <= now_ms
    }
}

/// The result a subtask's journal supports, when the subtask cannot (or must not) ask its
/// model again; `None` for an empty journal (nothing was done: the caller decides).
///
/// - an entry awaiting approval → [`SubtaskResult::AwaitingApproval`] with exactly what would be done;
/// - else an entry whose outcome is not known → [`SubtaskResult::Submitted`] ("being confirmed");
/// - else → [`SubtaskResult::Succeeded`] stating each call's recorded outcome, in call order
///   (a refusal is an answer too: the reply says what happened).
pub fn journal_result(effects: &[Effect]) -> Option<SubtaskResult> {
    if effects.is_empty() {
        return None;
    }
    let approvals: Vec<PendingApproval> = effects
        .iter()
        .filter(|e| e.state == EffectState::AwaitingApproval)
        .filter_map(|e| Some(PendingApproval { approval_id: e.approval_id.clone()?, action: e.proposed.clone()? }))
        .collect();
    if !approvals.is_empty() {
        return Some(SubtaskResult::AwaitingApproval { approvals });
    }
    let open: Vec<String> = effects
        .iter()
        .filter(|e| matches!(e.state, EffectState::Intent | EffectState::AwaitingApproval))
        .map(|e| e.tool.clone())
        .collect();
    if !open.is_empty() {
        return Some(SubtaskResult::Submitted { tools: open });
    }
    let lines: Vec<String> = effects
        .iter()
        .map(|e| match (e.state, &e.outcome) {
            (EffectState::Done, Some(o)) if !o.is_error => format!("{} was done: {}", e.tool, o.text),
            (EffectState::Done, Some(o)) => format!("{} was refused: {}", e.tool, o.text),
            (EffectState::Rejected, _) => format!("{} was not done: a person reviewed it and rejected it", e.tool),
            (EffectState::Expired, _) => format!("{} was not done: its approval expired", e.tool),
            _ => format!("{} ended without a recorded answer", e.tool),
        })
        .collect();
    let tool_calls = effects
        .iter()
        .map(|e| {
            let ok = e.state == EffectState::Done && e.outcome.as_ref().is_some_and(|o| !o.is_error);
            ToolCallRecord {
                name: e.tool.clone(),
                ok,
                error: (!ok).then(|| e.state.code().to_owned()),
                facts: Vec::new(),
            }
        })
        .collect();
    Some(SubtaskResult::Succeeded {
        text: format!("What this step did, as recorded: {}", lines.join("; ")),
        tool_calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv() -> ConversationId {
        ConversationId::from_trusted("0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07")
    }

    fn effect(ordinal: u32, state: EffectState, outcome: Option<(&str, bool)>) -> Effect {
        let mut args = serde_json::Map::new();
        args.insert("order_id".into(), "A1033".into());
        let mut e = Effect::intent(&conv(), &"w02".into(), ordinal, "shop__refund", args, 1);
        e.state = state;
        e.outcome = outcome.map(|(t, err)| EffectOutcome::new(t, err));
        e
    }

    #[test]
    fn the_key_is_the_conversation_the_subtask_and_the_position_only() {
        let key = effect_key(&conv(), &"w02".into(), 1);
        assert_eq!(key, "swarm:0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07:w02:1");
        assert_ne!(key, effect_key(&conv(), &"w02".into(), 2));
        assert_ne!(key, effect_key(&conv(), &"w03".into(), 1));
        // Whatever the model writes, the key of the first call of w02 is this one.
        let a = Effect::intent(&conv(), &"w02".into(), 1, "shop__refund", serde_json::Map::new(), 5);
        let mut other_args = serde_json::Map::new();
        other_args.insert("reason".into(), "a different free text".into());
        other_args.insert("amount".into(), 12.5.into());
        let b = Effect::intent(&conv(), &"w02".into(), 1, "shop__refund", other_args, 9);
        assert_eq!(a.key, b.key);
        assert!(key.len() <= 110 + 64);
    }

    #[test]
    fn an_empty_journal_supports_no_result() {
        assert_eq!(journal_result(&[]), None);
    }

    #[test]
    fn an_outcome_not_known_is_submitted_being_confirmed() {
        let r = journal_result(&[effect(1, EffectState::Intent, None)]).unwrap();
        assert_eq!(r, SubtaskResult::Submitted { tools: vec!["shop__refund".into()] });
    }

    #[test]
    fn recorded_outcomes_become_the_answer_in_call_order() {
        let r = journal_result(&[
            effect(1, EffectState::Done, Some((r#"{"refund_id":"RF-A1033-1"}"#, false))),
            effect(2, EffectState::Done, Some(("nothing left to refund", true))),
        ])
        .unwrap();
        let SubtaskResult::Succeeded { text, tool_calls } = r else { panic!("succeeded expected") };
        assert_eq!(
            text,
            r#"What this step did, as recorded: shop__refund was done: {"refund_id":"RF-A1033-1"}; shop__refund was refused: nothing left to refund"#
        );
        assert_eq!(tool_calls.iter().map(|c| c.ok).collect::<Vec<_>>(), [true, false]);
    }

    #[test]
    fn an_entry_awaiting_approval_says_exactly_what_would_be_done() {
        let mut e = effect(1, EffectState::AwaitingApproval, None);
        let action = ProposedAction {
            tool: "shop__refund".into(),
            order_id: "A1033".into(),
            amount_cents: 187_400,
            reason: Some("changed my mind".into()),
        };
        e.approval_id = Some("appr-1".into());
        e.proposed = Some(action.clone());
        let r = journal_result(&[e, effect(2, EffectState::Intent, None)]).unwrap();
        assert_eq!(
            r,
            SubtaskResult::AwaitingApproval {
                approvals: vec![PendingApproval { approval_id: "appr-1".into(), action }]
            }
        );
    }

    #[test]
    fn a_lease_admits_its_holder_and_anyone_once_it_expired() {
        let lease = AttemptLease { holder: "a".into(), until_ms: 100 };
        assert!(lease.admits("a", 50));
        assert!(!lease.admits("b", 99));
        assert!(lease.admits("b", 100));
        assert_ne!(AttemptLease::new(1).holder, AttemptLease::new(1).holder);
    }

    #[test]
    fn a_change_keeps_what_it_does_not_set() {
        let mut e = effect(1, EffectState::AwaitingApproval, None);
        e.approval_id = Some("appr-1".into());
        let done = EffectChange::done(EffectOutcome::new("ok", false), 7).apply(&e);
        assert_eq!(
            (done.state, done.approval_id.as_deref(), done.changed_at_ms),
            (EffectState::Done, Some("appr-1"), Some(7))
        );
        assert_eq!(done.key, e.key);
    }
}
