//! Turns told without the customer on DynamoDB ([`swarm_core::decisions`]): the notice, the archive of the turn before and the conversation item of the told turn in one `TransactWriteItems`.

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use swarm_core::decisions::{TellOutcome, ToldTurn};
use swarm_core::domain::{Conversation, TurnRecord};
use swarm_core::events::of;
use swarm_core::ports::StoreError;

use super::codec::{
    ItemKey, conversation_from_item, conversation_item, n, notice_from_item, notice_item, s, turn_item,
};
use super::events::{EVENTS_ATTR, events_value};
use super::store::{DynamoConversationStore, is_conditional_failure, to_store_error};

/// The told turn's conversation item, its log starting with the turn's reply and end (the same `Put`).
fn told_item(after: &Conversation) -> Result<super::codec::Item, StoreError> {
    let mut item = conversation_item(after)?;
    let logged = of::answered(after.turn, after.status);
    item.insert(EVENTS_ATTR.to_owned(), events_value(swarm_core::time::now_ms(), logged));
    Ok(item)
}

impl DynamoConversationStore {
    /// `tell_turn` as one `TransactWriteItems`: the notice (new), the archive of `previous`'s turn
    /// (new) and the told turn's conversation item (a `Put` over it, conditional on the stored turn
    /// and status). A cancelled transaction reads the notice (told before: its own write whose
    /// answer was lost, or another teller's), then the conversation (a refusal).
    pub(super) async fn tell(&self, previous: &Conversation, told: &ToldTurn) -> Result<TellOutcome, StoreError> {
        let id = &previous.id;
        let notice_key = ItemKey::Notice(id.clone(), told.key.clone());
        if let Some(item) = self.get_item(&notice_key).await? {
            return Ok(TellOutcome::AlreadyTold(notice_from_item(&item)?));
        }
        if !previous.status.is_terminal() {
            let stored = self.get_item(&ItemKey::conversation(id)).await?.map(|i| conversation_from_item(&i));
            return Ok(TellOutcome::Refused(stored.transpose()?));
        }
        let after = previous.told_turn(told);
        let new_item = |item, what: &str| {
            Put::builder()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(PK)")
                .build()
                .map_err(|e| StoreError::Permanent(format!("TransactWriteItems request ({what}): {e}")))
        };
        let notice = new_item(notice_item(id, &previous.notice_of(told))?, "notice")?;
        let archive = new_item(turn_item(id, &TurnRecord::of(previous))?, "archive")?;
        let meta = Put::builder()
            .table_name(&self.table)
            .set_item(Some(told_item(&after)?))
            .condition_expression("#turn = :turn AND #status = :status")
            .expression_attribute_names("#turn", "turn")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":turn", n(previous.turn))
            .expression_attribute_values(":status", s(previous.status.as_str()))
            .build()
            .map_err(|e| StoreError::Permanent(format!("TransactWriteItems request: {e}")))?;
        let req = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(notice).build())
            .transact_items(TransactWriteItem::builder().put(archive).build())
            .transact_items(TransactWriteItem::builder().put(meta).build());
        match self
            .retry
            .run("dynamodb", "TransactWriteItems", super::store::transaction_is_transient, || req.clone().send())
            .await
        {
            Ok(_) => Ok(TellOutcome::Told(after)),
            Err(e) if is_conditional_failure(&e) || super::store::was_cancelled(&e) => {
                if let Some(item) = self.get_item(&notice_key).await? {
                    return Ok(TellOutcome::AlreadyTold(notice_from_item(&item)?));
                }
                let stored = self.get_item(&ItemKey::conversation(id)).await?.map(|i| conversation_from_item(&i));
                Ok(TellOutcome::Refused(stored.transpose()?))
            }
            Err(e) => Err(to_store_error("TransactWriteItems", e)),
        }
    }
}
