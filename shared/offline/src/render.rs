//! Result rendering for the offline model: tool results (JSON text) turned into short factual sentences in the conversation's language.
//!
//! Shapes are recognised by their keys, not by tool names, so another
//! upstream's tool with the same shape renders the same; anything unknown is
//! rendered generically (`key: value`) so no fact is lost.

use serde_json::{Map, Value};

use swarm_core::domain::truncate_chars;

use swarm_core::language::Language;

use crate::catalog::ToolKind;
use crate::lang::{join_list, say, zh};
use codes::{coupon_reasons, no_shipment_yet, policy_in_chinese, refund_rule, refusal_in_chinese};

/// Longest rendering of one unknown result.
const MAX_GENERIC_CHARS: usize = 600;

/// The sentences for one tool result, in `language`. `kind` is what the call was for (if
/// known), `args` the arguments it was called with.
pub(crate) fn render(kind: Option<ToolKind>, args: &Value, text: &str, language: Language) -> Vec<String> {
    let Ok(value) = serde_json::from_str::<Value>(text.trim()) else {
        let plain = text.trim();
        return if plain.is_empty() { Vec::new() } else { vec![truncate_chars(plain, MAX_GENERIC_CHARS)] };
    };
    let Some(obj) = value.as_object() else {
        return vec![truncate_chars(&generic_value(&value), MAX_GENERIC_CHARS)];
    };
    let l = language;
    if let Some(error) = obj.get("error") {
        if let Some(sentence) = no_shipment_yet(obj, l) {
            return vec![sentence];
        }
        let code = str_of(obj, "code");
        let why = refund_rule(obj, l)
            .or_else(|| code.and_then(|c| refusal_in_chinese(c, l)))
            .unwrap_or_else(|| scalar(error));
        // Decided on the code; only an answer without one (another upstream's) is read for "not found".
        let not_found = match code {
            Some(code) => code == "not_found",
            None => reads_as_not_found(&scalar(error)),
        };
        return vec![error_sentence(kind, args, &why, not_found, l)];
    }
    if obj.get("orders").is_some_and(Value::is_array) {
        return vec![order_list(obj, false, l)];
    }
    if obj.get("matches").is_some_and(Value::is_array) {
        return products(obj, args, l);
    }
    if obj.contains_key("usable") || (obj.contains_key("code") && obj.contains_key("exists")) {
        return vec![coupon(obj, args, l)];
    }
    if obj.contains_key("refund_id") || obj.get("refunded").is_some_and(|v| v.as_bool() == Some(true)) {
        return vec![refund_receipt(obj, l)];
    }
    if obj.contains_key("refund_window_days_after_delivery")
        || (kind == Some(ToolKind::RefundPolicy) && obj.contains_key("text"))
    {
        return vec![policy(obj, l)];
    }
    if obj.contains_key("carrier")
        && (obj.contains_key("events") || obj.contains_key("latest_event"))
        && !obj.contains_key("items")
    {
        return vec![shipment(obj, l)];
    }
    if obj.contains_key("order_id") && obj.contains_key("status") {
        return vec![order(obj, l)];
    }
    vec![truncate_chars(&generic_object(obj), MAX_GENERIC_CHARS)]
}

/// The newest order of a `list_customer_orders`-shaped result: its id and a sentence about it.
pub(crate) fn newest_order(text: &str, language: Language) -> Option<(String, String)> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    let obj = value.as_object()?;
    let newest = newest(obj)?;
    let id = str_of(newest, "order_id")?;
    Some((id.to_owned(), order_list(obj, true, language)))
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

/// Whether an error without a code says something was not found (answers of upstreams that give no code).
fn reads_as_not_found(error: &str) -> bool {
    let e = error.to_lowercase();
    e.contains("not found") || e.contains("no product") || e.contains("does not exist") || e.contains("unknown")
}

