//! Domain values of the swarm: conversations, plans, subtask records, usage, leases, queue messages and the limits on them; the one path (`domain::…`) to the values its neighbours hold.
//!
//! The status machines live in [`crate::lifecycle`], a subtask's result in [`crate::result`],
//! identifiers in [`crate::ids`], bounded text in [`crate::text`] and the clock in
//! [`crate::time`]; each is re-exported here, so `swarm_core::domain::…` names them all.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::effects::{AttemptLease, Effect};
pub use crate::ids::{ConversationId, SubtaskId};
pub use crate::lifecycle::{ConversationStatus, SubtaskStatus};
pub use crate::result::{FailureKind, MAX_RESULT_CHARS, SubtaskResult, ToolCallRecord};
pub use crate::text::{TRUNCATION_MARK, truncate_bytes, truncate_chars};
pub use crate::time::now_ms;
pub use crate::turns::{NextTurn, TurnAuthor, TurnRecord};

/// Upper bound on subtasks in one plan (DESIGN.md "up to 100 independent subtasks").
pub const MAX_SUBTASKS: usize = 100;
/// Default message limit in characters (DESIGN.md API section).
pub const MAX_MESSAGE_CHARS: usize = 8_000;
/// Default deadline of a conversation, in seconds after creation (the timing table's `conversation.deadline_secs`).
pub const DEFAULT_DEADLINE_SECS: u64 = crate::timings::Timings::STANDARD.conversation.deadline.as_secs();
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

/// A conversation: its one item holds the status, the counts, the reply and the usage (the
/// table's keys are the DynamoDB store codec's).
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
    /// Ids of the plan's subtasks, written with the flip to `RUNNING`: only these are listed,
    /// resumed and counted (a planner taken over may have left items of its own plan). Empty while
    /// planning, for a plan of no subtasks, and on items written before plans were recorded: then
    /// every subtask item of the conversation is its plan's.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub plan: BTreeSet<String>,
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
    /// The turn being answered (0: the first message); every top-level field but the id, the
    /// customer, `created_at_ms` and `expires_at_ms` is this turn's (earlier turns: [`TurnRecord`]s).
    #[serde(default)]
    pub turn: u32,
    /// When this turn started, Unix epoch milliseconds; `None`: turn 0, which started at `created_at_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_started_at_ms: Option<i64>,
    /// After this instant (Unix epoch milliseconds) the conversation takes no follow-up (410): its
    /// idle time after the latest turn started. `None` on items written before it was stored: then
    /// [`Conversation::expires_at`] reckons it from the turn's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// The language and script the customer is answered in, detected from the message when the
    /// conversation was created; `None` on items written before it was stored: read it through
    /// [`Conversation::reply_language`], which then detects it from `query`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<crate::language::Language>,
    /// The lease on the current phase (planning or aggregating), if one was taken.
    #[serde(default)]
    pub lease: Option<Lease>,
    /// Shard of the sweep index while the conversation is not terminal; removed in the write that
    /// makes it terminal, so the sparse index holds only conversations that may still need the sweep.
    #[serde(default)]
    pub sweep_shard: Option<u32>,
    /// When the orchestrator (or the deadline path making up for it) had sent every subtask it
    /// sends at planning, Unix epoch milliseconds ([`crate::ports::ConversationRecords::mark_queued`]).
    /// Absent on a `RUNNING` conversation: those subtasks may never have been sent — told apart
    /// from a backlog still in the queue, which is never sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at_ms: Option<i64>,
    /// Who wrote the current turn's message: the customer, or (a turn that tells a decision or a
    /// person's answer, [`crate::decisions`]) the swarm or an operator. Items written before
    /// authors existed read as the customer's.
    #[serde(default, skip_serializing_if = "TurnAuthor::is_customer")]
    pub author: TurnAuthor,
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
    /// Whether this stored conversation is the one `created` writes: the same id, customer, message
    /// and creation instant. Each request makes a new id, so a match is that request's own write —
    /// a create retried after its answer was lost finds it.
    pub fn is_created_by(&self, created: &Conversation) -> bool {
        self.id == created.id
            && self.customer_id == created.customer_id
            && self.query == created.query
            && self.created_at_ms == created.created_at_ms
    }

    /// A new conversation in `PLANNING`, with the default deadline and a 7-day TTL.
    pub fn new(customer_id: &str, query: &str, now_ms: i64, deadline_secs: u64) -> Self {
        Self {
            id: ConversationId::new(),
            customer_id: customer_id.to_owned(),
            status: ConversationStatus::Planning,
            query: query.to_owned(),
            created_at_ms: now_ms,
            deadline_ms: crate::time::after_ms(now_ms, std::time::Duration::from_secs(deadline_secs)),
            total: 0,
            remaining: 0,
            finished: BTreeSet::new(),
            plan: BTreeSet::new(),
            reply: None,
            usage: Usage::default(),
            notes: Vec::new(),
            error: None,
            idempotency_key: None,
            trace_parent: None,
            handoff: None,
            request_hash: None,
            turn: 0,
            turn_started_at_ms: None,
            expires_at_ms: None,
            language: None,
            lease: None,
            sweep_shard: None,
            queued_at_ms: None,
            author: TurnAuthor::Customer,
            ttl: now_ms / 1000 + 7 * 24 * 3600,
        }
    }

    /// The language the conversation is answered in: the one stored at creation, else (an item
    /// written before the field existed) the one its query reads as.
    pub fn reply_language(&self) -> crate::language::Language {
        self.language.unwrap_or_else(|| crate::language::Language::detect(&self.query, None))
    }
}

