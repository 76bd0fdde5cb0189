//! The subtask and journal roles of [`DynamoConversationStore`]: subtask items read, flipped, attempted under a lease and finished, and their side-effect journals.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use swarm_core::domain::{ConversationId, SubtaskId, SubtaskRecord, SubtaskResult, SubtaskStatus, Usage};
use swarm_core::effects::{AttemptLease, Effect, EffectChange};
use swarm_core::events::{Event, of};
use swarm_core::ports::{
    AttemptStart, CloseOutcome, IntentOutcome, JournalStore, RecordOutcome, StoreError, SubtaskStore,
};
use swarm_core::time::now_ms;

use super::codec::{ItemKey, effect_value, fit_checkpoint, fit_result, n, s, subtask_from_item, to_json};
use super::events::append_events;
use super::store::DynamoConversationStore;
use super::update::Update;

const NON_TERMINAL: [SubtaskStatus; 3] = [SubtaskStatus::Pending, SubtaskStatus::Queued, SubtaskStatus::Running];
/// Read-modify-write rounds of a journal entry before contention is reported as transient.
const REWRITE_ROUNDS: u32 = 5;

/// `effects` holds exactly `len` entries (an absent list holds none).
fn journal_has(u: &mut Update, len: usize) -> String {
    let effects = u.name("effects");
    if len == 0 {
        let zero = u.value("jzero", n(0));
        format!("(attribute_not_exists({effects}) OR size({effects}) = {zero})")
    } else {
        // attribute_exists first: a missing list fails the condition (as DynamoDB answers `size()`
        // of it) instead of an emulator's HTTP 500 (moto evaluates AND left to right, stopping early).
        let len = u.value("jlen", n(len));
        format!("(attribute_exists({effects}) AND size({effects}) = {len})")
    }
}