fn error_sentence(kind: Option<ToolKind>, args: &Value, error: &str, not_found: bool, l: Language) -> String {
    let order = args.get("order_id").or_else(|| args.get("order")).map(scalar);
    let sku = args.get("sku").map(scalar);
    let name = args.get("name").or_else(|| args.get("query")).map(scalar);
    let code = args.get("code").map(scalar);
    match (kind, order, sku, name, code) {
        (Some(ToolKind::Refund), Some(o), ..) => say!(
            l,
            "The refund of order {o} was not made: {error}.",
            "订单 {o} 的退款未能办理：{error}。",
            "訂單 {o} 的退款未能辦理：{error}。"
        ),
        (_, Some(o), ..) if not_found => say!(l, "Order {o} was not found.", "未找到订单 {o}。", "未找到訂單 {o}。"),
        (Some(ToolKind::TrackShipment), Some(o), ..) => say!(
            l,
            "The parcel of order {o} could not be tracked: {error}.",
            "无法查询订单 {o} 的包裹物流：{error}。",
            "無法查詢訂單 {o} 的包裹物流：{error}。"
        ),
        (_, Some(o), ..) => say!(
            l,
            "Order {o} could not be looked up: {error}.",
            "无法查询订单 {o}：{error}。",
            "無法查詢訂單 {o}：{error}。"
        ),
        (_, None, Some(s), ..) if not_found => {
            say!(l, "Product {s} was not found.", "未找到商品 {s}。", "未找到商品 {s}。")
        }
        (_, None, None, Some(n), _) if not_found => say!(
            l,
            "No product matching \"{n}\" was found.",
            "未找到与“{n}”相符的商品。",
            "未找到與「{n}」相符的商品。"
        ),
        (_, None, _, _, Some(c)) => say!(
            l,
            "Coupon {c} could not be checked: {error}.",
            "无法查询优惠券 {c}：{error}。",
            "無法查詢優惠券 {c}：{error}。"
        ),
        _ => say!(l, "The shop answered: {error}.", "商店答复：{error}。", "商店答覆：{error}。"),
    }
}

fn order(o: &Map<String, Value>, l: Language) -> String {
    let id = str_of(o, "order_id").unwrap_or("?");
    let currency = str_of(o, "currency").unwrap_or("");
    let status = status_words(o, l);
    let mut s = match l {
        Language::English => {
            let verb = if status.starts_with("delivered") { "was" } else { "is" };
            format!("Order {id} {verb} {status}")
        }
        _ => zh!(l, "订单 {id} {status}", "訂單 {id} {status}"),
    };
    if let Some(placed) = str_of(o, "placed_at") {
        let placed = date(placed);
        s.push_str(&say!(l, " (placed on {placed})", "（下单日期 {placed}）", "（下單日期 {placed}）"));
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
        let items = items.join(if l == Language::English { ", " } else { "、" });
        s.push_str(&say!(l, ": {items}", "：{items}", "：{items}"));
    }
    if let Some(total) = o.get("total").and_then(Value::as_f64) {
        let total = money(total, currency);
        s.push_str(&say!(l, "; total {total}", "；合计 {total}", "；合計 {total}"));
    }
    s.push_str(if l == Language::English { "." } else { "。" });
    if let Some(refunded) = o.get("refunded").and_then(Value::as_f64)
        && refunded > 0.0
    {
        let refunded = money(refunded, currency);
        s.push_str(&say!(l, " {refunded} has been refunded.", "已退款 {refunded}。", "已退款 {refunded}。"));
    }
    match o.get("shipment").and_then(Value::as_object) {
        Some(ship) => {
            if l == Language::English {
                s.push(' ');
            }
            s.push_str(&parcel_sentence(ship, str_of(o, "tracking_no"), l));
        }
        None => {
            if let Some(t) = str_of(o, "tracking_no") {
                s.push_str(&say!(l, " Tracking number: {t}.", "运单号：{t}。", "運單號：{t}。"));
            }
        }
    }
    s
}

