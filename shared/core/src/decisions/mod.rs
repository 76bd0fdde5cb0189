//! Turns the swarm (or a person) writes on a conversation: the outcome of an approval told to the customer as a turn of its own, and an operator's answer to a handed-off conversation — each exactly once, keyed by what cannot change.
//!
//! A **decision** is told once the journal entry that waited for it is final: rejected, expired, or
//! approved and run (its receipt) or refused by the shop. The journal's final entry is the pending
//! notice (no other write is needed to remember it); a [`Notice`] item (`CONV#<id>` /
//! `NOTICE#<key>`, key = the approval id) records that it was told, written in the same
//! transaction as the turn it was told in ([`crate::ports::ConversationRecords::tell_turn`]). So a
//! decision is told at most once, and the teller ([`tell_decisions`]) that finds an untold one
//! tells it whoever died before.

mod teller;
mod text;

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::action::ProposedAction;
use crate::domain::{Conversation, ConversationStatus, FailureKind, SubtaskId, SubtaskRecord, SubtaskResult, Usage};
use crate::effects::{Effect, journal_result};
use crate::language::Language;
use crate::ports::ConversationHistory;
use crate::turns::{RETENTION_AFTER_EXPIRY_SECS, TurnAuthor, TurnRecord};

pub use self::teller::{Told, tell_decisions};
pub use self::text::{DecisionKind, decision_text};

/// Most characters of an operator's answer (the same bound as a customer's message).
pub const MAX_OPERATOR_ANSWER_CHARS: usize = 8_000;

/// That a turn was told for `key` (an approval id, or `op:<Idempotency-Key>` of an operator's
/// answer): the item `CONV#<id>` / `NOTICE#<key>`, written with the turn. Never changes once written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub key: String,
    /// The turn it was told in.
    pub turn: u32,
    pub author: TurnAuthor,
    /// When it was told, Unix epoch milliseconds.
    pub at_ms: i64,
    /// DynamoDB TTL, Unix epoch seconds (the conversation's after the turn).
    pub ttl: i64,
}

/// A turn written without the planner: its notice key, author, text, language and times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToldTurn {
    /// The notice key ([`Notice::key`]): one turn per key, ever.
    pub key: String,
    pub author: TurnAuthor,
    /// The turn's reply (the swarm's template, or the operator's answer).
    pub text: String,
    pub language: Language,
    /// When it is told, Unix epoch milliseconds (the turn's start, deadline and end).
    pub at_ms: i64,
    /// The conversation's new expiry (a told turn refreshes it like any turn), epoch milliseconds.
    pub expires_at_ms: i64,
}

impl ToldTurn {
    /// A told turn at `at_ms` that moves the conversation's expiry to `idle` after it.
    pub fn new(key: &str, author: TurnAuthor, text: String, language: Language, at_ms: i64, idle: Duration) -> Self {
        Self { key: key.to_owned(), author, text, language, at_ms, expires_at_ms: crate::time::after_ms(at_ms, idle) }
    }
}

/// What [`crate::ports::ConversationRecords::tell_turn`] did.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum TellOutcome {
    /// Told now: the conversation item on the new turn.
    Told(Conversation),
    /// A turn was told for this key before (this call's own write whose answer was lost, or
    /// another teller's): nothing written.
    AlreadyTold(Notice),
    /// Nothing written: the conversation moved on since it was read, its turn is running, or it
    /// is missing (`None`).
    Refused(Option<Conversation>),
}

impl Conversation {
    /// The conversation item after `told` was told on it: the next turn, `DONE` at once, authored
    /// by `told.author`, its reply `told.text`; no message, plan, lease or sweep shard (terminal:
    /// out of the sweep index and of the stream's filter); every per-turn field reset like
    /// [`Conversation::next_turn`]; the expiry refreshed, the TTL never shortened.
    pub fn told_turn(&self, told: &ToldTurn) -> Conversation {
        Conversation {
            id: self.id.clone(),
            customer_id: self.customer_id.clone(),
            status: ConversationStatus::Done,
            query: String::new(),
            created_at_ms: self.created_at_ms,
            deadline_ms: told.at_ms,
            total: 0,
            remaining: 0,
            finished: BTreeSet::new(),
            plan: BTreeSet::new(),
            reply: Some(told.text.clone()),
            usage: Usage::default(),
            notes: Vec::new(),
            error: None,
            idempotency_key: None,
            trace_parent: None,
            handoff: None,
            request_hash: None,
            turn: self.turn + 1,
            turn_started_at_ms: Some(told.at_ms),
            expires_at_ms: Some(told.expires_at_ms.max(self.expires_at_ms.unwrap_or(0))),
            language: Some(told.language),
            lease: None,
            sweep_shard: None,
            queued_at_ms: None,
            author: told.author,
            ttl: self.ttl.max(told.expires_at_ms / 1000 + RETENTION_AFTER_EXPIRY_SECS),
        }
    }

