//! The DynamoDB store's `AccessStore`: identity mappings and per-customer rate counters in the conversations table (their keys are the codec's), the counter taken with one conditional `UpdateItem`.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValue;
use swarm_core::access::{AccessStore, Principal, RateWindow, SlotOutcome};
use swarm_core::ports::StoreError;
use swarm_core::time::now_ms;

use super::DynamoConversationStore;
use super::codec::{ItemKey, n, principal_customer, principal_item, window_count};
use super::store::to_store_error;
use super::update::Update;
use crate::aws::retry::sdk_error_is_transient;

#[async_trait]
impl AccessStore for DynamoConversationStore {
    async fn customer_for(&self, principal: &Principal) -> Result<Option<String>, StoreError> {
        let item = self.get_item(&ItemKey::Principal(principal.clone())).await?;
        item.as_ref().map(principal_customer).transpose()
    }

    async fn map_customer(&self, principal: &Principal, customer_id: &str) -> Result<(), StoreError> {
        let item = principal_item(principal, customer_id, now_ms())?;
        let req = self.client.put_item().table_name(&self.table).set_item(Some(item));
        self.retry
            .run("dynamodb", "PutItem", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_store_error("PutItem", e))?;
        Ok(())
    }

    async fn unmap_customer(&self, principal: &Principal) -> Result<bool, StoreError> {
        let req = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(ItemKey::Principal(principal.clone()).item()))
            .return_values(ReturnValue::AllOld);
        let out = self
            .retry
            .run("dynamodb", "DeleteItem", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_store_error("DeleteItem", e))?;
        Ok(out.attributes.is_some_and(|a| !a.is_empty()))
    }

    async fn take_conversation_slot(
        &self,
        customer_id: &str,
        window: RateWindow,
        limit: u32,
    ) -> Result<SlotOutcome, StoreError> {
        let mut u = Update::default();
        u.add("count", n(1));
        u.set("ttl", n(window.expires_at_secs()));
        let count = u.name("count");
        let max = u.value("limit", n(limit));
        // A new window's item does not exist yet; an existing one always has its count.
        let condition = format!("attribute_not_exists(#PK) OR {count} < {max}");
        let key = ItemKey::RateWindow { customer_id: customer_id.to_owned(), window };
        let updated = self.update("UpdateItem", &key, u, condition, ReturnValue::UpdatedNew).await?;
        Ok(match updated {
            None => SlotOutcome::Exhausted,
            Some(item) => SlotOutcome::Taken { used: window_count(&item).unwrap_or(1) },
        })
    }
}
