//! The demo shop's data set as typed records, parsed and checked once at start-up.

use chrono::{DateTime, FixedOffset, NaiveDate};
use serde::Deserialize;

use crate::error::ShopError;

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
    /// Unit price in the policy currency.
    pub price: f64,
    pub stock: u32,
    pub restock_date: Option<NaiveDate>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Order {
    /// Upper case, e.g. "A1029".
    pub order_id: String,
    pub customer_id: String,
    pub placed_at: DateTime<FixedOffset>,
    /// One of PENDING_PAYMENT, PAID, SHIPPED, DELIVERED, CANCELLED, REFUNDED.
    pub status: String,
    pub items: Vec<OrderItem>,
    pub total: f64,
    pub paid: f64,
    /// Refunded before this process started (refunds made here are kept apart).
    pub refunded: f64,
    pub currency: String,
    pub delivered_at: Option<DateTime<FixedOffset>>,
    pub tracking_no: Option<String>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
pub struct OrderItem {
    pub sku: String,
    pub name: String,
    pub qty: u32,
    pub unit_price: f64,
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

#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
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
    /// "percent" (value is a percentage) or "fixed" (value is an amount).
    pub kind: String,
    pub value: f64,
    pub min_spend: f64,
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
            for amount in [order.total, order.paid, order.refunded] {
                if !amount.is_finite() || amount < 0.0 {
                    return bad(format!("order {} has a negative or non-finite amount", order.order_id));
                }
            }
            if order.refunded > order.paid + 0.005 {
                return bad(format!("order {} refunded more than it was paid", order.order_id));
            }
        }
        let mut skus = std::collections::HashSet::new();
        for product in &self.products {
            if !skus.insert(product.sku.to_ascii_uppercase()) {
                return bad(format!("product {} appears twice", product.sku));
            }
            if !product.price.is_finite() || product.price < 0.0 {
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
            if coupon.kind != "percent" && coupon.kind != "fixed" {
                return bad(format!("coupon {} has unknown kind '{}'", coupon.code, coupon.kind));
            }
        }
        if self.policy.refund_window_days_after_delivery < 0 {
            return bad("policy.refund_window_days_after_delivery is negative".into());
        }
        Ok(())
    }
}
