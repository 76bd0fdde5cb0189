//! The offline model's sentences in each language it writes: the `say!` macro that picks one of three templates, the label, and the Chinese description of a subtask.
//!
//! Every template exists three times — English, Simplified Chinese, Traditional Chinese — written
//! out rather than converted, so each reads as its script writes it; a test renders every one and
//! checks that no character of the other script slipped in. Ids, codes, names, dates and amounts
//! are put in as the shop has them.

use swarm_core::language::Language;

use crate::intent::analyse;

/// `say!(language, "English {x}", "简体 {x}", "繁體 {x}")`: the template of `language`, formatted
/// with the names it captures.
macro_rules! say {
    ($language:expr, $en:literal, $hans:literal, $hant:literal $(,)?) => {
        match $language {
            swarm_core::language::Language::English => format!($en),
            swarm_core::language::Language::SimplifiedChinese => format!($hans),
            swarm_core::language::Language::TraditionalChinese => format!($hant),
        }
    };
}
pub(crate) use say;

/// `zh!(language, "简体 {x}", "繁體 {x}")`: the Traditional template for Traditional Chinese,
/// else the Simplified one (for text that exists only in Chinese).
macro_rules! zh {
    ($language:expr, $hans:literal, $hant:literal $(,)?) => {
        match $language {
            swarm_core::language::Language::TraditionalChinese => format!($hant),
            _ => format!($hans),
        }
    };
}
pub(crate) use zh;

/// Last line of every reply the offline model writes in English.
pub const OFFLINE_LABEL: &str = "— Answered by lambda-swarm's offline model (no LLM configured).";

/// The label a reply in `language` ends with; the Chinese ones name the offline model in English
/// too, so an operator reading any reply sees where it came from.
pub fn offline_label(language: Language) -> &'static str {
    match language {
        Language::English => OFFLINE_LABEL,
        Language::SimplifiedChinese => "— 本回复由 lambda-swarm 的离线模型（offline model，未配置 LLM）生成。",
        Language::TraditionalChinese => "— 本回覆由 lambda-swarm 的離線模型（offline model，未設定 LLM）產生。",
    }
}

/// Joins list items the way `language` does: "a, b and c", "a、b、c".
pub(crate) fn join_list(items: &[String], language: Language) -> String {
    match (items, language) {
        ([], _) => String::new(),
        ([one], _) => one.clone(),
        ([init @ .., last], Language::English) => format!("{} and {last}", init.join(", ")),
        (all, _) => all.join("、"),
    }
}

/// What a subtask instruction (English, as the offline planner writes it, or any planner's)
/// asks, as a Chinese verb phrase for "could not …": read from its intents and entities, so the
/// sentence names the same orders, products and codes. `None` for English.
pub(crate) fn zh_clause(instruction: &str, language: Language) -> Option<String> {
    if language == Language::English {
        return None;
    }
    let a = analyse(instruction);
    let (i, e) = (a.intents, a.entities);
    let mut parts: Vec<String> = Vec::new();
    for id in &e.order_ids {
        let part = match (i.refund, i.status, i.shipment) {
            (true, ..) => zh!(language, "为订单 {id} 办理退款", "為訂單 {id} 辦理退款"),
            (_, true, true) => zh!(language, "查询订单 {id} 的状态和物流", "查詢訂單 {id} 的狀態和物流"),
            (_, false, true) => zh!(language, "查询订单 {id} 的物流", "查詢訂單 {id} 的物流"),
            _ => zh!(language, "查询订单 {id} 的状态", "查詢訂單 {id} 的狀態"),
        };
        parts.push(part);
    }
    if i.latest {
        parts.push(zh!(language, "查询您最近的订单", "查詢您最近的訂單"));
    }
    if i.list {
        parts.push(zh!(language, "列出您的订单", "列出您的訂單"));
    }
    if i.refund_without_order {
        parts.push(zh!(language, "说明退款政策并列出您的订单", "說明退款政策並列出您的訂單"));
    }
    if i.stock || i.price {
        let mut subjects = e.skus.clone();
        subjects.extend(e.product.iter().map(|p| p.name.clone()));
        let subject = join_list(&subjects, language);
        parts.push(match (i.stock, i.price) {
            (true, false) => zh!(language, "查询 {subject} 的库存", "查詢 {subject} 的庫存"),
            (false, true) => zh!(language, "查询 {subject} 的价格", "查詢 {subject} 的價格"),
            _ => zh!(language, "查询 {subject} 的价格和库存", "查詢 {subject} 的價格和庫存"),
        });
    }
    if i.coupon {
        for code in &e.codes {
            parts.push(zh!(language, "查询优惠券 {code} 能否使用", "查詢優惠券 {code} 能否使用"));
        }
    }
    if i.coupon_without_code {
        parts.push(zh!(language, "确认您要查询的优惠券", "確認您要查詢的優惠券"));
    }
    if i.policy {
        parts.push(zh!(language, "查询退款政策", "查詢退款政策"));
    }
    if parts.is_empty() {
        parts.push(zh!(language, "处理您的这部分问题", "處理您的這部分問題"));
    }
    Some(parts.join("、"))
}

/// The greeting of a conversation that asks for nothing the tools do.
pub(crate) fn greeting(language: Language) -> String {
    say!(
        language,
        "Hello! How can I help you today? I can check your orders and deliveries, product stock and prices, coupons and refunds.",
        "您好！请问有什么可以帮您？我可以查询订单和物流、商品库存和价格、优惠券以及退款。",
        "您好！請問有什麼可以幫您？我可以查詢訂單和物流、商品庫存和價格、優惠券以及退款。",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traditional_text_is_read_through_simplified_keywords() {
        let a = analyse("能用 DOUBLE11 這張券嗎？");
        assert!(a.intents.coupon && a.entities.codes == ["DOUBLE11"], "{a:?}");
    }

    #[test]
    fn a_failed_instruction_is_described_in_chinese_with_its_ids() {
        let hans = Language::SimplifiedChinese;
        let hant = Language::TraditionalChinese;
        assert_eq!(zh_clause("Check the status of order A1029.", hans).as_deref(), Some("查询订单 A1029 的状态"));
        assert_eq!(
            zh_clause("Check whether coupon SAVE20 can be used.", hant).as_deref(),
            Some("查詢優惠券 SAVE20 能否使用")
        );
        assert_eq!(
            zh_clause("Check whether SKU-1016 and SKU-1019 are in stock.", hans).as_deref(),
            Some("查询 SKU-1016、SKU-1019 的库存")
        );
        assert_eq!(
            zh_clause("Refund order A1016 if the shop allows it; the customer's reason: \"杂音\".", hant).as_deref(),
            Some("為訂單 A1016 辦理退款")
        );
        assert_eq!(zh_clause("Tell a joke.", hans).as_deref(), Some("处理您的这部分问题"));
        assert_eq!(zh_clause("Check the status of order A1029.", Language::English), None);
    }
}
