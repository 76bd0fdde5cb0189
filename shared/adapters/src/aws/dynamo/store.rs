//! `DynamoConversationStore`: the conversation store on one DynamoDB table (layout in the module above), every mutation one conditional write or transaction.

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, Put, PutRequest, ReturnValue, TransactWriteItem, WriteRequest,
};
use swarm_core::approval::{Approval, ApprovalStatus};
use swarm_core::decisions::{TellOutcome, ToldTurn};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, Handoff, NextTurn, SubtaskId, SubtaskRecord, Usage,
    truncate_chars,
};
use swarm_core::events::{Event, of};
use swarm_core::ports::{
    AccountingStore, AnswerStore, ConversationHistory, ConversationPage, ConversationPosition, ConversationRecords,
    CountOutcome, CreateOutcome, LeaseOutcome, LeasePhase, StoreError, SubtaskStore, TurnOutcome,
};
use swarm_core::time::now_ms;

use super::codec::{
    Item, ItemKey, SWEEP_INDEX, approval_item, conversation_from_item, conversation_id_of_keys, conversation_item,
    idempotency_claim, idempotency_item, n, remaining_of, s, subtask_item,
};
use super::events::append_events;
use super::update::Update;
use crate::aws::retry::{AwsRetryPolicy, sdk_error_is_transient};

/// Most items in one `BatchWriteItem` call (DynamoDB limit).
pub const BATCH_WRITE_LIMIT: usize = 25;
/// Longest failure reason kept on a conversation, in characters.
const MAX_ERROR_CHARS: usize = 2_000;

/// Cancellation reasons of a transaction that make retrying worthwhile.
const TRANSIENT_REASONS: &[&str] =
    &["TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"];
pub(super) fn is_conditional_failure<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> bool {
    matches!(e, SdkError::ServiceError(ctx) if ctx.err().code() == Some("ConditionalCheckFailedException"))
}

/// An SDK failure of DynamoDB call `op` as a [`StoreError`], transient or permanent by [`sdk_error_is_transient`].
pub fn to_store_error<E>(op: &'static str, e: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let message = format!("DynamoDB {op}: {}", DisplayErrorContext(&e));
    if sdk_error_is_transient(&e) { StoreError::Transient(message) } else { StoreError::Permanent(message) }
}

