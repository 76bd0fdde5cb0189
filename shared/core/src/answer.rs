//! The end of a conversation, in one place: take (or take over) the aggregation lease, write the reply within its bound, finish the conversation or hand it to a person, and count it — for the aggregator (its reply model) and the worker's deadline path (the model-free reply) alike.

use std::future::Future;
use std::time::Duration;

use crate::decisions::tell_decisions;
use crate::domain::{
    Conversation, ConversationStatus, FailureKind, Handoff, Lease, MAX_REPLY_BYTES, SubtaskRecord, SubtaskResult,
    Usage, now_ms,
};
use crate::faults::{self, CrashPoint};
use crate::handoff::handoff_reason;
use crate::obs;
use crate::obs::metrics::LeaseKind;
use crate::ports::{AnswerStore, ConversationRecords, LeaseOutcome, LeasePhase, StoreError, SubtaskStore};
use crate::prompts::ReplyInput;
use crate::reply::{compose_reply, handoff_note, reply_input_in};
use crate::untrusted::clean_text_bytes;

/// A reply as its writer wrote it, before [`answer_conversation`] bounds it.
#[derive(Clone, Debug, PartialEq)]
pub struct WrittenReply {
    pub text: String,
    /// Tokens the writing took (added to the conversation's usage).
    pub usage: Usage,
    /// Whether a language model wrote it (`false`: the model-free reply).
    pub by_model: bool,
}

/// Writes a conversation's reply once its aggregation lease is held.
pub trait ReplyWriter: Sync {
    /// The reply to `conversation` from `input` (every subtask's result, in plan order, and the notes).
    /// Never fails: a writer that cannot use its model writes the model-free reply ([`compose_reply`]).
    fn write<'a>(
        &'a self,
        conversation: &'a Conversation,
        input: &'a ReplyInput,
    ) -> impl Future<Output = WrittenReply> + Send + 'a;
}

/// The reply written without a model: every answer, then plainly what could not be done ([`compose_reply`]).
pub struct ModelFreeReply;

impl ReplyWriter for ModelFreeReply {
    async fn write(&self, _conversation: &Conversation, input: &ReplyInput) -> WrittenReply {
        WrittenReply { text: compose_reply(input), usage: Usage::default(), by_model: false }
    }
}

/// Who asks to answer a conversation, and for how long it may hold the aggregation lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answerer {
    /// The holder's kind, the lease holder's prefix (`aggregator`, `deadline`): `<kind>:<uuid v7>`.
    pub kind: &'static str,
    /// How long the aggregation lease holds the conversation (longer than any invocation that holds it).
    pub lease: Duration,
    /// The conversation's idle time after a turn (`conversation.idle_expiry_secs`): a decision
    /// told once the turn is answered refreshes it.
    pub idle_expiry: Duration,
}

/// What [`answer_conversation`] did: the conversation-level outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnswerOutcome {
    /// This call held the aggregation lease and wrote the reply: the conversation is now `status`
    /// ([`ConversationStatus::Done`] or [`ConversationStatus::Handoff`]). `taken_over`: the expired
    /// lease of an earlier holder this call replaced.
    Answered { status: ConversationStatus, by_model: bool, taken_over: Option<Lease> },
    /// This call held the aggregation lease and found that none of the conversation's subtasks
    /// ever began (never sent, or never taken up before they were closed): nothing of it ran, so it
    /// is not answered `DONE` with a reply about work that never ran but failed
    /// ([`NEVER_STARTED`]): not started, as a 503 `started: no` or `unknown` told the client it may end.
    NeverStarted { taken_over: Option<Lease> },
    /// Another holder's lease is live: it answers; nothing done.
    Held(Lease),
    /// The conversation is not ready or already over (`RUNNING` with subtasks open, terminal): nothing done.
    NotInPhase { status: ConversationStatus, remaining: u32 },
    /// This call's lease was taken over before its reply landed: another aggregation answered first.
    Overtaken,
    /// No such conversation.
    Missing,
}

/// The error of a conversation failed because none of its subtasks ever began.
pub const NEVER_STARTED: &str = "none of its subtasks began before they were closed: nothing of it ran";

