//! Follow-ups resolved from the conversation's memory: "it", "that order", "the other one", "the jacket", "它", "那个订单", "那個訂單", "这件外套" become the order id they mean, written into the message before it is planned; and the facts of an order that cannot change, handed to its subtask.

use std::sync::LazyLock;

use swarm_core::memory::{FactKind, KNOWN_FACTS_MARKER, Memory};
use swarm_core::text::truncate_chars;

use crate::fold::fold_to_simplified;
use crate::text::{self, Pat};

/// Longest known-facts paragraph handed to a subtask, characters.
const MAX_KNOWN_CHARS: usize = 300;

static OTHER: LazyLock<Pat> = LazyLock::new(|| {
    Pat::new(
        r"(?i)\bthe other (?:one|order)\b|\bthe other\b|另一个订单|另一个|另外一个|另一单|另一笔|另外那个|另外那单",
    )
});
static THIS: LazyLock<Pat> = LazyLock::new(|| {
    Pat::new(
        r"(?i)\b(?:that|this|the|same) order\b|\b(?:that|this) one\b|\bit\b|它|那个订单|这个订单|该订单|这笔订单|那笔订单|那笔|这笔|那单|这单|这件|那件|那个|这个",
    )
});
/// Product words a customer refers to an earlier order's item by, with the English word of the
/// item names the shop's orders hold (Traditional text is folded to Simplified first).
static PRODUCT_WORDS: LazyLock<Vec<(Pat, &'static str)>> = LazyLock::new(|| {
    [
        (r"(?i)\bjackets?\b|外套|夹克|羽绒服", "jacket"),
        (r"(?i)\b(?:running )?shoes\b|\bsneakers\b|跑鞋|鞋", "shoes"),
        (r"(?i)\bearbuds\b|\bheadphones\b|耳机", "earbuds"),
        (r"(?i)\bshirts?\b|衬衫", "shirt"),
        (r"(?i)\bmugs?\b|杯子|马克杯", "mug"),
        (r"(?i)\bkeyboards?\b|键盘", "keyboard"),
        (r"(?i)\b(?:air )?purifier\b|净化器", "purifier"),
        (r"(?i)\btea\b|茶叶|绿茶", "tea"),
    ]
    .into_iter()
    .map(|(re, word)| (Pat::new(re), word))
    .collect()
});

/// The order ids of `memory`, least recently mentioned first: each turn's customer message's ids,
/// else (a turn that named none: "my latest order") the one order its tools looked up (a listing
/// of the customer's orders not counting).
fn mentioned_orders(memory: &Memory) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in &memory.turns {
        let mut ids = text::order_ids(&t.customer);
        if ids.is_empty() {
            let looked_up: Vec<&str> = t
                .facts
                .iter()
                // A listing names every order of the customer: it says nothing of which one is meant.
                .filter(|f| f.fact.kind == FactKind::OrderId && !f.tool.contains("list_"))
                .map(|f| f.fact.value.as_str())
                .collect();
            if let [one] = looked_up.as_slice() {
                ids.push((*one).to_owned());
            }
        }
        for id in ids {
            out.retain(|x| x != &id);
            out.push(id);
        }
    }
    out
}

/// The order of an earlier turn holding an item named like `word` (the newest such turn).
fn order_holding(memory: &Memory, word: &str) -> Option<String> {
    memory.turns.iter().rev().find_map(|t| {
        t.facts.iter().find_map(|f| {
            let named = f.fact.label.as_deref().is_some_and(|l| l.to_lowercase().contains(word));
            (f.fact.kind == FactKind::Sku && named).then(|| f.fact.about.clone()).flatten()
        })
    })
}

/// `query` with the order an unresolved reference means written after it (` (order A1033)`), when
/// `memory` tells which: "the other one" the other of the orders mentioned, a product word the
/// order holding that item, "it" / "that order" / "它" / "那个订单" the last order mentioned. A
/// message naming an order, a SKU or a coupon of its own is left as it is.
pub(crate) fn resolve(query: &str, memory: &Memory) -> String {
    if memory.is_empty() {
        return query.to_owned();
    }
    // Folding keeps byte offsets, so a match in the folded text is a range of `query` too.
    let folded = fold_to_simplified(query);
    if !text::order_ids(&folded).is_empty() {
        return query.to_owned();
    }
    let mentioned = mentioned_orders(memory);
    let last = mentioned.last().cloned();
    // "Is the jacket back in stock?" asks of the product, not of the order that held one.
    let words = crate::intent::Words::of(&folded);
    let asks_stock_or_price = words.stock || words.price;
    let found = if let Some(m) = OTHER.find(&folded) {
        let other = mentioned.iter().rev().find(|id| Some(*id) != last.as_ref()).cloned();
        other.map(|id| (m.end(), id))
    } else if let Some((m, id)) = PRODUCT_WORDS.iter().filter(|_| !asks_stock_or_price).find_map(|(p, word)| {
        let m = p.find(&folded)?;
        order_holding(memory, word).map(|id| (m, id))
    }) {
        Some((m.end(), id))
    } else if let Some(m) = THIS.find(&folded) {
        let e = text::entities(&folded);
        (e.skus.is_empty() && e.codes.is_empty()).then_some(last.map(|id| (m.end(), id))).flatten()
    } else {
        None
    };
    match found {
        Some((at, id)) => format!("{} (order {id}){}", &query[..at], &query[at..]),
        None => query.to_owned(),
    }
}

