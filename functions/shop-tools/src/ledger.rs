//! The shop's ledger — every refund and every support ticket, each with its idempotency key — behind one trait: in memory (the local stack: it lives as long as the stack) and on DynamoDB (Lambda: it survives cold starts and instances, and a key is claimed by a conditional write).
//!
//! DynamoDB layout (the shop's own table, partition key `PK` only):
//!
//! | PK | attributes |
//! | --- | --- |
//! | `KEY#<customer>#<idempotency key>` | `refund` S (the [`RefundRecord`] as JSON) |
//! | `ORDER#<order id>` | `refunded_cents` N, `refunds` N (count, the version a new refund is conditional on) |
//! | `APPROVAL#<approval id>` | `key` S (the `KEY#…` item the approval paid) |
//! | `TICKET#<customer>#<idempotency key>` | `ticket` S (the [`TicketRecord`] as JSON) |
//!
//! A refund is one `TransactWriteItems`: the key item `attribute_not_exists(PK)`, the order
//! item conditional on the count of refunds the shop's checks were made against, and for a
//! refund a person approved the approval item `attribute_not_exists(PK)` — so a key refunds
//! once, two refunds with different keys can never both spend the same money, and an approval
//! pays one refund whatever key it comes with. (Refunds recorded before approvals were claimed
//! have no approval item and no `approval_id`; they read as refunds without one.)

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, Put, TransactWriteItem, Update};
use serde::{Deserialize, Serialize};

use crate::money::decimal;

/// One refund made through the shop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefundRecord {
    /// `RF-<order id>-<n>`: the `n`-th refund made through this ledger on that order.
    pub refund_id: String,
    pub customer_id: String,
    pub order_id: String,
    /// Amount refunded by this refund, in cents of `currency` (stored as the decimal `amount`).
    #[serde(rename = "amount", with = "decimal")]
    pub amount_cents: i64,
    pub currency: String,
    /// Total refunded on the order after this refund (including refunds before the ledger), in
    /// cents (stored as the decimal `refunded_total`).
    #[serde(rename = "refunded_total", with = "decimal")]
    pub refunded_total_cents: i64,
    pub reason: Option<String>,
    pub idempotency_key: String,
    /// The approval a person gave for it, when one was needed (absent on records written before
    /// approvals were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

/// One support ticket opened through the shop (a side effect without money: no approval).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketRecord {
    /// `TK-<32 hex digits>`: random for each ticket.
    pub ticket_id: String,
    pub customer_id: String,
    pub order_id: String,
    pub subject: String,
    pub idempotency_key: String,
}

/// What the ledger holds for one order: refunded through it, in cents, and how many refunds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrderRefunds {
    pub cents: i64,
    pub count: u64,
}

/// What [`RefundLedger::record`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerWrite {
    Recorded,
    /// The (customer, key) was claimed first (a concurrent request with the same key): the stored refund.
    KeyTaken(RefundRecord),
    /// Another refund of the order landed since its totals were read: read again and decide again.
    OrderChanged,
    /// The refund's approval already paid a refund under another key: nothing recorded.
    ApprovalUsed,
}

/// A ledger call failed; retrying may help when transient.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("refund ledger temporarily unavailable: {0}")]
    Transient(String),
    #[error("refund ledger error: {0}")]
    Permanent(String),
}

impl LedgerError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
}

