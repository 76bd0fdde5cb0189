//! The shop's rules as plain Rust: order, shipment, product, coupon and refund logic over
//! the data set, with refunds in a [`RefundLedger`] (in memory locally, DynamoDB on Lambda; the
//! data set on disk is never edited).

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, FixedOffset, NaiveDate};
use serde::Serialize;

use crate::args::{CheckCouponArgs, RefundArgs};
use crate::data::{Coupon, Customer, Order, OrderItem, Product, Shipment, ShipmentEvent, ShopData};
use crate::error::{Refusal, ShopError};
pub use crate::ledger::RefundRecord;
use crate::ledger::{InMemoryLedger, LedgerError, LedgerWrite, OrderRefunds, RefundLedger};
use crate::matching;

/// The demo data set, embedded at build time.
pub const DEMO_SHOP_JSON: &str = include_str!("../demo-shop.json");

/// Most products a name search returns.
pub const MAX_NAME_MATCHES: usize = 5;
/// Longest accepted idempotency key, in characters.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 200;
/// Most SKUs one `get_product` call may ask for.
pub const MAX_SKUS_PER_CALL: usize = 20;
/// Rounds of [`Shop::refund`] while other refunds of the same order keep landing first.
const REFUND_ROUNDS: usize = 8;

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

/// `get_order` result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrderView {
    pub order_id: String,
    /// PENDING_PAYMENT, PAID, SHIPPED, DELIVERED, CANCELLED or REFUNDED.
    pub status: String,
    pub placed_at: DateTime<FixedOffset>,
    pub items: Vec<OrderItem>,
    pub total: f64,
    pub paid: f64,
    /// Refunded so far, including refunds made through this server.
    pub refunded: f64,
    /// Money still refundable (paid minus refunded); the refund policy decides whether it can be.
    pub refundable: f64,
    pub currency: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<DateTime<FixedOffset>>,
    /// Last moment a refund is accepted (delivery + the refund window), for delivered orders.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refund_window_ends: Option<DateTime<FixedOffset>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracking_no: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shipment: Option<ShipmentSummary>,
}

/// The shipment part of [`OrderView`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShipmentSummary {
    pub carrier: String,
    /// See [`TrackView::status`].
    pub status: String,
    pub latest_event: Option<ShipmentEvent>,
    pub eta: Option<NaiveDate>,
    pub eta_passed: bool,
}

/// `list_customer_orders` result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrderList {
    pub customer_id: String,
    /// Newest first.
    pub orders: Vec<OrderLine>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrderLine {
    pub order_id: String,
    pub placed_at: DateTime<FixedOffset>,
    pub status: String,
    pub total: f64,
    pub currency: String,
}

/// `track_shipment` result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrackView {
    pub order_id: String,
    pub tracking_no: String,
    pub carrier: String,
    /// From the latest event: PICKED_UP, IN_TRANSIT, OUT_FOR_DELIVERY, DELAYED,
    /// HELD_AT_CUSTOMS, DELIVERED (AWAITING_PICKUP when there is no event yet).
    pub status: String,
    pub latest_event: Option<ShipmentEvent>,
    /// Oldest first.
    pub events: Vec<ShipmentEvent>,
    /// Estimated delivery day as the carrier gave it; never re-estimated here.
    pub eta: Option<NaiveDate>,
    /// True when the ETA day is over and the parcel is not delivered.
    pub eta_passed: bool,
    /// One or two plain sentences for the customer.
    pub note: String,
}

/// `get_product` result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProductMatches {
    /// Best first; at most [`MAX_NAME_MATCHES`] for a name search.
    pub matches: Vec<ProductView>,
    /// SKUs asked for that do not exist (only for a `skus` lookup).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_found: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProductView {
    pub sku: String,
    pub name: String,
    pub name_zh: String,
    pub category: String,
    pub price: f64,
    pub currency: String,
    pub stock: u32,
    pub in_stock: bool,
    /// Expected restock day, for products out of stock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restock_date: Option<NaiveDate>,
}