/// Answers `conversation` (as read by the caller) through the aggregation lease of its turn
/// (DESIGN.md invariant 2): `RUNNING → AGGREGATING` with nothing remaining, or the takeover of an
/// aggregation whose lease expired; never while another holder's lease is live. Then the reply
/// from every subtask's result (`writer`), bounded to [`MAX_REPLY_BYTES`] with no display
/// controls, and the conditional `AGGREGATING → DONE` (or `→ HANDOFF`, when
/// [`handoff_reason`] says a person takes over) that lets only the first finisher through; then
/// the reply, conversation, cost and hand-off metrics. A conversation with subtasks none of which
/// ever began (closed with no attempt: never sent, dead-lettered or closed at the deadline) and no
/// hand-off asked for is failed instead (`records`, [`AnswerOutcome::NeverStarted`]): every
/// answerer decides this alike from the same closed subtasks, so the lease's holder and a stale
/// one never disagree.
///
/// Errors: the store's, from taking the lease, reading the subtasks or finishing (a transient one
/// is retried by the caller's trigger; the lease makes the retry safe).
pub async fn answer_conversation<W: ReplyWriter + ?Sized>(
    records: &dyn ConversationRecords,
    answers: &dyn AnswerStore,
    subtasks: &dyn SubtaskStore,
    conversation: &Conversation,
    answerer: Answerer,
    writer: &W,
) -> Result<AnswerOutcome, StoreError> {
    let id = &conversation.id;
    let holder = format!("{}:{}", answerer.kind, uuid::Uuid::now_v7());
    let now = now_ms();
    let phase = LeasePhase::Aggregating { turn: conversation.turn };
    let taken_over = match answers.acquire_lease(id, phase, &holder, now, lease_until(now, answerer.lease)).await? {
        LeaseOutcome::Acquired { taken_over } => taken_over,
        LeaseOutcome::Held(lease) => return Ok(AnswerOutcome::Held(lease)),
        LeaseOutcome::NotInPhase { status, remaining } => return Ok(AnswerOutcome::NotInPhase { status, remaining }),
        LeaseOutcome::Missing => return Ok(AnswerOutcome::Missing),
    };
    if let Some(expired) = &taken_over {
        obs::metrics::lease_taken_over(LeaseKind::Aggregating);
        tracing::warn!(conversation_id = %id, expired_holder = %expired.holder, "aggregation lease expired: taking over");
    }
    faults::at(CrashPoint::AggregatorAfterFlip).await;
    let all = subtasks.list_subtasks(id).await?;
    let handoff = handoff_reason(conversation, &all).map(|reason| Handoff { reason, at_ms: now_ms() });
    if handoff.is_none() && !all.is_empty() && all.iter().all(closed_unbegun) {
        if !records.fail_conversation(id, conversation.turn, NEVER_STARTED).await? {
            return Ok(AnswerOutcome::Overtaken);
        }
        tracing::warn!(conversation_id = %id, subtasks = all.len(), "none of its subtasks ever began: failed, not answered");
        obs::metrics::conversation_finished(ConversationStatus::Failed, conversation.created_at_ms, now_ms());
        return Ok(AnswerOutcome::NeverStarted { taken_over });
    }
    let language = conversation.reply_language();
    let mut notes = conversation.notes.clone();
    if handoff.is_some() {
        notes.push(handoff_note(language).to_owned());
    }
    let written = writer.write(conversation, &reply_input_in(&all, &notes, language)).await;
    // Model output bound for a terminal and a DynamoDB item: no display controls, bounded in bytes.
    let reply = clean_text_bytes(&written.text, MAX_REPLY_BYTES);
    // The conversation item reaching HANDOFF is the hand-off event (the stream carries it on).
    let finished = match &handoff {
        Some(h) => answers.hand_off(id, conversation.turn, &reply, &written.usage, h).await?,
        None => answers.finish_conversation(id, conversation.turn, &reply, &written.usage).await?,
    };
    if !finished {
        tracing::warn!(conversation_id = %id, "another aggregation answered first (this lease was taken over)");
        return Ok(AnswerOutcome::Overtaken);
    }
    obs::metrics::reply_written(written.by_model);
    let status = if handoff.is_some() { ConversationStatus::Handoff } else { ConversationStatus::Done };
    obs::metrics::conversation_finished(status, conversation.created_at_ms, now_ms());
    obs::metrics::conversation_cost(&conversation.usage.add(&written.usage));
    if let Some(h) = &handoff {
        obs::metrics::handoff(h.reason);
        tracing::info!(conversation_id = %id, reason = h.reason.code(), "conversation handed to a person");
    }
    faults::at(CrashPoint::AnswerBeforeTell).await;
    // A decision that landed while this turn ran is told now, after it (DESIGN.md "Turns"). A
    // failure (or a crash just before) loses nothing: the next reader of the conversation tells it.
    if let Err(e) = tell_decisions(records, subtasks, id, answerer.idle_expiry).await {
        tracing::warn!(conversation_id = %id, error = %e, "could not tell a decision after the answer; its next reader will");
    }
    Ok(AnswerOutcome::Answered { status, by_model: written.by_model, taken_over })
}

/// Whether `r` was closed without ever beginning: no attempt, and skipped, or failed by the
/// closer (at the deadline, or as a dead letter) rather than by a worker.
fn closed_unbegun(r: &SubtaskRecord) -> bool {
    r.attempts == 0
        && match &r.result {
            Some(SubtaskResult::Skipped { .. }) => true,
            Some(result) => {
                matches!(result.failure_kind(), Some(FailureKind::DeadlinePassed | FailureKind::DeadLetter))
            }
            None => false,
        }
}

/// `now_ms + lease` in epoch milliseconds, saturating.
// The one place of this module's epoch arithmetic: it goes to the shared epoch-time helper once
// that exists.
fn lease_until(now_ms: i64, lease: Duration) -> i64 {
    now_ms.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
}
