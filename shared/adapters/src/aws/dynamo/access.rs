//! The DynamoDB store's `AccessStore`: identity mappings (`PRINCIPAL#…`) and per-customer rate counters (`LIMIT#…`) in the conversations table, the counter taken with one conditional `UpdateItem`.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValue;
use swarm_core::access::{AccessStore, Principal, RateWindow, SlotOutcome};
use swarm_core::ports::StoreError;
use swarm_core::time::now_ms;

use super::DynamoConversationStore;
use super::codec::{get_n, key, n, opt_s, s};
use super::store::to_store_error;
use super::update::Update;
use crate::aws::retry::sdk_error_is_transient;

/// Sort key of a principal's mapping item.
const CUSTOMER_SK: &str = "CUSTOMER";

/// `PRINCIPAL#<kind>:<value>`: a principal value is printable and blank-free, so it cannot
/// spill into another key (mapping items never share a partition with conversations).
pub fn principal_pk(principal: &Principal) -> String {
    format!("PRINCIPAL#{principal}")
}

/// `LIMIT#<customer>` (a canonical id: no `#`).
pub fn limit_pk(customer_id: &str) -> String {
    format!("LIMIT#{customer_id}")
}

/// `WINDOW#<start ms>`.
pub fn window_sk(window: RateWindow) -> String {
    format!("WINDOW#{}", window.start_ms)
}

#[async_trait]
impl AccessStore for DynamoConversationStore {
    async fn customer_for(&self, principal: &Principal) -> Result<Option<String>, StoreError> {
        let item = self.get_item(principal_pk(principal), CUSTOMER_SK.to_owned()).await?;
        Ok(item.as_ref().and_then(|i| opt_s(i, "customer_id")))
    }

    async fn map_customer(&self, principal: &Principal, customer_id: &str) -> Result<(), StoreError> {
        let mut item = key(principal_pk(principal), CUSTOMER_SK.to_owned());
        item.insert("customer_id".into(), s(customer_id));
        item.insert("principal".into(), s(principal.to_string()));
        item.insert("updated_at_ms".into(), n(now_ms()));
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
            .set_key(Some(key(principal_pk(principal), CUSTOMER_SK.to_owned())))
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
        let updated = self
            .update("UpdateItem", limit_pk(customer_id), window_sk(window), u, condition, ReturnValue::UpdatedNew)
            .await?;
        Ok(match updated {
            None => SlotOutcome::Exhausted,
            Some(item) => SlotOutcome::Taken { used: get_n::<u32>(&item, "count").unwrap_or(1) },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_never_share_a_partition_with_conversations() {
        let Ok(p) = Principal::parse("iam:AROAEXAMPLE:alice") else { panic!("a principal") };
        assert_eq!(principal_pk(&p), "PRINCIPAL#iam:AROAEXAMPLE:alice");
        assert_eq!(limit_pk("C104"), "LIMIT#C104");
        assert_eq!(window_sk(RateWindow::containing(1_767_225_659_500)), "WINDOW#1767225600000");
    }
}