/// `check_coupon` result. For an unknown code only `code`, `exists`, `usable`, `reasons`
/// and `note` are present.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CouponCheck {
    /// Upper case.
    pub code: String,
    pub exists: bool,
    /// False when something known rules the coupon out; true when nothing does (then
    /// `reasons` lists the conditions the basket must still meet, if any).
    pub usable: bool,
    /// Why it is not usable, or (when usable) conditions still to meet.
    pub reasons: Vec<String>,
    pub note: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_spend: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<NaiveDate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub categories: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_order_only: Option<bool>,
    /// Discount on `order_total`, when usable and the basket is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discount: Option<f64>,
    /// The basket the check used (given, or price × quantity of the product).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_total: Option<f64>,
    /// The product the check used, when one was named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product: Option<ProductView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

/// `get_refund_policy` result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefundPolicyView {
    pub refund_window_days_after_delivery: i64,
    pub refund_requires_paid: bool,
    pub refund_max: String,
    pub currency: String,
    pub text: String,
}

/// `refund` result (also returned again for a repeated idempotency key).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefundReceipt {
    /// Always true (a refusal is a [`Refusal`], not a receipt).
    pub refunded: bool,
    pub refund_id: String,
    pub order_id: String,
    pub amount: f64,
    pub currency: String,
    /// Total refunded on the order after this refund.
    pub refunded_total: f64,
}

impl RefundRecord {
    pub(crate) fn receipt(&self) -> RefundReceipt {
        RefundReceipt {
            refunded: true,
            refund_id: self.refund_id.clone(),
            order_id: self.order_id.clone(),
            amount: self.amount,
            currency: self.currency.clone(),
            refunded_total: self.refunded_total,
        }
    }
}

/// Amounts are compared in integer cents so that 0.1 + 0.2 style sums never decide a refund.
fn cents(amount: f64) -> i64 {
    crate::ledger::cents(amount)
}

fn from_cents(cents: i64) -> f64 {
    cents as f64 / 100.0
}

fn money(cents: i64, currency: &str) -> String {
    format!("{:.2} {currency}", from_cents(cents))
}

/// A user-supplied id shortened for echoing in an error message.
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

/// SKUs written inside free text ("is there stock for SKU-1013, sku 1014?"), in order.
fn skus_in_text(text: &str) -> Vec<String> {
    let upper = text.to_ascii_uppercase();
    let mut found = Vec::new();
    let mut rest = upper.as_str();
    while let Some(at) = rest.find("SKU") {
        let after = rest[at + 3..].trim_start_matches(['-', '_', ' ']);
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() {
            let sku = format!("SKU-{digits}");
            if !found.contains(&sku) {
                found.push(sku);
            }
        }
        rest = &rest[at + 3..];
    }
    found
}