#[async_trait]
impl SubtaskStore for DynamoConversationStore {
    async fn get_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
    ) -> Result<Option<SubtaskRecord>, StoreError> {
        self.get_item(&ItemKey::subtask(id, subtask_id)).await?.map(|item| subtask_from_item(&item)).transpose()
    }

    async fn list_subtasks(&self, id: &ConversationId) -> Result<Vec<SubtaskRecord>, StoreError> {
        let partition = self.partition(id).await?;
        let (turn, plan) = partition.conversation.map(|c| (c.turn, c.plan)).unwrap_or_default();
        let mut out = partition.subtasks;
        // Items of a planner taken over are not the conversation's (see `start_run`); with no plan
        // yet (or an item from before plans were kept) every item of the current turn is.
        out.retain(
            |r: &SubtaskRecord| {
                if plan.is_empty() { r.subtask.id.turn() == turn } else { plan.contains(r.subtask.id.as_str()) }
            },
        );
        Ok(out)
    }

    async fn transition_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        from: &[SubtaskStatus],
        to: SubtaskStatus,
    ) -> Result<bool, StoreError> {
        if from.is_empty() {
            return Ok(false);
        }
        let mut u = Update::default();
        u.set("status", s(to.as_str()));
        if to.is_terminal() {
            append_events(&mut u, now_ms(), of::closed(subtask_id, to));
        }
        let from: Vec<&str> = from.iter().map(|st| st.as_str()).collect();
        let condition = u.status_in(&from);
        Ok(self
            .update(
                "UpdateItem(transition_subtask)",
                &ItemKey::subtask(id, subtask_id),
                u,
                condition,
                ReturnValue::None,
            )
            .await?
            .is_some())
    }

    async fn begin_attempt(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        lease: &AttemptLease,
        now_ms: i64,
    ) -> Result<AttemptStart, StoreError> {
        let mut u = Update::default();
        u.set("status", s(SubtaskStatus::Running.as_str()))
            .set("lease_holder", s(&lease.holder))
            .set("lease_until_ms", n(lease.until_ms));
        let attempts = u.name("attempts");
        let zero = u.value("zero", n(0));
        let one = u.value("one", n(1));
        u.set_expr(format!("{attempts} = if_not_exists({attempts}, {zero}) + {one}"));
        let started = u.name("started_at_ms");
        let now = u.value("now", n(now_ms));
        u.set_expr(format!("{started} = if_not_exists({started}, {now})"));
        append_events(&mut u, now_ms, vec![Event::SubtaskStarted { subtask: subtask_id.clone() }]);
        let from: Vec<&str> = NON_TERMINAL.iter().map(|st| st.as_str()).collect();
        let open = u.status_in(&from);
        let (until, holder) = (u.name("lease_until_ms"), u.name("lease_holder"));
        let (at, me) = (u.value("at", n(now_ms)), u.value("me", s(&lease.holder)));
        // Never this attempt's own lease: a retry after a lost answer finds its start made and is counted once.
        let condition = format!(
            "{open} AND (attribute_not_exists({until}) OR {until} <= {at}) AND (attribute_not_exists({holder}) OR {holder} <> {me})"
        );
        match self
            .update("UpdateItem(begin_attempt)", &ItemKey::subtask(id, subtask_id), u, condition, ReturnValue::AllNew)
            .await?
        {
            Some(item) => Ok(AttemptStart::Started(subtask_from_item(&item)?)),
            None => match self.subtask_after_conflict(id, subtask_id).await? {
                None => Ok(AttemptStart::Missing),
                Some(rec) if rec.status.is_terminal() => Ok(AttemptStart::AlreadyFinished(rec)),
                Some(rec) if rec.lease.as_ref().is_some_and(|l| l.holder == lease.holder) => {
                    Ok(AttemptStart::Started(rec))
                }
                Some(rec) if rec.lease.as_ref().is_some_and(|l| !l.admits(&lease.holder, now_ms)) => {
                    Ok(AttemptStart::Leased(rec))
                }
                Some(rec) => Err(StoreError::Transient(format!(
                    "begin_attempt condition failed but subtask {subtask_id} is {} with no live lease; retry",
                    rec.status.as_str()
                ))),
            },
        }
    }

    async fn renew_attempt(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        lease: &AttemptLease,
    ) -> Result<bool, StoreError> {
        let mut u = Update::default();
        u.set("lease_until_ms", n(lease.until_ms));
        let from: Vec<&str> = NON_TERMINAL.iter().map(|st| st.as_str()).collect();
        let open = u.status_in(&from);
        let holder = u.name("lease_holder");
        let me = u.value("me", s(&lease.holder));
        // Only the holder's own lease: a retry after a lost answer passes the same condition again.
        let condition = format!("{open} AND {holder} = {me}");
        Ok(self
            .update("UpdateItem(renew_attempt)", &ItemKey::subtask(id, subtask_id), u, condition, ReturnValue::None)
            .await?
            .is_some())
    }

    async fn release_attempt(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        holder: &str,
    ) -> Result<(), StoreError> {
        let mut u = Update::default();
        u.remove("lease_holder").remove("lease_until_ms");
        let name = u.name("lease_holder");
        let me = u.value("me", s(holder));
        let condition = format!("attribute_exists(#PK) AND {name} = {me}");
        // Another holder's lease (or none) is left alone: nothing to do, as in the trait.
        self.update("UpdateItem(release_attempt)", &ItemKey::subtask(id, subtask_id), u, condition, ReturnValue::None)
            .await?;
        Ok(())
    }

    async fn save_checkpoint(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        checkpoint: &str,
    ) -> Result<(), StoreError> {
        let mut u = Update::default();
        u.set("checkpoint", s(fit_checkpoint(checkpoint)));
        let from: Vec<&str> = NON_TERMINAL.iter().map(|st| st.as_str()).collect();
        let condition = u.status_in(&from);
        // A terminal or missing subtask keeps no checkpoint: nothing to do, as in the trait.
        self.update("UpdateItem(save_checkpoint)", &ItemKey::subtask(id, subtask_id), u, condition, ReturnValue::None)
            .await?;
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
        let mut u = Update::default();
        u.set("status", s(result.status().as_str()))
            .set("result", s(fit_result(result)?))
            .set("finished_at_ms", n(now_ms))
            .remove("checkpoint");
        if usage.is_empty() {
            u.remove("usage");
        } else {
            u.set("usage", s(to_json(usage)?));
        }
        if tools_used.is_empty() {
            u.remove("tools_used");
        } else {
            u.set("tools_used", AttributeValue::L(tools_used.iter().map(s).collect()));
        }
        append_events(&mut u, now_ms, of::finished(subtask_id, result, Some(usage), tools_used, false));
        let from: Vec<&str> = NON_TERMINAL.iter().map(|st| st.as_str()).collect();
        let condition = u.status_in(&from);
        match self
            .update("UpdateItem(record_result)", &ItemKey::subtask(id, subtask_id), u, condition, ReturnValue::AllNew)
            .await?
        {
            Some(item) => Ok(RecordOutcome::Recorded(subtask_from_item(&item)?)),
            None => match self.subtask_after_conflict(id, subtask_id).await? {
                None => Ok(RecordOutcome::Missing),
                Some(rec) if rec.is_finish_of(result, usage, tools_used, now_ms) => Ok(RecordOutcome::Recorded(rec)),
                Some(rec) if rec.status.is_terminal() => Ok(RecordOutcome::AlreadyFinished(rec)),
                Some(rec) => Err(StoreError::Transient(format!(
                    "record_result condition failed but subtask {subtask_id} is {}; retry",
                    rec.status.as_str()
                ))),
            },
        }
    }

    async fn close_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: &SubtaskResult,
        journal_len: usize,
        now_ms: i64,
    ) -> Result<CloseOutcome, StoreError> {
        let mut u = Update::default();
        u.set("status", s(result.status().as_str()))
            .set("result", s(fit_result(result)?))
            .set("finished_at_ms", n(now_ms))
            .remove("checkpoint");
        let from: Vec<&str> = NON_TERMINAL.iter().map(|st| st.as_str()).collect();
        let open = u.status_in(&from);
        append_events(&mut u, now_ms, of::finished(subtask_id, result, None, &[], false));
        let unchanged = journal_has(&mut u, journal_len);
        let condition = format!("{open} AND {unchanged}");
        if let Some(item) = self
            .update("UpdateItem(close_subtask)", &ItemKey::subtask(id, subtask_id), u, condition, ReturnValue::AllNew)
            .await?
        {
            return Ok(CloseOutcome::Recorded(subtask_from_item(&item)?));
        }
        match self.subtask_after_conflict(id, subtask_id).await? {
            None => Ok(CloseOutcome::Missing),
            Some(rec) if rec.status.is_terminal() => Ok(CloseOutcome::AlreadyFinished(rec)),
            Some(rec) if rec.effects.len() != journal_len => Ok(CloseOutcome::JournalChanged),
            Some(rec) => Err(StoreError::Transient(format!(
                "close_subtask condition failed but subtask {subtask_id} is {}; retry",
                rec.status.as_str()
            ))),
        }
    }

    async fn settle_submitted(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: &SubtaskResult,
    ) -> Result<RecordOutcome, StoreError> {
        self.settle(id, subtask_id, result, SubtaskStatus::Submitted).await
    }

    async fn settle_decided(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: &SubtaskResult,
    ) -> Result<RecordOutcome, StoreError> {
        self.settle(id, subtask_id, result, SubtaskStatus::AwaitingApproval).await
    }
}

