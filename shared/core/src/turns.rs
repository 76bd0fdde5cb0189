//! A conversation's turns: each follow-up message starts a new turn on the same conversation item; the turn it ends is archived as a [`TurnRecord`] (its own item), so the item only ever holds the latest turn.
//!
//! What a new turn writes is [`NextTurn`]; [`Conversation::next_turn`] is the conversation item as
//! a store leaves it after `start_turn` (both store backends build it here, so they agree).

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::{Conversation, ConversationStatus, Handoff, Lease, Usage};
use crate::language::Language;

/// How long a conversation's items are kept after it expired (DynamoDB TTL), in seconds: the
/// customer can still read it, and follow-ups are answered 410 rather than 404.
pub const RETENTION_AFTER_EXPIRY_SECS: i64 = 7 * 24 * 3600;

/// A finished turn, as archived when the next one started (DynamoDB: `CONV#<id>` / `TURN#<n>`).
/// Bounded like the conversation item it was cut from: message ≤ 32 KB, reply ≤ 200 KB.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub turn: u32,
    /// The customer's message of this turn.
    pub query: String,
    /// Terminal: `DONE`, `FAILED` or `HANDOFF`.
    pub status: ConversationStatus,
    /// When the turn started, Unix epoch milliseconds.
    pub started_at_ms: i64,
    #[serde(default)]
    pub reply: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub notes: Vec<String>,
    #[serde(default)]
    pub usage: Usage,
    /// The ids of the turn's plan (its subtask items keep their keys: `TASK#<id>`).
    #[serde(default)]
    pub plan: BTreeSet<String>,
    #[serde(default)]
    pub total: u32,
    #[serde(default)]
    pub handoff: Option<Handoff>,
    /// The `Idempotency-Key` the turn was asked with: a retry of that request finds it here.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    #[serde(default)]
    pub request_hash: Option<String>,
    #[serde(default)]
    pub language: Option<Language>,
    /// Who wrote the turn's message ([`TurnAuthor`]); archives written before authors existed
    /// read as the customer's.
    #[serde(default, skip_serializing_if = "TurnAuthor::is_customer")]
    pub author: TurnAuthor,
    /// DynamoDB TTL, Unix epoch seconds (the conversation's at the time).
    pub ttl: i64,
}

impl TurnRecord {
    /// The turn `conversation` holds now, as archived.
    pub fn of(conversation: &Conversation) -> Self {
        Self {
            turn: conversation.turn,
            query: conversation.query.clone(),
            status: conversation.status,
            started_at_ms: conversation.turn_started_at(),
            reply: conversation.reply.clone(),
            error: conversation.error.clone(),
            notes: conversation.notes.clone(),
            usage: conversation.usage,
            plan: conversation.plan.clone(),
            total: conversation.total,
            handoff: conversation.handoff,
            idempotency_key: conversation.idempotency_key.clone(),
            request_hash: conversation.request_hash.clone(),
            language: conversation.language,
            author: conversation.author,
            ttl: conversation.ttl,
        }
    }
}

/// What a follow-up message writes when it starts turn `turn`: its message and request, the
/// planner's lease, the turn's deadline and the conversation's new expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextTurn {
    /// The turn it starts: the conversation's turn + 1.
    pub turn: u32,
    pub query: String,
    pub language: Language,
    pub idempotency_key: Option<String>,
    pub request_hash: String,
    pub trace_parent: Option<String>,
    /// The planner's lease (its `turn` is [`NextTurn::turn`]).
    pub lease: Lease,
    /// Unix epoch milliseconds: when the turn starts, its deadline, the conversation's new expiry.
    pub started_at_ms: i64,
    pub deadline_ms: i64,
    pub expires_at_ms: i64,
    /// The sweep index's shard the turn is written into.
    pub sweep_shard: u32,
}

impl Conversation {
    /// When the current turn started (turn 0: the conversation's creation), epoch milliseconds.
    pub fn turn_started_at(&self) -> i64 {
        self.turn_started_at_ms.unwrap_or(self.created_at_ms)
    }

    /// When the conversation stops taking follow-ups: its stored expiry, or (an item written before
    /// expiries were stored) `idle` after its current turn started. Epoch milliseconds.
    pub fn expires_at(&self, idle: Duration) -> i64 {
        self.expires_at_ms.unwrap_or_else(|| crate::time::after_ms(self.turn_started_at(), idle))
    }

    /// The conversation item after `next` started on it: `PLANNING` under the planner's lease, in the
    /// sweep index, every per-turn field reset (counts, plan, reply, usage, notes, error, hand-off);
    /// the id, customer and creation stay. The TTL never shrinks: at least
    /// [`RETENTION_AFTER_EXPIRY_SECS`] after the new expiry.
    pub fn next_turn(&self, next: &NextTurn) -> Conversation {
        Conversation {
            id: self.id.clone(),
            customer_id: self.customer_id.clone(),
            status: ConversationStatus::Planning,
            query: next.query.clone(),
            created_at_ms: self.created_at_ms,
            deadline_ms: next.deadline_ms,
            total: 0,
            remaining: 0,
            finished: BTreeSet::new(),
            plan: BTreeSet::new(),
            reply: None,
            usage: Usage::default(),
            notes: Vec::new(),
            error: None,
            idempotency_key: next.idempotency_key.clone(),
            trace_parent: next.trace_parent.clone(),
            handoff: None,
            request_hash: Some(next.request_hash.clone()),
            turn: next.turn,
            turn_started_at_ms: Some(next.started_at_ms),
            expires_at_ms: Some(next.expires_at_ms),
            language: Some(next.language),
            lease: Some(next.lease.clone()),
            sweep_shard: Some(next.sweep_shard),
            queued_at_ms: None,
            author: TurnAuthor::Customer,
            ttl: self.ttl.max(next.expires_at_ms / 1000 + RETENTION_AFTER_EXPIRY_SECS),
        }
    }

