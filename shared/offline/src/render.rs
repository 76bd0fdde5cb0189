//! Result rendering for the offline model: tool results (JSON text) turned into short factual English sentences.
//!
//! Shapes are recognised by their keys, not by tool names, so another
//! upstream's tool with the same shape renders the same; anything unknown is
//! rendered generically (`key: value`) so no fact is lost.

use serde_json::{Map, Value};

use swarm_core::domain::truncate_chars;

use crate::catalog::ToolKind;

/// Longest rendering of one unknown result.
const MAX_GENERIC_CHARS: usize = 600;

/// The sentences for one tool result. `kind` is what the call was for (if
/// known), `args` the arguments it was called with.
pub(crate) fn render(kind: Option<ToolKind>, args: &Value, text: &str) -> Vec<String> {
    let Ok(value) = serde_json::from_str::<Value>(text.trim()) else {
        let plain = text.trim();
        return if plain.is_empty() { Vec::new() } else { vec![truncate_chars(plain, MAX_GENERIC_CHARS)] };
    };
    let Some(obj) = value.as_object() else {
        return vec![truncate_chars(&generic_value(&value), MAX_GENERIC_CHARS)];
    };
    if let Some(error) = obj.get("error") {
        return vec![error_sentence(kind, args, &scalar(error))];
    }
    if obj.get("orders").is_some_and(Value::is_array) {
        return vec![order_list(obj, false)];
    }
    if obj.get("matches").is_some_and(Value::is_array) {
        return products(obj, args);
    }
    if obj.contains_key("usable") || (obj.contains_key("code") && obj.contains_key("exists")) {
        return vec![coupon(obj, args)];
    }
    if obj.contains_key("refund_id") || obj.get("refunded").is_some_and(|v| v.as_bool() == Some(true)) {
        return vec![refund_receipt(obj)];
    }
    if obj.contains_key("refund_window_days_after_delivery")
        || (kind == Some(ToolKind::RefundPolicy) && obj.contains_key("text"))
    {
        return vec![policy(obj)];
    }
    if obj.contains_key("carrier")
        && (obj.contains_key("events") || obj.contains_key("latest_event"))
        && !obj.contains_key("items")
    {
        return vec![shipment(obj)];
    }
    if obj.contains_key("order_id") && obj.contains_key("status") {
        return vec![order(obj)];
    }
    vec![truncate_chars(&generic_object(obj), MAX_GENERIC_CHARS)]
}

/// The newest order of a `list_customer_orders`-shaped result: its id and a sentence about it.
pub(crate) fn newest_order(text: &str) -> Option<(String, String)> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    let obj = value.as_object()?;
    let newest = newest(obj)?;
    let id = str_of(newest, "order_id")?;
    Some((id.to_owned(), order_list(obj, true)))
}

/// Whether a result is an error (`{"error": ...}`) or not JSON at all.
pub(crate) fn is_error(text: &str) -> bool {
    serde_json::from_str::<Value>(text.trim())
        .ok()
        .and_then(|v| v.as_object().map(|o| o.contains_key("error")))
        .unwrap_or(true)
}

/// A field of a JSON object result.
pub(crate) fn field(text: &str, key: &str) -> Option<Value> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    value.get(key).cloned()
}

// ------------------------------------------------------------------ shapes

fn error_sentence(kind: Option<ToolKind>, args: &Value, error: &str) -> String {
    let not_found = {
        let e = error.to_lowercase();
        e.contains("not found") || e.contains("no product") || e.contains("does not exist") || e.contains("unknown")
    };
    let order = args.get("order_id").or_else(|| args.get("order")).map(scalar);
    let sku = args.get("sku").map(scalar);
    let name = args.get("name").or_else(|| args.get("query")).map(scalar);
    let code = args.get("code").map(scalar);
    match (kind, order, sku, name, code) {
        (Some(ToolKind::Refund), Some(o), ..) => format!("The refund of order {o} was not made: {error}."),
        (_, Some(o), ..) if not_found => format!("Order {o} was not found."),
        (Some(ToolKind::TrackShipment), Some(o), ..) => {
            format!("The parcel of order {o} could not be tracked: {error}.")
        }
        (_, Some(o), ..) => format!("Order {o} could not be looked up: {error}."),
        (_, None, Some(s), ..) if not_found => format!("Product {s} was not found."),
        (_, None, None, Some(n), _) if not_found => format!("No product matching \"{n}\" was found."),
        (_, None, _, _, Some(c)) => format!("Coupon {c} could not be checked: {error}."),
        _ => format!("The shop answered: {error}."),
    }
}