impl DynamoConversationStore {
    /// The status and result of a counted subtask in `from` become `result`'s, one conditional
    /// write (`settle_submitted`, `settle_decided`).
    async fn settle(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: &SubtaskResult,
        from: SubtaskStatus,
    ) -> Result<RecordOutcome, StoreError> {
        let mut u = Update::default();
        u.set("status", s(result.status().as_str())).set("result", s(fit_result(result)?));
        let decided = from == SubtaskStatus::AwaitingApproval;
        append_events(&mut u, now_ms(), of::finished(subtask_id, result, None, &[], decided));
        let condition = u.status_in(&[from.as_str()]);
        if let Some(item) = self
            .update(
                if from == SubtaskStatus::Submitted {
                    "UpdateItem(settle_submitted)"
                } else {
                    "UpdateItem(settle_decided)"
                },
                &ItemKey::subtask(id, subtask_id),
                u,
                condition,
                ReturnValue::AllNew,
            )
            .await?
        {
            return Ok(RecordOutcome::Recorded(subtask_from_item(&item)?));
        }
        Ok(match self.subtask_after_conflict(id, subtask_id).await? {
            None => RecordOutcome::Missing,
            // A retry whose answer was lost finds its own write.
            Some(rec) if rec.status == result.status() && rec.result.as_ref() == Some(result) => {
                RecordOutcome::Recorded(rec)
            }
            Some(rec) => RecordOutcome::AlreadyFinished(rec),
        })
    }
}

