//! Tool arguments: one struct per tool; doc comments become the JSON Schema the model sees.

use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `get_order`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct GetOrderArgs {
    /// The customer asking: filled by the tool gateway and hidden from the model; the shop acts for the
    /// gateway's `x-swarm-customer-id` header and never for this value.
    #[serde(default)]
    pub customer_id: String,
    /// Order id, e.g. "A1029" (case-insensitive).
    pub order_id: String,
}

/// Arguments of `list_customer_orders`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct ListOrdersArgs {
    /// The customer asking: filled by the tool gateway and hidden from the model; the shop acts for the
    /// gateway's `x-swarm-customer-id` header and never for this value.
    #[serde(default)]
    pub customer_id: String,
}

/// Arguments of `track_shipment`: give `order_id` or `tracking_no`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct TrackShipmentArgs {
    /// The customer asking: filled by the tool gateway and hidden from the model; the shop acts for the
    /// gateway's `x-swarm-customer-id` header and never for this value.
    #[serde(default)]
    pub customer_id: String,
    /// Order id whose parcel to track, e.g. "A1031".
    #[serde(default)]
    pub order_id: Option<String>,
    /// Carrier tracking number, e.g. "SF250638245935" (alternative to order_id).
    #[serde(default)]
    pub tracking_no: Option<String>,
}

/// Arguments of `get_product`: give `sku`, `skus` or `name`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct GetProductArgs {
    /// Exact SKU, e.g. "SKU-1016" (case-insensitive).
    #[serde(default)]
    pub sku: Option<String>,
    /// Several SKUs at once, e.g. ["SKU-1016", "SKU-1011"].
    #[serde(default)]
    pub skus: Option<Vec<String>>,
    /// Product name or description in English or Chinese, e.g. "Navy Down Jacket L" or "羽绒服"; fuzzy match, best first, at most 5.
    #[serde(default)]
    pub name: Option<String>,
}

/// Arguments of `check_coupon`. Give the basket as `order_total`, or as a product (`sku` or
/// `product_name`) and `quantity`, to learn whether the coupon applies and the discount.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct CheckCouponArgs {
    /// The customer asking: filled by the tool gateway and hidden from the model; the shop acts for the
    /// gateway's `x-swarm-customer-id` header and never for this value.
    #[serde(default)]
    pub customer_id: String,
    /// Coupon / promo code, e.g. "SAVE20" (case-insensitive).
    pub code: String,
    /// Basket total in the shop currency (CNY), if known.
    #[serde(default)]
    pub order_total: Option<f64>,
    /// SKU of the product the coupon is for, e.g. "SKU-1022".
    #[serde(default)]
    pub sku: Option<String>,
    /// Name of the product the coupon is for, e.g. "Green Tea 250g" (fuzzy match).
    #[serde(default)]
    pub product_name: Option<String>,
    /// How many units of that product (default 1).
    #[serde(default)]
    pub quantity: Option<u32>,
    /// Product category, e.g. "apparel", "shoes", "electronics", "home", "grocery".
    #[serde(default)]
    pub category: Option<String>,
}

/// Arguments of `refund`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct RefundArgs {
    /// The customer asking: filled by the tool gateway and hidden from the model; the shop acts for the
    /// gateway's `x-swarm-customer-id` header and never for this value.
    #[serde(default)]
    pub customer_id: String,
    /// Order id to refund, e.g. "A1016".
    pub order_id: String,
    /// Amount to refund in the order currency (CNY); default: everything still refundable (paid minus already refunded).
    #[serde(default)]
    pub amount: Option<f64>,
    /// Customer's reason for the refund, in a few words.
    #[serde(default)]
    pub reason: Option<String>,
    /// Unique key for this refund request (at most 200 characters); repeating a call with the same key returns the
    /// first result and never refunds twice. Filled by the tool gateway and hidden from the model; the shop uses the
    /// gateway's `x-swarm-idempotency-key` header and never this value.
    #[serde(default)]
    pub idempotency_key: String,
    /// The most the order's refunds, this one included, may total without a person's approval, in
    /// cents. Filled by the tool gateway and hidden from the model (taking it tells the gateway
    /// that the shop enforces it); the shop uses the gateway's `x-swarm-consent-limit-cents`
    /// header and never this value.
    #[serde(default)]
    pub consent_limit_cents: Option<i64>,
    /// The approval a person gave for this refund, from the gateway's `x-swarm-approval-id`
    /// header only: never an argument, never in the schema.
    #[serde(skip)]
    #[schemars(skip)]
    pub approval_id: Option<String>,
}

/// Arguments of `open_ticket`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct OpenTicketArgs {
    /// The customer asking: filled by the tool gateway and hidden from the model; the shop acts for the
    /// gateway's `x-swarm-customer-id` header and never for this value.
    #[serde(default)]
    pub customer_id: String,
    /// Order id the ticket is about, e.g. "A1016".
    pub order_id: String,
    /// What the customer needs a person to look into, in a sentence (at most 300 characters).
    pub subject: String,
    /// Unique key for this ticket (at most 200 characters); repeating a call with the same key returns the first
    /// ticket and never opens a second. Filled by the tool gateway and hidden from the model; the shop uses the
    /// gateway's `x-swarm-idempotency-key` header and never this value.
    #[serde(default)]
    pub idempotency_key: String,
}