fn order(o: &Map<String, Value>) -> String {
    let id = str_of(o, "order_id").unwrap_or("?");
    let currency = str_of(o, "currency").unwrap_or("");
    let status = status_words(o);
    let verb = if status.starts_with("delivered") { "was" } else { "is" };
    let mut s = format!("Order {id} {verb} {status}");
    if let Some(placed) = str_of(o, "placed_at") {
        s.push_str(&format!(" (placed on {})", date(placed)));
    }
    let items: Vec<String> = o
        .get("items")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_object)
                .map(|i| {
                    let name = str_of(i, "name").or_else(|| str_of(i, "sku")).unwrap_or("item");
                    let qty = i.get("qty").or_else(|| i.get("quantity")).map(scalar).unwrap_or_else(|| "1".into());
                    format!("{qty} × {name}")
                })
                .collect()
        })
        .unwrap_or_default();
    if !items.is_empty() {
        s.push_str(&format!(": {}", items.join(", ")));
    }
    if let Some(total) = o.get("total").and_then(Value::as_f64) {
        s.push_str(&format!("; total {}", money(total, currency)));
    }
    s.push('.');
    if let Some(refunded) = o.get("refunded").and_then(Value::as_f64)
        && refunded > 0.0
    {
        s.push_str(&format!(" {} has been refunded.", money(refunded, currency)));
    }
    match o.get("shipment").and_then(Value::as_object) {
        Some(ship) => {
            s.push(' ');
            s.push_str(&parcel_sentence(ship, str_of(o, "tracking_no")));
        }
        None => {
            if let Some(t) = str_of(o, "tracking_no") {
                s.push_str(&format!(" Tracking number: {t}."));
            }
        }
    }
    s
}

/// "paid", "delivered on 2026-11-25", "waiting for payment" …
fn status_words(o: &Map<String, Value>) -> String {
    let status = str_of(o, "status").unwrap_or("unknown");
    match status.to_ascii_uppercase().as_str() {
        "DELIVERED" => match str_of(o, "delivered_at") {
            Some(at) => format!("delivered on {}", date(at)),
            None => "delivered".into(),
        },
        "PENDING_PAYMENT" | "UNPAID" => "waiting for payment".into(),
        _ => plain(status),
    }
}

/// The parcel part of an order: carrier, latest event with location, ETA.
fn parcel_sentence(ship: &Map<String, Value>, tracking: Option<&str>) -> String {
    let carrier = str_of(ship, "carrier").unwrap_or("the carrier");
    let mut s = match tracking.or_else(|| str_of(ship, "tracking_no")) {
        Some(t) => format!("Its parcel is with {carrier} (tracking {t})"),
        None => format!("Its parcel is with {carrier}"),
    };
    match ship.get("latest_event").and_then(Value::as_object) {
        Some(e) => s.push_str(&format!("; latest event: {}.", event(e))),
        None => s.push('.'),
    }
    s.push_str(&eta_sentence(ship));
    s
}

