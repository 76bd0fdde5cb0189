//! Tool matching for the offline model: which offered tool does a kind of lookup, scored from tool names and descriptions, and arguments shaped to its schema.

use serde_json::{Map, Value};

use swarm_core::ports::ToolSpec;

/// A kind of lookup or action the offline model knows how to ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ToolKind {
    GetOrder,
    ListOrders,
    TrackShipment,
    GetProduct,
    CheckCoupon,
    RefundPolicy,
    Refund,
}

/// Scoring table of a kind: words of the tool name (after the upstream prefix) and of its description.
struct KindWords {
    /// Name words with their weight; a negative weight rules a tool out in practice.
    name: &'static [(&'static str, i32)],
    /// Description words, +1 each (at most +2 in total).
    description: &'static [&'static str],
    /// The name must hold one of these words (a refund tool never answers a policy question).
    core: &'static [&'static str],
}

/// Name words that say nothing about the kind ("get_order", "check_coupon").
const NEUTRAL_NAME_WORDS: &[&str] = &[
    "get", "check", "find", "lookup", "look", "up", "query", "fetch", "read", "show", "search", "info", "details",
    "by", "id",
];

impl ToolKind {
    fn words(self) -> KindWords {
        match self {
            Self::GetOrder => KindWords {
                name: &[
                    ("order", 4),
                    ("status", 1),
                    ("orders", -6),
                    ("list", -6),
                    ("refund", -8),
                    ("cancel", -8),
                    ("track", -4),
                    ("history", -6),
                ],
                description: &["status", "order id", "one of the customer's orders", "items"],
                core: &["order"],
            },
            Self::ListOrders => KindWords {
                name: &[
                    ("orders", 4),
                    ("list", 3),
                    ("history", 3),
                    ("customer", 1),
                    ("order", 1),
                    ("purchases", 3),
                    ("refund", -8),
                    ("cancel", -8),
                ],
                description: &["newest", "list", "order history", "orders"],
                core: &["orders", "history", "purchases"],
            },
            Self::TrackShipment => KindWords {
                name: &[
                    ("track", 4),
                    ("tracking", 4),
                    ("shipment", 4),
                    ("shipping", 3),
                    ("delivery", 3),
                    ("logistics", 4),
                    ("parcel", 3),
                    ("package", 3),
                    ("shipments", 3),
                ],
                description: &["carrier", "tracking", "parcel", "eta"],
                core: &[
                    "track",
                    "tracking",
                    "shipment",
                    "shipments",
                    "shipping",
                    "delivery",
                    "logistics",
                    "parcel",
                    "package",
                ],
            },
            Self::GetProduct => KindWords {
                name: &[
                    ("product", 4),
                    ("products", 4),
                    ("inventory", 4),
                    ("stock", 4),
                    ("sku", 3),
                    ("item", 2),
                    ("catalog", 3),
                    ("catalogue", 3),
                    ("coupon", -8),
                    ("order", -4),
                ],
                description: &["stock", "price", "sku", "inventory"],
                core: &["product", "products", "inventory", "stock", "sku", "item", "catalog", "catalogue"],
            },
            Self::CheckCoupon => KindWords {
                name: &[
                    ("coupon", 5),
                    ("coupons", 5),
                    ("voucher", 5),
                    ("promo", 4),
                    ("discount", 3),
                    ("redeem", -10),
                    ("apply", -10),
                    ("use", -6),
                ],
                description: &["coupon", "usable", "valid", "discount"],
                core: &["coupon", "coupons", "voucher", "promo", "discount"],
            },
            Self::RefundPolicy => KindWords {
                name: &[("policy", 5), ("refund", 2), ("return", 2), ("returns", 2), ("terms", 2)],
                description: &["policy", "refund window", "days after delivery"],
                core: &["policy", "terms"],
            },
            Self::Refund => KindWords {
                name: &[("refund", 4), ("return", 2), ("policy", -10), ("status", -4), ("list", -6), ("history", -6)],
                description: &["refund", "money back"],
                core: &["refund", "return"],
            },
        }
    }

