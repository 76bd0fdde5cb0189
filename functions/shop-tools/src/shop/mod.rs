//! The shop's rules as plain Rust over the data set, one room per job: orders, shipments, products, coupons, refunds and support tickets (in a [`RefundLedger`]: in memory locally, DynamoDB on Lambda; the data set on disk is never edited). Here: the shop itself and the lookups every job shares. Amounts are whole cents inside; the tools' results ([`views`]) speak decimals.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, FixedOffset, NaiveDate};

use crate::data::{Customer, Order, Shipment, ShopData};
use crate::error::{Refusal, ShopError};
use crate::ledger::{InMemoryLedger, LedgerError, OrderRefunds, RefundLedger};
pub use crate::ledger::{RefundRecord, TicketRecord};

mod coupons;
mod orders;
mod products;
mod refunds;
mod shipping;
mod tickets;
pub mod views;

pub use tickets::{MAX_SUBJECT_CHARS, TicketReceipt};
pub use views::{
    CouponCheck, CouponFinding, OrderLine, OrderList, OrderView, ProductMatches, ProductView, RefundPolicyView,
    RefundReceipt, ShipmentSummary, TrackView,
};

/// The demo data set, embedded at build time.
pub const DEMO_SHOP_JSON: &str = include_str!("../../demo-shop.json");

/// Most products a name search returns.
pub const MAX_NAME_MATCHES: usize = 5;
/// Longest accepted idempotency key, in characters.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 200;
/// Most SKUs one `get_product` call may ask for.
pub const MAX_SKUS_PER_CALL: usize = 20;

/// The shop: read-only data plus its refund ledger. Keys are per customer, so one customer's
/// key can never replay another customer's refund.
pub struct Shop {
    data: ShopData,
    ledger: Arc<dyn RefundLedger>,
}

impl std::fmt::Debug for Shop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shop").field("customers", &self.data.customers.len()).finish_non_exhaustive()
    }
}

fn unavailable(e: LedgerError) -> Refusal {
    tracing::error!(error = %e, "refund ledger call failed");
    Refusal::Unavailable("the refund ledger is unavailable right now; nothing was changed, try again".into())
}

/// A user-supplied id shortened for echoing in an error message.
/// The idempotency key a side effect is recorded under, trimmed.
///
/// Errors: [`Refusal::InvalidArguments`] when it is empty or longer than
/// [`MAX_IDEMPOTENCY_KEY_CHARS`] characters.
fn idempotency_key(raw: &str) -> Result<&str, Refusal> {
    let key = raw.trim();
    if key.is_empty() {
        return Err(Refusal::InvalidArguments("idempotency_key is required".into()));
    }
    if key.chars().count() > MAX_IDEMPOTENCY_KEY_CHARS {
        return Err(Refusal::InvalidArguments(format!(
            "idempotency_key is longer than {MAX_IDEMPOTENCY_KEY_CHARS} characters"
        )));
    }
    Ok(key)
}

fn shown(text: &str) -> String {
    const MAX: usize = 40;
    let trimmed = text.trim();
    if trimmed.chars().count() <= MAX {
        trimmed.to_string()
    } else {
        let head: String = trimmed.chars().take(MAX).collect();
        format!("{head}…")
    }
}