fn shipment_status(latest: Option<&ShipmentEvent>) -> &'static str {
    let Some(event) = latest else { return "AWAITING_PICKUP" };
    let e = event.event.to_ascii_lowercase();
    if e.starts_with("delivered") {
        "DELIVERED"
    } else if e.contains("customs") {
        "HELD_AT_CUSTOMS"
    } else if e.starts_with("delayed") {
        "DELAYED"
    } else if e.contains("out for delivery") {
        "OUT_FOR_DELIVERY"
    } else if e.contains("picked up") {
        "PICKED_UP"
    } else {
        "IN_TRANSIT"
    }
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
        cents(order.refunded) + ledger.get(&order.order_id).map_or(0, |o| o.cents)
    }

    fn effective_status(order: &Order, refunded: i64) -> String {
        let paid = cents(order.paid);
        if order.status == "DELIVERED" && paid > 0 && refunded >= paid {
            "REFUNDED".to_string()
        } else {
            order.status.clone()
        }
    }

    fn eta_passed(&self, order: &Order, shipment: &Shipment) -> bool {
        let delivered = order.status == "DELIVERED"
            || shipment_status(shipment.events.last()) == "DELIVERED"
            || order.delivered_at.is_some();
        !delivered && shipment.eta.is_some_and(|eta| eta < self.today())
    }

    /// One order of the customer with its items, money and shipment summary.
    ///
    /// Errors: [`Refusal::NotFound`] "order A1005 not found" for an unknown order or one of
    /// another customer; [`Refusal::InvalidArguments`] for an empty id.
    pub async fn get_order(&self, customer_id: &str, order_id: &str) -> Result<OrderView, Refusal> {
        let customer = self.customer(customer_id)?;
        let order = self.order_of(customer, order_id)?;
        let refunded = Self::refunded_cents(&self.ledger_orders(&[order]).await?, order);
        let shipment = self.shipment_of(order).map(|s| ShipmentSummary {
            carrier: s.carrier.clone(),
            status: shipment_status(s.events.last()).to_string(),
            latest_event: s.events.last().cloned(),
            eta: s.eta,
            eta_passed: self.eta_passed(order, s),
        });
        let window = Duration::days(self.data.policy.refund_window_days_after_delivery);
        Ok(OrderView {
            order_id: order.order_id.clone(),
            status: Self::effective_status(order, refunded),
            placed_at: order.placed_at,
            items: order.items.clone(),
            total: order.total,
            paid: order.paid,
            refunded: from_cents(refunded),
            refundable: from_cents((cents(order.paid) - refunded).max(0)),
            currency: order.currency.clone(),
            delivered_at: order.delivered_at,
            refund_window_ends: order.delivered_at.map(|d| d + window),
            tracking_no: order.tracking_no.clone(),
            shipment,
        })
    }

    /// The customer's orders, newest first.
    ///
    /// Errors: [`Refusal::NotFound`] for an unknown customer id.
    pub async fn list_customer_orders(&self, customer_id: &str) -> Result<OrderList, Refusal> {
        let customer = self.customer(customer_id)?;
        let own: Vec<&Order> = self.data.orders.iter().filter(|o| o.customer_id == customer.customer_id).collect();
        let ledger = self.ledger_orders(&own).await?;
        let mut orders: Vec<OrderLine> = own
            .iter()
            .map(|o| OrderLine {
                order_id: o.order_id.clone(),
                placed_at: o.placed_at,
                status: Self::effective_status(o, Self::refunded_cents(&ledger, o)),
                total: o.total,
                currency: o.currency.clone(),
            })
            .collect();
        orders.sort_by(|a, b| b.placed_at.cmp(&a.placed_at).then_with(|| b.order_id.cmp(&a.order_id)));
        Ok(OrderList { customer_id: customer.customer_id.clone(), orders })
    }

    /// Where the customer's parcel is, by order id or tracking number (one of the two).
    ///
    /// Errors: [`Refusal::NotFound`] for an unknown (or another customer's) order or tracking
    /// number, and "order A1029 has no shipment yet (status PAID)";
    /// [`Refusal::InvalidArguments`] when neither is given or the two disagree.
    pub async fn track_shipment(
        &self,
        customer_id: &str,
        order_id: Option<&str>,
        tracking_no: Option<&str>,
    ) -> Result<TrackView, Refusal> {
        let customer = self.customer(customer_id)?;
        let order_id = order_id.map(str::trim).filter(|s| !s.is_empty());
        let tracking_no = tracking_no.map(str::trim).filter(|s| !s.is_empty());
        let (order, shipment) = match (order_id, tracking_no) {
            (None, None) => {
                return Err(Refusal::InvalidArguments("give an order_id or a tracking_no".into()));
            }
            (Some(order_id), tracking) => {
                let order = self.order_of(customer, order_id)?;
                let Some(shipment) = self.shipment_of(order) else {
                    let refunded = Self::refunded_cents(&self.ledger_orders(&[order]).await?, order);
                    return Err(Refusal::NotFound(format!(
                        "order {} has no shipment yet (status {})",
                        order.order_id,
                        Self::effective_status(order, refunded)
                    )));
                };
                if let Some(tracking) = tracking
                    && !shipment.tracking_no.eq_ignore_ascii_case(tracking)
                {
                    return Err(Refusal::InvalidArguments(format!(
                        "tracking number {} does not belong to order {}",
                        shown(tracking),
                        order.order_id
                    )));
                }
                (order, shipment)
            }
            (None, Some(tracking)) => {
                let not_found = || Refusal::NotFound(format!("shipment {} not found", shown(tracking)));
                let shipment = self
                    .data
                    .shipments
                    .iter()
                    .find(|s| s.tracking_no.eq_ignore_ascii_case(tracking))
                    .ok_or_else(not_found)?;
                let order = self.order_of(customer, &shipment.order_id).map_err(|_| not_found())?;
                (order, shipment)
            }
        };
        let latest = shipment.events.last();
        let status = shipment_status(latest);
        let eta_passed = self.eta_passed(order, shipment);
        Ok(TrackView {
            order_id: order.order_id.clone(),
            tracking_no: shipment.tracking_no.clone(),
            carrier: shipment.carrier.clone(),
            status: status.to_string(),
            latest_event: latest.cloned(),
            events: shipment.events.clone(),
            eta: shipment.eta,
            eta_passed,
            note: Self::tracking_note(shipment, status, eta_passed),
        })
    }

    fn tracking_note(shipment: &Shipment, status: &str, eta_passed: bool) -> String {
        let Some(latest) = shipment.events.last() else {
            return format!("{} has not picked the parcel up yet.", shipment.carrier);
        };
        if status == "DELIVERED" {
            return format!("Delivered on {} in {}.", stamp(&latest.at), latest.location);
        }
        let mut note = match status {
            "HELD_AT_CUSTOMS" => {
                format!("The parcel is held at customs in {} since {}.", latest.location, stamp(&latest.at))
            }
            "DELAYED" => format!(
                "{} reports a delay ({}) in {} on {}.",
                shipment.carrier,
                latest.event.trim_start_matches("delayed").trim_start_matches(':').trim(),
                latest.location,
                stamp(&latest.at)
            ),
            _ => format!("Latest event: {} in {} on {}.", latest.event, latest.location, stamp(&latest.at)),
        };
        match shipment.eta {
            Some(eta) if eta_passed => note.push_str(&format!(
                " The parcel is late: the estimated delivery date {eta} has passed and the carrier has not given a new date."
            )),
            Some(eta) => note.push_str(&format!(" Estimated delivery: {eta}.")),
            None => note.push_str(" The carrier has not given an estimated delivery date."),
        }
        note
    }

    fn product_view(&self, product: &Product) -> ProductView {
        ProductView {
            sku: product.sku.clone(),
            name: product.name.clone(),
            name_zh: product.name_zh.clone(),
            category: product.category.clone(),
            price: product.price,
            currency: self.currency().to_string(),
            stock: product.stock,
            in_stock: product.stock > 0,
            restock_date: if product.stock > 0 { None } else { product.restock_date },
        }
    }

    /// The product with this SKU ("SKU-1016", "sku-1016" or just "1016").
    pub fn product_by_sku(&self, sku: &str) -> Option<&Product> {
        let wanted = sku.trim().to_ascii_uppercase();
        let find = |s: &str| self.data.products.iter().find(|p| p.sku.eq_ignore_ascii_case(s));
        find(&wanted).or_else(|| {
            let digits = wanted.trim_start_matches("SKU").trim_start_matches(['-', ' ', '_']);
            (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()))
                .then(|| find(&format!("SKU-{digits}")))
                .flatten()
        })
    }

    /// Products whose English or Chinese name shares words with `name`, best first, at most
    /// [`MAX_NAME_MATCHES`]; candidates scoring under half of the best are dropped.
    pub fn search_products(&self, name: &str) -> Vec<&Product> {
        let mut scored: Vec<(matching::Score, &Product)> = self
            .data
            .products
            .iter()
            .filter_map(|p| matching::score(name, &[&p.name, &p.name_zh]).map(|s| (s, p)))
            .collect();
        let best = scored.iter().map(|(s, _)| s.matched).max().unwrap_or(0);
        scored.retain(|(s, _)| s.matched * 2 >= best);
        scored.sort_by(|(a, pa), (b, pb)| {
            b.matched.cmp(&a.matched).then(a.unmatched_own.cmp(&b.unmatched_own)).then_with(|| pa.sku.cmp(&pb.sku))
        });
        scored.into_iter().take(MAX_NAME_MATCHES).map(|(_, p)| p).collect()
    }

    /// Product details with price and stock, by `sku`, `skus` or fuzzy `name` (first given wins
    /// in that order).
    ///
    /// Errors: [`Refusal::NotFound`] "no product matches '...'" / "no product with SKU '...'";
    /// [`Refusal::InvalidArguments`] when nothing is given or more than [`MAX_SKUS_PER_CALL`] SKUs.
    pub fn get_product(
        &self,
        sku: Option<&str>,
        skus: &[String],
        name: Option<&str>,
    ) -> Result<ProductMatches, Refusal> {
        let sku = sku.map(str::trim).filter(|s| !s.is_empty());
        let name = name.map(str::trim).filter(|s| !s.is_empty());
        if let Some(sku) = sku {
            let product = self
                .product_by_sku(sku)
                .ok_or_else(|| Refusal::NotFound(format!("no product with SKU '{}'", shown(sku))))?;
            return Ok(ProductMatches { matches: vec![self.product_view(product)], not_found: vec![] });
        }
        let skus: Vec<&str> = skus.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
        if !skus.is_empty() {
            if skus.len() > MAX_SKUS_PER_CALL {
                return Err(Refusal::InvalidArguments(format!(
                    "at most {MAX_SKUS_PER_CALL} SKUs per call (got {})",
                    skus.len()
                )));
            }
            let mut matches = Vec::new();
            let mut not_found = Vec::new();
            for sku in skus {
                match self.product_by_sku(sku) {
                    Some(p) => matches.push(self.product_view(p)),
                    None => not_found.push(shown(sku)),
                }
            }
            if matches.is_empty() {
                return Err(Refusal::NotFound(format!("no product with SKU {}", not_found.join(", "))));
            }
            return Ok(ProductMatches { matches, not_found });
        }
        let Some(name) = name else {
            return Err(Refusal::InvalidArguments("give a sku, skus or a product name".into()));
        };
        // A "name" that spells out SKUs is a SKU lookup.
        let named_skus = skus_in_text(name);
        if !named_skus.is_empty() {
            return self.get_product(None, &named_skus, None);
        }
        let found = self.search_products(name);
        if found.is_empty() {
            return Err(Refusal::NotFound(format!("no product matches '{}'", shown(name))));
        }
        Ok(ProductMatches { matches: found.into_iter().map(|p| self.product_view(p)).collect(), not_found: vec![] })
    }

    fn coupon(&self, code: &str) -> Option<&Coupon> {
        self.data.coupons.iter().find(|c| c.code.eq_ignore_ascii_case(code))
    }

    /// Whether a coupon exists, is valid now, and fits the basket (if one is described).
    ///
    /// Errors: [`Refusal::InvalidArguments`] for an empty code, quantity 0 or a negative
    /// total; [`Refusal::NotFound`] when a named product does not exist. An unknown code is
    /// not an error: it answers `exists: false`.
    pub fn check_coupon(&self, query: &CheckCouponArgs) -> Result<CouponCheck, Refusal> {
        let customer = self.customer(&query.customer_id)?;
        let code = query.code.trim().to_ascii_uppercase();
        if code.is_empty() {
            return Err(Refusal::InvalidArguments("code is required".into()));
        }
        let quantity = query.quantity.unwrap_or(1);
        if quantity == 0 {
            return Err(Refusal::InvalidArguments("quantity must be at least 1".into()));
        }
        if let Some(total) = query.order_total
            && (!total.is_finite() || total < 0.0)
        {
            return Err(Refusal::InvalidArguments("order_total must be a non-negative amount".into()));
        }
        let product = if let Some(sku) = non_empty(query.sku.as_ref()) {
            Some(
                self.product_by_sku(sku)
                    .ok_or_else(|| Refusal::NotFound(format!("no product with SKU '{}'", shown(sku))))?,
            )
        } else if let Some(name) = non_empty(query.product_name.as_ref()) {
            Some(
                self.search_products(name)
                    .first()
                    .copied()
                    .ok_or_else(|| Refusal::NotFound(format!("no product matches '{}'", shown(name))))?,
            )
        } else {
            None
        };
        let currency = self.currency().to_string();
        let basket: Option<i64> =
            query.order_total.map(cents).or(product.map(|p| cents(p.price) * i64::from(quantity)));
        let category: Option<String> = non_empty(query.category.as_ref())
            .map(str::to_lowercase)
            .or_else(|| product.map(|p| p.category.to_lowercase()));

        let Some(coupon) = self.coupon(&code) else {
            return Ok(CouponCheck {
                reasons: vec![format!("no coupon with code {} exists", shown(&code))],
                note: format!("{} is not a valid coupon code.", shown(&code)),
                code,
                exists: false,
                usable: false,
                kind: None,
                value: None,
                min_spend: None,
                valid_until: None,
                categories: None,
                first_order_only: None,
                discount: None,
                order_total: basket.map(from_cents),
                product: product.map(|p| self.product_view(p)),
                currency: Some(currency),
            });
        };

        let mut failures = Vec::new();
        let mut pending = Vec::new();
        if coupon.valid_until < self.today() {
            failures.push(format!("{code} expired on {}", coupon.valid_until));
        }
        let min_spend = cents(coupon.min_spend);
        match basket {
            Some(total) if total < min_spend => failures.push(format!(
                "the minimum spend for {code} is {}; this basket is {} ({} short)",
                money(min_spend, &currency),
                money(total, &currency),
                money(min_spend - total, &currency)
            )),
            None if min_spend > 0 => {
                pending.push(format!("needs a basket of at least {}", money(min_spend, &currency)))
            }
            _ => {}
        }
        if !coupon.categories.is_empty() {
            let list = coupon.categories.join(", ");
            match &category {
                Some(c) if !coupon.categories.iter().any(|k| k.eq_ignore_ascii_case(c)) => {
                    failures.push(format!("{code} applies only to {list} products, not {c}"));
                }
                None => pending.push(format!("applies only to {list} products")),
                _ => {}
            }
        }
        if coupon.first_order_only {
            let previous = self
                .data
                .orders
                .iter()
                .filter(|o| o.customer_id == customer.customer_id && o.status != "CANCELLED")
                .count();
            if previous > 0 {
                failures.push(format!(
                    "{code} is for a customer's first order only, and this customer already has {previous} order(s)"
                ));
            }
        }
        if let Some(max) = coupon.max_uses_per_customer {
            let used = coupon.used_by.iter().filter(|c| c.eq_ignore_ascii_case(&customer.customer_id)).count();
            if used >= max as usize {
                failures.push(format!(
                    "{code} can be used {max} time(s) per customer and this customer has already used it"
                ));
            }
        }

        let usable = failures.is_empty();
        let discount = basket.filter(|_| usable).map(|total| match coupon.kind.as_str() {
            "percent" => (total as f64 * coupon.value / 100.0).round() as i64,
            _ => cents(coupon.value).min(total),
        });
        let note = if !usable {
            format!("{code} cannot be used: {}.", failures.join("; "))
        } else if let (Some(d), Some(total)) = (discount, basket) {
            format!(
                "{code} can be used: it takes {} off {} (valid until {}).",
                money(d, &currency),
                money(total, &currency),
                coupon.valid_until
            )
        } else if pending.is_empty() {
            format!("{code} is valid until {} and has no further conditions.", coupon.valid_until)
        } else {
            format!(
                "{code} is valid until {}; whether it applies depends on the basket: it {}.",
                coupon.valid_until,
                pending.join(" and ")
            )
        };
        Ok(CouponCheck {
            code,
            exists: true,
            usable,
            reasons: if usable { pending } else { failures },
            note,
            kind: Some(coupon.kind.clone()),
            value: Some(coupon.value),
            min_spend: Some(coupon.min_spend),
            valid_until: Some(coupon.valid_until),
            categories: Some(coupon.categories.clone()),
            first_order_only: Some(coupon.first_order_only),
            discount: discount.map(from_cents),
            order_total: basket.map(from_cents),
            product: product.map(|p| self.product_view(p)),
            currency: Some(currency),
        })
    }

    /// The refund policy in numbers and one plain sentence.
    pub fn refund_policy(&self) -> RefundPolicyView {
        let p = &self.data.policy;
        let paid = if p.refund_requires_paid { " for paid orders" } else { "" };
        RefundPolicyView {
            refund_window_days_after_delivery: p.refund_window_days_after_delivery,
            refund_requires_paid: p.refund_requires_paid,
            refund_max: p.refund_max.clone(),
            currency: p.currency.clone(),
            text: format!(
                "Refunds are accepted within {} days after delivery{paid}, up to the amount paid minus anything \
                 already refunded ({}). An order that has not been delivered yet cannot be refunded: the refund \
                 window starts at delivery.",
                p.refund_window_days_after_delivery, p.currency
            ),
        }
    }

    /// Refunds (part of) a delivered, paid order within the refund window.
    ///
    /// Idempotent by `(customer_id, idempotency_key)`: a repeated key returns the first
    /// receipt and moves no money; the same key for another order or amount is refused.
    /// The checks are made against the ledger's totals of the order and the refund is recorded
    /// conditional on those totals and on the key being new (one conditional write on
    /// DynamoDB), so concurrent calls — on any instance — cannot refund the same money twice.
    /// A refusal records nothing.
    ///
    /// Errors: [`Refusal::NotFound`] (order), [`Refusal::InvalidArguments`] (key, amount),
    /// [`Refusal::Refused`] with the policy reason, e.g. "order A1032 is SHIPPED, not
    /// delivered: the refund window starts at delivery"; [`Refusal::Unavailable`] when the
    /// ledger cannot be reached (nothing recorded).
    pub async fn refund(&self, request: &RefundArgs) -> Result<RefundReceipt, Refusal> {
        let customer = self.customer(&request.customer_id)?;
        let key = request.idempotency_key.trim();
        if key.is_empty() {
            return Err(Refusal::InvalidArguments("idempotency_key is required".into()));
        }
        if key.chars().count() > MAX_IDEMPOTENCY_KEY_CHARS {
            return Err(Refusal::InvalidArguments(format!(
                "idempotency_key is longer than {MAX_IDEMPOTENCY_KEY_CHARS} characters"
            )));
        }
        let wanted = match request.amount {
            Some(a) if !a.is_finite() || cents(a) <= 0 => {
                return Err(Refusal::InvalidArguments(format!("the refund amount must be greater than 0 (got {a})")));
            }
            Some(a) => Some(cents(a)),
            None => None,
        };
        let order = self.order_of(customer, &request.order_id)?;
        for _ in 0..REFUND_ROUNDS {
            if let Some(first) = self.ledger.by_key(&customer.customer_id, key).await.map_err(unavailable)? {
                return Self::replay(&first, order, key, wanted);
            }
            let before = self.ledger_orders(&[order]).await?.get(&order.order_id).copied().unwrap_or_default();
            let record = self.new_refund(customer, order, request, key, wanted, before)?;
            match self.ledger.record(&record, before).await.map_err(unavailable)? {
                LedgerWrite::Recorded => {
                    tracing::info!(refund_id = %record.refund_id, order_id = %record.order_id, amount = record.amount, "refund recorded");
                    return Ok(record.receipt());
                }
                LedgerWrite::KeyTaken(first) => return Self::replay(&first, order, key, wanted),
                // Another refund of this order landed first: check again against the new totals.
                LedgerWrite::OrderChanged => continue,
            }
        }
        Err(Refusal::Unavailable(format!(
            "order {} is being refunded by other requests right now; nothing was changed, try again",
            order.order_id
        )))
    }

    /// The answer to a repeated key: the first receipt, unless it names another order or amount.
    fn replay(first: &RefundRecord, order: &Order, key: &str, wanted: Option<i64>) -> Result<RefundReceipt, Refusal> {
        if first.order_id != order.order_id {
            return Err(Refusal::Refused(format!(
                "idempotency_key '{}' was already used for a refund of order {}; use a new key for a new refund",
                shown(key),
                first.order_id
            )));
        }
        if wanted.is_some_and(|w| w != cents(first.amount)) {
            return Err(Refusal::Refused(format!(
                "idempotency_key '{}' was already used for a refund of {} on order {}; use a new key for a different amount",
                shown(key),
                money(cents(first.amount), &first.currency),
                first.order_id
            )));
        }
        tracing::info!(refund_id = %first.refund_id, order_id = %first.order_id, "refund replayed for a repeated idempotency key");
        Ok(first.receipt())
    }

    /// The policy checks against `before` (the ledger's totals of the order), and the refund they allow.
    fn new_refund(
        &self,
        customer: &Customer,
        order: &Order,
        request: &RefundArgs,
        key: &str,
        wanted: Option<i64>,
        before: OrderRefunds,
    ) -> Result<RefundRecord, Refusal> {
        let id = &order.order_id;
        let currency = order.currency.as_str();
        let paid = cents(order.paid);
        let refunded = cents(order.refunded) + before.cents;
        let remaining = paid - refunded;
        if self.data.policy.refund_requires_paid && paid <= 0 {
            return Err(Refusal::Refused(format!(
                "order {id} is {} and nothing has been paid, so there is nothing to refund",
                order.status
            )));
        }
        if remaining <= 0 {
            return Err(Refusal::Refused(format!(
                "order {id} has nothing left to refund: {} paid, {} already refunded",
                money(paid, currency),
                money(refunded, currency)
            )));
        }
        if order.status != "DELIVERED" {
            return Err(Refusal::Refused(format!(
                "order {id} is {}, not delivered: the refund window starts at delivery",
                order.status
            )));
        }
        let Some(delivered_at) = order.delivered_at else {
            return Err(Refusal::Refused(format!(
                "order {id} has no delivery time on record, so the refund window is unknown"
            )));
        };
        let days = self.data.policy.refund_window_days_after_delivery;
        let window_end = delivered_at + Duration::days(days);
        if self.now() > window_end {
            return Err(Refusal::Refused(format!(
                "order {id} was delivered on {}: the {days}-day refund window closed on {}",
                stamp(&delivered_at),
                stamp(&window_end)
            )));
        }
        let amount = wanted.unwrap_or(remaining);
        if amount > remaining {
            return Err(Refusal::Refused(format!(
                "a refund of {} exceeds what is refundable on order {id}: {} ({} paid minus {} already refunded)",
                money(amount, currency),
                money(remaining, currency),
                money(paid, currency),
                money(refunded, currency)
            )));
        }
        Ok(RefundRecord {
            refund_id: format!("RF-{id}-{}", before.count + 1),
            customer_id: customer.customer_id.clone(),
            order_id: id.clone(),
            amount: from_cents(amount),
            currency: currency.to_string(),
            refunded_total: from_cents(refunded + amount),
            reason: request.reason.as_ref().map(|r| r.trim().to_string()).filter(|r| !r.is_empty()),
            idempotency_key: key.to_string(),
        })
    }
}
