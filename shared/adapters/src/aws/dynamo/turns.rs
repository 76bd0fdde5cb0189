//! A conversation's turns on DynamoDB: the whole partition read in one `Query` (the conversation item, its subtask items, its archived turns), and `start_turn`'s transaction.

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use swarm_core::decisions::Notice;
use swarm_core::domain::{Conversation, ConversationId, NextTurn, SubtaskRecord, TurnRecord};
use swarm_core::ports::{ConversationHistory, StoreError, TurnOutcome};

use super::codec::{
    Item, ItemKey, conversation_from_item, conversation_item, conversation_partition, n, notice_from_item, s,
    subtask_from_item, turn_from_item, turn_item,
};
use super::store::{DynamoConversationStore, is_conditional_failure, to_store_error};
use crate::aws::retry::sdk_error_is_transient;

/// Everything a conversation's partition holds, as read by [`DynamoConversationStore::partition`].
#[derive(Default)]
pub(super) struct Partition {
    pub conversation: Option<Conversation>,
    /// In id order.
    pub subtasks: Vec<SubtaskRecord>,
    /// Oldest first.
    pub turns: Vec<TurnRecord>,
    /// The told turns' notices, in key order.
    pub notices: Vec<Notice>,
}

/// The key of a partition's `item` (from its `PK` and `SK`).
pub(super) fn key_of(item: &Item) -> Option<ItemKey> {
    let keys: Item =
        item.iter().filter(|(k, _)| *k == "PK" || *k == "SK").map(|(k, v)| (k.clone(), v.clone())).collect();
    ItemKey::of(keys)
}

impl DynamoConversationStore {
    /// The whole partition of `id`, strongly consistent, in one paged `Query`. A conversation holds
    /// at most 100 subtasks a turn; the page bound only guards against a runaway loop.
    pub(super) async fn partition(&self, id: &ConversationId) -> Result<Partition, StoreError> {
        let mut out = Partition::default();
        for item in self.partition_items(id, None).await? {
            match key_of(&item) {
                Some(ItemKey::Conversation(_)) => out.conversation = Some(conversation_from_item(&item)?),
                Some(ItemKey::Subtask(..)) => out.subtasks.push(subtask_from_item(&item)?),
                Some(ItemKey::Turn(..)) => out.turns.push(turn_from_item(&item)?),
                Some(ItemKey::Notice(..)) => out.notices.push(notice_from_item(&item)?),
                _ => {}
            }
        }
        Ok(out)
    }

    /// Every item of `id`'s partition in sort-key order, strongly consistent, all pages; only the
    /// attributes of `projection` (an expression and its `#name` aliases) when given.
    pub(super) async fn partition_items(
        &self,
        id: &ConversationId,
        projection: Option<(&str, &[(&str, &str)])>,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items: Vec<Item> = Vec::new();
        let mut start: Option<Item> = None;
        for _page in 0..1_000 {
            let mut req = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("PK = :pk")
                .expression_attribute_values(":pk", conversation_partition(id))
                .consistent_read(true)
                .set_exclusive_start_key(start.take());
            if let Some((expression, names)) = projection {
                req = req.projection_expression(expression);
                for (alias, name) in names {
                    req = req.expression_attribute_names(*alias, *name);
                }
            }
            let page = self
                .retry
                .run("dynamodb", "Query", sdk_error_is_transient, || req.clone().send())
                .await
                .map_err(|e| to_store_error("Query", e))?;
            items.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(items),
            }
        }
        Err(StoreError::Permanent(format!("Query of conversation {id} did not end after 1000 pages")))
    }

    /// The conversation's archived turns and all its subtask items.
    pub(super) async fn history(&self, id: &ConversationId) -> Result<ConversationHistory, StoreError> {
        let p = self.partition(id).await?;
        Ok(ConversationHistory { turns: p.turns, subtasks: p.subtasks, notices: p.notices })
    }

    /// `start_turn` as one `TransactWriteItems`: the archive of `previous`'s turn (new) and the
    /// conversation item of `next` (a `Put` over it, conditional on the stored turn and status and
    /// the expiry). A cancelled transaction reads the conversation: its own write (an answer lost) or
    /// a refusal.
    pub(super) async fn begin_turn(
        &self,
        previous: &Conversation,
        next: &NextTurn,
        now_ms: i64,
    ) -> Result<TurnOutcome, StoreError> {
        let id = &previous.id;
        if !previous.status.is_terminal() {
            // The condition below holds the stored status to `previous`'s: a turn only follows a terminal one.
            let stored = self.get_item(&ItemKey::conversation(id)).await?.map(|i| conversation_from_item(&i));
            return Ok(TurnOutcome::Refused(stored.transpose()?));
        }
        let archive = turn_item(id, &TurnRecord::of(previous))?;
        let started = previous.next_turn(next);
        let meta = conversation_item(&started)?;
        let archive = Put::builder()
            .table_name(&self.table)
            .set_item(Some(archive))
            .condition_expression("attribute_not_exists(PK)")
            .build()
            .map_err(|e| StoreError::Permanent(format!("TransactWriteItems request: {e}")))?;
        let meta = Put::builder()
            .table_name(&self.table)
            .set_item(Some(meta))
            .condition_expression(
                "#turn = :turn AND #status = :status AND (attribute_not_exists(expires_at_ms) OR expires_at_ms > :now)",
            )
            .expression_attribute_names("#turn", "turn")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":turn", n(previous.turn))
            .expression_attribute_values(":status", s(previous.status.as_str()))
            .expression_attribute_values(":now", AttributeValue::N(now_ms.to_string()))
            .build()
            .map_err(|e| StoreError::Permanent(format!("TransactWriteItems request: {e}")))?;
        let req = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(archive).build())
            .transact_items(TransactWriteItem::builder().put(meta).build());
        match self
            .retry
            .run("dynamodb", "TransactWriteItems", super::store::transaction_is_transient, || req.clone().send())
            .await
        {
            Ok(_) => {
                tracing::info!(conversation_id = %id, turn = next.turn, "turn started");
                Ok(TurnOutcome::Started(started))
            }
            Err(e) if is_conditional_failure(&e) || super::store::was_cancelled(&e) => {
                // Refused — or this call's own transaction, applied by an attempt whose answer was lost.
                let stored =
                    self.get_item(&ItemKey::conversation(id)).await?.map(|i| conversation_from_item(&i)).transpose()?;
                Ok(match stored {
                    Some(c) if c.is_turn_started_by(next) => TurnOutcome::Started(c),
                    other => TurnOutcome::Refused(other),
                })
            }
            Err(e) => Err(to_store_error("TransactWriteItems", e)),
        }
    }
}