/// A subtask's record: one item per planned subtask, in its conversation's partition.
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
    pub effects: Vec<Effect>,
    /// Who runs the subtask now and until when: a second delivery waits for it to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<AttemptLease>,
    /// Same as the conversation's TTL.
    pub ttl: i64,
}

impl SubtaskRecord {
    /// Whether the orchestrator sends this subtask at planning and it never began: `QUEUED` with no
    /// attempt, or `PENDING` with no attempt when its role has a queue of its own (`own_queue`:
    /// such a subtask waits for its dependencies there). Those are what a re-drive sends when
    /// the conversation holds no `queued_at_ms` marker.
    pub fn sent_at_planning_never_begun(&self, own_queue: bool) -> bool {
        self.attempts == 0
            && (self.status == SubtaskStatus::Queued || (self.status == SubtaskStatus::Pending && own_queue))
    }

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

    /// Whether this record is the finish `record_result` writes for exactly these values (its
    /// `finished_at_ms` is `now_ms`, epoch milliseconds): a retry whose answer was lost finds its own
    /// write by it. A result trimmed to fit the item is not recognised (answered as already finished).
    pub fn is_finish_of(&self, result: &SubtaskResult, usage: &Usage, tools_used: &[String], now_ms: i64) -> bool {
        self.status == result.status()
            && self.finished_at_ms == Some(now_ms)
            && self.result.as_ref() == Some(result)
            && self.usage == *usage
            && self.tools_used == tools_used
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
    /// The conversation's deadline passed: aggregate with what it has. `turn` is the turn whose
    /// deadline it is (absent, 0, in messages queued before turns): a message of another turn than
    /// the conversation's changes nothing and is not re-armed.
    Deadline {
        conversation_id: ConversationId,
        #[serde(default, skip_serializing_if = "is_zero")]
        turn: u32,
    },
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

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl TaskMessage {
    /// The turn the message belongs to: a `Run`'s or `Confirm`'s subtask id carries it
    /// ([`SubtaskId::turn`]: ids of turn 0 have no prefix, so messages queued before turns read as
    /// turn 0), a `Deadline` says it; `None` for `Execute` (its approval names the subtask).
    pub fn turn(&self) -> Option<u32> {
        match self {
            Self::Run { subtask_id, .. } | Self::Confirm { subtask_id, .. } => Some(subtask_id.turn()),
            Self::Deadline { turn, .. } => Some(*turn),
            Self::Execute { .. } => None,
        }
    }

    pub fn run(conversation_id: &ConversationId, subtask_id: &SubtaskId) -> Self {
        Self::Run { conversation_id: conversation_id.clone(), subtask_id: subtask_id.clone(), handbacks: 0 }
    }

    pub fn conversation_id(&self) -> &ConversationId {
        match self {
            Self::Run { conversation_id, .. }
            | Self::Deadline { conversation_id, .. }
            | Self::Execute { conversation_id, .. }
            | Self::Confirm { conversation_id, .. } => conversation_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_conversation_without_a_stored_language_reads_as_its_query() {
        use crate::language::Language;

        let mut c = Conversation::new("C1", "訂單 A1029 到哪裡了？", 0, 120);
        assert_eq!(c.language, None);
        assert_eq!(c.reply_language(), Language::TraditionalChinese);
        c.language = Some(Language::English);
        assert_eq!(c.reply_language(), Language::English, "the stored value wins");
        let old: Conversation = serde_json::from_value(serde_json::json!({
            "id": "0190d1a0-0000-7000-8000-000000000000", "customer_id": "C1", "status": "DONE",
            "query": "你好", "created_at_ms": 0, "deadline_ms": 0, "total": 0, "remaining": 0, "ttl": 0
        }))
        .unwrap();
        assert_eq!(old.language, None);
        assert_eq!(old.reply_language(), Language::SimplifiedChinese);
    }
}
