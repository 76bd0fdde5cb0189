//! Intent detection for the offline model: keyword tables (English and Simplified Chinese, Traditional text read through them) turned into what a piece of text asks for.

use std::sync::LazyLock;

use crate::text::{self, Entities, Pat};

macro_rules! pat {
    ($(#[$doc:meta])* $name:ident, $re:expr) => {
        $(#[$doc])*
        static $name: LazyLock<Pat> = LazyLock::new(|| Pat::new($re));
    };
}

pat!(
    STATUS_STRONG,
    r"(?i)\bstatus\b|\bdelivered\b|\bstate of\b|\bprogress\b|\bhappening with\b|\bhas\b[^.?!]*\bshipped\b|状态|进度|签收|送达|送到了|送到没|发货了|付款了|支付了|情况|怎么样了"
);
pat!(
    /// "Check my order", "look up orders A1001 …": a status question unless a parcel is asked about.
    CHECK_ORDER,
    r"(?i)\b(?:check|look up|see)\b[^.?!]*\borders?\b"
);
pat!(ORDER_WORD, r"(?i)\borders?\b|订单|单号");
pat!(
    SHIPMENT_STRONG,
    r"(?i)\bparcels?\b|\bpackages?\b|\barriv|\btrack|\bshipping\b|\bshipment|\bdelivery\b|\beta\b|\bcourier|\bcarrier|\blogistics|\bin transit\b|\bdelayed\b|\blate\b|\boverdue\b|\bstuck\b|\bwhen will\b[^.?!]*\b(?:come|get here|reach|be here|deliver|arrive)|\bwill\b[^.?!]*\bbe delivered\b|到哪|在哪|物流|快递|包裹|什么时候到|何时到|几时到|运单|配送|派送|(?:^|[^送])到了吗|还没到|没收到"
);
pat!(WHERE, r"(?i)\bwhere\b|\bwhere's\b|\bwhereabouts\b");
pat!(WILL_BE_DELIVERED, r"(?i)\bwill\b[^.?!]*\bdelivered\b");
pat!(
    STOCK,
    r"(?i)\bstock\b|\bstocks\b|\bavailable\b|\bavailability\b|\bsold out\b|\brestock|\binventory\b|\bdo you have\b|\bhave you got\b|\bdo you sell\b|库存|有货|没货|缺货|补货|现货|有没有货|卖完"
);
pat!(PRICE, r"(?i)\bprices?\b|\bhow much\b|\bcosts?\b|多少钱|价格|价钱|怎么卖|几块|售价");
pat!(COUPON_WORD, r"(?i)\bcoupons?\b|\bvouchers?\b|\bpromo\b|\bdiscount|\bcodes?\b|优惠券|优惠码|折扣|券|优惠");
pat!(COUPON_USE, r"(?i)\buse\b|\bused\b|\bapply\b|\bredeem\b|\bvalid\b|\bworks?\b|能用|可以用|用吗|可用|有效");
pat!(
    POLICY,
    r"(?i)\bpolicy\b|\bpolicies\b|\bterms\b|\bhow (?:do|can) i return\b|\breturn window\b|\bcan i return\b|政策|规则|规定|几天内|多少天"
);
pat!(
    REFUND,
    r"(?i)\brefund|\bmoney back\b|\breturn (?:it|this|them|the|my|order)\b|\bsend (?:it|this|them) back\b|退款|退货|退钱|退掉"
);
pat!(
    LATEST,
    r"(?i)\b(?:latest|most recent|recent|last|newest|previous)\b[^.?!]*\b(?:orders?|purchases?|parcels?|packages?|delivery|shipment)\b|最近|最新|上一笔|上一单|上一个订单|最后一笔|刚买的|刚下的"
);
pat!(
    LIST,
    r"(?i)\b(?:my|all|customer's|their|your)\s+(?:recent\s+)?orders\b|\border history\b|\bmy purchases\b|\bwhat did i (?:order|buy)\b|\blist\b[^.?!]*\borders\b|我的订单|所有订单|全部订单|哪些订单|订单列表|历史订单"
);
pat!(
    GREETING,
    r"(?i)^\W*(?:hi|hello|hey|hiya|good (?:morning|afternoon|evening)|thanks|thank you|cheers|greetings)\b|\bgreet|你好|您好|在吗|谢谢|哈喽|嗨"
);
pat!(PRONOUN, r"(?i)\b(?:it|its|it's|they|them|their|this|that|these|those|one)\b|它|这个|那个|这些|那些");

/// What the words of a piece of text ask for, before entities are taken into account.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Words {
    pub status: bool,
    pub order: bool,
    pub shipment: bool,
    pub where_: bool,
    pub stock: bool,
    pub price: bool,
    pub coupon: bool,
    pub coupon_use: bool,
    pub policy: bool,
    pub refund: bool,
    pub latest: bool,
    pub list: bool,
    pub greeting: bool,
    pub pronoun: bool,
}

impl Words {
    pub(crate) fn of(text: &str) -> Self {
        let will_deliver = WILL_BE_DELIVERED.is_match(text);
        let shipment = SHIPMENT_STRONG.is_match(text) || will_deliver;
        let where_ = WHERE.is_match(text);
        Self {
            status: (STATUS_STRONG.is_match(text) && !will_deliver)
                || (CHECK_ORDER.is_match(text) && !shipment && !where_),
            order: ORDER_WORD.is_match(text),
            shipment,
            where_,
            stock: STOCK.is_match(text),
            price: PRICE.is_match(text),
            coupon: COUPON_WORD.is_match(text),
            coupon_use: COUPON_USE.is_match(text),
            policy: POLICY.is_match(text),
            refund: REFUND.is_match(text),
            latest: LATEST.is_match(text),
            list: LIST.is_match(text),
            greeting: GREETING.is_match(text),
            pronoun: PRONOUN.is_match(text),
        }
    }

    /// Any word that asks for something (greetings and pronouns do not).
    pub(crate) fn any_request(&self) -> bool {
        self.status
            || self.shipment
            || self.where_
            || self.stock
            || self.price
            || self.coupon
            || self.policy
            || self.refund
            || self.latest
            || self.list
    }

    /// Words that make a piece a question of its own even without an entity.
    pub(crate) fn standalone(&self) -> bool {
        self.latest || self.list || self.policy
    }
}

/// What a piece of text asks for, once entities are taken into account.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Intents {
    /// Order status (per order id, or of the newest order with `latest`).
    pub status: bool,
    /// Parcel whereabouts (per order id, or of the newest order with `latest`).
    pub shipment: bool,
    /// Stock of the products / SKUs.
    pub stock: bool,
    /// Price of the products / SKUs.
    pub price: bool,
    /// Coupon check, per code.
    pub coupon: bool,
    /// Coupon words but no code: ask for it.
    pub coupon_without_code: bool,
    /// The refund policy.
    pub policy: bool,
    /// A refund, per order id.
    pub refund: bool,
    /// A refund without an order id: explain the policy and list the orders.
    pub refund_without_order: bool,
    /// The newest order (no order id given).
    pub latest: bool,
    /// The customer's orders.
    pub list: bool,
    /// Only a greeting or thanks.
    pub greeting: bool,
}

