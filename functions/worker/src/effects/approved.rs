//! Approved side effects executed: a person's approval (`Execute` message) runs the journal entry exactly as recorded, with its token, at most once — and closes the approval with what happened.

use std::sync::Arc;
use std::time::Duration;

use swarm_core::approval::ApprovalStatus;
use swarm_core::decisions::tell_decisions;
use swarm_core::domain::{ConversationId, now_ms};
use swarm_core::effects::{EffectChange, EffectOutcome, EffectState};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::ports::{ApprovalStore, ConversationStore, JournalStore, StoreError, SubtaskStore, ToolContext};
use tokio::time::Instant;

use super::dispatch::{Dispatcher, EffectEnd, Sent};
use crate::outcome::Outcome;

/// Executes approved side effects.
pub struct ApprovedEffects {
    approvals: Arc<dyn ApprovalStore>,
    /// Read for the approval's journal entry.
    subtasks: Arc<dyn SubtaskStore>,
    journal: Arc<dyn JournalStore>,
    /// Where the outcome is told to the customer as a turn ([`tell_decisions`]).
    store: Arc<dyn ConversationStore>,
    dispatcher: Arc<Dispatcher>,
    /// The conversation's idle expiry a told turn refreshes.
    idle_expiry: Duration,
}

impl ApprovedEffects {
    pub fn new(store: Arc<dyn ConversationStore>, dispatcher: Arc<Dispatcher>, idle_expiry: Duration) -> Self {
        Self {
            approvals: store.clone(),
            subtasks: store.clone(),
            journal: store.clone(),
            store,
            dispatcher,
            idle_expiry,
        }
    }

    /// Tells the customer what came of the approval as a turn, if its conversation's turn is
    /// over (else the writer that ends that turn does). A failure here loses nothing: the outcome
    /// is in the journal, and the next teller (the turn's end, a read of the conversation) finds
    /// it untold; so it is logged, not retried through the message.
    async fn tell(&self, id: &ConversationId) {
        match tell_decisions(self.store.as_ref(), self.store.as_ref(), id, self.idle_expiry).await {
            Ok(told) if told.deferred => {
                tracing::info!(conversation_id = %id, "outcome told when the running turn ends")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(conversation_id = %id, error = %e, "could not tell the outcome yet; its next reader will")
            }
        }
    }

    /// A [`swarm_core::domain::TaskMessage::Execute`]: runs an approved side effect exactly as
    /// recorded, with its approval attached; no model is involved. Runs at most once: the call
    /// carries its journal key (the tool server returns the first answer for a repeated key) and
    /// an entry with an outcome is never dispatched again.
    pub async fn execute(
        &self,
        id: &ConversationId,
        approval_id: &str,
        deadline: Instant,
    ) -> Result<Outcome, StoreError> {
        let Some(approval) = self.approvals.get_approval(approval_id).await? else {
            return Ok(Outcome::Poison(format!("unknown approval {approval_id}")));
        };
        if &approval.conversation_id != id {
            return Ok(Outcome::Poison(format!("approval {approval_id} belongs to another conversation")));
        }
        if approval.status != ApprovalStatus::Approved {
            if matches!(approval.status, ApprovalStatus::Executed | ApprovalStatus::Expired) {
                // A redelivery after the approval closed (the worker may have died before telling it).
                self.tell(id).await;
            }
            return Ok(Outcome::Ignored(format!("approval is {}", approval.status.code())));
        }
        let Some(record) = self.subtasks.get_subtask(id, &approval.subtask_id).await? else {
            return Ok(Outcome::Poison(format!("unknown subtask {}", approval.subtask_id)));
        };
        let Some(effect) = record.effects.get((approval.ordinal as usize).saturating_sub(1)).cloned() else {
            return Ok(Outcome::Poison(format!("approval {approval_id} names no journal entry")));
        };
        if effect.state.is_final() {
            // It ran before (a duplicate message, or a crash after its outcome): close the approval the same way.
            let outcome = effect
                .outcome
                .clone()
                .unwrap_or_else(|| EffectOutcome::new(&format!("not run: {}", effect.state.code()), true));
            let status =
                if effect.state == EffectState::Done { ApprovalStatus::Executed } else { ApprovalStatus::Expired };
            self.approvals.finish_approval(approval_id, status, &outcome, now_ms()).await?;
            self.tell(id).await;
            return Ok(Outcome::AlreadyFinished);
        }
        let Some(token) = approval.token.clone() else {
            return Ok(Outcome::Poison(format!("approval {approval_id} carries no token")));
        };
        tracing::info!(approval_id, order_id = %approval.action.order_id, amount_cents = approval.action.amount_cents, "running an approved side effect");
        let ctx = ToolContext {
            role: record.role.clone(),
            customer_id: approval.customer_id.clone(),
            conversation_id: id.clone(),
            subtask_id: approval.subtask_id.clone(),
        };
        let ended =
            self.dispatcher.dispatch_recorded(&ctx, &effect, Some(&token), Sent::Maybe, record.ttl, deadline).await?;
        let (status, outcome) = match &ended {
            EffectEnd::Unknown => {
                return Ok(Outcome::Retry("the approved side effect's outcome is not known yet".into()));
            }
            EffectEnd::Recorded(outcome) => (ApprovalStatus::Executed, outcome.clone()),
            EffectEnd::Awaiting(_) => {
                (ApprovalStatus::Expired, EffectOutcome::new("the gateway asked for an approval again", true))
            }
        };
        let change = match &ended {
            EffectEnd::Recorded(outcome) => EffectChange::done(outcome.clone(), now_ms()),
            _ => EffectChange {
                state: EffectState::Expired,
                outcome: Some(outcome.clone()),
                approval_id: None,
                proposed: None,
                at_ms: now_ms(),
            },
        };
        self.journal.record_effect_outcome(id, &approval.subtask_id, effect.ordinal, &change).await?;
        faults::at(CrashPoint::WorkerAfterOutcome).await;
        self.approvals.finish_approval(approval_id, status, &outcome, now_ms()).await?;
        tracing::info!(approval_id, ok = !outcome.is_error, "approved side effect ran");
        faults::at(CrashPoint::WorkerAfterFinishApproval).await;
        self.tell(id).await;
        Ok(Outcome::Finished(record.status))
    }
}