/// The facts of order `id` that cannot change, as memory holds them (`None` without any): its
/// items' SKUs and names and the amount paid, as a known-facts paragraph's text.
fn known_facts(memory: &Memory, id: &str) -> Option<String> {
    let facts = memory.turns.iter().flat_map(|t| &t.facts).filter(|f| f.stable && f.fact.about.as_deref() == Some(id));
    let mut items: Vec<String> = Vec::new();
    let mut paid = None;
    for f in facts {
        match f.fact.kind {
            FactKind::Sku => {
                let item = match &f.fact.label {
                    Some(name) => format!("{} {name}", f.fact.value),
                    None => f.fact.value.clone(),
                };
                if !items.contains(&item) {
                    items.push(item);
                }
            }
            FactKind::Amount if f.fact.label.as_deref() == Some("paid") => paid = Some(f.fact.value.clone()),
            _ => {}
        }
    }
    let mut parts = Vec::new();
    if !items.is_empty() {
        parts.push(format!("items {}", items.join(", ")));
    }
    if let Some(p) = paid {
        parts.push(format!("paid {p}"));
    }
    (!parts.is_empty()).then(|| truncate_chars(&format!("order {id}: {}.", parts.join("; ")), MAX_KNOWN_CHARS))
}

/// `instruction` ending in a known-facts paragraph for the one order it names that `memory` holds
/// facts of that cannot change; unchanged otherwise. The worker still asks its tools for
/// everything else, and a refund still goes through its checks and approval.
pub(crate) fn with_known_facts(instruction: String, memory: &Memory) -> String {
    let ids = text::order_ids(&instruction);
    let [id] = ids.as_slice() else { return instruction };
    match known_facts(memory, id) {
        Some(known) => format!("{instruction}{KNOWN_FACTS_MARKER}{known}"),
        None => instruction,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_core::memory::{Fact, RememberedFact, TurnMemory};

    fn fact(kind: FactKind, value: &str, about: Option<&str>, label: Option<&str>) -> RememberedFact {
        let fact = Fact { kind, value: value.into(), about: about.map(Into::into), label: label.map(Into::into) };
        RememberedFact { stable: fact.is_stable(), fact, subtask: "w01".into(), tool: "shop__get_order".into() }
    }

    fn turn(n: u32, customer: &str, facts: Vec<RememberedFact>) -> TurnMemory {
        TurnMemory { turn: n, customer: customer.into(), reply: Some("…".into()), facts }
    }

    fn order(id: &str, item: (&str, &str)) -> Vec<RememberedFact> {
        vec![
            fact(FactKind::OrderId, id, None, None),
            fact(FactKind::Status, "DELIVERED", Some(id), Some("order")),
            fact(FactKind::Sku, item.0, Some(id), Some(item.1)),
            fact(FactKind::Amount, "1874.00 CNY", Some(id), Some("paid")),
        ]
    }

    fn memory() -> Memory {
        Memory {
            turns: vec![
                turn(
                    0,
                    "Where are A1007 and A1031?",
                    [
                        order("A1007", ("SKU-1013", "Grey Running Shoes 40")),
                        order("A1031", ("SKU-1008", "Black Down Jacket L")),
                    ]
                    .concat(),
                ),
                turn(1, "我最近的订单呢？", order("A1031", ("SKU-1008", "Black Down Jacket L"))),
            ],
            dropped: 0,
        }
    }

    #[test]
    fn it_and_that_order_mean_the_last_order_mentioned_in_every_script() {
        let m = memory();
        assert_eq!(resolve("can I still get a refund for it?", &m), "can I still get a refund for it (order A1031)?");
        assert_eq!(resolve("它能退款吗？", &m), "它 (order A1031)能退款吗？");
        assert_eq!(resolve("那個訂單到哪了？", &m), "那個訂單 (order A1031)到哪了？");
        assert_eq!(resolve("What about that order?", &m), "What about that order (order A1031)?");
    }

    #[test]
    fn the_other_one_and_a_product_word_mean_the_order_they_name() {
        let m = memory();
        assert_eq!(resolve("and the other one?", &m), "and the other one (order A1007)?");
        assert_eq!(resolve("另一個呢？", &m), "另一個 (order A1007)呢？");
        assert_eq!(resolve("I want to return the shoes", &m), "I want to return the shoes (order A1007)");
        assert_eq!(resolve("夾克可以退款嗎？", &m), "夾克 (order A1031)可以退款嗎？");
    }

    #[test]
    fn a_message_with_its_own_ids_or_no_memory_is_left_alone() {
        let m = memory();
        assert_eq!(resolve("where is A1029?", &m), "where is A1029?");
        assert_eq!(resolve("is coupon SAVE20 valid for it?", &m), "is coupon SAVE20 valid for it?");
        assert_eq!(resolve("can I get a refund for it?", &Memory::default()), "can I get a refund for it?");
    }

    #[test]
    fn only_facts_that_cannot_change_are_handed_to_the_subtask() {
        let m = memory();
        let i = with_known_facts("Check the status of order A1031.".into(), &m);
        assert_eq!(
            i,
            format!(
                "Check the status of order A1031.{KNOWN_FACTS_MARKER}order A1031: items SKU-1008 Black Down Jacket L; paid 1874.00 CNY."
            )
        );
        assert!(!i.contains("DELIVERED"), "a status is asked of the tool again");
        assert_eq!(with_known_facts("Check order A1029.".into(), &m), "Check order A1029.");
    }
}
