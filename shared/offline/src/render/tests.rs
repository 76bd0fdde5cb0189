//! Tests of the result rendering: every shape in English, and in Chinese of each script.

use super::*;
use serde_json::json;

fn one(kind: Option<ToolKind>, args: Value, result: Value) -> String {
    render(kind, &args, &result.to_string(), Language::English).join(" ")
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
    let s = one(Some(ToolKind::TrackShipment), json!({"order_id": "A9999"}), json!({"error": "order A9999 not found"}));
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
    let (id, line) = newest_order(&list.to_string(), Language::English).unwrap_or_default();
    assert_eq!(id, "A1003");
    assert_eq!(line, "Your most recent order is A1003 (placed on 2026-11-27, shipped, total 1997 CNY).");
}
/// One result of every shape, and the sentences each language makes of them.
fn every_shape(l: Language) -> Vec<String> {
    let shapes: Vec<(Option<ToolKind>, Value, Value)> = vec![
        (
            Some(ToolKind::GetOrder),
            json!({"order_id": "A1013"}),
            json!({"order_id": "A1013", "status": "SHIPPED", "placed_at": "2026-11-19T17:00:00+08:00",
                   "items": [{"sku": "SKU-1008", "name": "Black Down Jacket L", "qty": 2}],
                   "total": 1798.0, "refunded": 100.0, "currency": "CNY", "tracking_no": "YT649469840891",
                   "shipment": {"carrier": "YTO Express", "status": "HELD_AT_CUSTOMS",
                                "latest_event": {"at": "2026-11-22T03:00:00+08:00", "location": "Hangzhou", "event": "held at customs"},
                                "eta": "2026-11-23", "eta_passed": true}}),
        ),
        (
            None,
            json!({}),
            json!({"order_id": "A1034", "status": "DELIVERED", "delivered_at": "2026-11-25T11:00:00+08:00"}),
        ),
        (None, json!({}), json!({"order_id": "A1001", "status": "PENDING_PAYMENT", "tracking_no": "T1"})),
        (
            Some(ToolKind::TrackShipment),
            json!({"order_id": "A1031"}),
            json!({"order_id": "A1031", "tracking_no": "SF250638245935", "carrier": "SF Express", "status": "IN_TRANSIT",
                   "events": [{"at": "2026-11-07T03:00:00+08:00", "location": "Suzhou", "event": "delayed: weather"}],
                   "eta": "2026-11-09"}),
        ),
        (Some(ToolKind::TrackShipment), json!({}), json!({"carrier": "ZTO Express", "events": [], "eta_passed": true})),
        (
            Some(ToolKind::GetProduct),
            json!({"sku": "SKU-1016"}),
            json!({"matches": [{"sku": "SKU-1016", "name": "Grey Running Shoes 43", "price": 549.0, "currency": "CNY",
                                "stock": 0, "in_stock": false, "restock_date": "2026-12-05"}], "not_found": ["SKU-9"]}),
        ),
        (
            Some(ToolKind::GetProduct),
            json!({"name": "tea"}),
            json!({"matches": [{"name": "Green Tea 250g", "stock": 3}]}),
        ),
        (
            Some(ToolKind::GetProduct),
            json!({"sku": "SKU-1"}),
            json!({"matches": [{"sku": "SKU-1", "in_stock": false}]}),
        ),
        (Some(ToolKind::GetProduct), json!({"name": "flux"}), json!({"matches": []})),
        (
            Some(ToolKind::CheckCoupon),
            json!({"code": "TEA5", "product_name": "Green Tea 250g", "quantity": 2}),
            json!({"code": "TEA5", "exists": true, "usable": true, "reasons": ["once per customer"], "kind": "fixed",
                   "value": 5.0, "min_spend": 80.0, "valid_until": "2026-12-31", "categories": ["grocery", "tea"],
                   "first_order_only": true, "discount": 5.0, "order_total": 176.0, "currency": "CNY"}),
        ),
        (
            Some(ToolKind::CheckCoupon),
            json!({"code": "SAVE20"}),
            json!({"code": "SAVE20", "exists": true, "usable": true, "kind": "percent", "value": 20, "discount": 40.0}),
        ),
        (Some(ToolKind::CheckCoupon), json!({"code": "X"}), json!({"code": "X", "exists": false})),
        (Some(ToolKind::CheckCoupon), json!({"code": "Y"}), json!({"code": "Y", "exists": true, "usable": false})),
        (
            Some(ToolKind::Refund),
            json!({"order_id": "A1016"}),
            json!({"refund_id": "RF-A1016-1", "order_id": "A1016", "amount": 797.0, "refunded_total": 797.0, "currency": "CNY"}),
        ),
        (
            Some(ToolKind::RefundPolicy),
            json!({}),
            json!({"refund_window_days_after_delivery": 7, "refund_requires_paid": true, "refund_max": "paid minus already refunded"}),
        ),
        (Some(ToolKind::RefundPolicy), json!({}), json!({"text": "Within a week."})),
        (Some(ToolKind::ListOrders), json!({}), json!({"orders": []})),
        (
            Some(ToolKind::ListOrders),
            json!({}),
            json!({"orders": [{"order_id": "A1003", "placed_at": "2026-11-27T20:00:00+08:00", "status": "SHIPPED", "total": 1997.0, "currency": "CNY"}]}),
        ),
        (Some(ToolKind::Refund), json!({"order_id": "A1032"}), json!({"error": "order A1032 is SHIPPED"})),
        (Some(ToolKind::GetOrder), json!({"order_id": "A9999"}), json!({"error": "order A9999 not found"})),
        (Some(ToolKind::TrackShipment), json!({"order_id": "A1"}), json!({"error": "no parcel yet"})),
        (Some(ToolKind::GetOrder), json!({"order_id": "A2"}), json!({"error": "timeout"})),
        (Some(ToolKind::GetProduct), json!({"sku": "SKU-2"}), json!({"error": "no product SKU-2"})),
        (Some(ToolKind::GetProduct), json!({"name": "kettle"}), json!({"error": "unknown product"})),
        (Some(ToolKind::CheckCoupon), json!({"code": "Z"}), json!({"error": "busy"})),
        (None, json!({}), json!({"error": "busy"})),
    ];
    let mut out: Vec<String> = shapes.iter().map(|(k, a, r)| render(*k, a, &r.to_string(), l).join(" ")).collect();
    out.extend(newest_order(&shapes[17].2.to_string(), l).map(|(_, line)| line));
    out
}