/// The refunds and their keys (see the module docs for the DynamoDB layout).
#[async_trait]
pub trait RefundLedger: Send + Sync {
    /// The refund recorded under `(customer_id, key)`, if any.
    async fn by_key(&self, customer_id: &str, key: &str) -> Result<Option<RefundRecord>, LedgerError>;
    /// What the ledger holds for each of `order_ids` (absent orders: zero).
    async fn orders(&self, order_ids: &[&str]) -> Result<HashMap<String, OrderRefunds>, LedgerError>;
    /// Records `refund` under its customer and key, conditional on the key being new, its
    /// order still holding `before` (the totals the shop's checks used) and its approval, if
    /// any, not having paid another refund.
    async fn record(&self, refund: &RefundRecord, before: OrderRefunds) -> Result<LedgerWrite, LedgerError>;
    /// Every refund, in no particular order (tests and the local stack's checks).
    async fn all(&self) -> Result<Vec<RefundRecord>, LedgerError>;
    /// Records `ticket` under its customer and key, conditional on the key being new; answers
    /// the ticket the key holds — `ticket` itself, or the one a first call with the key opened.
    async fn open_ticket(&self, ticket: &TicketRecord) -> Result<TicketRecord, LedgerError>;
    /// Every ticket, in no particular order (tests and the local stack's checks).
    async fn tickets(&self) -> Result<Vec<TicketRecord>, LedgerError>;
}

#[derive(Default)]
struct Memory {
    by_key: HashMap<(String, String), RefundRecord>,
    orders: HashMap<String, OrderRefunds>,
    /// Approval id → the (customer, key) it paid.
    approvals: HashMap<String, (String, String)>,
    /// Recording order, for [`RefundLedger::all`].
    order: Vec<(String, String)>,
    /// (customer, key) → ticket, in opening order.
    tickets: Vec<((String, String), TicketRecord)>,
}

/// The ledger in this process: one lock per call, the same conditions as DynamoDB's.
#[derive(Default)]
pub struct InMemoryLedger {
    state: Mutex<Memory>,
}

impl InMemoryLedger {
    pub fn new() -> Self {
        Self::default()
    }

    // Every update is one insert after all checks, so a poisoned lock holds consistent state.
    fn state(&self) -> MutexGuard<'_, Memory> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl RefundLedger for InMemoryLedger {
    async fn by_key(&self, customer_id: &str, key: &str) -> Result<Option<RefundRecord>, LedgerError> {
        Ok(self.state().by_key.get(&(customer_id.to_owned(), key.to_owned())).cloned())
    }

    async fn orders(&self, order_ids: &[&str]) -> Result<HashMap<String, OrderRefunds>, LedgerError> {
        let state = self.state();
        Ok(order_ids.iter().filter_map(|id| state.orders.get(*id).map(|o| ((*id).to_owned(), *o))).collect())
    }

    async fn record(&self, refund: &RefundRecord, before: OrderRefunds) -> Result<LedgerWrite, LedgerError> {
        let mut state = self.state();
        let slot = (refund.customer_id.clone(), refund.idempotency_key.clone());
        if let Some(existing) = state.by_key.get(&slot) {
            return Ok(LedgerWrite::KeyTaken(existing.clone()));
        }
        let now = state.orders.get(&refund.order_id).copied().unwrap_or_default();
        if now != before {
            return Ok(LedgerWrite::OrderChanged);
        }
        if let Some(approval) = &refund.approval_id {
            if state.approvals.contains_key(approval) {
                return Ok(LedgerWrite::ApprovalUsed);
            }
            state.approvals.insert(approval.clone(), slot.clone());
        }
        state.orders.insert(
            refund.order_id.clone(),
            OrderRefunds { cents: now.cents + refund.amount_cents, count: now.count + 1 },
        );
        state.by_key.insert(slot.clone(), refund.clone());
        state.order.push(slot);
        Ok(LedgerWrite::Recorded)
    }

    async fn all(&self) -> Result<Vec<RefundRecord>, LedgerError> {
        let state = self.state();
        Ok(state.order.iter().filter_map(|slot| state.by_key.get(slot).cloned()).collect())
    }

    async fn open_ticket(&self, ticket: &TicketRecord) -> Result<TicketRecord, LedgerError> {
        let mut state = self.state();
        let slot = (ticket.customer_id.clone(), ticket.idempotency_key.clone());
        if let Some((_, first)) = state.tickets.iter().find(|(s, _)| *s == slot) {
            return Ok(first.clone());
        }
        state.tickets.push((slot, ticket.clone()));
        Ok(ticket.clone())
    }