fn non_empty(value: Option<&String>) -> Option<&str> {
    value.map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// "a1029", "#A1029" and "order A1029" all name order A1029 (models do not always pass a bare id).
fn normalize_order_id(order_id: &str) -> String {
    let upper = order_id.trim().trim_start_matches('#').to_ascii_uppercase();
    if upper.chars().all(|c| c.is_ascii_alphanumeric()) {
        return upper;
    }
    let looks_like_id = |t: &&str| {
        let mut chars = t.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && t.len() >= 4 && chars.all(|c| c.is_ascii_digit())
    };
    upper.split(|c: char| !c.is_ascii_alphanumeric()).find(looks_like_id).map(str::to_string).unwrap_or(upper)
}

fn stamp(at: &DateTime<FixedOffset>) -> String {
    at.format("%Y-%m-%d %H:%M").to_string()
}

impl Shop {
    /// The embedded demo data set (`demo-shop.json`).
    ///
    /// Errors: [`ShopError::InvalidData`] if the embedded JSON is malformed.
    pub fn demo() -> Result<Shop, ShopError> {
        Shop::from_json(DEMO_SHOP_JSON)
    }

    /// A shop over any data set of the same shape.
    ///
    /// Errors: [`ShopError::InvalidData`] (see [`ShopData::from_json`]).
    pub fn from_json(json: &str) -> Result<Shop, ShopError> {
        Self::from_json_with(json, Arc::new(InMemoryLedger::new()))
    }

    /// The embedded demo data set over `ledger` (DynamoDB on Lambda).
    ///
    /// Errors: [`ShopError::InvalidData`] if the embedded JSON is malformed.
    pub fn demo_with(ledger: Arc<dyn RefundLedger>) -> Result<Shop, ShopError> {
        Self::from_json_with(DEMO_SHOP_JSON, ledger)
    }

    /// A shop over any data set of the same shape, its refunds in `ledger`.
    ///
    /// Errors: [`ShopError::InvalidData`] (see [`ShopData::from_json`]).
    pub fn from_json_with(json: &str, ledger: Arc<dyn RefundLedger>) -> Result<Shop, ShopError> {
        Ok(Shop { data: ShopData::from_json(json)?, ledger })
    }

    /// The shop's "now" (`policy.now`), the clock of every date rule.
    pub fn now(&self) -> DateTime<FixedOffset> {
        self.data.policy.now
    }

    fn today(&self) -> NaiveDate {
        self.data.policy.now.date_naive()
    }

    fn currency(&self) -> &str {
        &self.data.policy.currency
    }

    /// Every refund in the ledger (the in-memory ledger: oldest first).
    ///
    /// Errors: the ledger cannot be read.
    pub async fn refunds(&self) -> Result<Vec<RefundRecord>, LedgerError> {
        self.ledger.all().await
    }

    /// What the ledger holds for `orders`.
    async fn ledger_orders(&self, orders: &[&Order]) -> Result<HashMap<String, OrderRefunds>, Refusal> {
        let ids: Vec<&str> = orders.iter().map(|o| o.order_id.as_str()).collect();
        self.ledger.orders(&ids).await.map_err(unavailable)
    }

    fn customer(&self, customer_id: &str) -> Result<&Customer, Refusal> {
        let id = customer_id.trim();
        if id.is_empty() {
            return Err(Refusal::InvalidArguments("customer_id is required".into()));
        }
        self.data
            .customers
            .iter()
            // Exact: customer ids reach the shop in their one canonical form (upper case), so a
            // lower-case id names nobody rather than someone.
            .find(|c| c.customer_id == id)
            .ok_or_else(|| Refusal::NotFound(format!("customer {} not found", shown(id))))
    }

    /// The customer's order; another customer's order is "not found", exactly like an unknown one.
    fn order_of(&self, customer: &Customer, order_id: &str) -> Result<&Order, Refusal> {
        let id = normalize_order_id(order_id);
        if id.is_empty() {
            return Err(Refusal::InvalidArguments("order_id is required".into()));
        }
        self.data
            .orders
            .iter()
            .find(|o| o.order_id.eq_ignore_ascii_case(&id) && o.customer_id == customer.customer_id)
            .ok_or_else(|| Refusal::NotFound(format!("order {} not found", shown(&id))))
    }

    fn shipment_of(&self, order: &Order) -> Option<&Shipment> {
        self.data.shipments.iter().find(|s| s.order_id.eq_ignore_ascii_case(&order.order_id))
    }

    /// Refunded on the order in cents: before the ledger plus refunds in it.
    fn refunded_cents(ledger: &HashMap<String, OrderRefunds>, order: &Order) -> i64 {
        order.refunded_cents + ledger.get(&order.order_id).map_or(0, |o| o.cents)
    }
}
