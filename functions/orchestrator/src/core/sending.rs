//! Sending a plan's subtasks and arming its deadline: the first run's queue and delay, the sends by role, the `queued` marker and handing the planning lease back.

use std::sync::Arc;

use swarm_core::domain::{Conversation, ConversationId, SubtaskRecord, TaskMessage};
use swarm_core::ports::{LeaseOutcome, LeasePhase, MAX_DELAY_SECONDS, TaskQueue};
use swarm_core::roles::REFUND_ROLE;
use swarm_core::time::{self, now_ms};

use super::Orchestrator;
use crate::budget::{Budget, CallFailed};

impl Orchestrator {
    /// The queue of the deadline message armed at planning: the side effects' (refund role's) own
    /// queue when this function holds it, else the default. Its worker holds every queue (the
    /// tasks worker may not send to the side effects' queue: `ROLE_NEEDS`), so the first run
    /// sends a refund or ticket subtask never sent as well as the others: the unsent half of a
    /// partial `SendMessageBatch`, or a planner killed before its send, costs the planning lease,
    /// not the subtask. Later runs are re-armed on the default queue (the tasks worker's).
    pub(super) fn first_run_queue(&self) -> &Arc<dyn TaskQueue> {
        self.queues.queue_for(REFUND_ROLE).unwrap_or_else(|_| self.queues.default_queue())
    }

    /// `DelaySeconds` of the deadline message armed at planning: until the planning lease ends
    /// (its first run sends what a dead planner did not), or until the deadline when that is sooner.
    pub(super) fn first_run_delay(&self, conversation: &Conversation) -> u32 {
        let deadline = time::until(conversation.deadline_ms).as_secs() + 1;
        let lease_end = conversation.lease.as_ref().map_or(deadline, |l| time::until(l.until_ms).as_secs() + 1);
        deadline.min(lease_end).min(u64::from(MAX_DELAY_SECONDS)) as u32
    }

    /// Writes the `queued` marker: every subtask sent at planning was sent. A failure is logged and
    /// answered 202 all the same: the subtasks are sent; without the marker the deadline path's
    /// first run sends them once more, a duplicate absorbed like any duplicate delivery.
    pub(super) async fn mark_queued(&self, id: &ConversationId, turn: u32, budget: &Budget) {
        if let Err(e) = budget.after_plan("the queued marker", 0, self.store.mark_queued(id, turn, now_ms())).await {
            tracing::warn!(error = %e, "subtasks sent but not marked: the deadline path may send them once more");
        }
    }

    /// Ends this planner's own planning lease (its holder renews it until an instant already past),
    /// `PLANNING` or just flipped to `RUNNING`: a retry takes the planning over (or sends what was not
    /// sent) at once instead of waiting for the lease. When that write fails the lease simply runs
    /// out and the retry after it does.
    pub(super) async fn end_planning_lease(&self, conversation: &Conversation, budget: &Budget) {
        let Some(lease) = &conversation.lease else { return };
        let now = now_ms();
        let end = self.store.acquire_lease(&conversation.id, LeasePhase::Planning, &lease.holder, now, now - 1);
        match budget.after_plan("ending the planning lease", 0, end).await {
            Ok(LeaseOutcome::Acquired { .. }) => tracing::info!("planning lease handed back"),
            Ok(outcome) => tracing::info!(?outcome, "planning lease not handed back: no longer this planner's"),
            Err(e) => tracing::warn!(error = %e, "planning lease not handed back; it runs out"),
        }
    }

    /// Enqueues every subtask without dependencies, and every subtask of a role with its own
    /// queue whatever its dependencies: those wait for them on their own queue, because no
    /// function but the orchestrator and that role's worker may send there. Each send is cut at
    /// the per-call deadline.
    pub(super) async fn enqueue_ready(
        &self,
        id: &ConversationId,
        records: &[SubtaskRecord],
        budget: &Budget,
    ) -> Result<(), CallFailed> {
        let mut by_role: std::collections::BTreeMap<&str, Vec<TaskMessage>> = Default::default();
        for r in records.iter().filter(|r| r.subtask.depends_on.is_empty() || self.queues.has_own_queue(&r.role)) {
            by_role.entry(r.role.as_str()).or_default().push(TaskMessage::run(id, &r.subtask.id));
        }
        let mut sends_left = by_role.len() as u32;
        for (role, messages) in by_role {
            sends_left -= 1;
            // After this send: the other queue's, then the queued marker.
            let send = self.queues.for_role(role).send(&messages, 0);
            if let Err(e) = budget.after_plan("sending the subtasks", sends_left + 1, send).await {
                tracing::error!(error = %e, role, "could not enqueue subtasks");
                return Err(e);
            }
        }
        Ok(())
    }
}