#[test]
fn every_shape_reads_in_chinese_of_its_script_with_the_shops_ids_names_and_amounts() {
    let hans = every_shape(Language::SimplifiedChinese);
    let hant = every_shape(Language::TraditionalChinese);
    assert_eq!(
        hans[0],
        "订单 A1013 已发货（下单日期 2026-11-19）：2 × Black Down Jacket L；合计 1798 CNY。已退款 100 CNY。\
         包裹由 YTO Express 承运（运单号 YT649469840891）；最新动态：2026-11-22 03:00 于 Hangzhou 海关扣留。\
         原预计 2026-11-23 送达，现已逾期；承运商尚未给出新的送达日期。"
    );
    assert_eq!(hant[1], "訂單 A1034 已於 2026-11-25 送達。");
    assert_eq!(hans[5], "Grey Running Shoes 43（SKU-1016）缺货，预计 2026-12-05 补货；价格 549 CNY。 未找到：SKU-9。");
    assert_eq!(
        hant[9],
        "優惠券 TEA5 可以使用。使用條件：立減 5 CNY，最低消費 80 CNY，僅限 grocery、tea 類商品，僅限首單，有效期至 2026-12-31。\
         購買 2 × Green Tea 250g（176 CNY）可減 5 CNY。附加條件：once per customer。"
    );
    assert_eq!(hans[13], "订单 A1016 已退款：797 CNY（退款编号 RF-A1016-1）。该订单累计已退款：797 CNY。");
    assert_eq!(hant[19], "未找到訂單 A9999。");
    assert_eq!(
        hans.last().map(String::as_str),
        Some("您最近的订单是 A1003（下单日期 2026-11-27，已发货，合计 1997 CNY）。")
    );
    for (language, sentences) in [(Language::SimplifiedChinese, &hans), (Language::TraditionalChinese, &hant)] {
        for s in sentences.iter() {
            let foreign: String = s.chars().filter(|c| language.foreign_character(*c)).collect();
            assert!(foreign.is_empty(), "{language}: {foreign} in {s}");
            assert_eq!(Language::detect(s, Some(language)), language, "{s}");
        }
    }
    // English is today's, word for word.
    let en = every_shape(Language::English);
    assert!(
        en[0].starts_with("Order A1013 is shipped (placed on 2026-11-19): 2 × Black Down Jacket L; total 1798 CNY.")
    );
    assert_eq!(en[19], "Order A9999 was not found.");
}

/// Every sentence of `l`'s script and no English sentence word in it.
fn assert_chinese(l: Language, s: &str) {
    for word in ["expired", "minimum", "basket", "first", "customer", "refund", "window", "delivered", "accepted"] {
        assert!(!s.contains(word), "{l}: English '{word}' in {s}");
    }
    let foreign: String = s.chars().filter(|c| l.foreign_character(*c)).collect();
    assert!(foreign.is_empty(), "{l}: {foreign} in {s}");
}