    /// Whether this stored conversation is `next`'s own write (a `start_turn` retried after its
    /// answer was lost finds it): on `next.turn` under `next`'s planner, or moved on from it.
    pub fn is_turn_started_by(&self, next: &NextTurn) -> bool {
        self.turn == next.turn && self.turn_started_at_ms == Some(next.started_at_ms) && self.query == next.query
    }

    /// Whether this stored conversation is the flip of `fail_conversation(turn, reason)` made
    /// (a retry whose first write was applied and its answer lost finds it): `FAILED` on `turn`
    /// with `reason` as its error (as the store wrote it: DynamoDB's is cut to its limit).
    pub fn is_failed_on(&self, turn: u32, reason: &str) -> bool {
        self.turn == turn && self.status == ConversationStatus::Failed && self.error.as_deref() == Some(reason)
    }
}

/// Who wrote a turn's message: the customer (every turn asked through the API), the swarm (a turn
/// that tells the customer what a person decided on an approval) or an operator (a person's answer
/// to a handed-off conversation). Serialised `customer`, `swarm`, `operator`; absent reads as `customer`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnAuthor {
    #[default]
    Customer,
    Swarm,
    Operator,
}

impl TurnAuthor {
    /// Whether the customer wrote it (the serialised default, left out of stored items).
    pub fn is_customer(&self) -> bool {
        *self == Self::Customer
    }

    /// The stable code: `customer`, `swarm`, `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Customer => "customer",
            Self::Swarm => "swarm",
            Self::Operator => "operator",
        }
    }
}

/// A one-line-per-turn outline of earlier turns (number and status only), for logs and tools.
///
/// The planner's account of earlier turns — messages, replies and the facts their tools returned,
/// bounded in tokens — is [`crate::memory::Memory`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EarlierTurns {
    /// One line per earlier turn, oldest first.
    pub lines: Vec<String>,
}

/// Builds the account of `turns` (the archived turns, oldest first) for the next turn's planner.
pub fn earlier_turns_account(turns: &[TurnRecord]) -> EarlierTurns {
    EarlierTurns { lines: turns.iter().map(|t| format!("turn {}: {}", t.turn, t.status.as_str())).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(c: &Conversation, now: i64) -> NextTurn {
        NextTurn {
            turn: c.turn + 1,
            query: "and the coupon?".into(),
            language: Language::English,
            idempotency_key: Some("k2".into()),
            request_hash: "h2".into(),
            trace_parent: None,
            lease: Lease { holder: "orchestrator:2".into(), until_ms: now + 35_000, turn: c.turn + 1 },
            started_at_ms: now,
            deadline_ms: now + 120_000,
            expires_at_ms: now + 87_300_000,
            sweep_shard: 3,
        }
    }

    #[test]
    fn a_new_turn_resets_every_per_turn_field_and_keeps_the_conversation() {
        let mut c = Conversation::new("C1", "where is A1029?", 1_000, 120);
        c.status = ConversationStatus::Done;
        c.reply = Some("it ships today".into());
        c.total = 2;
        c.plan = ["w01".to_owned(), "w02".to_owned()].into();
        c.finished = c.plan.clone();
        c.usage.prompt_tokens = Some(10);
        let archived = TurnRecord::of(&c);
        assert_eq!((archived.turn, archived.started_at_ms, archived.total), (0, 1_000, 2));
        assert_eq!(archived.reply.as_deref(), Some("it ships today"));
        let n = next(&c, 50_000);
        let t1 = c.next_turn(&n);
        assert_eq!((t1.turn, t1.status, t1.total, t1.remaining), (1, ConversationStatus::Planning, 0, 0));
        assert!(t1.plan.is_empty() && t1.finished.is_empty() && t1.reply.is_none() && t1.usage.is_empty());
        assert_eq!((t1.id.clone(), t1.created_at_ms, t1.turn_started_at()), (c.id.clone(), 1_000, 50_000));
        assert_eq!(t1.sweep_shard, Some(3));
        assert_eq!(t1.ttl, (50_000 + 87_300_000) / 1000 + RETENTION_AFTER_EXPIRY_SECS);
        assert!(t1.is_turn_started_by(&n));
        assert!(!c.is_turn_started_by(&n));
    }

    #[test]
    fn an_item_without_a_stored_expiry_expires_its_idle_time_after_its_turn_started() {
        let c = Conversation::new("C1", "hi", 1_000, 120);
        assert_eq!(c.expires_at(Duration::from_secs(60)), 61_000);
        let t1 = c.next_turn(&next(&c, 5_000));
        assert_eq!(t1.expires_at(Duration::from_secs(60)), 5_000 + 87_300_000, "the stored value wins");
    }

    #[test]
    fn the_account_of_earlier_turns_names_each_in_order() {
        let mut c = Conversation::new("C1", "hi", 1_000, 120);
        c.status = ConversationStatus::Done;
        let t0 = TurnRecord::of(&c);
        let mut t1 = TurnRecord::of(&c.next_turn(&next(&c, 2_000)));
        t1.status = ConversationStatus::Failed;
        assert_eq!(earlier_turns_account(&[t0, t1]).lines, ["turn 0: DONE", "turn 1: FAILED"]);
    }
}