#[async_trait]
impl JournalStore for DynamoConversationStore {
    async fn record_intent(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        holder: &str,
        effect: &Effect,
    ) -> Result<IntentOutcome, StoreError> {
        let mut u = Update::default();
        let effects = u.name("effects");
        let empty = u.value("empty", AttributeValue::L(Vec::new()));
        let one = u.value("entry", AttributeValue::L(vec![effect_value(effect)?]));
        u.set_expr(format!("{effects} = list_append(if_not_exists({effects}, {empty}), {one})"));
        append_events(&mut u, effect.recorded_at_ms, of::tool(subtask_id, effect));
        let from: Vec<&str> = NON_TERMINAL.iter().map(|st| st.as_str()).collect();
        let open = u.status_in(&from);
        let lease_holder = u.name("lease_holder");
        let me = u.value("me", s(holder));
        let follows = journal_has(&mut u, (effect.ordinal as usize).saturating_sub(1));
        let condition = format!("{open} AND {lease_holder} = {me} AND {follows}");
        if self
            .update("UpdateItem(record_intent)", &ItemKey::subtask(id, subtask_id), u, condition, ReturnValue::None)
            .await?
            .is_some()
        {
            return Ok(IntentOutcome::Recorded);
        }
        let Some(rec) = self.subtask_after_conflict(id, subtask_id).await? else {
            return Ok(IntentOutcome::Missing);
        };
        if rec.status.is_terminal() {
            return Ok(IntentOutcome::Closed(rec));
        }
        if rec.lease.as_ref().is_none_or(|l| l.holder != holder) {
            return Ok(IntentOutcome::LeaseLost);
        }
        match rec.effects.get((effect.ordinal as usize).saturating_sub(1)) {
            Some(existing) => Ok(IntentOutcome::Existing(existing.clone())),
            None => Err(StoreError::Permanent(format!(
                "journal of {subtask_id} has {} entries; intent {} does not follow them",
                rec.effects.len(),
                effect.ordinal
            ))),
        }
    }

    async fn record_effect_outcome(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        ordinal: u32,
        change: &EffectChange,
    ) -> Result<Option<Effect>, StoreError> {
        let index = (ordinal as usize).saturating_sub(1);
        for _ in 0..REWRITE_ROUNDS {
            let Some(rec) = self.get_subtask(id, subtask_id).await? else { return Ok(None) };
            let Some(current) = rec.effects.get(index) else { return Ok(None) };
            if current.state.is_final() {
                return Ok(Some(current.clone()));
            }
            let after = change.apply(current);
            let mut u = Update::default();
            let effects = u.name("effects");
            let new = u.value("new", effect_value(&after)?);
            let old = u.value("old", effect_value(current)?);
            u.set_expr(format!("{effects}[{index}] = {new}"));
            if after.state != current.state {
                let at_ms = after.changed_at_ms.unwrap_or_else(now_ms);
                append_events(&mut u, at_ms, of::tool(subtask_id, &after));
            }
            let condition = format!("attribute_exists(#PK) AND {effects}[{index}] = {old}");
            if self
                .update(
                    "UpdateItem(record_effect_outcome)",
                    &ItemKey::subtask(id, subtask_id),
                    u,
                    condition,
                    ReturnValue::None,
                )
                .await?
                .is_some()
            {
                return Ok(Some(after));
            }
        }
        Err(StoreError::Transient(format!("journal entry {ordinal} of {subtask_id} kept changing; retry")))
    }
}
