//! What the verdict is made of: the facts a chaos run gathered (the clients' outcomes, the store at the end, the audit of the stream, the ledger, the operator's log, the platform's counters), and what reads them: the scenario a conversation belongs to, the approval a side effect's key names.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use swarm_core::approval::{Approval, approval_id};
use swarm_core::domain::{Conversation, ConversationId, ConversationStatus, SubtaskId, SubtaskRecord, SubtaskStatus};

use crate::chaos::audit::AuditLog;
use crate::chaos::operator::OperatorLog;

/// One fault kind's line: its rate, its opportunities and how often it was injected.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultLine {
    pub name: String,
    pub rate: f64,
    pub opportunities: u64,
    pub injected: u64,
}

/// What the client side of one scripted conversation saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientOutcome {
    /// The conversation id of the 202, if one came.
    pub conversation_id: Option<String>,
    /// `POST`s sent (the first and every re-post).
    pub posts: u32,
    /// The client stopped without a 202 (no re-post drawn, or too many failures).
    pub gave_up: bool,
    /// A 4xx that is not a fault (the request was refused).
    pub refused: Option<u16>,
}

/// A refund in the shop's ledger (what the ledger says, nothing the swarm reported).
#[derive(Clone, Debug, PartialEq)]
pub struct LedgerRefund {
    pub order_id: String,
    /// Cents of the order's currency.
    pub amount_cents: i64,
    pub reason: Option<String>,
    /// The idempotency key the shop received with the call.
    pub idempotency_key: String,
}

/// A support ticket in the shop's ledger (what the ledger says).
#[derive(Clone, Debug, PartialEq)]
pub struct LedgerTicket {
    pub order_id: String,
    pub subject: String,
    /// The idempotency key the shop received with the call.
    pub idempotency_key: String,
}

/// The dead-letter path as the run saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeadLetterFacts {
    /// Messages the chaos poisoned (failed on every receive: each must reach a DLQ).
    pub poisoned: u64,
    /// Distinct messages received on a DLQ (dead-lettered by a redrive policy).
    pub dead_lettered: u64,
    /// Of those, the ones the DLQ consumer acknowledged (deleted from the DLQ).
    pub acknowledged: u64,
    /// DLQ consumer invocations.
    pub invocations: u64,
}

/// The stack killed mid-run and started again on the same stack (`--restart-at`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RestartFacts {
    /// When it was killed, from the run's start.
    pub killed_at: Duration,
    /// Conversations accepted (202) before the kill.
    pub accepted_at_kill: usize,
    /// Of those, the ones not terminal in the table right after the kill (in flight).
    pub open_at_kill: usize,
    /// Their ids (the subtasks short of `SUCCEEDED` among them are shown apart).
    pub open_ids: Vec<String>,
    /// How long the new stack took to start.
    pub restarted_in: Duration,
    /// The new stack's backend line (`stack … reused`).
    pub backend: String,
    /// Conversations accepted after the restart.
    pub accepted_after: usize,
}

/// Everything the verdict is made of.
#[derive(Clone, Debug, Default)]
pub struct RunFacts {
    pub backend: String,
    pub conversations_asked: usize,
    pub subtasks_each: usize,
    pub time_scale: f64,
    pub deadline: Duration,
    pub wall: Duration,
    pub faults: Vec<FaultLine>,
    /// By scenario index.
    pub clients: BTreeMap<usize, ClientOutcome>,
    /// Scenario index → the order its refund is for and its refund subtask.
    pub refunds_asked: BTreeMap<usize, (String, String)>,
    pub audit: AuditLog,
    /// The store at the end: every conversation the audit or a client knows, with its subtasks
    /// (`None`: absent from the store).
    pub store: BTreeMap<String, Option<(Conversation, Vec<SubtaskRecord>)>>,
    pub ledger: Vec<LedgerRefund>,
    /// Every support ticket the shop opened.
    pub tickets: Vec<LedgerTicket>,
    /// What the operator decided (its own log).
    pub operator: OperatorLog,
    /// Every approval id known (the operator's log, the subtasks' journals) → the approval in the
    /// store at the end (`None`: absent).
    pub approvals_at_end: BTreeMap<String, Option<Approval>>,
    /// `(function, peak, cap)`.
    pub concurrency: Vec<(String, u64, u64)>,
    /// Platform counters worth a line: `(name, value)`.
    pub platform: Vec<(String, u64)>,
    pub dead_letters: DeadLetterFacts,
    /// `(conversation, subtask)` of every subtask an unrecoverable fault was injected into (a
    /// poisoned message), where the injector knew it.
    pub unrecoverable: BTreeSet<(String, String)>,
    /// Store faults by operation name: `(answers lost, throttled)`.
    pub store_faults: BTreeMap<String, (u64, u64)>,
    /// Lines said before the table (skipped parts, warnings).
    pub notes: Vec<String>,
    /// `Some` when a restart was asked for (`--restart-at`): `Some(None)` it never came (the run
    /// accepted too few conversations), `Some(Some(_))` what it did.
    pub restart: Option<Option<RestartFacts>>,
    /// `--min-succeeded`: the share of counted subtasks (0..=1) that must end `SUCCEEDED`; `None`: not judged.
    pub min_succeeded: Option<f64>,
}

/// The scenario index a conversation's message names (`chaos conversation <n>.`).
pub(super) fn scenario_of(c: &Conversation) -> Option<usize> {
    let rest = &c.query[c.query.find("chaos conversation ")? + "chaos conversation ".len()..];
    rest.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()
}

/// The approval a side effect's idempotency key belongs to: `swarm:<conversation>:<subtask>:<ordinal>`
/// → `<conversation>.<subtask>.<ordinal>`; `None` for a key of another shape.
pub fn approval_of_key(key: &str) -> Option<String> {
    let mut parts = key.strip_prefix("swarm:")?.rsplitn(3, ':');
    let ordinal: u32 = parts.next()?.parse().ok()?;
    let subtask = parts.next().filter(|s| !s.is_empty())?;
    let conversation = parts.next().filter(|c| !c.is_empty() && !c.contains(':'))?;
    Some(approval_id(&ConversationId::from_trusted(conversation), &SubtaskId::from(subtask), ordinal))
}

/// `DONE` or `HANDOFF`: the conversation was answered.
pub(super) fn answered(c: &Conversation) -> bool {
    matches!(c.status, ConversationStatus::Done | ConversationStatus::Handoff)
}

/// Failed or skipped: a subtask the reply must name as not done.
pub(super) fn failed_or_skipped(s: &SubtaskRecord) -> bool {
    matches!(s.status, SubtaskStatus::Failed | SubtaskStatus::Skipped)
}