/// "paid", "delivered on 2026-11-25", "waiting for payment" …; "已付款", "已于 2026-11-25 送达" ….
fn status_words(o: &Map<String, Value>, l: Language) -> String {
    let status = str_of(o, "status").unwrap_or("unknown");
    match (status.to_ascii_uppercase().as_str(), str_of(o, "delivered_at").map(date)) {
        ("DELIVERED", Some(at)) => say!(l, "delivered on {at}", "已于 {at} 送达", "已於 {at} 送達"),
        _ => status_word(status, l),
    }
}

/// A status code in words: "SHIPPED" → "shipped", "已发货", "已發貨"; a code without Chinese
/// words is kept as the shop's words.
pub(crate) fn status_word(status: &str, l: Language) -> String {
    let zh: Option<(&str, &str)> = match status.trim().to_ascii_uppercase().as_str() {
        "PENDING_PAYMENT" | "UNPAID" => {
            if l == Language::English {
                return "waiting for payment".into();
            }
            Some(("待付款", "待付款"))
        }
        "PAID" => Some(("已付款", "已付款")),
        "SHIPPED" => Some(("已发货", "已發貨")),
        "DELIVERED" => Some(("已送达", "已送達")),
        "CANCELLED" | "CANCELED" => Some(("已取消", "已取消")),
        "REFUNDED" => Some(("已退款", "已退款")),
        "IN_TRANSIT" => Some(("运输中", "運輸中")),
        "HELD_AT_CUSTOMS" => Some(("海关扣留中", "海關扣留中")),
        "DELAYED" => Some(("延误", "延誤")),
        "PICKED_UP" => Some(("已揽收", "已攬收")),
        "OUT_FOR_DELIVERY" => Some(("派送中", "派送中")),
        "PROCESSING" => Some(("处理中", "處理中")),
        _ => None,
    };
    match (l, zh) {
        (Language::SimplifiedChinese, Some((hans, _))) => hans.into(),
        (Language::TraditionalChinese, Some((_, hant))) => hant.into(),
        _ => plain(status),
    }
}

/// A carrier's event in words: the shop's English for English, Chinese for the events the demo
/// carriers report, anything else as the carrier wrote it.
fn event_word(what: &str, l: Language) -> String {
    let zh: Option<(&str, &str)> = match what.trim().to_lowercase().as_str() {
        "in transit" => Some(("运输中", "運輸中")),
        "picked up" => Some(("已揽收", "已攬收")),
        "delivered" => Some(("已签收", "已簽收")),
        "out for delivery" => Some(("派送中", "派送中")),
        "held at customs" => Some(("海关扣留", "海關扣留")),
        "delayed: weather" => Some(("因天气延误", "因天氣延誤")),
        _ => None,
    };
    match (l, zh) {
        (Language::SimplifiedChinese, Some((hans, _))) => hans.into(),
        (Language::TraditionalChinese, Some((_, hant))) => hant.into(),
        _ => what.to_owned(),
    }
}

/// The parcel part of an order: carrier, latest event with location, ETA.
fn parcel_sentence(ship: &Map<String, Value>, tracking: Option<&str>, l: Language) -> String {
    let carrier = str_of(ship, "carrier").unwrap_or(match l {
        Language::English => "the carrier",
        Language::SimplifiedChinese => "快递公司",
        Language::TraditionalChinese => "快遞公司",
    });
    let mut s = match tracking.or_else(|| str_of(ship, "tracking_no")) {
        Some(t) => say!(
            l,
            "Its parcel is with {carrier} (tracking {t})",
            "包裹由 {carrier} 承运（运单号 {t}）",
            "包裹由 {carrier} 承運（運單號 {t}）"
        ),
        None => say!(l, "Its parcel is with {carrier}", "包裹由 {carrier} 承运", "包裹由 {carrier} 承運"),
    };
    match ship.get("latest_event").and_then(Value::as_object) {
        Some(e) => {
            let ev = event(e, l);
            s.push_str(&say!(l, "; latest event: {ev}.", "；最新动态：{ev}。", "；最新動態：{ev}。"));
        }
        None => s.push_str(if l == Language::English { "." } else { "。" }),
    }
    s.push_str(&eta_sentence(ship, l));
    s
}