    async fn tickets(&self) -> Result<Vec<TicketRecord>, LedgerError> {
        Ok(self.state().tickets.iter().map(|(_, t)| t.clone()).collect())
    }
}

/// The ledger on its own DynamoDB table (`SHOP_LEDGER_TABLE`).
#[derive(Clone, Debug)]
pub struct DynamoLedger {
    client: Client,
    table: String,
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// `%` and `#` in a customer id escaped, so two (customer, key) pairs never share an item.
fn key_pk(customer_id: &str, key: &str) -> String {
    format!("KEY#{}#{key}", customer_id.replace('%', "%25").replace('#', "%23"))
}

fn ticket_pk(customer_id: &str, key: &str) -> String {
    format!("TICKET#{}#{key}", customer_id.replace('%', "%25").replace('#', "%23"))
}

fn order_pk(order_id: &str) -> String {
    format!("ORDER#{order_id}")
}

fn approval_pk(approval_id: &str) -> String {
    format!("APPROVAL#{approval_id}")
}

fn sdk_error<E, R>(op: &str, e: &SdkError<E, R>) -> LedgerError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let transient = match e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => true,
        SdkError::ServiceError(ctx) => matches!(
            ctx.err().code(),
            Some(
                "ThrottlingException"
                    | "ProvisionedThroughputExceededException"
                    | "RequestLimitExceeded"
                    | "InternalServerError"
                    | "ServiceUnavailable"
                    | "TransactionConflictException"
            )
        ),
        _ => false,
    };
    let message = format!("DynamoDB {op}: {}", DisplayErrorContext(e));
    if transient { LedgerError::Transient(message) } else { LedgerError::Permanent(message) }
}

fn record_from(item: &HashMap<String, AttributeValue>) -> Result<RefundRecord, LedgerError> {
    let text = item
        .get("refund")
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| LedgerError::Permanent("a key item has no `refund`".into()))?;
    serde_json::from_str(text).map_err(|e| LedgerError::Permanent(format!("a refund item is not valid JSON: {e}")))
}

fn ticket_from(item: &HashMap<String, AttributeValue>) -> Result<TicketRecord, LedgerError> {
    let text = item
        .get("ticket")
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| LedgerError::Permanent("a ticket item has no `ticket`".into()))?;
    serde_json::from_str(text).map_err(|e| LedgerError::Permanent(format!("a ticket item is not valid JSON: {e}")))
}

fn number<T: std::str::FromStr + Default>(item: &HashMap<String, AttributeValue>, name: &str) -> T {
    item.get(name).and_then(|v| v.as_n().ok()).and_then(|t| t.parse().ok()).unwrap_or_default()
}

impl DynamoLedger {
    /// A ledger on `table` (partition key `PK`, type S). The SDK's standard retries apply.
    pub fn new(client: Client, table: String) -> Self {
        Self { client, table }
    }

    /// Creates the ledger's table (on-demand, partition key `PK`) and waits until it is active;
    /// for the emulator and the contract tests (the template creates it on AWS).
    ///
    /// Errors: the table cannot be created or does not become active within 30 s.
    pub async fn create_table(client: &Client, table: &str) -> Result<(), LedgerError> {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TableStatus,
        };
        let definition = AttributeDefinition::builder()
            .attribute_name("PK")
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|e| LedgerError::Permanent(e.to_string()))?;
        let key = KeySchemaElement::builder()
            .attribute_name("PK")
            .key_type(KeyType::Hash)
            .build()
            .map_err(|e| LedgerError::Permanent(e.to_string()))?;
        client
            .create_table()
            .table_name(table)
            .attribute_definitions(definition)
            .key_schema(key)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await
            .map_err(|e| sdk_error("CreateTable", &e))?;
        for _ in 0..300 {
            let described =
                client.describe_table().table_name(table).send().await.map_err(|e| sdk_error("DescribeTable", &e))?;
            if described.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Err(LedgerError::Transient(format!("table {table} did not become active within 30 s")))
    }
}

