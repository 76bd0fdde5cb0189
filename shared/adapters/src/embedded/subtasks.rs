//! The subtask and journal roles of [`InMemoryConversationStore`]: subtask records read, flipped, attempted under a lease and finished, and their side-effect journals.

use async_trait::async_trait;
use swarm_core::domain::{ConversationId, SubtaskId, SubtaskRecord, SubtaskResult, SubtaskStatus, Usage};
use swarm_core::effects::{AttemptLease, Effect, EffectChange};
use swarm_core::events::{Event, of};
use swarm_core::ports::{
    AttemptStart, CloseOutcome, IntentOutcome, JournalStore, RecordOutcome, StoreError, SubtaskStore,
};

use super::store::{ChangedItem, InMemoryConversationStore};

#[async_trait]
impl SubtaskStore for InMemoryConversationStore {
    async fn get_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
    ) -> Result<Option<SubtaskRecord>, StoreError> {
        Ok(self.lock()?.subtasks.get(id).and_then(|m| m.get(subtask_id)).cloned())
    }

    async fn list_subtasks(&self, id: &ConversationId) -> Result<Vec<SubtaskRecord>, StoreError> {
        let t = self.lock()?;
        let conv = t.conversation(id);
        // An empty plan (planning, no subtasks, an item written before plans were kept): every item of the turn.
        let of_plan = |r: &&SubtaskRecord| {
            conv.is_none_or(|c| {
                if c.plan.is_empty() { r.subtask.id.turn() == c.turn } else { c.plan.contains(r.subtask.id.as_str()) }
            })
        };
        Ok(t.subtasks.get(id).map(|m| m.values().filter(of_plan).cloned().collect()).unwrap_or_default())
    }

    async fn transition_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        from: &[SubtaskStatus],
        to: SubtaskStatus,
    ) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(false);
        };
        if !from.contains(&rec.status) {
            return Ok(false);
        }
        rec.status = to;
        let snapshot = rec.clone();
        if to.is_terminal() {
            t.log_subtask(id, subtask_id, swarm_core::time::now_ms(), of::closed(subtask_id, to));
        }
        t.emit(false, ChangedItem::Subtask(snapshot));
        Ok(true)
    }

    async fn begin_attempt(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        lease: &AttemptLease,
        now_ms: i64,
    ) -> Result<AttemptStart, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(AttemptStart::Missing);
        };
        if rec.status.is_terminal() {
            return Ok(AttemptStart::AlreadyFinished(rec.clone()));
        }
        if rec.lease.as_ref().is_some_and(|held| held.holder == lease.holder) {
            // This attempt's own start (a retry after its answer was lost): counted once.
            return Ok(AttemptStart::Started(rec.clone()));
        }
        if rec.lease.as_ref().is_some_and(|held| !held.admits(&lease.holder, now_ms)) {
            return Ok(AttemptStart::Leased(rec.clone()));
        }
        rec.lease = Some(lease.clone());
        rec.status = SubtaskStatus::Running;
        rec.attempts += 1;
        if rec.started_at_ms.is_none() {
            rec.started_at_ms = Some(now_ms);
        }
        let snapshot = rec.clone();
        t.log_subtask(id, subtask_id, now_ms, vec![Event::SubtaskStarted { subtask: subtask_id.clone() }]);
        t.emit(false, ChangedItem::Subtask(snapshot.clone()));
        Ok(AttemptStart::Started(snapshot))
    }

    async fn renew_attempt(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        lease: &AttemptLease,
    ) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(false);
        };
        // Only the holder's own lease on an open subtask: a retry after a lost answer renews it again.
        let Some(held) = rec.lease.as_mut().filter(|held| held.holder == lease.holder && !rec.status.is_terminal())
        else {
            return Ok(false);
        };
        held.until_ms = lease.until_ms;
        let snapshot = rec.clone();
        t.emit(false, ChangedItem::Subtask(snapshot));
        Ok(true)
    }

    async fn release_attempt(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        holder: &str,
    ) -> Result<(), StoreError> {
        let mut t = self.lock()?;
        if let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id))
            && rec.lease.as_ref().is_some_and(|l| l.holder == holder)
        {
            rec.lease = None;
            let snapshot = rec.clone();
            t.emit(false, ChangedItem::Subtask(snapshot));
        }
        Ok(())
    }

    async fn save_checkpoint(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        checkpoint: &str,
    ) -> Result<(), StoreError> {
        let mut t = self.lock()?;
        if let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id))
            && !rec.status.is_terminal()
        {
            rec.checkpoint = Some(checkpoint.to_owned());
            let snapshot = rec.clone();
            t.emit(false, ChangedItem::Subtask(snapshot));
        }
        Ok(())
    }

    async fn record_result(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: &SubtaskResult,
        usage: &Usage,
        tools_used: &[String],
        now_ms: i64,
    ) -> Result<RecordOutcome, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(RecordOutcome::Missing);
        };
        if rec.status.is_terminal() {
            if rec.is_finish_of(result, usage, tools_used, now_ms) {
                return Ok(RecordOutcome::Recorded(rec.clone()));
            }
            return Ok(RecordOutcome::AlreadyFinished(rec.clone()));
        }
        rec.status = result.status();
        rec.result = Some(result.clone());
        rec.usage = *usage;
        rec.tools_used = tools_used.to_vec();
        rec.finished_at_ms = Some(now_ms);
        rec.checkpoint = None;
        let snapshot = rec.clone();
        t.log_subtask(id, subtask_id, now_ms, of::finished(subtask_id, result, Some(usage), tools_used, false));
        t.emit(false, ChangedItem::Subtask(snapshot.clone()));
        Ok(RecordOutcome::Recorded(snapshot))
    }

    async fn close_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: &SubtaskResult,
        journal_len: usize,
        now_ms: i64,
    ) -> Result<CloseOutcome, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(CloseOutcome::Missing);
        };
        if rec.status.is_terminal() {
            return Ok(CloseOutcome::AlreadyFinished(rec.clone()));
        }
        if rec.effects.len() != journal_len {
            return Ok(CloseOutcome::JournalChanged);
        }
        rec.status = result.status();
        rec.result = Some(result.clone());
        rec.finished_at_ms = Some(now_ms);
        rec.checkpoint = None;
        let snapshot = rec.clone();
        t.log_subtask(id, subtask_id, now_ms, of::finished(subtask_id, result, None, &[], false));
        t.emit(false, ChangedItem::Subtask(snapshot.clone()));
        Ok(CloseOutcome::Recorded(snapshot))
    }

    async fn settle_submitted(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: &SubtaskResult,
    ) -> Result<RecordOutcome, StoreError> {
        self.settle(id, subtask_id, result, SubtaskStatus::Submitted)
    }

    async fn settle_decided(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: &SubtaskResult,
    ) -> Result<RecordOutcome, StoreError> {
        self.settle(id, subtask_id, result, SubtaskStatus::AwaitingApproval)
    }
}