fn shipment(t: &Map<String, Value>, l: Language) -> String {
    let carrier = str_of(t, "carrier").unwrap_or(match l {
        Language::English => "the carrier",
        Language::SimplifiedChinese => "快递公司",
        Language::TraditionalChinese => "快遞公司",
    });
    let mut s = match str_of(t, "order_id") {
        Some(o) => say!(
            l,
            "The parcel of order {o} is with {carrier}",
            "订单 {o} 的包裹由 {carrier} 承运",
            "訂單 {o} 的包裹由 {carrier} 承運"
        ),
        None => say!(l, "The parcel is with {carrier}", "包裹由 {carrier} 承运", "包裹由 {carrier} 承運"),
    };
    if let Some(tracking) = str_of(t, "tracking_no") {
        s.push_str(&say!(l, " (tracking {tracking})", "（运单号 {tracking}）", "（運單號 {tracking}）"));
    }
    s.push_str(if l == Language::English { "." } else { "。" });
    let latest = t
        .get("latest_event")
        .and_then(Value::as_object)
        .or_else(|| t.get("events").and_then(Value::as_array).and_then(|e| e.last()).and_then(Value::as_object));
    let status = str_of(t, "status").map(|s| status_word(s, l));
    match latest {
        Some(e) => {
            let ev = event(e, l);
            s.push_str(&say!(l, " Latest event: {ev}.", "最新动态：{ev}。", "最新動態：{ev}。"));
            if let Some(st) = status
                && !ev.to_lowercase().contains(&st)
            {
                s.push_str(&say!(l, " Status: {st}.", "状态：{st}。", "狀態：{st}。"));
            }
        }
        None => {
            if let Some(st) = status {
                s.push_str(&say!(l, " Status: {st}.", "状态：{st}。", "狀態：{st}。"));
            }
        }
    }
    s.push_str(&eta_sentence(t, l));
    s
}

/// " Estimated delivery: D." / " It was expected by D and is overdue …"; empty when delivered.
fn eta_sentence(t: &Map<String, Value>, l: Language) -> String {
    let delivered = str_of(t, "status").is_some_and(|s| s.eq_ignore_ascii_case("DELIVERED"));
    let passed = t.get("eta_passed").and_then(Value::as_bool).unwrap_or(false);
    match str_of(t, "eta") {
        Some(eta) if passed => say!(
            l,
            " It was expected by {eta} and is now overdue; the carrier has not given a new delivery date.",
            "原预计 {eta} 送达，现已逾期；承运商尚未给出新的送达日期。",
            "原預計 {eta} 送達，現已逾期；承運商尚未提供新的送達日期。"
        ),
        Some(eta) => say!(l, " Estimated delivery: {eta}.", "预计送达：{eta}。", "預計送達：{eta}。"),
        None if delivered => String::new(),
        None if passed => say!(
            l,
            " It is overdue; the carrier has not given a new delivery date.",
            "已逾期；承运商尚未给出新的送达日期。",
            "已逾期；承運商尚未提供新的送達日期。"
        ),
        None => String::new(),
    }
}

