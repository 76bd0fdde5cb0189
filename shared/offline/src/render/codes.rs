//! The shop's codes in Chinese: a coupon's findings, a refund the policy rules out and the refund policy, written from their codes and figures rather than quoted from the shop's English sentences.

use serde_json::{Map, Value};

use swarm_core::language::Language;

use super::{money, number, scalar, stamp, status_word, str_of};
use crate::lang::{join_list, zh};

/// Why a coupon cannot be used, or what it still depends on: in English the shop's own
/// `reasons`; in Chinese each written from its code and figures (`findings`), the shop's sentence
/// only where a code is missing or unknown (another shop's).
pub(super) fn coupon_reasons(c: &Map<String, Value>, code: &str, currency: &str, l: Language) -> Vec<String> {
    let reasons: Vec<String> =
        c.get("reasons").and_then(Value::as_array).map(|r| r.iter().map(scalar).collect()).unwrap_or_default();
    let findings = c.get("findings").and_then(Value::as_array).filter(|f| f.len() == reasons.len());
    match findings {
        Some(findings) if l != Language::English => findings
            .iter()
            .zip(reasons)
            .map(|(f, reason)| f.as_object().and_then(|f| coupon_finding(f, code, currency, l)).unwrap_or(reason))
            .collect(),
        _ => reasons,
    }
}

/// One coupon finding (`{"code": "expired", "valid_until": …}`) in Chinese; `None` for a code or
/// figures it does not know.
fn coupon_finding(f: &Map<String, Value>, code: &str, currency: &str, l: Language) -> Option<String> {
    let amount = |key: &str| f.get(key).and_then(Value::as_f64).map(|v| money(v, currency));
    let list = |key: &str| {
        f.get(key).and_then(Value::as_array).map(|a| join_list(&a.iter().map(scalar).collect::<Vec<_>>(), l))
    };
    Some(match str_of(f, "code")? {
        "unknown_code" => zh!(l, "不存在代码为 {code} 的优惠券", "不存在代碼為 {code} 的優惠券"),
        "expired" => {
            let until = str_of(f, "valid_until")?;
            zh!(l, "已于 {until} 过期", "已於 {until} 過期")
        }
        "below_min_spend" => {
            let (min, total, short) = (amount("min_spend")?, amount("order_total")?, amount("short")?);
            zh!(l, "最低消费 {min}，当前金额 {total}，还差 {short}", "最低消費 {min}，目前金額 {total}，還差 {short}")
        }
        "needs_min_spend" => {
            let min = amount("min_spend")?;
            zh!(l, "订单金额需满 {min}", "訂單金額需滿 {min}")
        }
        "wrong_category" => {
            let (list, category) = (list("categories")?, str_of(f, "category")?);
            zh!(l, "仅限 {list} 类商品，不适用于 {category} 类商品", "僅限 {list} 類商品，不適用於 {category} 類商品")
        }
        "needs_category" => {
            let list = list("categories")?;
            zh!(l, "仅适用于 {list} 类商品", "僅適用於 {list} 類商品")
        }
        "first_order_only" => {
            let orders = f.get("orders").map(scalar)?;
            zh!(l, "仅限首单使用，您已有 {orders} 笔订单", "僅限首單使用，您已有 {orders} 筆訂單")
        }
        "used_up" => {
            let max = f.get("max_uses").map(scalar)?;
            zh!(l, "每位顾客限用 {max} 次，您已用过", "每位顧客限用 {max} 次，您已用過")
        }
        _ => return None,
    })
}

