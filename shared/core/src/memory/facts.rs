//! Facts a worker keeps from a tool's structured result (order ids, SKUs, coupon codes, amounts, statuses): small typed values recorded with the call, so memory never holds raw tool output.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::text::truncate_chars;

/// Facts kept from one tool call, at most: a call listing many orders keeps the first (newest) ones.
pub const MAX_FACTS_PER_CALL: usize = 12;
/// Longest fact value kept, characters (ids, codes, amounts and statuses are far shorter).
pub const MAX_FACT_VALUE_CHARS: usize = 64;
/// Longest fact label kept (a product's name), characters.
pub const MAX_FACT_LABEL_CHARS: usize = 80;

/// What a fact is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactKind {
    /// An order's id (`A1033`).
    OrderId,
    /// A SKU (`SKU-1021`), its product's name as the label; `about` the order holding it, if any.
    Sku,
    /// A coupon code (`SAVE20`).
    Coupon,
    /// An amount with its currency (`1874.00 CNY`); the label says which (`paid`, `refundable`, `price`, `refunded`).
    Amount,
    /// A status (`DELIVERED`, `usable`); the label says of what (`order`, `parcel`, `coupon`, `refund`).
    Status,
}

/// One fact a tool returned: `kind` `value`, about the order / SKU / coupon `about`, `label` saying which.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fact {
    pub kind: FactKind,
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl Fact {
    fn new(kind: FactKind, value: &str, about: Option<&str>, label: Option<&str>) -> Self {
        Self {
            kind,
            value: truncate_chars(value, MAX_FACT_VALUE_CHARS),
            about: about.map(|a| truncate_chars(a, MAX_FACT_VALUE_CHARS)),
            label: label.map(|l| truncate_chars(l, MAX_FACT_LABEL_CHARS)),
        }
    }

    /// Whether the fact cannot change between turns, so a plan may hand it to a worker instead of
    /// the tool being asked again: an order's id, the SKUs and names of its items and what was paid
    /// (`paid`, `total`), a SKU's name, a coupon's code. Everything else is asked of the tool again:
    /// order and parcel status, stock and price, a coupon's validity, what is still refundable.
    pub fn is_stable(&self) -> bool {
        match self.kind {
            FactKind::OrderId | FactKind::Sku | FactKind::Coupon => true,
            FactKind::Amount => matches!(self.label.as_deref(), Some("paid" | "total")),
            FactKind::Status => false,
        }
    }
}

