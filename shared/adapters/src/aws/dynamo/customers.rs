//! A customer's conversations on DynamoDB: pages of the sparse `customer` index (`customer_id`, `created_at_ms`), which only conversation items carry both of (an idempotency claim has no `created_at_ms`).

use swarm_core::ports::{ConversationPage, ConversationPosition, StoreError};

use super::codec::{CUSTOMER_INDEX, conversation_from_item, conversation_id_of_keys, customer_index_start, s};
use super::store::{DynamoConversationStore, to_store_error};
use crate::aws::retry::sdk_error_is_transient;

impl DynamoConversationStore {
    /// One page of `customer_id`'s conversations, newest first, after `after` (see
    /// [`swarm_core::ports::ConversationRecords::list_customer_conversations`]). Asks for one item
    /// more than the page holds, so `next` is set only when another page follows.
    pub(super) async fn customer_page(
        &self,
        customer_id: &str,
        after: Option<&ConversationPosition>,
        limit: usize,
    ) -> Result<ConversationPage, StoreError> {
        let limit = limit.clamp(1, 100);
        let start = after.map(|p| customer_index_start(customer_id, p));
        let req = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(CUSTOMER_INDEX)
            .key_condition_expression("customer_id = :customer")
            .expression_attribute_values(":customer", s(customer_id))
            .scan_index_forward(false)
            .limit(i32::try_from(limit + 1).unwrap_or(101))
            .set_exclusive_start_key(start);
        let page = self
            .retry
            .run("dynamodb", "Query(customer)", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_store_error("Query(customer)", e))?;
        let mut conversations = Vec::new();
        for item in page.items() {
            if conversation_id_of_keys(item.clone()).is_none() {
                tracing::warn!("customer index holds an item that is not a conversation");
                continue;
            }
            conversations.push(conversation_from_item(item)?);
        }
        let more = conversations.len() > limit;
        conversations.truncate(limit);
        let next = if more { conversations.last().map(ConversationPosition::of) } else { None };
        Ok(ConversationPage { conversations, next })
    }
}