    /// Whether subtask item `r` is of this conversation's current turn: of its plan, or (no plan
    /// kept) of its turn by id — what `list_subtasks` lists, picked from the whole partition.
    pub fn holds(&self, r: &SubtaskRecord) -> bool {
        if self.plan.is_empty() { r.subtask.id.turn() == self.turn } else { self.plan.contains(r.subtask.id.as_str()) }
    }

    /// The notice `told` leaves when it is told on this conversation (as read).
    pub fn notice_of(&self, told: &ToldTurn) -> Notice {
        let after = self.told_turn(told);
        Notice { key: told.key.clone(), turn: after.turn, author: told.author, at_ms: told.at_ms, ttl: after.ttl }
    }
}

/// A decided journal entry not told yet: its subtask and the entry (final, with an approval id).
#[derive(Clone, Debug, PartialEq)]
pub struct Untold {
    pub subtask_id: SubtaskId,
    pub effect: Effect,
}

impl Untold {
    /// The approval id: the notice key.
    pub fn key(&self) -> &str {
        self.effect.approval_id.as_deref().unwrap_or_default()
    }

    /// What the person decided and what came of it.
    pub fn kind(&self) -> DecisionKind {
        DecisionKind::of(&self.effect)
    }

    /// The refund as the gateway validated it, when the entry kept it.
    pub fn proposed(&self) -> Option<&ProposedAction> {
        self.effect.proposed.as_ref()
    }
}

/// Every final journal entry of `history` that waited for an approval and has no notice yet,
/// oldest decision first (by when the entry last changed, then approval id).
pub fn untold_decisions(history: &ConversationHistory) -> Vec<Untold> {
    let told: BTreeSet<&str> = history.notices.iter().map(|n| n.key.as_str()).collect();
    let mut out: Vec<Untold> = history
        .subtasks
        .iter()
        .flat_map(|r| r.effects.iter().map(move |e| (r, e)))
        .filter(|(_, e)| e.state.is_final())
        .filter(|(_, e)| e.approval_id.as_deref().is_some_and(|a| !told.contains(a)))
        .map(|(r, e)| Untold { subtask_id: r.subtask.id.clone(), effect: e.clone() })
        .collect();
    out.sort_by(|a, b| {
        (a.effect.changed_at_ms.unwrap_or(0), a.key()).cmp(&(b.effect.changed_at_ms.unwrap_or(0), b.key()))
    });
    out
}

/// The result a subtask that waited for approvals settles to once every one of them is decided
/// (`None` while one still waits): `SUCCEEDED` stating each call's outcome when every approved
/// call ran; `FAILED` (`not_approved`) when one was rejected or expired; `FAILED`
/// (`action_failed`) when one ran and the shop refused it.
pub fn decided_result(record: &SubtaskRecord) -> Option<SubtaskResult> {
    let effects = &record.effects;
    if effects.iter().any(|e| !e.state.is_final()) {
        return None;
    }
    let said = match journal_result(effects)? {
        SubtaskResult::Succeeded { text, .. } => text,
        _ => return None,
    };
    let decided = effects.iter().filter(|e| e.approval_id.is_some());
    let kinds: Vec<DecisionKind> = decided.map(DecisionKind::of).collect();
    if kinds.iter().any(|k| matches!(k, DecisionKind::Rejected | DecisionKind::Expired)) {
        return Some(SubtaskResult::failed(FailureKind::NotApproved, said));
    }
    if kinds.iter().any(|k| matches!(k, DecisionKind::RefundFailed)) {
        return Some(SubtaskResult::failed(FailureKind::ActionFailed, said));
    }
    journal_result(effects)
}

/// The language a decision on subtask `subtask_id` is told in: that of the turn that asked for it
/// (an archived turn's, or the conversation's when it is that turn), else the conversation's.
pub fn decision_language(conversation: &Conversation, turns: &[TurnRecord], subtask_id: &SubtaskId) -> Language {
    let turn = subtask_id.turn();
    if conversation.turn == turn {
        return conversation.reply_language();
    }
    turns
        .iter()
        .find(|t| t.turn == turn)
        .and_then(|t| t.language.or_else(|| Some(Language::detect(&t.query, None))))
        .unwrap_or_else(|| conversation.reply_language())
}

#[cfg(test)]
mod tests;