/// The facts of a tool's result (its JSON output, as the shop's tools answer), at most
/// [`MAX_FACTS_PER_CALL`]: orders (`get_order`, `list_customer_orders`), parcels
/// (`track_shipment`), products (`get_product`), coupons (`check_coupon`) and refund receipts.
/// Output that is not a JSON object, or an error (`{"error": …}`), yields none.
pub fn facts_from_tool_output(output: &str) -> Vec<Fact> {
    let Ok(Value::Object(top)) = serde_json::from_str::<Value>(output) else { return Vec::new() };
    if top.contains_key("error") {
        return Vec::new();
    }
    let mut out = Vec::new();
    let value = Value::Object(top);
    if let Some(orders) = value.get("orders").and_then(Value::as_array) {
        orders.iter().for_each(|o| order_facts(o, &mut out));
    } else if let Some(products) = value.get("matches").and_then(Value::as_array) {
        products.iter().for_each(|p| product_facts(p, None, &mut out));
    } else if value.get("code").is_some() && value.get("usable").is_some() {
        coupon_facts(&value, &mut out);
    } else if value.get("order_id").is_some() {
        order_facts(&value, &mut out);
    }
    let mut unique: Vec<Fact> = Vec::new();
    for f in out {
        if !unique.contains(&f) {
            unique.push(f);
        }
    }
    unique.truncate(MAX_FACTS_PER_CALL);
    unique
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

/// `12.5` of `currency` as `12.50 CNY`.
fn amount(v: &Value, key: &str, currency: Option<&str>) -> Option<String> {
    let n = v.get(key).and_then(Value::as_f64)?;
    Some(match currency {
        Some(c) => format!("{n:.2} {c}"),
        None => format!("{n:.2}"),
    })
}

/// An order (`get_order`, a line of `list_customer_orders`), a parcel (`track_shipment`) or a refund receipt.
fn order_facts(v: &Value, out: &mut Vec<Fact>) {
    let Some(id) = text(v, "order_id") else { return };
    let currency = text(v, "currency");
    out.push(Fact::new(FactKind::OrderId, id, None, None));
    let parcel = v.get("events").is_some();
    if v.get("refund_id").is_some() {
        if let Some(a) = amount(v, "amount", currency) {
            out.push(Fact::new(FactKind::Amount, &a, Some(id), Some("refunded")));
        }
        out.push(Fact::new(FactKind::Status, "REFUNDED", Some(id), Some("refund")));
        return;
    }
    if let Some(status) = text(v, "status") {
        out.push(Fact::new(FactKind::Status, status, Some(id), Some(if parcel { "parcel" } else { "order" })));
    }
    for item in v.get("items").and_then(Value::as_array).into_iter().flatten() {
        product_facts(item, Some(id), out);
    }
    for (key, label) in [("paid", "paid"), ("refundable", "refundable")] {
        if let Some(a) = amount(v, key, currency) {
            out.push(Fact::new(FactKind::Amount, &a, Some(id), Some(label)));
        }
    }
}

/// A product (`get_product`) or an order's item (`about` the order).
fn product_facts(v: &Value, order: Option<&str>, out: &mut Vec<Fact>) {
    let Some(sku) = text(v, "sku") else { return };
    let name = match (text(v, "name"), text(v, "name_zh")) {
        (Some(en), Some(zh)) => Some(format!("{en} / {zh}")),
        (Some(one), None) | (None, Some(one)) => Some(one.to_owned()),
        (None, None) => None,
    };
    out.push(Fact::new(FactKind::Sku, sku, order, name.as_deref()));
    if order.is_none()
        && let Some(a) = amount(v, "price", text(v, "currency"))
    {
        out.push(Fact::new(FactKind::Amount, &a, Some(sku), Some("price")));
    }
}

/// A coupon check: the code and whether it is usable (a fact that changes).
fn coupon_facts(v: &Value, out: &mut Vec<Fact>) {
    let Some(code) = text(v, "code") else { return };
    out.push(Fact::new(FactKind::Coupon, code, None, None));
    let usable = v.get("usable").and_then(Value::as_bool).unwrap_or(false);
    out.push(Fact::new(FactKind::Status, if usable { "usable" } else { "not usable" }, Some(code), Some("coupon")));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_order_yields_its_id_status_items_and_amounts() {
        let order = json!({"order_id": "A1033", "status": "DELIVERED", "items": [
            {"sku": "SKU-1021", "name": "White Air Purifier", "qty": 1, "unit_price": 1299.0}],
            "total": 1874.0, "paid": 1874.0, "refunded": 0.0, "refundable": 1874.0, "currency": "CNY"});
        let facts = facts_from_tool_output(&order.to_string());
        assert_eq!(
            facts,
            vec![
                Fact::new(FactKind::OrderId, "A1033", None, None),
                Fact::new(FactKind::Status, "DELIVERED", Some("A1033"), Some("order")),
                Fact::new(FactKind::Sku, "SKU-1021", Some("A1033"), Some("White Air Purifier")),
                Fact::new(FactKind::Amount, "1874.00 CNY", Some("A1033"), Some("paid")),
                Fact::new(FactKind::Amount, "1874.00 CNY", Some("A1033"), Some("refundable")),
            ]
        );
        let stable: Vec<bool> = facts.iter().map(Fact::is_stable).collect();
        assert_eq!(stable, [true, false, true, true, false], "status and what is refundable change");
    }

    #[test]
    fn parcels_coupons_products_and_lists_yield_their_facts_and_errors_none() {
        let parcel = json!({"order_id": "A1031", "tracking_no": "SF1", "status": "IN_TRANSIT", "events": []});
        assert_eq!(facts_from_tool_output(&parcel.to_string())[1].label.as_deref(), Some("parcel"));
        let coupon = json!({"code": "SAVE20", "exists": true, "usable": false, "reasons": ["expired"]});
        let facts = facts_from_tool_output(&coupon.to_string());
        assert_eq!(facts[0], Fact::new(FactKind::Coupon, "SAVE20", None, None));
        assert_eq!(facts[1].value, "not usable");
        let product = json!({"matches": [{"sku": "SKU-1011", "name": "Navy Down Jacket L", "name_zh": "藏青羽绒服 L",
            "price": 899.0, "currency": "CNY", "stock": 0, "in_stock": false}]});
        let facts = facts_from_tool_output(&product.to_string());
        assert_eq!(facts[0].label.as_deref(), Some("Navy Down Jacket L / 藏青羽绒服 L"));
        assert!(!facts[1].is_stable(), "a price is asked again");
        let many: Vec<Value> = (0..30)
            .map(|i| json!({"order_id": format!("A{}", 1000 + i), "status": "PAID", "total": 1.0, "currency": "CNY"}))
            .collect();
        let listed = facts_from_tool_output(&json!({"customer_id": "C1", "orders": many}).to_string());
        assert_eq!(listed.len(), MAX_FACTS_PER_CALL);
        assert!(facts_from_tool_output(r#"{"error": "not found", "order_id": "A1"}"#).is_empty());
        assert!(facts_from_tool_output("order A1029 is PAID").is_empty(), "never text, only structured results");
    }
}