/// "in transit in Suzhou on 2026-11-07 03:00"; "2026-11-07 03:00 于 Suzhou 运输中".
fn event(e: &Map<String, Value>, l: Language) -> String {
    let what = event_word(str_of(e, "event").or_else(|| str_of(e, "status")).unwrap_or("update"), l);
    let at = str_of(e, "at").or_else(|| str_of(e, "time")).map(stamp);
    let loc = str_of(e, "location");
    match l {
        Language::English => {
            let mut s = what;
            if let Some(loc) = loc {
                s.push_str(&format!(" in {loc}"));
            }
            if let Some(at) = at {
                s.push_str(&format!(" on {at}"));
            }
            s
        }
        _ => {
            let mut parts: Vec<String> = Vec::new();
            parts.extend(at);
            if let Some(loc) = loc {
                parts.push(zh!(l, "于 {loc}", "於 {loc}"));
            }
            parts.push(what);
            parts.join(" ")
        }
    }
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

fn order_line(o: &Map<String, Value>, l: Language) -> String {
    let id = str_of(o, "order_id").unwrap_or("?");
    let mut parts = Vec::new();
    if let Some(placed) = str_of(o, "placed_at") {
        let placed = date(placed);
        parts.push(say!(l, "placed on {placed}", "下单日期 {placed}", "下單日期 {placed}"));
    }
    parts.push(status_words(o, l));
    if let Some(total) = o.get("total").and_then(Value::as_f64) {
        let total = money(total, str_of(o, "currency").unwrap_or(""));
        parts.push(say!(l, "total {total}", "合计 {total}", "合計 {total}"));
    }
    match l {
        Language::English => format!("{id} ({})", parts.join(", ")),
        _ => format!("{id}（{}）", parts.join("，")),
    }
}

fn order_list(list: &Map<String, Value>, only_newest: bool, l: Language) -> String {
    let orders: Vec<&Map<String, Value>> = list
        .get("orders")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    let none = || say!(l, "You have no orders yet.", "您还没有订单。", "您還沒有訂單。");
    if orders.is_empty() {
        return none();
    }
    if only_newest {
        return match newest(list) {
            Some(o) => {
                let line = order_line(o, l);
                say!(l, "Your most recent order is {line}.", "您最近的订单是 {line}。", "您最近的訂單是 {line}。")
            }
            None => none(),
        };
    }
    const SHOWN: usize = 20;
    let lines: Vec<String> = orders.iter().take(SHOWN).map(|o| order_line(o, l)).collect();
    let more = orders.len().saturating_sub(SHOWN);
    let tail = match more {
        0 => String::new(),
        _ => say!(l, "; and {more} more", "；另有 {more} 个", "；另有 {more} 個"),
    };
    let (n, lines) = (orders.len(), lines.join(if l == Language::English { "; " } else { "；" }));
    say!(
        l,
        "You have {n} order(s): {lines}{tail}.",
        "您共有 {n} 个订单：{lines}{tail}。",
        "您共有 {n} 個訂單：{lines}{tail}。"
    )
}

fn products(p: &Map<String, Value>, args: &Value, l: Language) -> Vec<String> {
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
        Some(m) => out.push(product_sentence(m, asked_sku.as_deref(), l)),
        None => out.push(match (&asked_sku, &asked_name) {
            (Some(s), _) => say!(l, "Product {s} was not found.", "未找到商品 {s}。", "未找到商品 {s}。"),
            (None, Some(n)) => say!(
                l,
                "No product matching \"{n}\" was found.",
                "未找到与“{n}”相符的商品。",
                "未找到與「{n}」相符的商品。"
            ),
            _ => say!(l, "No matching product was found.", "未找到相符的商品。", "未找到相符的商品。"),
        }),
    }
    if let Some(missing) = p.get("not_found").and_then(Value::as_array)
        && !missing.is_empty()
    {
        let list: Vec<String> = missing.iter().map(scalar).collect();
        let list = list.join(if l == Language::English { ", " } else { "、" });
        out.push(say!(l, "Not found: {list}.", "未找到：{list}。", "未找到：{list}。"));
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

fn product_sentence(m: &Map<String, Value>, asked_sku: Option<&str>, l: Language) -> String {
    let name = str_of(m, "name").unwrap_or(match l {
        Language::English => "The product",
        Language::SimplifiedChinese => "该商品",
        Language::TraditionalChinese => "該商品",
    });
    let sku = asked_sku.or_else(|| str_of(m, "sku"));
    let mut s = match (sku, l) {
        (Some(sku), Language::English) => format!("{name} ({sku})"),
        (Some(sku), _) => format!("{name}（{sku}）"),
        (None, _) => name.to_owned(),
    };
    match in_stock(m) {
        Some(true) => match m.get("stock").and_then(Value::as_u64) {
            Some(n) => {
                s.push_str(&say!(l, " is in stock ({n} available)", "有货（库存 {n} 件）", "有貨（庫存 {n} 件）"))
            }
            None => s.push_str(&say!(l, " is in stock", "有货", "有貨")),
        },
        Some(false) => {
            s.push_str(&say!(l, " is out of stock", "缺货", "缺貨"));
            match str_of(m, "restock_date") {
                Some(d) => {
                    s.push_str(&say!(l, "; it is expected back in stock on {d}", "，预计 {d} 补货", "，預計 {d} 補貨"))
                }
                None => s.push_str(&say!(l, "; no restock date is known yet", "，暂无补货日期", "，暫無補貨日期")),
            }
        }
        None => {}
    }
    if let Some(price) = m.get("price").and_then(Value::as_f64) {
        let price = money(price, str_of(m, "currency").unwrap_or(""));
        s.push_str(&say!(l, "; price {price}", "；价格 {price}", "；價格 {price}"));
    }
    s.push_str(if l == Language::English { "." } else { "。" });
    s
}

fn coupon(c: &Map<String, Value>, args: &Value, l: Language) -> String {
    let code =
        str_of(c, "code").map(str::to_owned).or_else(|| args.get("code").map(scalar)).unwrap_or_else(|| "?".into());
    let currency = str_of(c, "currency").unwrap_or("");
    let reasons = coupon_reasons(c, &code, currency, l);
    if c.get("exists").and_then(Value::as_bool) == Some(false) {
        return say!(l, "Coupon {code} does not exist.", "优惠券 {code} 不存在。", "優惠券 {code} 不存在。");
    }
    let usable = c.get("usable").and_then(Value::as_bool).unwrap_or(false);
    let why = reasons.join(if l == Language::English { "; " } else { "；" });
    let mut s = if usable {
        say!(l, "Coupon {code} can be used.", "优惠券 {code} 可以使用。", "優惠券 {code} 可以使用。")
    } else if reasons.is_empty() {
        say!(l, "Coupon {code} cannot be used.", "优惠券 {code} 不能使用。", "優惠券 {code} 不能使用。")
    } else {
        say!(
            l,
            "Coupon {code} cannot be used: {why}.",
            "优惠券 {code} 不能使用：{why}。",
            "優惠券 {code} 不能使用：{why}。"
        )
    };
    let terms = coupon_terms(c, currency, l);
    if !terms.is_empty() {
        let terms = terms.join(if l == Language::English { ", " } else { "，" });
        s.push_str(&say!(l, " Terms: {terms}.", "使用条件：{terms}。", "使用條件：{terms}。"));
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
                let (d, total) = (money(d, currency), money(total, currency));
                s.push_str(&match (basket, l) {
                    (Some(b), _) => {
                        say!(
                            l,
                            " For {b} ({total}) it takes {d} off.",
                            "购买 {b}（{total}）可减 {d}。",
                            "購買 {b}（{total}）可減 {d}。"
                        )
                    }
                    (None, _) => say!(
                        l,
                        " For ({total}) it takes {d} off.",
                        "订单金额 {total} 可减 {d}。",
                        "訂單金額 {total} 可減 {d}。"
                    ),
                });
            }
            (Some(d), None) => {
                let d = money(d, currency);
                s.push_str(&say!(l, " Discount: {d}.", "优惠金额：{d}。", "優惠金額：{d}。"));
            }
            _ => {}
        }
        if !reasons.is_empty() {
            s.push_str(&say!(l, " Conditions: {why}.", "附加条件：{why}。", "附加條件：{why}。"));
        }
    }
    s
}

