//! The approval role of [`DynamoConversationStore`]: approvals of side effects on the `APPROVALS` partition.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValue;
use swarm_core::approval::{Approval, ApprovalDecision, ApprovalStatus, DecideOutcome};
use swarm_core::effects::EffectOutcome;
use swarm_core::ports::{ApprovalStore, StoreError};

use super::codec::{ItemKey, PENDING_INDEX, approval_from_item, approval_item, approvals_partition, s};
use super::store::{DynamoConversationStore, to_store_error};
use super::update::Update;
use crate::aws::retry::sdk_error_is_transient;

#[async_trait]
impl ApprovalStore for DynamoConversationStore {
    async fn create_approval(&self, approval: &Approval) -> Result<Approval, StoreError> {
        let mut u = Update::default();
        for (attr, value) in approval_item(approval)? {
            if attr != "PK" && attr != "SK" {
                u.set(&attr, value);
            }
        }
        let condition = "attribute_not_exists(#PK)".to_owned();
        let created = self
            .update("UpdateItem(create_approval)", &ItemKey::approval(&approval.id), u, condition, ReturnValue::None)
            .await?;
        if created.is_some() {
            return Ok(approval.clone());
        }
        self.get_approval(&approval.id).await?.ok_or_else(|| {
            StoreError::Transient(format!("approval {} exists but could not be read; retry", approval.id))
        })
    }

    async fn get_approval(&self, approval_id: &str) -> Result<Option<Approval>, StoreError> {
        self.get_item(&ItemKey::approval(approval_id)).await?.map(|item| approval_from_item(&item)).transpose()
    }

    async fn list_approvals(&self, limit: usize) -> Result<Vec<Approval>, StoreError> {
        let req = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("PK = :pk")
            .expression_attribute_values(":pk", approvals_partition())
            .scan_index_forward(false)
            .limit(i32::try_from(limit.clamp(1, 1_000)).unwrap_or(1_000))
            .consistent_read(true);
        let page = self
            .retry
            .run("dynamodb", "Query", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_store_error("Query", e))?;
        page.items().iter().map(approval_from_item).collect()
    }

    async fn list_approvals_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<Approval>, StoreError> {
        let mut req = self
            .client
            .query()
            .table_name(&self.table)
            .expression_attribute_values(":pk", approvals_partition())
            .scan_index_forward(false)
            .limit(i32::try_from(limit.clamp(1, 1_000)).unwrap_or(1_000))
            .consistent_read(true);
        req = match after {
            None => req.key_condition_expression("PK = :pk"),
            Some(id) => req
                .key_condition_expression("PK = :pk AND SK < :after")
                .expression_attribute_values(":after", s(ItemKey::approval(id).sk())),
        };
        let page = self
            .retry
            .run("dynamodb", "Query", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_store_error("Query", e))?;
        page.items().iter().map(approval_from_item).collect()
    }

    async fn list_pending_approvals_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Approval>, StoreError> {
        // The index is read eventually consistent (a GSI has no other): an approval created or
        // decided a moment ago may be missing or still listed; its status_at tells the reader.
        let limit = limit.clamp(1, 1_000);
        let mut req = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(PENDING_INDEX)
            .expression_attribute_values(":pk", approvals_partition())
            .scan_index_forward(false);
        req = match after {
            None => req.key_condition_expression("pending_pk = :pk"),
            Some(id) => req
                .key_condition_expression("pending_pk = :pk AND pending_sk < :after")
                .expression_attribute_values(":after", s(ItemKey::approval(id).sk())),
        };
        let mut pending = Vec::new();
        let mut start = None;
        // A page stops at 1 MB: read on from its last key until `limit` or the index's end.
        loop {
            let want = i32::try_from(limit - pending.len()).unwrap_or(1_000);
            let page_req = req.clone().limit(want).set_exclusive_start_key(start.take());
            let page = self
                .retry
                .run("dynamodb", "Query", sdk_error_is_transient, || page_req.clone().send())
                .await
                .map_err(|e| to_store_error("Query", e))?;
            for item in page.items() {
                pending.push(approval_from_item(item)?);
            }
            start = page.last_evaluated_key;
            if pending.len() >= limit || start.is_none() {
                break;
            }
        }
        pending.truncate(limit);
        Ok(pending)
    }

    async fn index_pending_approval(&self, approval_id: &str) -> Result<bool, StoreError> {
        let key = ItemKey::approval(approval_id);
        let mut u = Update::default();
        u.set("pending_pk", s(key.pk())).set("pending_sk", s(key.sk()));
        let status = u.name("status");
        let pending = u.value("pending", s(ApprovalStatus::Pending.code()));
        let unindexed = u.name("pending_pk");
        let condition = format!("attribute_exists(#PK) AND {status} = {pending} AND attribute_not_exists({unindexed})");
        Ok(self.update("UpdateItem(index_pending_approval)", &key, u, condition, ReturnValue::None).await?.is_some())
    }

    async fn decide_approval(
        &self,
        approval_id: &str,
        decision: &ApprovalDecision,
    ) -> Result<DecideOutcome, StoreError> {
        let Some(current) = self.get_approval(approval_id).await? else { return Ok(DecideOutcome::Missing) };
        if current.status != ApprovalStatus::Pending {
            return Ok(DecideOutcome::Unchanged(current));
        }
        let expired = decision.at_ms >= current.expires_at_ms;
        let after = if expired {
            Approval { status: ApprovalStatus::Expired, ..current.clone() }
        } else {
            Approval {
                status: if decision.approve { ApprovalStatus::Approved } else { ApprovalStatus::Rejected },
                decided_by: Some(decision.by.clone()),
                decided_at_ms: Some(decision.at_ms),
                token: decision.token.clone(),
                ..current.clone()
            }
        };
        if self.rewrite_approval(&after, ApprovalStatus::Pending).await? {
            return Ok(if expired { DecideOutcome::Unchanged(after) } else { DecideOutcome::Decided(after) });
        }
        // Someone decided first: theirs stands.
        match self.get_approval(approval_id).await? {
            Some(now) => Ok(DecideOutcome::Unchanged(now)),
            None => Ok(DecideOutcome::Missing),
        }
    }

    async fn finish_approval(
        &self,
        approval_id: &str,
        status: ApprovalStatus,
        outcome: &EffectOutcome,
        at_ms: i64,
    ) -> Result<bool, StoreError> {
        let Some(current) = self.get_approval(approval_id).await? else { return Ok(false) };
        if current.status != ApprovalStatus::Approved {
            return Ok(false);
        }
        let after = Approval { status, outcome: Some(outcome.clone()), finished_at_ms: Some(at_ms), ..current };
        self.rewrite_approval(&after, ApprovalStatus::Approved).await
    }

    async fn reissue_token(&self, approval_id: &str, token: &str, at_ms: i64) -> Result<Option<Approval>, StoreError> {
        let Some(current) = self.get_approval(approval_id).await? else { return Ok(None) };
        if current.status != ApprovalStatus::Approved {
            return Ok(None);
        }
        let after = Approval { token: Some(token.to_owned()), reissued_at_ms: Some(at_ms), ..current };
        Ok(self.rewrite_approval(&after, ApprovalStatus::Approved).await?.then_some(after))
    }
}