impl Intents {
    /// Whether anything needs a tool.
    pub(crate) fn actionable(&self) -> bool {
        self.status
            || self.shipment
            || self.stock
            || self.price
            || self.coupon
            || self.coupon_without_code
            || self.policy
            || self.refund
            || self.refund_without_order
            || self.latest
            || self.list
    }
}

/// A piece of text with its words, entities and resolved intents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Analysis {
    pub words: Words,
    pub entities: Entities,
    pub intents: Intents,
}

/// Analyses one piece of text (a clause of the customer's message, or a subtask instruction).
pub(crate) fn analyse(text: &str) -> Analysis {
    // The keyword tables are written in Simplified characters: Traditional text is read through them.
    let text = crate::fold::fold_to_simplified(text);
    let words = Words::of(&text);
    let entities = text::entities(&text);
    let intents = resolve(&words, &entities);
    Analysis { words, entities, intents }
}

/// Turns words and entities into intents: weak words ("order", "where") count
/// only with an entity they can act on; entity-bound intents need their entity.
fn resolve(w: &Words, e: &Entities) -> Intents {
    let has_ids = !e.order_ids.is_empty();
    let has_products = !e.skus.is_empty() || e.product.is_some();
    let mut i = Intents::default();

    i.coupon = !e.codes.is_empty() && (w.coupon || w.coupon_use);
    i.coupon_without_code = e.codes.is_empty() && w.coupon && !w.refund && !w.policy;
    i.stock = (w.stock || (!e.skus.is_empty() && !i.coupon)) && has_products;
    i.price = w.price && has_products;
    i.policy = w.policy;
    // A refund moves money: only a plain request triggers it, never a question about the policy.
    i.refund = w.refund && has_ids && !w.policy;
    i.refund_without_order = w.refund && !has_ids && !w.policy;
    let other = i.coupon || i.stock || i.price || i.policy || i.refund || i.coupon_without_code;

    if has_ids {
        i.shipment = !i.refund && (w.shipment || w.where_);
        i.status = !i.refund && (w.status || (w.order && !i.shipment && !other));
    } else if !i.refund_without_order {
        let shipment = w.shipment || (w.where_ && (w.order || w.latest || w.list));
        let status = w.status;
        if w.latest && (shipment || status || w.order || w.list) {
            i.latest = true;
            i.shipment = shipment;
            i.status = status || !shipment;
        } else if w.list {
            if shipment {
                i.latest = true;
                i.shipment = true;
            } else {
                i.list = true;
            }
        } else if (shipment || status) && !other && !has_products && e.codes.is_empty() {
            // "Where is my parcel?" with no id: the newest order is meant.
            i.latest = true;
            i.shipment = shipment;
            i.status = status;
        }
    }

    if !i.actionable() && !has_ids && !has_products && !e.codes.is_empty() {
        i.coupon = true;
    }
    if !i.actionable() && has_ids && !w.refund {
        i.status = true;
    }
    if !i.actionable() && has_products && !w.coupon {
        i.stock = !e.skus.is_empty() || w.stock;
    }
    i.greeting = !i.actionable() && w.greeting;
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intents(text: &str) -> Intents {
        analyse(text).intents
    }

    #[test]
    fn order_status_is_asked_with_an_order_id() {
        let i = intents("我的订单 A1029 现在什么状态");
        assert!(i.status && !i.shipment && !i.coupon);
        assert!(intents("did A1034 get delivered").status);
        assert!(intents("Check all three of my orders A1001, A1013 and A1025 please").status);
    }

    #[test]
    fn where_questions_ask_for_the_shipment() {
        let i = intents("订单 A9999 到哪里了");
        assert!(i.shipment && !i.status);
        let i = intents("where's A1022");
        assert!(i.shipment);
        let i = intents("Where is my parcel for order A1031, and when will it arrive");
        assert!(i.shipment && !i.latest);
    }

    #[test]
    fn the_latest_order_is_meant_when_no_id_is_given() {
        let i = intents("我最近的那笔订单到哪了");
        assert!(i.latest && i.shipment);
        let i = intents("where is my parcel");
        assert!(i.latest && i.shipment);
        let i = intents("what's the status of my most recent order");
        assert!(i.latest && i.status && !i.shipment);
        assert!(intents("show me my orders").list);
    }

    #[test]
    fn coupons_need_a_code_and_next_order_is_not_an_order_question() {
        let i = intents("Can I use WELCOME50 on my next order");
        assert!(i.coupon && !i.status && !i.latest && !i.list);
        let i = intents("优惠券 SAVE20 还能用吗");
        assert!(i.coupon && !i.stock);
        assert!(intents("do you have any coupons").coupon_without_code);
    }

    #[test]
    fn refunds_need_an_order_id_and_policy_questions_do_not() {
        let i = intents("订单 A1016 的耳机有杂音，我想退款");
        assert!(i.refund && !i.status);
        let i = intents("And what is your refund policy");
        assert!(i.policy && !i.refund && !i.refund_without_order);
        let i = intents("I want my money back");
        assert!(i.refund_without_order && !i.refund);
    }

    #[test]
    fn stock_and_price_questions_need_a_product() {
        let i = intents("are the Grey Running Shoes 43 back in stock");
        assert!(i.stock && !i.price);
        let i = intents("how much is the air purifier");
        assert!(i.price && !i.stock);
        let i = intents("can I use TECH100 for a mechanical keyboard");
        assert!(i.coupon && !i.stock && !i.price);
        assert!(!intents("is it in stock").stock);
    }

    #[test]
    fn greetings_are_not_actionable() {
        for g in ["你好", "hi", "Thanks!", "Greet the customer and ask how the shop can help."] {
            let i = intents(g);
            assert!(i.greeting && !i.actionable(), "{g}");
        }
    }
}