fn shipment(t: &Map<String, Value>) -> String {
    let carrier = str_of(t, "carrier").unwrap_or("the carrier");
    let mut s = match str_of(t, "order_id") {
        Some(o) => format!("The parcel of order {o} is with {carrier}"),
        None => format!("The parcel is with {carrier}"),
    };
    if let Some(tracking) = str_of(t, "tracking_no") {
        s.push_str(&format!(" (tracking {tracking})"));
    }
    s.push('.');
    let latest = t
        .get("latest_event")
        .and_then(Value::as_object)
        .or_else(|| t.get("events").and_then(Value::as_array).and_then(|e| e.last()).and_then(Value::as_object));
    let status = str_of(t, "status").map(plain);
    match latest {
        Some(e) => {
            let ev = event(e);
            s.push_str(&format!(" Latest event: {ev}."));
            if let Some(st) = status
                && !ev.to_lowercase().contains(&st)
            {
                s.push_str(&format!(" Status: {st}."));
            }
        }
        None => {
            if let Some(st) = status {
                s.push_str(&format!(" Status: {st}."));
            }
        }
    }
    s.push_str(&eta_sentence(t));
    s
}

/// " Estimated delivery: D." / " It was expected by D and is overdue …"; empty when delivered.
fn eta_sentence(t: &Map<String, Value>) -> String {
    let delivered = str_of(t, "status").is_some_and(|s| s.eq_ignore_ascii_case("DELIVERED"));
    let passed = t.get("eta_passed").and_then(Value::as_bool).unwrap_or(false);
    match str_of(t, "eta") {
        Some(eta) if passed => {
            format!(" It was expected by {eta} and is now overdue; the carrier has not given a new delivery date.")
        }
        Some(eta) => format!(" Estimated delivery: {eta}."),
        None if delivered => String::new(),
        None if passed => " It is overdue; the carrier has not given a new delivery date.".into(),
        None => String::new(),
    }
}

/// "in transit in Suzhou on 2026-11-07 03:00".
fn event(e: &Map<String, Value>) -> String {
    let what = str_of(e, "event").or_else(|| str_of(e, "status")).unwrap_or("update");
    let mut s = what.to_owned();
    if let Some(loc) = str_of(e, "location") {
        s.push_str(&format!(" in {loc}"));
    }
    if let Some(at) = str_of(e, "at").or_else(|| str_of(e, "time")) {
        s.push_str(&format!(" on {}", stamp(at)));
    }
    s
}

fn newest(l: &Map<String, Value>) -> Option<&Map<String, Value>> {
    let orders: Vec<&Map<String, Value>> = l.get("orders")?.as_array()?.iter().filter_map(Value::as_object).collect();
    // Newest first by contract; the latest `placed_at` wins anyway, the earliest listed on a tie.
    let mut best = *orders.first()?;
    for o in &orders {
        if str_of(o, "placed_at") > str_of(best, "placed_at") {
            best = o;
        }
    }
    Some(best)
}

fn order_line(o: &Map<String, Value>) -> String {
    let id = str_of(o, "order_id").unwrap_or("?");
    let mut parts = Vec::new();
    if let Some(placed) = str_of(o, "placed_at") {
        parts.push(format!("placed on {}", date(placed)));
    }
    parts.push(status_words(o));
    if let Some(total) = o.get("total").and_then(Value::as_f64) {
        parts.push(format!("total {}", money(total, str_of(o, "currency").unwrap_or(""))));
    }
    format!("{id} ({})", parts.join(", "))
}

fn order_list(l: &Map<String, Value>, only_newest: bool) -> String {
    let orders: Vec<&Map<String, Value>> = l
        .get("orders")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    if orders.is_empty() {
        return "You have no orders yet.".into();
    }
    if only_newest {
        return match newest(l) {
            Some(o) => format!("Your most recent order is {}.", order_line(o)),
            None => "You have no orders yet.".into(),
        };
    }
    const SHOWN: usize = 20;
    let lines: Vec<String> = orders.iter().take(SHOWN).map(|o| order_line(o)).collect();
    let more = orders.len().saturating_sub(SHOWN);
    let tail = if more > 0 { format!("; and {more} more") } else { String::new() };
    format!("You have {} order(s): {}{tail}.", orders.len(), lines.join("; "))
}

