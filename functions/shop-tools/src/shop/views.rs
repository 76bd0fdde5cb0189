//! What the shop's tools answer: one result type per tool, serialised as the tool's output (decimals of the shop's currency here, cents inside).

use chrono::{DateTime, FixedOffset, NaiveDate};
use serde::Serialize;

use crate::data::{OrderItem, ShipmentEvent};
use crate::ledger::RefundRecord;
use crate::money::to_decimal;

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
    /// Best first; at most [`MAX_NAME_MATCHES`](super::MAX_NAME_MATCHES) for a name search.
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
    /// Why it is not usable, or (when usable) conditions still to meet: English sentences.
    pub reasons: Vec<String>,
    /// The same as `reasons`, one for one, as codes with their figures, for a reply in another
    /// language than the shop's English.
    pub findings: Vec<CouponFinding>,
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

/// A rule of a coupon the check found unmet (or, for a usable coupon, still to meet): a code
/// (`"code": "expired"`, …) and its figures, amounts in the shop's currency.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum CouponFinding {
    /// No coupon has this code.
    UnknownCode,
    /// The last valid day has passed.
    Expired { valid_until: NaiveDate },
    /// The basket is below the minimum spend, by `short`.
    BelowMinSpend { min_spend: f64, order_total: f64, short: f64 },
    /// No basket was given: it must reach the minimum spend.
    NeedsMinSpend { min_spend: f64 },
    /// The basket's category is not one of the coupon's.
    WrongCategory { categories: Vec<String>, category: String },
    /// No category was given: the basket must be of one of these.
    NeedsCategory { categories: Vec<String> },
    /// For a first order only, and the customer has `orders` orders (cancelled ones not counted).
    FirstOrderOnly { orders: usize },
    /// The customer has used it the `max_uses` times allowed.
    UsedUp { max_uses: u32 },
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
            amount: to_decimal(self.amount_cents),
            currency: self.currency.clone(),
            refunded_total: to_decimal(self.refunded_total_cents),
        }
    }
}
