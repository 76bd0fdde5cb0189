//! Approved side effects executed: a person's approval (`Execute` message) runs the journal entry exactly as recorded, with its token, at most once — and closes the approval with what happened.

use std::sync::Arc;

use swarm_core::approval::ApprovalStatus;
use swarm_core::domain::{ConversationId, now_ms};
use swarm_core::effects::{EffectChange, EffectOutcome, EffectState};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::ports::{ApprovalStore, JournalStore, StoreError, SubtaskStore, ToolContext};
use tokio::time::Instant;

use super::dispatch::{Dispatcher, EffectEnd, Sent};
use crate::outcome::Outcome;

/// Executes approved side effects.
pub struct ApprovedEffects {
    approvals: Arc<dyn ApprovalStore>,
    /// Read for the approval's journal entry.
    subtasks: Arc<dyn SubtaskStore>,
    journal: Arc<dyn JournalStore>,
    dispatcher: Arc<Dispatcher>,
}

impl ApprovedEffects {
    pub fn new(
        approvals: Arc<dyn ApprovalStore>,
        subtasks: Arc<dyn SubtaskStore>,
        journal: Arc<dyn JournalStore>,
        dispatcher: Arc<Dispatcher>,
    ) -> Self {
        Self { approvals, subtasks, journal, dispatcher }
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
        Ok(Outcome::Finished(record.status))
    }
}