fn products(p: &Map<String, Value>, args: &Value) -> Vec<String> {
    let matches: Vec<&Map<String, Value>> = p
        .get("matches")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    let asked_sku = args.get("sku").map(scalar);
    let asked_name = args.get("name").or_else(|| args.get("query")).or_else(|| args.get("product_name")).map(scalar);
    let mut out = Vec::new();
    let chosen = match &asked_sku {
        Some(sku) => {
            matches.iter().find(|m| str_of(m, "sku").is_some_and(|s| s.eq_ignore_ascii_case(sku))).or(matches.first())
        }
        None => matches.first(),
    };
    match chosen {
        Some(m) => out.push(product_sentence(m, asked_sku.as_deref())),
        None => out.push(match (&asked_sku, &asked_name) {
            (Some(s), _) => format!("Product {s} was not found."),
            (None, Some(n)) => format!("No product matching \"{n}\" was found."),
            _ => "No matching product was found.".into(),
        }),
    }
    if let Some(missing) = p.get("not_found").and_then(Value::as_array)
        && !missing.is_empty()
    {
        let list: Vec<String> = missing.iter().map(scalar).collect();
        out.push(format!("Not found: {}.", list.join(", ")));
    }
    out
}

/// Whether a product result says the product is in stock (`None` when it does not say).
pub(crate) fn in_stock(p: &Map<String, Value>) -> Option<bool> {
    p.get("in_stock").and_then(Value::as_bool).or_else(|| p.get("stock").and_then(Value::as_f64).map(|s| s > 0.0))
}

/// The product a `get_product` result is about: the SKU asked for, else the first match.
pub(crate) fn chosen_product(text: &str, asked_sku: Option<&str>) -> Option<Map<String, Value>> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    let matches = value.get("matches")?.as_array()?;
    let found = asked_sku.and_then(|sku| {
        matches.iter().find(|m| m.get("sku").and_then(Value::as_str).is_some_and(|s| s.eq_ignore_ascii_case(sku)))
    });
    found.or(matches.first())?.as_object().cloned()
}

fn product_sentence(m: &Map<String, Value>, asked_sku: Option<&str>) -> String {
    let name = str_of(m, "name").unwrap_or("The product");
    let sku = asked_sku.or_else(|| str_of(m, "sku"));
    let mut s = match sku {
        Some(sku) => format!("{name} ({sku})"),
        None => name.to_owned(),
    };
    match in_stock(m) {
        Some(true) => match m.get("stock").and_then(Value::as_u64) {
            Some(n) => s.push_str(&format!(" is in stock ({n} available)")),
            None => s.push_str(" is in stock"),
        },
        Some(false) => {
            s.push_str(" is out of stock");
            match str_of(m, "restock_date") {
                Some(d) => s.push_str(&format!("; it is expected back in stock on {d}")),
                None => s.push_str("; no restock date is known yet"),
            }
        }
        None => {}
    }
    if let Some(price) = m.get("price").and_then(Value::as_f64) {
        s.push_str(&format!("; price {}", money(price, str_of(m, "currency").unwrap_or(""))));
    }
    s.push('.');
    s
}