/// The terms of a coupon result: value, minimum spend, categories, first order, validity.
fn coupon_terms(c: &Map<String, Value>, currency: &str, l: Language) -> Vec<String> {
    let mut terms = Vec::new();
    match (str_of(c, "kind"), c.get("value").and_then(Value::as_f64)) {
        (Some("percent"), Some(v)) => {
            let v = number(v);
            terms.push(say!(l, "{v}% off", "立减 {v}%", "立減 {v}%"));
        }
        (Some(_), Some(v)) | (None, Some(v)) => {
            let v = money(v, currency);
            terms.push(say!(l, "{v} off", "立减 {v}", "立減 {v}"));
        }
        _ => {}
    }
    if let Some(min) = c.get("min_spend").and_then(Value::as_f64) {
        let min = money(min, currency);
        terms.push(say!(l, "minimum spend {min}", "最低消费 {min}", "最低消費 {min}"));
    }
    if let Some(cats) = c.get("categories").and_then(Value::as_array)
        && !cats.is_empty()
    {
        let list: Vec<String> = cats.iter().map(scalar).collect();
        let list = join_list(&list, l);
        terms.push(say!(l, "only for {list} products", "仅限 {list} 类商品", "僅限 {list} 類商品"));
    }
    if c.get("first_order_only").and_then(Value::as_bool) == Some(true) {
        terms.push(say!(l, "first order only", "仅限首单", "僅限首單"));
    }
    if let Some(until) = str_of(c, "valid_until") {
        terms.push(say!(l, "valid until {until}", "有效期至 {until}", "有效期至 {until}"));
    }
    terms
}

