//! The approval role of [`InMemoryConversationStore`]: approvals of side effects, by id.

use async_trait::async_trait;
use swarm_core::approval::{Approval, ApprovalDecision, ApprovalStatus, DecideOutcome};
use swarm_core::effects::EffectOutcome;
use swarm_core::ports::{ApprovalStore, StoreError};

use super::store::{ChangedItem, InMemoryConversationStore};

#[async_trait]
impl ApprovalStore for InMemoryConversationStore {
    async fn create_approval(&self, approval: &Approval) -> Result<Approval, StoreError> {
        let mut t = self.lock()?;
        if let Some(existing) = t.approvals.get(&approval.id) {
            return Ok(existing.clone());
        }
        t.approvals.insert(approval.id.clone(), approval.clone());
        t.emit(true, ChangedItem::Approval(approval.clone()));
        Ok(approval.clone())
    }

    async fn get_approval(&self, approval_id: &str) -> Result<Option<Approval>, StoreError> {
        Ok(self.lock()?.approvals.get(approval_id).cloned())
    }

    async fn list_approvals(&self, limit: usize) -> Result<Vec<Approval>, StoreError> {
        Ok(self.lock()?.approvals.values().rev().take(limit).cloned().collect())
    }

    async fn list_approvals_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<Approval>, StoreError> {
        use std::ops::Bound;
        let t = self.lock()?;
        let upper = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(t.approvals.range::<str, _>((Bound::Unbounded, upper)).rev().take(limit).map(|(_, a)| a.clone()).collect())
    }

    async fn list_pending_approvals_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Approval>, StoreError> {
        use std::ops::Bound;
        let t = self.lock()?;
        let upper = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(t.approvals
            .range::<str, _>((Bound::Unbounded, upper))
            .rev()
            .filter(|(_, a)| a.status == ApprovalStatus::Pending)
            .take(limit.clamp(1, 1_000))
            .map(|(_, a)| a.clone())
            .collect())
    }

    async fn index_pending_approval(&self, _approval_id: &str) -> Result<bool, StoreError> {
        // The embedded store lists pending approvals by their status: every one is indexed.
        Ok(false)
    }

    async fn decide_approval(
        &self,
        approval_id: &str,
        decision: &ApprovalDecision,
    ) -> Result<DecideOutcome, StoreError> {
        let mut t = self.lock()?;
        let Some(a) = t.approvals.get_mut(approval_id) else { return Ok(DecideOutcome::Missing) };
        if a.status != ApprovalStatus::Pending {
            return Ok(DecideOutcome::Unchanged(a.clone()));
        }
        if decision.at_ms >= a.expires_at_ms {
            a.status = ApprovalStatus::Expired;
            let snapshot = a.clone();
            t.emit(false, ChangedItem::Approval(snapshot.clone()));
            return Ok(DecideOutcome::Unchanged(snapshot));
        }
        a.status = if decision.approve { ApprovalStatus::Approved } else { ApprovalStatus::Rejected };
        a.decided_by = Some(decision.by.clone());
        a.decided_at_ms = Some(decision.at_ms);
        a.token = decision.token.clone();
        let snapshot = a.clone();
        t.emit(false, ChangedItem::Approval(snapshot.clone()));
        Ok(DecideOutcome::Decided(snapshot))
    }

    async fn finish_approval(
        &self,
        approval_id: &str,
        status: ApprovalStatus,
        outcome: &EffectOutcome,
        at_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(a) = t.approvals.get_mut(approval_id) else { return Ok(false) };
        if a.status != ApprovalStatus::Approved {
            return Ok(false);
        }
        a.status = status;
        a.outcome = Some(outcome.clone());
        a.finished_at_ms = Some(at_ms);
        let snapshot = a.clone();
        t.emit(false, ChangedItem::Approval(snapshot));
        Ok(true)
    }

    async fn reissue_token(&self, approval_id: &str, token: &str, at_ms: i64) -> Result<Option<Approval>, StoreError> {
        let mut t = self.lock()?;
        let Some(a) = t.approvals.get_mut(approval_id) else { return Ok(None) };
        if a.status != ApprovalStatus::Approved {
            return Ok(None);
        }
        a.token = Some(token.to_owned());
        a.reissued_at_ms = Some(at_ms);
        let snapshot = a.clone();
        t.emit(false, ChangedItem::Approval(snapshot.clone()));
        Ok(Some(snapshot))
    }
}