#[async_trait]
impl RefundLedger for DynamoLedger {
    async fn by_key(&self, customer_id: &str, key: &str) -> Result<Option<RefundRecord>, LedgerError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("PK", s(key_pk(customer_id, key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error("GetItem", &e))?;
        out.item.as_ref().map(record_from).transpose()
    }

    async fn orders(&self, order_ids: &[&str]) -> Result<HashMap<String, OrderRefunds>, LedgerError> {
        let mut found = HashMap::new();
        // BatchGetItem takes 100 keys; a customer has far fewer orders.
        for chunk in order_ids.chunks(100) {
            let mut keys = Vec::with_capacity(chunk.len());
            for id in chunk {
                keys.push(HashMap::from([("PK".to_owned(), s(order_pk(id)))]));
            }
            let mut pending = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| LedgerError::Permanent(e.to_string()))?,
            );
            for _round in 0..10 {
                let Some(request) = pending.take() else { break };
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| sdk_error("BatchGetItem", &e))?;
                for item in out.responses.and_then(|mut r| r.remove(&self.table)).unwrap_or_default() {
                    let Some(pk) = item.get("PK").and_then(|v| v.as_s().ok()) else { continue };
                    let Some(order) = pk.strip_prefix("ORDER#") else { continue };
                    found.insert(
                        order.to_owned(),
                        OrderRefunds { cents: number(&item, "refunded_cents"), count: number(&item, "refunds") },
                    );
                }
                pending = out.unprocessed_keys.and_then(|mut u| u.remove(&self.table)).filter(|k| !k.keys().is_empty());
            }
            if pending.is_some() {
                return Err(LedgerError::Transient("BatchGetItem left keys unprocessed (throttled)".into()));
            }
        }
        Ok(found)
    }

    async fn record(&self, refund: &RefundRecord, before: OrderRefunds) -> Result<LedgerWrite, LedgerError> {
        let json = serde_json::to_string(refund).map_err(|e| LedgerError::Permanent(e.to_string()))?;
        let put = Put::builder()
            .table_name(&self.table)
            .item("PK", s(key_pk(&refund.customer_id, &refund.idempotency_key)))
            .item("refund", s(json))
            .condition_expression("attribute_not_exists(PK)")
            .build()
            .map_err(|e| LedgerError::Permanent(e.to_string()))?;
        let version =
            if before.count == 0 { "attribute_not_exists(PK)".to_owned() } else { "#refunds = :before".to_owned() };
        let mut update = Update::builder()
            .table_name(&self.table)
            .key("PK", s(order_pk(&refund.order_id)))
            .update_expression("SET #cents = :cents, #refunds = :after")
            .condition_expression(version)
            .expression_attribute_names("#cents", "refunded_cents")
            .expression_attribute_names("#refunds", "refunds")
            .expression_attribute_values(":cents", n(before.cents + refund.amount_cents))
            .expression_attribute_values(":after", n(before.count + 1));
        if before.count > 0 {
            update = update.expression_attribute_values(":before", n(before.count));
        }
        let update = update.build().map_err(|e| LedgerError::Permanent(e.to_string()))?;
        let mut transaction = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put).build())
            .transact_items(TransactWriteItem::builder().update(update).build());
        if let Some(approval) = &refund.approval_id {
            let claim = Put::builder()
                .table_name(&self.table)
                .item("PK", s(approval_pk(approval)))
                .item("key", s(key_pk(&refund.customer_id, &refund.idempotency_key)))
                .condition_expression("attribute_not_exists(PK)")
                .build()
                .map_err(|e| LedgerError::Permanent(e.to_string()))?;
            transaction = transaction.transact_items(TransactWriteItem::builder().put(claim).build());
        }
        let sent = transaction.send().await;
        let error = match sent {
            Ok(_) => return Ok(LedgerWrite::Recorded),
            Err(e) => e,
        };
        let codes: Vec<String> = match &error {
            SdkError::ServiceError(ctx) => match ctx.err() {
                TransactWriteItemsError::TransactionCanceledException(t) => {
                    t.cancellation_reasons().iter().map(|r| r.code().unwrap_or("None").to_owned()).collect()
                }
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        if codes.first().is_some_and(|c| c == "ConditionalCheckFailed") {
            return match self.by_key(&refund.customer_id, &refund.idempotency_key).await? {
                Some(existing) => Ok(LedgerWrite::KeyTaken(existing)),
                None => Err(LedgerError::Transient("the key was claimed but cannot be read yet; retry".into())),
            };
        }
        if codes.get(1).is_some_and(|c| c == "ConditionalCheckFailed") {
            return Ok(LedgerWrite::OrderChanged);
        }
        if codes.get(2).is_some_and(|c| c == "ConditionalCheckFailed") {
            return Ok(LedgerWrite::ApprovalUsed);
        }
        if codes.iter().any(|c| c == "TransactionConflict") {
            return Ok(LedgerWrite::OrderChanged);
        }
        Err(sdk_error("TransactWriteItems", &error))
    }

    async fn all(&self) -> Result<Vec<RefundRecord>, LedgerError> {
        self.scan_prefix("KEY#").await?.iter().map(record_from).collect()
    }

    async fn open_ticket(&self, ticket: &TicketRecord) -> Result<TicketRecord, LedgerError> {
        let json = serde_json::to_string(ticket).map_err(|e| LedgerError::Permanent(e.to_string()))?;
        let pk = ticket_pk(&ticket.customer_id, &ticket.idempotency_key);
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("PK", s(pk.clone()))
            .item("ticket", s(json))
            .condition_expression("attribute_not_exists(PK)")
            .send()
            .await;
        match put {
            Ok(_) => Ok(ticket.clone()),
            // The key holds a ticket already (a retry, or this very write whose answer was lost):
            // the stored one is the answer.
            Err(e) if e.as_service_error().is_some_and(|se| se.is_conditional_check_failed_exception()) => {
                let out = self
                    .client
                    .get_item()
                    .table_name(&self.table)
                    .key("PK", s(pk))
                    .consistent_read(true)
                    .send()
                    .await
                    .map_err(|e| sdk_error("GetItem", &e))?;
                match out.item.as_ref() {
                    Some(item) => ticket_from(item),
                    None => {
                        Err(LedgerError::Transient("the ticket's key was claimed but cannot be read yet; retry".into()))
                    }
                }
            }
            Err(e) => Err(sdk_error("PutItem", &e)),
        }
    }

    async fn tickets(&self) -> Result<Vec<TicketRecord>, LedgerError> {
        self.scan_prefix("TICKET#").await?.iter().map(ticket_from).collect()
    }
}

impl DynamoLedger {
    /// Every item whose `PK` begins with `prefix` (a consistent scan, every page).
    async fn scan_prefix(&self, prefix: &str) -> Result<Vec<HashMap<String, AttributeValue>>, LedgerError> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(PK, :key)")
                .expression_attribute_values(":key", s(prefix))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| sdk_error("Scan", &e))?;
            out.extend(page.items().iter().cloned());
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_different_customers_never_share_an_item() {
        assert_ne!(key_pk("a#b", "c"), key_pk("a", "b#c"));
        assert_eq!(key_pk("C104", "swarm:x:w01:1"), "KEY#C104#swarm:x:w01:1");
        assert_eq!(order_pk("A1033"), "ORDER#A1033");
        assert_eq!(approval_pk("c.w01.1"), "APPROVAL#c.w01.1");
        assert_eq!(ticket_pk("C104", "swarm:x:w01:1"), "TICKET#C104#swarm:x:w01:1");
        assert_ne!(ticket_pk("a#b", "c"), ticket_pk("a", "b#c"));
    }
}
