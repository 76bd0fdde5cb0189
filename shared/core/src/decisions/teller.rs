//! The teller: finds a conversation's decided approvals not told yet and tells each as a swarm-authored turn, once its current turn is over — called by whoever learns an outcome or ends a turn, and by the readers that would show it.

use std::time::Duration;

use crate::domain::ConversationId;
use crate::faults::{self, CrashPoint};
use crate::ports::{ConversationRecords, StoreError, SubtaskStore};
use crate::time::now_ms;
use crate::turns::TurnAuthor;

use super::{TellOutcome, ToldTurn, decided_result, decision_language, decision_text, untold_decisions};

/// Most passes one call makes (each tells one decision, or finds it told by another teller):
/// bounded so a conversation that keeps moving cannot hold a caller.
const MAX_PASSES: usize = 24;

/// What [`tell_decisions`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Told {
    /// The turns this call told, in order.
    pub turns: Vec<u32>,
    /// A decision waits untold because the conversation's current turn is running: the writer
    /// that ends that turn tells it (or the next reader).
    pub deferred: bool,
}

/// Tells every decided approval of conversation `id` not told yet, oldest first, each as one
/// swarm-authored turn ([`crate::ports::ConversationRecords::tell_turn`]), while the
/// conversation's current turn is over; moves each decided subtask on from `AWAITING_APPROVAL`
/// first ([`super::decided_result`]; a repeat of that write changes nothing). Safe to call
/// anywhere, any number of times, concurrently: a decision's notice is written in the same
/// transaction as its turn, so it is told once; a teller that dies between its writes leaves the
/// decision untold for the next call. `idle`: the conversation's idle expiry, refreshed by each turn.
///
/// Errors: the store's (nothing is lost: the next call finds what is still untold).
pub async fn tell_decisions(
    records: &dyn ConversationRecords,
    subtasks: &dyn SubtaskStore,
    id: &ConversationId,
    idle: Duration,
) -> Result<Told, StoreError> {
    let mut told = Told::default();
    for _ in 0..MAX_PASSES {
        let Some(conversation) = records.get_conversation(id).await? else { return Ok(told) };
        let history = records.conversation_history(id).await?;
        let Some(first) = untold_decisions(&history).into_iter().next() else { return Ok(told) };
        if !conversation.status.is_terminal() {
            tracing::info!(conversation_id = %id, turn = conversation.turn, "a decision waits for the running turn to end");
            told.deferred = true;
            return Ok(told);
        }
        let record = history.subtasks.iter().find(|r| r.subtask.id == first.subtask_id);
        if let Some(result) = record.and_then(decided_result) {
            subtasks.settle_decided(id, &first.subtask_id, &result).await?;
        }
        faults::at(CrashPoint::DecisionAfterSettle).await;
        let language = decision_language(&conversation, &history.turns, &first.subtask_id);
        let kind = first.kind();
        let text = decision_text(&kind, first.proposed(), language);
        let turn = ToldTurn::new(first.key(), TurnAuthor::Swarm, text, language, now_ms(), idle);
        match records.tell_turn(&conversation, &turn).await? {
            TellOutcome::Told(after) => {
                tracing::info!(conversation_id = %id, approval_id = first.key(), decision = kind.code(), turn = after.turn, "decision told as a turn");
                told.turns.push(after.turn);
            }
            // Told by another teller, or the conversation moved on since it was read: read again.
            TellOutcome::AlreadyTold(_) | TellOutcome::Refused(_) => {}
        }
    }
    Ok(told)
}