fn coupon(c: &Map<String, Value>, args: &Value) -> String {
    let code =
        str_of(c, "code").map(str::to_owned).or_else(|| args.get("code").map(scalar)).unwrap_or_else(|| "?".into());
    let currency = str_of(c, "currency").unwrap_or("");
    let reasons: Vec<String> =
        c.get("reasons").and_then(Value::as_array).map(|r| r.iter().map(scalar).collect()).unwrap_or_default();
    if c.get("exists").and_then(Value::as_bool) == Some(false) {
        return format!("Coupon {code} does not exist.");
    }
    let usable = c.get("usable").and_then(Value::as_bool).unwrap_or(false);
    let mut s = if usable {
        format!("Coupon {code} can be used")
    } else if reasons.is_empty() {
        format!("Coupon {code} cannot be used")
    } else {
        format!("Coupon {code} cannot be used: {}", reasons.join("; "))
    };
    s.push('.');
    let mut terms = Vec::new();
    match (str_of(c, "kind"), c.get("value").and_then(Value::as_f64)) {
        (Some("percent"), Some(v)) => terms.push(format!("{}% off", number(v))),
        (Some(_), Some(v)) | (None, Some(v)) => terms.push(format!("{} off", money(v, currency))),
        _ => {}
    }
    if let Some(min) = c.get("min_spend").and_then(Value::as_f64) {
        terms.push(format!("minimum spend {}", money(min, currency)));
    }
    if let Some(cats) = c.get("categories").and_then(Value::as_array)
        && !cats.is_empty()
    {
        let list: Vec<String> = cats.iter().map(scalar).collect();
        terms.push(format!("only for {} products", join_and(&list)));
    }
    if c.get("first_order_only").and_then(Value::as_bool) == Some(true) {
        terms.push("first order only".into());
    }
    if let Some(until) = str_of(c, "valid_until") {
        terms.push(format!("valid until {until}"));
    }
    if !terms.is_empty() {
        s.push_str(&format!(" Terms: {}.", terms.join(", ")));
    }
    if usable {
        let basket = match (
            args.get("quantity").map(scalar),
            args.get("product_name").or_else(|| args.get("sku")).map(scalar),
        ) {
            (Some(q), Some(p)) => Some(format!("{q} × {p}")),
            (None, Some(p)) => Some(p),
            _ => None,
        };
        match (c.get("discount").and_then(Value::as_f64), c.get("order_total").and_then(Value::as_f64)) {
            (Some(d), Some(total)) => {
                let what = basket.map(|b| format!("{b} ")).unwrap_or_default();
                s.push_str(&format!(" For {what}({}) it takes {} off.", money(total, currency), money(d, currency)));
            }
            (Some(d), None) => s.push_str(&format!(" Discount: {}.", money(d, currency))),
            _ => {}
        }
        if !reasons.is_empty() {
            s.push_str(&format!(" Conditions: {}.", reasons.join("; ")));
        }
    }
    s
}

fn refund_receipt(r: &Map<String, Value>) -> String {
    let currency = str_of(r, "currency").unwrap_or("");
    let order = str_of(r, "order_id").unwrap_or("?");
    let mut s = format!("Order {order} was refunded");
    if let Some(amount) = r.get("amount").and_then(Value::as_f64) {
        s.push_str(&format!(": {}", money(amount, currency)));
    }
    if let Some(id) = r.get("refund_id").map(scalar) {
        s.push_str(&format!(" (refund id {id})"));
    }
    s.push('.');
    if let Some(total) = r.get("refunded_total").and_then(Value::as_f64) {
        s.push_str(&format!(" Refunded on this order in total: {}.", money(total, currency)));
    }
    s
}

fn policy(p: &Map<String, Value>) -> String {
    let mut parts = Vec::new();
    let text = str_of(p, "text").map(str::trim).unwrap_or("");
    if !text.is_empty() {
        parts.push(format!("Refund policy: {text}"));
    }
    if let Some(days) = p.get("refund_window_days_after_delivery").and_then(Value::as_f64) {
        let days = number(days);
        if !text.contains(&format!("{days} days")) {
            parts.push(format!("Refunds are accepted within {days} days after delivery."));
        }
    }
    if text.is_empty() {
        if p.get("refund_requires_paid").and_then(Value::as_bool) == Some(true) {
            parts.push("Only paid orders can be refunded.".into());
        }
        if let Some(max) = p.get("refund_max").map(scalar) {
            parts.push(format!("The most that can be refunded: {max}."));
        }
    }
    if parts.is_empty() { generic_object(p) } else { parts.join(" ") }
}

// ------------------------------------------------------------------ helpers

fn str_of<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    o.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

/// "a, b and c".
fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// A JSON value as plain text: strings unquoted, numbers without a needless ".0".
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.as_f64().map(number).unwrap_or_else(|| n.to_string()),
        Value::Null => "none".into(),
        other => generic_value(other),
    }
}

/// `1299.0` → "1299", `12.5` → "12.50".
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{v:.0}") } else { format!("{v:.2}") }
}