    /// Short words for a missing tool, e.g. "look up orders".
    pub(crate) fn action(self) -> &'static str {
        match self {
            Self::GetOrder => "look up orders",
            Self::ListOrders => "list your orders",
            Self::TrackShipment => "track parcels",
            Self::GetProduct => "look up products",
            Self::CheckCoupon => "check coupons",
            Self::RefundPolicy => "look up the refund policy",
            Self::Refund => "make refunds",
        }
    }

    /// [`Self::action`] in Chinese of `language`'s script (Simplified for anything but Traditional).
    pub(crate) fn action_zh(self, language: swarm_core::language::Language) -> &'static str {
        let hant = language == swarm_core::language::Language::TraditionalChinese;
        match (self, hant) {
            (Self::GetOrder, false) => "查询订单",
            (Self::GetOrder, true) => "查詢訂單",
            (Self::ListOrders, false) => "列出您的订单",
            (Self::ListOrders, true) => "列出您的訂單",
            (Self::TrackShipment, false) => "查询物流",
            (Self::TrackShipment, true) => "查詢物流",
            (Self::GetProduct, false) => "查询商品",
            (Self::GetProduct, true) => "查詢商品",
            (Self::CheckCoupon, false) => "查询优惠券",
            (Self::CheckCoupon, true) => "查詢優惠券",
            (Self::RefundPolicy, false) => "查询退款政策",
            (Self::RefundPolicy, true) => "查詢退款政策",
            (Self::Refund, false) => "办理退款",
            (Self::Refund, true) => "辦理退款",
        }
    }
}

/// A tool's name without its upstream prefix (`shop__get_order` → `get_order`).
pub(crate) fn bare_name(name: &str) -> &str {
    name.rsplit_once("__").map_or(name, |(_, rest)| rest)
}