/// Why the shop refused a refund, in Chinese from the refusal's code and figures
/// (`{"error": …, "code": "refund_window_closed", …}`); `None` in English (the shop's own
/// sentence is English) and for a refusal without a code this knows.
pub(super) fn refund_rule(e: &Map<String, Value>, l: Language) -> Option<String> {
    if l == Language::English {
        return None;
    }
    let currency = str_of(e, "currency").unwrap_or("");
    let amount = |key: &str| e.get(key).and_then(Value::as_f64).map(|v| money(v, currency));
    Some(match str_of(e, "code")? {
        "not_paid" => {
            let word = status_word(str_of(e, "status")?, l);
            zh!(l, "该订单{word}，尚未付款，没有可退的金额", "該訂單{word}，尚未付款，沒有可退的金額")
        }
        "nothing_left" => {
            let (paid, refunded) = (amount("paid")?, amount("refunded")?);
            zh!(
                l,
                "该订单已付 {paid}，已退 {refunded}，没有可退的金额",
                "該訂單已付 {paid}，已退 {refunded}，沒有可退的金額"
            )
        }
        "not_delivered" => {
            let word = status_word(str_of(e, "status")?, l);
            zh!(
                l,
                "该订单{word}，尚未送达，退款期限从送达时开始计算",
                "該訂單{word}，尚未送達，退款期限從送達時開始計算"
            )
        }
        "no_delivery_time" => {
            zh!(l, "该订单没有送达时间记录，无法确定退款期限", "該訂單沒有送達時間記錄，無法確定退款期限")
        }
        "refund_window_closed" => {
            let (at, until) = (stamp(str_of(e, "delivered_at")?), stamp(str_of(e, "window_closed_at")?));
            let days = e.get("window_days").map(scalar)?;
            zh!(
                l,
                "该订单已于 {at} 送达，{days} 天的退款期限已于 {until} 结束",
                "該訂單已於 {at} 送達，{days} 天的退款期限已於 {until} 結束"
            )
        }
        "exceeds_refundable" => {
            let (amount_, refundable) = (amount("amount")?, amount("refundable")?);
            let (paid, refunded) = (amount("paid")?, amount("refunded")?);
            zh!(
                l,
                "退款 {amount_} 超过该订单可退的 {refundable}（已付 {paid}，已退 {refunded}）",
                "退款 {amount_} 超過該訂單可退的 {refundable}（已付 {paid}，已退 {refunded}）"
            )
        }
        _ => return None,
    })
}

/// The policy in Chinese from its window and whether it refunds paid orders only (the shop's
/// `text` is English); `None` in English or without a window.
pub(super) fn policy_in_chinese(p: &Map<String, Value>, l: Language) -> Option<String> {
    if l == Language::English {
        return None;
    }
    let days = number(p.get("refund_window_days_after_delivery").and_then(Value::as_f64)?);
    let orders = if p.get("refund_requires_paid").and_then(Value::as_bool) == Some(true) {
        zh!(l, "已付款的订单", "已付款的訂單")
    } else {
        zh!(l, "订单", "訂單")
    };
    Some(zh!(
        l,
        "退款政策：{orders}签收后 {days} 天内可申请退款；尚未送达的订单不能退款，退款期限从送达时开始计算。",
        "退款政策：{orders}簽收後 {days} 天內可申請退款；尚未送達的訂單不能退款，退款期限從送達時開始計算。"
    ))
}

/// An order without a parcel yet (`{"error": …, "code": "no_shipment_yet", "order_id", "status"}`)
/// in Chinese; `None` in English (the shop's sentence is English) and for any other answer.
pub(super) fn no_shipment_yet(e: &Map<String, Value>, l: Language) -> Option<String> {
    if l == Language::English || str_of(e, "code")? != "no_shipment_yet" {
        return None;
    }
    let (order, word) = (str_of(e, "order_id")?, status_word(str_of(e, "status")?, l));
    Some(zh!(
        l,
        "订单 {order} 还没有包裹：该订单{word}，尚未发货。",
        "訂單 {order} 還沒有包裹：該訂單{word}，尚未發貨。"
    ))
}

/// A refusal's class code in Chinese, for a refusal without a sentence of its own; `None` in
/// English and for a code this does not know.
pub(super) fn refusal_in_chinese(code: &str, l: Language) -> Option<String> {
    if l == Language::English {
        return None;
    }
    Some(match code {
        "not_found" => zh!(l, "未找到相关记录", "未找到相關記錄"),
        "invalid_arguments" => zh!(l, "请求的信息不完整或有误", "請求的資訊不完整或有誤"),
        "unavailable" => zh!(l, "商店暂时无法处理，请稍后再试", "商店暫時無法處理，請稍後再試"),
        "refused" => zh!(l, "商店拒绝了该请求", "商店拒絕了該請求"),
        "needs_approval" => zh!(l, "需要工作人员批准", "需要工作人員核准"),
        _ => return None,
    })
}