/// Reason codes of a cancelled transaction, in item order (`"None"` for items that passed).
fn cancellation_codes(e: &SdkError<TransactWriteItemsError, HttpResponse>) -> Vec<String> {
    match e {
        SdkError::ServiceError(ctx) => match ctx.err() {
            TransactWriteItemsError::TransactionCanceledException(t) => {
                t.cancellation_reasons().iter().map(|r| r.code().unwrap_or("None").to_owned()).collect()
            }
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Whether a transaction was cancelled because one of its conditions failed (nothing was written).
pub(super) fn was_cancelled(e: &SdkError<TransactWriteItemsError, HttpResponse>) -> bool {
    cancellation_codes(e).iter().any(|c| c == "ConditionalCheckFailed")
}

pub(super) fn transaction_is_transient(e: &SdkError<TransactWriteItemsError, HttpResponse>) -> bool {
    let codes = cancellation_codes(e);
    if codes.is_empty() {
        return sdk_error_is_transient(e);
    }
    !codes.iter().any(|c| c == "ConditionalCheckFailed")
        && codes.iter().any(|c| TRANSIENT_REASONS.contains(&c.as_str()))
}

/// [`ConversationStore`](swarm_core::ports::ConversationStore) on one DynamoDB table (see the module docs for the layout).
///
/// Every mutation is a single conditional `UpdateItem` / `PutItem` or one
/// `TransactWriteItems`; throttling and contention are retried in place with
/// jittered exponential backoff ([`AwsRetryPolicy`]) and then reported as
/// [`StoreError::Transient`]; validation errors and a missing table are
/// [`StoreError::Permanent`]. Reads are strongly consistent.
#[derive(Clone, Debug)]
pub struct DynamoConversationStore {
    pub(super) client: Client,
    pub(super) table: String,
    pub(super) retry: AwsRetryPolicy,
}

impl DynamoConversationStore {
    /// A store on `table`. The client's own SDK retries are switched off: this
    /// adapter owns the retry policy, so attempts do not multiply.
    pub fn new(client: Client, table: String) -> Self {
        let config =
            client.config().to_builder().retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled()).build();
        Self { client: Client::from_conf(config), table, retry: AwsRetryPolicy::default() }
    }

    /// Replaces the retry policy (tests use short ones).
    pub fn with_retry(mut self, retry: AwsRetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    pub(super) async fn get_item(&self, key: &ItemKey) -> Result<Option<Item>, StoreError> {
        let req = self.client.get_item().table_name(&self.table).set_key(Some(key.item())).consistent_read(true);
        let out = self
            .retry
            .run("dynamodb", "GetItem", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_store_error("GetItem", e))?;
        Ok(out.item)
    }

    /// Runs one conditional `UpdateItem` on the item of `key`. `Ok(None)` when the condition failed.
    pub(super) async fn update(
        &self,
        op: &'static str,
        key: &ItemKey,
        mut update: Update,
        condition: String,
        return_values: ReturnValue,
    ) -> Result<Option<Item>, StoreError> {
        update.name("PK");
        let req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key.item()))
            .update_expression(update.expression())
            .condition_expression(condition)
            .set_expression_attribute_names(Some(update.names))
            .set_expression_attribute_values(Some(update.values))
            .return_values(return_values);
        match self.retry.run("dynamodb", op, sdk_error_is_transient, || req.clone().send()).await {
            Ok(out) => Ok(Some(out.attributes.unwrap_or_default())),
            Err(e) if is_conditional_failure(&e) => Ok(None),
            Err(e) => Err(to_store_error(op, e)),
        }
    }

    /// Writes `items` with `BatchWriteItem`, 25 per call, retrying unprocessed items.
    async fn batch_put(&self, items: Vec<Item>) -> Result<(), StoreError> {
        let mut writes = Vec::with_capacity(items.len());
        for item in items {
            let put = PutRequest::builder()
                .set_item(Some(item))
                .build()
                .map_err(|e| StoreError::Permanent(format!("BatchWriteItem request: {e}")))?;
            writes.push(WriteRequest::builder().put_request(put).build());
        }
        self.batch_write(writes).await
    }

    /// Deletes the items of `keys` (`PK` and `SK` each) with `BatchWriteItem`, 25 per call.
    async fn batch_delete(&self, keys: Vec<Item>) -> Result<(), StoreError> {
        let mut writes = Vec::with_capacity(keys.len());
        for key in keys {
            let delete = DeleteRequest::builder()
                .set_key(Some(key))
                .build()
                .map_err(|e| StoreError::Permanent(format!("BatchWriteItem request: {e}")))?;
            writes.push(WriteRequest::builder().delete_request(delete).build());
        }
        self.batch_write(writes).await
    }

    /// Runs `writes` with `BatchWriteItem`, 25 per call, retrying unprocessed ones.
    async fn batch_write(&self, writes: Vec<WriteRequest>) -> Result<(), StoreError> {
        for chunk in writes.chunks(BATCH_WRITE_LIMIT) {
            let mut pending: Vec<WriteRequest> = chunk.to_vec();
            let mut round = 0u32;
            while !pending.is_empty() {
                let req = self.client.batch_write_item().request_items(self.table.clone(), pending.clone());
                let out = self
                    .retry
                    .run("dynamodb", "BatchWriteItem", sdk_error_is_transient, || req.clone().send())
                    .await
                    .map_err(|e| to_store_error("BatchWriteItem", e))?;
                pending = out.unprocessed_items.and_then(|mut m| m.remove(&self.table)).unwrap_or_default();
                if pending.is_empty() {
                    break;
                }
                round += 1;
                if round >= self.retry.max_attempts.max(1) {
                    return Err(StoreError::Transient(format!(
                        "BatchWriteItem left {} items unprocessed after {round} rounds (throttled)",
                        pending.len()
                    )));
                }
                let delay = self.retry.backoff(round);
                tracing::warn!(
                    unprocessed = pending.len(),
                    round,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "BatchWriteItem unprocessed items, retrying"
                );
                tokio::time::sleep(delay).await;
            }
        }
        Ok(())
    }

    /// After a create whose condition failed on the conversation's id: [`CreateOutcome::Created`] when the
    /// stored item is this request's own conversation (an attempt applied, its answer lost, retried in
    /// place); a permanent error for any other conversation under the id.
    async fn own_conversation(&self, conversation: &Conversation) -> Result<CreateOutcome, StoreError> {
        match self.get_conversation(&conversation.id).await? {
            Some(stored) if stored.is_created_by(conversation) => {
                tracing::info!(conversation_id = %conversation.id, "create found its own write (answer lost)");
                Ok(CreateOutcome::Created)
            }
            _ => Err(StoreError::Permanent(format!("conversation {} already exists", conversation.id))),
        }
    }

    /// Writes `after` over the stored approval, conditional on its status still being `from`.
    pub(super) async fn rewrite_approval(&self, after: &Approval, from: ApprovalStatus) -> Result<bool, StoreError> {
        let mut u = Update::default();
        for (attr, value) in approval_item(after)? {
            if !matches!(attr.as_str(), "PK" | "SK" | "status") {
                u.set(&attr, value);
            }
        }
        if after.status != ApprovalStatus::Pending {
            // Out of the pending approvals' index in the same conditional write that decides it.
            u.remove("pending_pk").remove("pending_sk");
        }
        let status = u.name("status");
        let to = u.value("to", s(after.status.code()));
        u.set_expr(format!("{status} = {to}"));
        let was = u.value("was", s(from.code()));
        let condition = format!("attribute_exists(#PK) AND {status} = {was}");
        Ok(self
            .update("UpdateItem(approval)", &ItemKey::approval(&after.id), u, condition, ReturnValue::None)
            .await?
            .is_some())
    }

    /// After a failed condition on a subtask: the stored record, read consistently.
    pub(super) async fn subtask_after_conflict(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
    ) -> Result<Option<SubtaskRecord>, StoreError> {
        self.get_subtask(id, subtask_id).await
    }
}

/// Whether `planner` (when named) holds the conversation's lease.
fn holds_planning(c: &Conversation, planner: Option<&str>) -> bool {
    planner.is_none_or(|p| c.lease.as_ref().is_some_and(|l| l.holder == p))
}

/// Whether `c` is `planner`'s own flip to `RUNNING` with `plan` (made by an attempt whose answer was lost).
fn own_flip(c: &Conversation, planner: Option<&str>, plan: &BTreeSet<String>) -> bool {
    planner.is_some() && c.status == ConversationStatus::Running && holds_planning(c, planner) && c.plan == *plan
}

/// The condition of a write of `turn`'s answer: `AGGREGATING` on that turn (an item without `turn`
/// was written before turns: turn 0).
fn on_turn(u: &mut Update, turn: u32) -> String {
    let status = u.status_in(&[ConversationStatus::Aggregating.as_str()]);
    format!("{status} AND {}", turn_is(u, turn))
}

/// The condition that the conversation item is on `turn` (an item written before turns existed,
/// with no `turn` attribute, is on turn 0).
fn turn_is(u: &mut Update, turn: u32) -> String {
    let name = u.name("turn");
    let value = u.value("turn", n(turn));
    if turn == 0 { format!("(attribute_not_exists({name}) OR {name} = {value})") } else { format!("{name} = {value}") }
}

fn put(item: Item, table: &str) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(PK)")
        .build()
        .map_err(|e| StoreError::Permanent(format!("TransactWriteItems request: {e}")))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

#[async_trait]
impl ConversationRecords for DynamoConversationStore {
    async fn create_conversation(&self, conversation: &Conversation) -> Result<CreateOutcome, StoreError> {
        let meta = conversation_item(conversation)?;
        let Some(idem_key) = &conversation.idempotency_key else {
            let req = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(meta))
                .condition_expression("attribute_not_exists(PK)");
            return match self.retry.run("dynamodb", "PutItem", sdk_error_is_transient, || req.clone().send()).await {
                Ok(_) => Ok(CreateOutcome::Created),
                Err(e) if is_conditional_failure(&e) => self.own_conversation(conversation).await,
                Err(e) => Err(to_store_error("PutItem", e)),
            };
        };
        let idem = idempotency_item(
            &conversation.customer_id,
            idem_key,
            &conversation.id,
            conversation.request_hash.as_deref(),
            conversation.ttl,
        )?;
        let claim = ItemKey::Idempotency { customer_id: conversation.customer_id.clone(), key: idem_key.clone() };
        let req = self
            .client
            .transact_write_items()
            .transact_items(put(meta, &self.table)?)
            .transact_items(put(idem, &self.table)?);
        match self.retry.run("dynamodb", "TransactWriteItems", transaction_is_transient, || req.clone().send()).await {
            Ok(_) => Ok(CreateOutcome::Created),
            Err(e) => {
                let codes = cancellation_codes(&e);
                if codes.get(1).is_some_and(|c| c == "ConditionalCheckFailed") {
                    let existing = self.get_item(&claim).await?.ok_or_else(|| {
                        StoreError::Transient("idempotency key claimed but its item is gone (expired?); retry".into())
                    })?;
                    let claimed = idempotency_claim(&existing)?;
                    let id = claimed.conversation_id;
                    if id == conversation.id {
                        // The claim is this request's own (a retried transaction whose answer was lost).
                        return self.own_conversation(conversation).await;
                    }
                    tracing::info!(conversation_id = %id, customer_id = %conversation.customer_id, "idempotency key already used");
                    // A claim without a hash (written before hashes were kept) matches any request.
                    return Ok(match (claimed.request_hash, &conversation.request_hash) {
                        (Some(a), Some(b)) if &a != b => CreateOutcome::KeyReused(id),
                        _ => CreateOutcome::Existing(id),
                    });
                }
                if codes.first().is_some_and(|c| c == "ConditionalCheckFailed") {
                    return self.own_conversation(conversation).await;
                }
                Err(to_store_error("TransactWriteItems", e))
            }
        }
    }

    async fn get_conversation(&self, id: &ConversationId) -> Result<Option<Conversation>, StoreError> {
        self.get_item(&ItemKey::conversation(id)).await?.map(|item| conversation_from_item(&item)).transpose()
    }

    async fn start_run(
        &self,
        id: &ConversationId,
        planner: Option<&str>,
        subtasks: &[SubtaskRecord],
        notes: &[String],
        usage: &Usage,
    ) -> Result<bool, StoreError> {
        // A plan can hold 100 subtasks and a transaction only 100 items, so the
        // subtasks are batch-written first and the conversation flipped last. The
        // status check first keeps "not PLANNING writes nothing" for every caller
        // but a concurrent second start_run of the same conversation.
        let plan: BTreeSet<String> = subtasks.iter().map(|r| r.subtask.id.to_string()).collect();
        let Some(current) = self.get_conversation(id).await? else {
            return Ok(false);
        };
        if current.status != ConversationStatus::Planning || !holds_planning(&current, planner) {
            return Ok(own_flip(&current, planner, &plan));
        }
        // A planner taken over may have written items of its own plan before it died: they go.
        let stale: Vec<SubtaskId> = self
            .list_subtasks(id)
            .await?
            .into_iter()
            .map(|r| r.subtask.id)
            .filter(|sid| !plan.contains(sid.as_str()))
            .collect();
        if !stale.is_empty() {
            tracing::warn!(conversation_id = %id, stale = stale.len(), "removing subtask items of a planner taken over");
            self.batch_delete(stale.iter().map(|sid| ItemKey::subtask(id, sid).item()).collect()).await?;
        }
        let items = subtasks.iter().map(subtask_item).collect::<Result<Vec<_>, _>>()?;
        self.batch_put(items).await?;
        let count = subtasks.len() as u32;
        let mut u = Update::default();
        u.set("status", s(ConversationStatus::Running.as_str())).set("total", n(count)).set("remaining", n(count));
        if plan.is_empty() {
            u.remove("plan");
        } else {
            u.set("plan", AttributeValue::Ss(plan.iter().cloned().collect()));
        }
        if notes.is_empty() {
            u.remove("notes");
        } else {
            u.set("notes", AttributeValue::L(notes.iter().map(s).collect()));
        }
        u.add_usage(usage);
        append_events(&mut u, now_ms(), of::planned(current.turn));
        let mut condition = u.status_in(&[ConversationStatus::Planning.as_str()]);
        if let Some(planner) = planner {
            let holder = u.name("lease_holder");
            let me = u.value("planner", s(planner));
            condition = format!("{condition} AND {holder} = {me}");
        }
        let mut flipped = self
            .update("UpdateItem(start_run)", &ItemKey::conversation(id), u, condition, ReturnValue::None)
            .await?
            .is_some();
        if !flipped {
            // Someone else's flip or takeover — or this planner's own flip, applied by an attempt
            // whose answer was lost (HTTP 500, a timeout) and retried in place.
            flipped = self.get_conversation(id).await?.is_some_and(|c| own_flip(&c, planner, &plan));
        }
        tracing::info!(conversation_id = %id, subtasks = count, flipped, "run started");
        Ok(flipped)
    }

    async fn mark_queued(&self, id: &ConversationId, turn: u32, at_ms: i64) -> Result<bool, StoreError> {
        let mut u = Update::default();
        let queued = u.name("queued_at_ms");
        let at = u.value("at", n(at_ms));
        u.set_expr(format!("{queued} = if_not_exists({queued}, {at})"));
        let condition = format!("attribute_exists(#PK) AND {}", turn_is(&mut u, turn));
        Ok(self
            .update("UpdateItem(mark_queued)", &ItemKey::conversation(id), u, condition, ReturnValue::None)
            .await?
            .is_some())
    }

    async fn transition_conversation(
        &self,
        id: &ConversationId,
        from: ConversationStatus,
        to: ConversationStatus,
    ) -> Result<bool, StoreError> {
        let mut u = Update::default();
        u.set("status", s(to.as_str()));
        if to.is_terminal() {
            u.remove("sweep_shard");
        }
        let condition = u.status_in(&[from.as_str()]);
        Ok(self
            .update("UpdateItem(transition_conversation)", &ItemKey::conversation(id), u, condition, ReturnValue::None)
            .await?
            .is_some())
    }

    async fn fail_conversation(&self, id: &ConversationId, turn: u32, reason: &str) -> Result<bool, StoreError> {
        let reason = truncate_chars(reason, MAX_ERROR_CHARS);
        let mut u = Update::default();
        u.set("status", s(ConversationStatus::Failed.as_str())).set("error", s(&reason)).remove("sweep_shard");
        append_events(&mut u, now_ms(), vec![Event::TurnFailed { turn, reason: reason.clone() }]);
        let status = u.status_in(&[
            ConversationStatus::Planning.as_str(),
            ConversationStatus::Running.as_str(),
            ConversationStatus::Aggregating.as_str(),
        ]);
        let condition = format!("{status} AND {}", turn_is(&mut u, turn));
        if self
            .update("UpdateItem(fail_conversation)", &ItemKey::conversation(id), u, condition, ReturnValue::None)
            .await?
            .is_some()
        {
            return Ok(true);
        }
        // Refused: someone else's flip, a later turn — or this very write, applied by an attempt
        // whose answer was lost and refused when retried.
        Ok(self.get_conversation(id).await?.is_some_and(|c| c.is_failed_on(turn, &reason)))
    }

    async fn overdue_conversations(
        &self,
        shard: u32,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<ConversationId>, StoreError> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        while out.len() < limit {
            let page_size = i32::try_from(limit - out.len()).unwrap_or(i32::MAX);
            let req = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(SWEEP_INDEX)
                .key_condition_expression("#shard = :shard AND #deadline < :now")
                .expression_attribute_names("#shard", "sweep_shard")
                .expression_attribute_names("#deadline", "deadline_ms")
                .expression_attribute_values(":shard", n(shard))
                .expression_attribute_values(":now", n(now_ms))
                .limit(page_size)
                .set_exclusive_start_key(start.take());
            let page = self
                .retry
                .run("dynamodb", "Query(sweep)", sdk_error_is_transient, || req.clone().send())
                .await
                .map_err(|e| to_store_error("Query(sweep)", e))?;
            for item in page.items() {
                match conversation_id_of_keys(item.clone()) {
                    Some(id) => out.push(id),
                    None => tracing::warn!("sweep index holds an item that is not a conversation"),
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        out.truncate(limit);
        Ok(out)
    }

    async fn start_turn(
        &self,
        previous: &Conversation,
        next: &NextTurn,
        now_ms: i64,
    ) -> Result<TurnOutcome, StoreError> {
        self.begin_turn(previous, next, now_ms).await
    }

    async fn tell_turn(&self, previous: &Conversation, told: &ToldTurn) -> Result<TellOutcome, StoreError> {
        self.tell(previous, told).await
    }

    async fn conversation_history(&self, id: &ConversationId) -> Result<ConversationHistory, StoreError> {
        self.history(id).await
    }

    async fn list_customer_conversations(
        &self,
        customer_id: &str,
        after: Option<&ConversationPosition>,
        limit: usize,
    ) -> Result<ConversationPage, StoreError> {
        self.customer_page(customer_id, after, limit).await
    }
}

#[async_trait]
impl AnswerStore for DynamoConversationStore {
    async fn acquire_lease(
        &self,
        id: &ConversationId,
        phase: LeasePhase,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<LeaseOutcome, StoreError> {
        let mut u = Update::default();
        u.set("lease_holder", s(holder)).set("lease_until_ms", n(until_ms));
        let status = u.name("status");
        let lease_until = u.name("lease_until_ms");
        let now = u.value("now", n(now_ms));
        let holder_name = u.name("lease_holder");
        let me = u.value("me", s(holder));
        // Expired, or this holder's own (a renewal, or this call's own write retried after its answer was lost).
        let expired = format!("(attribute_not_exists({lease_until}) OR {lease_until} < {now} OR {holder_name} = {me})");
        let condition = match phase {
            LeasePhase::Planning => {
                let turn = u.name("turn");
                let zero = u.value("zero", n(0));
                let lease_turn = u.name("lease_turn");
                u.set_expr(format!("{lease_turn} = if_not_exists({turn}, {zero})"));
                let planning = u.value("planning", s(ConversationStatus::Planning.as_str()));
                let running = u.value("running", s(ConversationStatus::Running.as_str()));
                // Its own holder may end the lease after the flip to RUNNING too (a failed enqueue).
                format!(
                    "attribute_exists(#PK) AND (({status} = {planning} AND {expired}) OR ({status} = {running} AND {holder_name} = {me}))"
                )
            }
            LeasePhase::Aggregating { turn } => {
                u.set("status", s(ConversationStatus::Aggregating.as_str())).set("lease_turn", n(turn));
                let turn_name = u.name("turn");
                let turn_value = u.value("turn_now", n(turn));
                let on_turn = if turn == 0 {
                    format!("(attribute_not_exists({turn_name}) OR {turn_name} = {turn_value})")
                } else {
                    format!("{turn_name} = {turn_value}")
                };
                let remaining = u.name("remaining");
                let zero = u.value("zero", n(0));
                let running = u.value("running", s(ConversationStatus::Running.as_str()));
                let aggregating = u.value("aggregating", s(ConversationStatus::Aggregating.as_str()));
                format!(
                    "attribute_exists(#PK) AND {on_turn} AND (({status} = {running} AND {remaining} = {zero}) OR ({status} = {aggregating} AND {expired}))"
                )
            }
        };
        match self
            .update("UpdateItem(acquire_lease)", &ItemKey::conversation(id), u, condition, ReturnValue::AllOld)
            .await?
        {
            Some(old) => {
                let old = conversation_from_item(&old)?;
                // From RUNNING the lease on the item (the planning one) is not an aggregation taken
                // over; nor is this holder's own lease.
                let taken_over = if old.status == ConversationStatus::Running {
                    None
                } else {
                    old.lease.filter(|l| l.holder != holder)
                };
                Ok(LeaseOutcome::Acquired { taken_over })
            }
            None => {
                let Some(c) = self.get_conversation(id).await? else { return Ok(LeaseOutcome::Missing) };
                let in_phase = match phase {
                    LeasePhase::Planning => {
                        c.status == ConversationStatus::Planning
                            || (c.status == ConversationStatus::Running
                                && c.lease.as_ref().is_some_and(|l| l.holder == holder))
                    }
                    LeasePhase::Aggregating { turn } => {
                        c.turn == turn
                            && (c.status == ConversationStatus::Aggregating
                                || (c.status == ConversationStatus::Running && c.remaining == 0))
                    }
                };
                match c.lease {
                    _ if !in_phase => Ok(LeaseOutcome::NotInPhase { status: c.status, remaining: c.remaining }),
                    Some(lease) if lease.until_ms >= now_ms => Ok(LeaseOutcome::Held(lease)),
                    _ => Err(StoreError::Transient(format!(
                        "acquire_lease condition failed but conversation {id} is {} with no live lease; retry",
                        c.status
                    ))),
                }
            }
        }
    }

    async fn finish_conversation(
        &self,
        id: &ConversationId,
        turn: u32,
        reply: &str,
        usage: &Usage,
    ) -> Result<bool, StoreError> {
        let mut u = Update::default();
        u.set("status", s(ConversationStatus::Done.as_str()))
            .set("reply", s(reply))
            .add_usage(usage)
            .remove("sweep_shard");
        append_events(&mut u, now_ms(), of::answered(turn, ConversationStatus::Done));
        let condition = on_turn(&mut u, turn);
        Ok(self
            .update("UpdateItem(finish_conversation)", &ItemKey::conversation(id), u, condition, ReturnValue::None)
            .await?
            .is_some())
    }

    async fn request_handoff(&self, id: &ConversationId, handoff: &Handoff) -> Result<bool, StoreError> {
        let mut u = Update::default();
        u.set("handoff_reason", s(handoff.reason.code()))
            .set("handoff_at_ms", n(handoff.at_ms))
            .set("conversation_id", s(id.as_str()));
        append_events(&mut u, now_ms(), vec![Event::HandoffRequested { reason: handoff.reason }]);
        let condition = u.status_in(&[
            ConversationStatus::Planning.as_str(),
            ConversationStatus::Running.as_str(),
            ConversationStatus::Aggregating.as_str(),
        ]);
        Ok(self
            .update("UpdateItem(request_handoff)", &ItemKey::conversation(id), u, condition, ReturnValue::None)
            .await?
            .is_some())
    }

    async fn hand_off(
        &self,
        id: &ConversationId,
        turn: u32,
        reply: &str,
        usage: &Usage,
        handoff: &Handoff,
    ) -> Result<bool, StoreError> {
        let mut u = Update::default();
        u.set("status", s(ConversationStatus::Handoff.as_str()))
            .set("reply", s(reply))
            .set("handoff_reason", s(handoff.reason.code()))
            .set("handoff_at_ms", n(handoff.at_ms))
            .set("conversation_id", s(id.as_str()))
            .add_usage(usage)
            .remove("sweep_shard");
        append_events(&mut u, now_ms(), of::answered(turn, ConversationStatus::Handoff));
        let condition = on_turn(&mut u, turn);
        Ok(self
            .update("UpdateItem(hand_off)", &ItemKey::conversation(id), u, condition, ReturnValue::None)
            .await?
            .is_some())
    }
}

#[async_trait]
impl AccountingStore for DynamoConversationStore {
    async fn count_finished(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        usage: &Usage,
    ) -> Result<CountOutcome, StoreError> {
        let mut u = Update::default();
        u.add("finished", AttributeValue::Ss(vec![subtask_id.to_string()]));
        let remaining = u.name("remaining");
        let one = u.value("one", n(1));
        u.set_expr(format!("{remaining} = {remaining} - {one}"));
        u.add_usage(usage);
        let finished = u.name("finished");
        let sid = u.value("sid", s(subtask_id));
        let zero = u.value("zero", n(0));
        // Only an id of the plan counts (no `plan`: a conversation planned before it was kept).
        let plan = u.name("plan");
        let condition = format!(
            "attribute_exists(#PK) AND NOT contains({finished}, {sid}) AND {remaining} > {zero} AND (attribute_not_exists({plan}) OR contains({plan}, {sid}))"
        );
        match self
            .update("UpdateItem(count_finished)", &ItemKey::conversation(id), u, condition, ReturnValue::UpdatedNew)
            .await?
        {
            Some(item) => {
                let remaining = remaining_of(&item)?;
                tracing::info!(conversation_id = %id, subtask_id = %subtask_id, remaining, "subtask counted");
                Ok(CountOutcome::Counted { remaining })
            }
            None => match self.get_item(&ItemKey::conversation(id)).await? {
                None => Ok(CountOutcome::Missing),
                Some(_) => {
                    tracing::info!(conversation_id = %id, subtask_id = %subtask_id, "subtask already counted");
                    Ok(CountOutcome::AlreadyCounted)
                }
            },
        }
    }
}