#[test]
fn a_coupons_reasons_are_written_from_the_shops_codes_in_chinese() {
    let hans = Language::SimplifiedChinese;
    let hant = Language::TraditionalChinese;
    let expired = json!({"code": "DOUBLE11", "exists": true, "usable": false,
        "reasons": ["DOUBLE11 expired on 2026-11-12"], "findings": [{"code": "expired", "valid_until": "2026-11-12"}],
        "kind": "percent", "value": 15.0, "min_spend": 500.0, "valid_until": "2026-11-12", "currency": "CNY"});
    let s = render(Some(ToolKind::CheckCoupon), &json!({"code": "DOUBLE11"}), &expired.to_string(), hant).join(" ");
    assert_eq!(
        s,
        "優惠券 DOUBLE11 不能使用：已於 2026-11-12 過期。使用條件：立減 15%，最低消費 500 CNY，有效期至 2026-11-12。"
    );
    let short = json!({"code": "TECH100", "exists": true, "usable": false,
        "reasons": ["the minimum spend for TECH100 is 999.00 CNY; this basket is 629.00 CNY (370.00 CNY short)",
                    "TECH100 is for a customer's first order only, and this customer already has 3 order(s)",
                    "TECH100 can be used 1 time(s) per customer and this customer has already used it",
                    "TECH100 applies only to electronics products, not apparel"],
        "findings": [{"code": "below_min_spend", "min_spend": 999.0, "order_total": 629.0, "short": 370.0},
                     {"code": "first_order_only", "orders": 3},
                     {"code": "used_up", "max_uses": 1},
                     {"code": "wrong_category", "categories": ["electronics"], "category": "apparel"}],
        "currency": "CNY"});
    let s = render(Some(ToolKind::CheckCoupon), &json!({"code": "TECH100"}), &short.to_string(), hans).join(" ");
    assert_eq!(
        s,
        "优惠券 TECH100 不能使用：最低消费 999 CNY，当前金额 629 CNY，还差 370 CNY；仅限首单使用，您已有 3 笔订单；\
         每位顾客限用 1 次，您已用过；仅限 electronics 类商品，不适用于 apparel 类商品。"
    );
    let pending = json!({"code": "SAVE20", "exists": true, "usable": true,
        "reasons": ["needs a basket of at least 300.00 CNY", "applies only to apparel, shoes products"],
        "findings": [{"code": "needs_min_spend", "min_spend": 300.0}, {"code": "needs_category", "categories": ["apparel", "shoes"]}],
        "currency": "CNY"});
    let s = render(Some(ToolKind::CheckCoupon), &json!({"code": "SAVE20"}), &pending.to_string(), hant).join(" ");
    assert_eq!(s, "優惠券 SAVE20 可以使用。附加條件：訂單金額需滿 300 CNY；僅適用於 apparel、shoes 類商品。");
    for l in [hans, hant] {
        for c in [&expired, &short, &pending] {
            assert_chinese(l, &render(Some(ToolKind::CheckCoupon), &json!({}), &c.to_string(), l).join(" "));
        }
    }
    // English keeps the shop's own sentences.
    let en = render(Some(ToolKind::CheckCoupon), &json!({}), &expired.to_string(), Language::English).join(" ");
    assert!(en.starts_with("Coupon DOUBLE11 cannot be used: DOUBLE11 expired on 2026-11-12."), "{en}");
}

#[test]
fn a_refund_the_shop_refuses_is_explained_from_its_code_in_chinese() {
    let closed = json!({"error": "order A1006 was delivered on 2026-11-18 06:00: the 7-day refund window closed on 2026-11-25 06:00",
        "code": "refund_window_closed", "order_id": "A1006", "delivered_at": "2026-11-18T06:00:00+08:00",
        "window_days": 7, "window_closed_at": "2026-11-25T06:00:00+08:00"});
    let args = json!({"order_id": "A1006"});
    let s = render(Some(ToolKind::Refund), &args, &closed.to_string(), Language::SimplifiedChinese).join(" ");
    assert_eq!(
        s,
        "订单 A1006 的退款未能办理：该订单已于 2026-11-18 06:00 送达，7 天的退款期限已于 2026-11-25 06:00 结束。"
    );
    let more = json!({"error": "a refund of 500.00 CNY exceeds what is refundable on order A1016: 398.00 CNY (797.00 CNY paid minus 399.00 CNY already refunded)",
        "code": "exceeds_refundable", "order_id": "A1016", "amount": 500.0, "refundable": 398.0, "paid": 797.0,
        "refunded": 399.0, "currency": "CNY"});
    let s =
        render(Some(ToolKind::Refund), &json!({"order_id": "A1016"}), &more.to_string(), Language::TraditionalChinese)
            .join(" ");
    assert_eq!(s, "訂單 A1016 的退款未能辦理：退款 500 CNY 超過該訂單可退的 398 CNY（已付 797 CNY，已退 399 CNY）。");
    let others = [
        json!({"error": "x", "code": "not_delivered", "order_id": "A1032", "status": "SHIPPED"}),
        json!({"error": "x", "code": "not_paid", "order_id": "A1001", "status": "PENDING_PAYMENT"}),
        json!({"error": "x", "code": "nothing_left", "order_id": "A1009", "paid": 1098.0, "refunded": 1098.0, "currency": "CNY"}),
        json!({"error": "x", "code": "no_delivery_time", "order_id": "A1009"}),
    ];
    for l in [Language::SimplifiedChinese, Language::TraditionalChinese] {
        for e in [&closed, &more].into_iter().chain(&others) {
            let s = render(Some(ToolKind::Refund), &args, &e.to_string(), l).join(" ");
            assert!(!s.contains(": x") && !s.contains("：x"), "the shop's text is not quoted: {s}");
            assert_chinese(l, &s);
        }
    }
    // English keeps the shop's own sentence.
    let en = render(Some(ToolKind::Refund), &args, &closed.to_string(), Language::English).join(" ");
    assert!(en.ends_with("the 7-day refund window closed on 2026-11-25 06:00."), "{en}");
}