fn refund_receipt(r: &Map<String, Value>, l: Language) -> String {
    let currency = str_of(r, "currency").unwrap_or("");
    let order = str_of(r, "order_id").unwrap_or("?");
    let mut s = say!(l, "Order {order} was refunded", "订单 {order} 已退款", "訂單 {order} 已退款");
    if let Some(amount) = r.get("amount").and_then(Value::as_f64) {
        let amount = money(amount, currency);
        s.push_str(&say!(l, ": {amount}", "：{amount}", "：{amount}"));
    }
    if let Some(id) = r.get("refund_id").map(scalar) {
        s.push_str(&say!(l, " (refund id {id})", "（退款编号 {id}）", "（退款編號 {id}）"));
    }
    s.push_str(if l == Language::English { "." } else { "。" });
    if let Some(total) = r.get("refunded_total").and_then(Value::as_f64) {
        let total = money(total, currency);
        s.push_str(&say!(
            l,
            " Refunded on this order in total: {total}.",
            "该订单累计已退款：{total}。",
            "該訂單累計已退款：{total}。"
        ));
    }
    s
}

fn policy(p: &Map<String, Value>, l: Language) -> String {
    if let Some(zh) = policy_in_chinese(p, l) {
        return zh;
    }
    let mut parts = Vec::new();
    let text = str_of(p, "text").map(str::trim).unwrap_or("");
    if !text.is_empty() {
        // In Chinese only when the policy has no window to write it from: quoted as the shop's words.
        parts.push(say!(l, "Refund policy: {text}", "退款政策（商店原文）：{text}", "退款政策（商店原文）：{text}"));
    }
    if let Some(days) = p.get("refund_window_days_after_delivery").and_then(Value::as_f64) {
        let days = number(days);
        if l != Language::English || !text.contains(&format!("{days} days")) {
            parts.push(say!(
                l,
                "Refunds are accepted within {days} days after delivery.",
                "签收后 {days} 天内可申请退款。",
                "簽收後 {days} 天內可申請退款。"
            ));
        }
    }
    if text.is_empty() {
        if p.get("refund_requires_paid").and_then(Value::as_bool) == Some(true) {
            parts.push(say!(
                l,
                "Only paid orders can be refunded.",
                "仅已付款的订单可以退款。",
                "僅已付款的訂單可以退款。"
            ));
        }
        if let Some(max) = p.get("refund_max").map(scalar) {
            parts.push(say!(
                l,
                "The most that can be refunded: {max}.",
                "最多可退金额：{max}。",
                "最多可退金額：{max}。"
            ));
        }
    }
    if parts.is_empty() { generic_object(p) } else { parts.join(if l == Language::English { " " } else { "" }) }
}

// ------------------------------------------------------------------ helpers

fn str_of<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    o.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
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

mod codes;
#[cfg(test)]
mod tests;