/// Splits a tool name into lower-case words: `getOrder-status_v2` → get, order, status, v2.
fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in bare_name(name).chars() {
        if c == '_' || c == '-' || c == '.' || c == ' ' {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// How well `tool` fits `kind`; below [`MIN_SCORE`] it does not.
fn score(kind: ToolKind, tool: &ToolSpec) -> i32 {
    let table = kind.words();
    let mut total = 0;
    for word in name_words(&tool.name) {
        match table.name.iter().find(|(w, _)| *w == word) {
            Some((_, weight)) => total += weight,
            // Every unexplained word makes the match less likely (`get_customer_order_notes` is not `get_order`).
            None if !NEUTRAL_NAME_WORDS.contains(&word.as_str()) => total -= 1,
            None => {}
        }
    }
    if !name_words(&tool.name).iter().any(|w| table.core.contains(&w.as_str())) {
        return i32::MIN;
    }
    let description = tool.description.to_lowercase();
    let from_description = table.description.iter().filter(|w| description.contains(*w)).count().min(2) as i32;
    total + from_description
}

const MIN_SCORE: i32 = 3;

/// The best tool of `tools` for `kind`: highest score, the earliest on a tie; `None` when none fits.
pub(crate) fn find_tool(kind: ToolKind, tools: &[ToolSpec]) -> Option<&ToolSpec> {
    let mut best: Option<(i32, &ToolSpec)> = None;
    for tool in tools {
        let s = score(kind, tool);
        if s >= MIN_SCORE && best.is_none_or(|(b, _)| s > b) {
            best = Some((s, tool));
        }
    }
    best.map(|(_, t)| t)
}

/// Argument names the offline model may fill, each with the property names a schema may use for it.
const SYNONYMS: &[(&str, &[&str])] = &[
    ("order_id", &["order_id", "orderId", "order", "order_no", "order_number", "id"]),
    ("sku", &["sku", "sku_id", "product_id", "item_id"]),
    ("name", &["name", "product_name", "query", "product", "keyword", "q", "search"]),
    ("code", &["code", "coupon_code", "coupon", "promo_code", "voucher", "voucher_code"]),
    ("product_name", &["product_name", "product", "item_name", "name"]),
    ("quantity", &["quantity", "qty", "count", "units"]),
    ("reason", &["reason", "note", "comment"]),
];

/// Properties the gateway fills itself; never sent by the model.
const GATEWAY_OWNED: &[&str] = &["customer_id", "idempotency_key"];

/// Builds the arguments for `tool` from canonical `(name, value)` pairs, keeping
/// only properties its schema declares (any, when it declares none), and never
/// the gateway-owned ones.
pub(crate) fn arguments(tool: &ToolSpec, canonical: &[(&str, Value)]) -> Value {
    let properties = tool.input_schema.get("properties").and_then(Value::as_object);
    let mut out = Map::new();
    for (name, value) in canonical {
        let target = match properties {
            None => Some((*name).to_owned()),
            Some(props) => {
                let candidates = SYNONYMS.iter().find(|(n, _)| n == name).map_or(&[][..], |(_, s)| *s);
                std::iter::once(*name)
                    .chain(candidates.iter().copied())
                    .find(|p| props.contains_key(*p) && !out.contains_key(*p))
                    .map(str::to_owned)
            }
        };
        if let Some(key) = target
            && !GATEWAY_OWNED.contains(&key.as_str())
        {
            out.insert(key, value.clone());
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str, props: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object", "properties": props}),
            side_effecting: false,
        }
    }

    fn shop() -> Vec<ToolSpec> {
        vec![
            tool("crm__get_customer_order_notes", "Notes about an order.", json!({})),
            tool("shop__get_order", "Look up one order: status, items.", json!({"order_id": {}})),
            tool("shop__list_customer_orders", "List the customer's orders, newest first.", json!({})),
            tool("shop__track_shipment", "Track a parcel: carrier, ETA.", json!({"order_id": {}})),
            tool("shop__get_product", "Find a product: price, stock.", json!({"sku": {}, "name": {}})),
            tool("shop__check_coupon", "Check a coupon code.", json!({"code": {}, "product_name": {}, "quantity": {}})),
            tool("shop__redeem_coupon", "Redeem a coupon code.", json!({"code": {}})),
            tool("shop__get_refund_policy", "The refund policy.", json!({})),
            tool("shop__refund", "Refund an order.", json!({"order_id": {}, "reason": {}, "idempotency_key": {}})),
        ]
    }

    #[test]
    fn each_kind_finds_the_tool_whose_name_fits_best() {
        let tools = shop();
        let name = |k| find_tool(k, &tools).map(|t| t.name.as_str());
        assert_eq!(name(ToolKind::GetOrder), Some("shop__get_order"));
        assert_eq!(name(ToolKind::ListOrders), Some("shop__list_customer_orders"));
        assert_eq!(name(ToolKind::TrackShipment), Some("shop__track_shipment"));
        assert_eq!(name(ToolKind::GetProduct), Some("shop__get_product"));
        assert_eq!(name(ToolKind::CheckCoupon), Some("shop__check_coupon"));
        assert_eq!(name(ToolKind::RefundPolicy), Some("shop__get_refund_policy"));
        assert_eq!(name(ToolKind::Refund), Some("shop__refund"));
    }

    #[test]
    fn other_names_for_the_same_job_are_recognised() {
        let tools = vec![
            tool("inv__query_inventory", "Stock by SKU.", json!({"sku": {}})),
            tool("getOrderStatus", "", json!({})),
        ];
        assert_eq!(find_tool(ToolKind::GetProduct, &tools).map(|t| t.name.as_str()), Some("inv__query_inventory"));
        assert_eq!(find_tool(ToolKind::GetOrder, &tools).map(|t| t.name.as_str()), Some("getOrderStatus"));
        assert!(find_tool(ToolKind::Refund, &tools).is_none());
    }

    #[test]
    fn arguments_keep_only_schema_properties_and_never_gateway_owned_ones() {
        let tools = shop();
        let refund = &tools[8];
        let args = arguments(
            refund,
            &[("order_id", json!("A1016")), ("reason", json!("noise")), ("idempotency_key", json!("k"))],
        );
        assert_eq!(args, json!({"order_id": "A1016", "reason": "noise"}));
        let coupon = &tools[5];
        let args = arguments(coupon, &[("code", json!("TEA5")), ("sku", json!("SKU-1022")), ("quantity", json!(2))]);
        assert_eq!(args, json!({"code": "TEA5", "quantity": 2}));
        let search = tool("p", "", json!({"query": {}}));
        assert_eq!(arguments(&search, &[("name", json!("tea"))]), json!({"query": "tea"}));
    }
}