#[test]
fn the_policy_is_written_from_its_numbers_in_chinese() {
    let p = json!({"refund_window_days_after_delivery": 7, "refund_requires_paid": true,
        "refund_max": "paid minus already refunded", "currency": "CNY",
        "text": "Refunds are accepted within 7 days after delivery for paid orders, up to the amount paid minus anything already refunded (CNY). An order that has not been delivered yet cannot be refunded: the refund window starts at delivery."});
    let s = render(Some(ToolKind::RefundPolicy), &json!({}), &p.to_string(), Language::SimplifiedChinese).join(" ");
    assert_eq!(s, "退款政策：已付款的订单签收后 7 天内可申请退款；尚未送达的订单不能退款，退款期限从送达时开始计算。");
    let t = render(Some(ToolKind::RefundPolicy), &json!({}), &p.to_string(), Language::TraditionalChinese).join(" ");
    assert_chinese(Language::TraditionalChinese, &t);
}

#[test]
fn an_order_without_a_parcel_yet_is_explained_from_its_code_in_chinese() {
    let none = json!({"error": "order A1029 has no shipment yet (status PAID)", "code": "no_shipment_yet",
        "order_id": "A1029", "status": "PAID"});
    let args = json!({"order_id": "A1029"});
    let hans = render(Some(ToolKind::TrackShipment), &args, &none.to_string(), Language::SimplifiedChinese).join(" ");
    assert_eq!(hans, "订单 A1029 还没有包裹：该订单已付款，尚未发货。");
    let hant = render(Some(ToolKind::TrackShipment), &args, &none.to_string(), Language::TraditionalChinese).join(" ");
    assert_eq!(hant, "訂單 A1029 還沒有包裹：該訂單已付款，尚未發貨。");
    let en = render(Some(ToolKind::TrackShipment), &args, &none.to_string(), Language::English).join(" ");
    assert_eq!(en, "The parcel of order A1029 could not be tracked: order A1029 has no shipment yet (status PAID).");
}

#[test]
fn a_refusal_with_a_code_is_decided_on_its_code_and_never_quoted_in_english_in_chinese() {
    let hans = Language::SimplifiedChinese;
    let r = |kind, args: Value, result: Value, l| render(Some(kind), &args, &result.to_string(), l).join(" ");
    // The code decides "not found", not the words of the message.
    let busy = json!({"error": "order lookup not found in cache, try later", "code": "unavailable"});
    assert_eq!(
        r(ToolKind::GetOrder, json!({"order_id": "A2"}), busy.clone(), Language::English),
        "Order A2 could not be looked up: order lookup not found in cache, try later."
    );
    assert_eq!(
        r(ToolKind::GetOrder, json!({"order_id": "A2"}), busy, hans),
        "无法查询订单 A2：商店暂时无法处理，请稍后再试。"
    );
    let gone = json!({"error": "order A9 is gone", "code": "not_found"});
    assert_eq!(r(ToolKind::GetOrder, json!({"order_id": "A9"}), gone, hans), "未找到订单 A9。");
    let product = json!({"error": "no product matches 'kettle'", "code": "not_found"});
    assert_eq!(
        r(
            ToolKind::CheckCoupon,
            json!({"code": "TEA5", "product_name": "kettle"}),
            product,
            Language::TraditionalChinese
        ),
        "無法查詢優惠券 TEA5：未找到相關記錄。"
    );
    let bad = json!({"error": "invalid arguments for refund: missing field `order_id`", "code": "invalid_arguments"});
    assert_eq!(
        r(ToolKind::Refund, json!({"order_id": "A1"}), bad, hans),
        "订单 A1 的退款未能办理：请求的信息不完整或有误。"
    );
}