fn money(v: f64, currency: &str) -> String {
    if currency.is_empty() { number(v) } else { format!("{} {currency}", number(v)) }
}

/// "2026-11-25T11:00:00+08:00" → "2026-11-25".
fn date(s: &str) -> String {
    s.get(..10).filter(|d| d.as_bytes().get(4) == Some(&b'-')).unwrap_or(s).to_owned()
}

/// "2026-11-25T11:00:00+08:00" → "2026-11-25 11:00".
fn stamp(s: &str) -> String {
    match (s.get(..10), s.get(10..11), s.get(11..16)) {
        (Some(d), Some("T"), Some(t)) => format!("{d} {t}"),
        _ => s.to_owned(),
    }
}

/// "HELD_AT_CUSTOMS" → "held at customs".
fn plain(status: &str) -> String {
    status.trim().to_lowercase().replace('_', " ")
}

fn generic_value(v: &Value) -> String {
    match v {
        Value::Object(o) => format!("{{{}}}", generic_object(o)),
        Value::Array(a) => a.iter().map(generic_value).collect::<Vec<_>>().join("; "),
        other => scalar(other),
    }
}

fn generic_object(o: &Map<String, Value>) -> String {
    o.iter().map(|(k, v)| format!("{k}: {}", generic_value(v))).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(kind: Option<ToolKind>, args: Value, result: Value) -> String {
        render(kind, &args, &result.to_string()).join(" ")
    }

    #[test]
    fn an_order_names_its_status_items_total_and_parcel() {
        let s = one(
            Some(ToolKind::GetOrder),
            json!({"order_id": "A1013"}),
            json!({"order_id": "A1013", "status": "SHIPPED", "placed_at": "2026-11-19T17:00:00+08:00",
                   "items": [{"sku": "SKU-1008", "name": "Black Down Jacket L", "qty": 2, "unit_price": 899.0}],
                   "total": 1798.0, "paid": 1798.0, "refunded": 0.0, "refundable": 1798.0, "currency": "CNY",
                   "tracking_no": "YT649469840891",
                   "shipment": {"carrier": "YTO Express", "status": "HELD_AT_CUSTOMS",
                                "latest_event": {"at": "2026-11-22T03:00:00+08:00", "location": "Hangzhou", "event": "held at customs"},
                                "eta": "2026-11-23", "eta_passed": true}}),
        );
        assert_eq!(
            s,
            "Order A1013 is shipped (placed on 2026-11-19): 2 × Black Down Jacket L; total 1798 CNY. \
             Its parcel is with YTO Express (tracking YT649469840891); latest event: held at customs in Hangzhou on 2026-11-22 03:00. \
             It was expected by 2026-11-23 and is now overdue; the carrier has not given a new delivery date."
        );
    }

    #[test]
    fn a_delivered_order_says_when() {
        let s = one(
            None,
            json!({}),
            json!({"order_id": "A1034", "status": "DELIVERED", "delivered_at": "2026-11-25T11:00:00+08:00"}),
        );
        assert_eq!(s, "Order A1034 was delivered on 2026-11-25.");
    }

    #[test]
    fn an_overdue_parcel_is_called_overdue_without_a_new_date() {
        let s = one(
            Some(ToolKind::TrackShipment),
            json!({"order_id": "A1031"}),
            json!({"order_id": "A1031", "tracking_no": "SF250638245935", "carrier": "SF Express", "status": "IN_TRANSIT",
                   "latest_event": {"at": "2026-11-07T03:00:00+08:00", "location": "Suzhou", "event": "in transit"},
                   "events": [], "eta": "2026-11-09", "eta_passed": true, "note": "late"}),
        );
        assert!(s.contains("SF Express") && s.contains("in transit in Suzhou on 2026-11-07 03:00"), "{s}");
        assert!(s.contains("overdue") && !s.contains("Estimated delivery"), "{s}");
    }

    #[test]
    fn a_product_names_stock_restock_date_and_price() {
        let s = one(
            Some(ToolKind::GetProduct),
            json!({"sku": "SKU-1016"}),
            json!({"matches": [{"sku": "SKU-1016", "name": "Grey Running Shoes 43", "price": 549.0, "currency": "CNY",
                                "stock": 0, "in_stock": false, "restock_date": "2026-12-05"}]}),
        );
        assert_eq!(
            s,
            "Grey Running Shoes 43 (SKU-1016) is out of stock; it is expected back in stock on 2026-12-05; price 549 CNY."
        );
        let none = one(Some(ToolKind::GetProduct), json!({"name": "flux capacitor"}), json!({"matches": []}));
        assert_eq!(none, "No product matching \"flux capacitor\" was found.");
    }

    #[test]
    fn a_coupon_names_usability_reasons_terms_and_discount() {
        let s = one(
            Some(ToolKind::CheckCoupon),
            json!({"code": "TEA5", "product_name": "Green Tea 250g", "quantity": 2}),
            json!({"code": "TEA5", "exists": true, "usable": true, "reasons": [], "kind": "fixed", "value": 5.0,
                   "min_spend": 80.0, "valid_until": "2026-12-31", "categories": ["grocery"], "first_order_only": false,
                   "discount": 5.0, "order_total": 176.0, "currency": "CNY"}),
        );
        assert_eq!(
            s,
            "Coupon TEA5 can be used. Terms: 5 CNY off, minimum spend 80 CNY, only for grocery products, valid until 2026-12-31. \
             For 2 × Green Tea 250g (176 CNY) it takes 5 CNY off."
        );
        let no = one(
            Some(ToolKind::CheckCoupon),
            json!({"code": "WELCOME50"}),
            json!({"code": "WELCOME50", "exists": true, "usable": false, "reasons": ["first order only"], "kind": "fixed",
                   "value": 50.0, "min_spend": 200.0, "valid_until": "2027-03-31"}),
        );
        assert!(no.starts_with("Coupon WELCOME50 cannot be used: first order only."), "{no}");
    }

    #[test]
    fn errors_name_the_entity_and_say_not_found() {
        let s =
            one(Some(ToolKind::TrackShipment), json!({"order_id": "A9999"}), json!({"error": "order A9999 not found"}));
        assert_eq!(s, "Order A9999 was not found.");
        let r = one(
            Some(ToolKind::Refund),
            json!({"order_id": "A1032"}),
            json!({"error": "order A1032 is SHIPPED, not delivered"}),
        );
        assert_eq!(r, "The refund of order A1032 was not made: order A1032 is SHIPPED, not delivered.");
    }

    #[test]
    fn the_policy_names_its_window_and_unknown_json_is_kept_as_key_value() {
        let p = one(
            Some(ToolKind::RefundPolicy),
            json!({}),
            json!({"refund_window_days_after_delivery": 7, "text": "Refunds within a week."}),
        );
        assert_eq!(p, "Refund policy: Refunds within a week. Refunds are accepted within 7 days after delivery.");
        let g = one(None, json!({}), json!({"weather": "sunny", "temp": 21.5, "tags": ["a", "b"]}));
        assert!(g.contains("weather: sunny") && g.contains("temp: 21.50") && g.contains("tags: a; b"), "{g}");
    }

    #[test]
    fn the_newest_order_is_the_latest_placed() {
        let list = json!({"customer_id": "C102", "orders": [
            {"order_id": "A1003", "placed_at": "2026-11-27T20:00:00+08:00", "status": "SHIPPED", "total": 1997.0, "currency": "CNY"},
            {"order_id": "A1015", "placed_at": "2026-11-14T13:00:00+08:00", "status": "DELIVERED", "total": 2795.0, "currency": "CNY"}]});
        let (id, line) = newest_order(&list.to_string()).unwrap_or_default();
        assert_eq!(id, "A1003");
        assert_eq!(line, "Your most recent order is A1003 (placed on 2026-11-27, shipped, total 1997 CNY).");
    }
}
