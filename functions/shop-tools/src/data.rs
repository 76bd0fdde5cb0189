//! The demo shop's data set as typed records, parsed and checked once at start-up.

use chrono::{DateTime, FixedOffset, NaiveDate};
use serde::{Deserialize, Serialize};

use crate::error::ShopError;
use crate::money::decimal;

/// The whole data set (the shape of `demo-shop.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct ShopData {
    pub policy: Policy,
    pub customers: Vec<Customer>,
    pub products: Vec<Product>,
    pub orders: Vec<Order>,
    pub shipments: Vec<Shipment>,
    pub coupons: Vec<Coupon>,
}

/// Shop-wide rules; `now` is the clock every date rule uses (never the wall clock).
#[derive(Debug, Clone, Deserialize)]
pub struct Policy {
    /// Days after `delivered_at` during which a refund is accepted.
    pub refund_window_days_after_delivery: i64,
    pub refund_requires_paid: bool,
    /// Plain-words cap, e.g. "paid minus already refunded".
    pub refund_max: String,
    /// ISO 4217 code of every amount in the data set, e.g. "CNY".
    pub currency: String,
    pub now: DateTime<FixedOffset>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Customer {
    pub customer_id: String,
    pub name: String,
    pub tier: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Product {
    /// Upper case, e.g. "SKU-1016".
    pub sku: String,
    pub name: String,
    pub name_zh: String,
    pub category: String,
    /// Unit price in cents of the policy currency (`price` in the data set, a decimal).
    #[serde(rename = "price", with = "decimal")]
    pub price_cents: i64,
    pub stock: u32,
    pub restock_date: Option<NaiveDate>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Order {
    /// Upper case, e.g. "A1029".
    pub order_id: String,
    pub customer_id: String,
    pub placed_at: DateTime<FixedOffset>,
    pub status: OrderStatus,
    pub items: Vec<OrderItem>,
    /// Cents (`total` in the data set, a decimal), like `paid` and `refunded`.
    #[serde(rename = "total", with = "decimal")]
    pub total_cents: i64,
    #[serde(rename = "paid", with = "decimal")]
    pub paid_cents: i64,
    /// Refunded before this process started (refunds made here are kept apart).
    #[serde(rename = "refunded", with = "decimal")]
    pub refunded_cents: i64,
    pub currency: String,
    pub delivered_at: Option<DateTime<FixedOffset>>,
    pub tracking_no: Option<String>,
}

/// One line of an order; shown as it is in `get_order` (its price as a decimal there too).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct OrderItem {
    pub sku: String,
    pub name: String,
    pub qty: u32,
    #[serde(rename = "unit_price", with = "decimal")]
    pub unit_price_cents: i64,
}

/// Where an order stands in the data set (a refund made here can make a delivered one `REFUNDED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    PendingPayment,
    Paid,
    Shipped,
    Delivered,
    Cancelled,
    Refunded,
}

impl OrderStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PendingPayment => "PENDING_PAYMENT",
            Self::Paid => "PAID",
            Self::Shipped => "SHIPPED",
            Self::Delivered => "DELIVERED",
            Self::Cancelled => "CANCELLED",
            Self::Refunded => "REFUNDED",
        }
    }
}

impl std::fmt::Display for OrderStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Shipment {
    pub tracking_no: String,
    pub order_id: String,
    pub carrier: String,
    /// Oldest first.
    pub events: Vec<ShipmentEvent>,
    /// Promised delivery day; `None` once delivered.
    pub eta: Option<NaiveDate>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ShipmentEvent {
    pub at: DateTime<FixedOffset>,
    pub location: String,
    /// Free text such as "in transit", "held at customs", "delivered".
    pub event: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Coupon {
    /// Upper case, e.g. "TEA5".
    pub code: String,
    pub kind: CouponKind,
    /// A percentage (`percent`) or an amount of the policy currency (`fixed`), as the data set gives it.
    pub value: f64,
    /// Cents (`min_spend` in the data set, a decimal).
    #[serde(rename = "min_spend", with = "decimal")]
    pub min_spend_cents: i64,
    /// Last day the coupon can be used (inclusive, in the shop's time zone).
    pub valid_until: NaiveDate,
    /// Empty: every category.
    pub categories: Vec<String>,
    #[serde(default)]
    pub first_order_only: bool,
    pub max_uses_per_customer: Option<u32>,
    #[serde(default)]
    pub used_by: Vec<String>,
}

/// How a coupon's `value` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CouponKind {
    /// `value` is a percentage of the basket.
    Percent,
    /// `value` is an amount off, at most the basket.
    Fixed,
}

impl CouponKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Percent => "percent",
            Self::Fixed => "fixed",
        }
    }
}

impl Coupon {
    /// The discount on a basket of `total` cents.
    pub fn discount_cents(&self, total: i64) -> i64 {
        match self.kind {
            CouponKind::Percent => (total as f64 * self.value / 100.0).round() as i64,
            CouponKind::Fixed => crate::money::to_cents(self.value).min(total),
        }
    }
}

impl ShopData {
    /// Parses and checks a data set.
    ///
    /// Errors: [`ShopError::InvalidData`] when the JSON does not have the shape above, an
    /// amount is negative or not finite, an id is duplicated, or a shipment names an
    /// unknown order.
    pub fn from_json(json: &str) -> Result<Self, ShopError> {
        let data: ShopData =
            serde_json::from_str(json).map_err(|e| ShopError::InvalidData(format!("demo shop JSON: {e}")))?;
        data.check()?;
        Ok(data)
    }

    fn check(&self) -> Result<(), ShopError> {
        let bad = |what: String| Err(ShopError::InvalidData(what));
        let mut seen = std::collections::HashSet::new();
        for order in &self.orders {
            if !seen.insert(order.order_id.to_ascii_uppercase()) {
                return bad(format!("order {} appears twice", order.order_id));
            }
            if [order.total_cents, order.paid_cents, order.refunded_cents].iter().any(|c| *c < 0) {
                return bad(format!("order {} has a negative or non-finite amount", order.order_id));
            }
            if order.refunded_cents > order.paid_cents {
                return bad(format!("order {} refunded more than it was paid", order.order_id));
            }
        }
        let mut skus = std::collections::HashSet::new();
        for product in &self.products {
            if !skus.insert(product.sku.to_ascii_uppercase()) {
                return bad(format!("product {} appears twice", product.sku));
            }
            if product.price_cents < 0 {
                return bad(format!("product {} has a negative or non-finite price", product.sku));
            }
        }
        for shipment in &self.shipments {
            if !seen.contains(&shipment.order_id.to_ascii_uppercase()) {
                return bad(format!("shipment {} names unknown order {}", shipment.tracking_no, shipment.order_id));
            }
        }
        let mut codes = std::collections::HashSet::new();
        for coupon in &self.coupons {
            if !codes.insert(coupon.code.to_ascii_uppercase()) {
                return bad(format!("coupon {} appears twice", coupon.code));
            }
        }
        if self.policy.refund_window_days_after_delivery < 0 {
            return bad("policy.refund_window_days_after_delivery is negative".into());
        }
        Ok(())
    }
}