impl InMemoryConversationStore {
    /// The status and result of a counted subtask in `from` become `result`'s, under the one lock
    /// (`settle_submitted`, `settle_decided`).
    fn settle(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: &SubtaskResult,
        from: SubtaskStatus,
    ) -> Result<RecordOutcome, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(RecordOutcome::Missing);
        };
        if rec.status != from {
            if rec.status == result.status() && rec.result.as_ref() == Some(result) {
                return Ok(RecordOutcome::Recorded(rec.clone()));
            }
            return Ok(RecordOutcome::AlreadyFinished(rec.clone()));
        }
        rec.status = result.status();
        rec.result = Some(result.clone());
        let snapshot = rec.clone();
        let decided = from == SubtaskStatus::AwaitingApproval;
        let logged = of::finished(subtask_id, result, None, &[], decided);
        t.log_subtask(id, subtask_id, swarm_core::time::now_ms(), logged);
        t.emit(false, ChangedItem::Subtask(snapshot.clone()));
        Ok(RecordOutcome::Recorded(snapshot))
    }
}

#[async_trait]
impl JournalStore for InMemoryConversationStore {
    async fn record_intent(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        holder: &str,
        effect: &Effect,
    ) -> Result<IntentOutcome, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(IntentOutcome::Missing);
        };
        let index = (effect.ordinal as usize).saturating_sub(1);
        if rec.status.is_terminal() {
            return Ok(IntentOutcome::Closed(rec.clone()));
        }
        if rec.lease.as_ref().is_none_or(|l| l.holder != holder) {
            return Ok(IntentOutcome::LeaseLost);
        }
        if let Some(existing) = rec.effects.get(index) {
            return Ok(IntentOutcome::Existing(existing.clone()));
        }
        if rec.effects.len() != index {
            return Err(StoreError::Permanent(format!(
                "journal of {subtask_id} has {} entries; intent {} does not follow them",
                rec.effects.len(),
                effect.ordinal
            )));
        }
        rec.effects.push(effect.clone());
        let snapshot = rec.clone();
        t.log_subtask(id, subtask_id, effect.recorded_at_ms, of::tool(subtask_id, effect));
        t.emit(false, ChangedItem::Subtask(snapshot));
        Ok(IntentOutcome::Recorded)
    }

    async fn record_effect_outcome(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        ordinal: u32,
        change: &EffectChange,
    ) -> Result<Option<Effect>, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(None);
        };
        let Some(entry) = rec.effects.get_mut((ordinal as usize).saturating_sub(1)) else {
            return Ok(None);
        };
        if entry.state.is_final() {
            return Ok(Some(entry.clone()));
        }
        let before = entry.state;
        *entry = change.apply(entry);
        let after = entry.clone();
        let snapshot = rec.clone();
        if after.state != before {
            let at_ms = after.changed_at_ms.unwrap_or_else(swarm_core::time::now_ms);
            t.log_subtask(id, subtask_id, at_ms, of::tool(subtask_id, &after));
        }
        t.emit(false, ChangedItem::Subtask(snapshot));
        Ok(Some(after))
    }
}
