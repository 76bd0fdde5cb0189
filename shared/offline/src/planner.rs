//! The offline planner: splits a customer's message into questions and writes one subtask per independent lookup, with tools picked from the catalogue.

use serde::Serialize;

use swarm_core::domain::{Subtask, SubtaskId, truncate_chars};
use swarm_core::memory::Memory;
use swarm_core::ports::ToolSpec;

use crate::catalog::{ToolKind, find_tool};
use crate::intent::{Analysis, analyse};
use crate::recall;
use crate::text::{Boundary, Product, split_message};

/// Instruction of the subtask a greeting gets.
pub(crate) const GREET_INSTRUCTION: &str = "Greet the customer and ask how the shop can help.";
/// Instruction of the subtask a message gets when it asks for nothing the shop's tools do.
pub(crate) const HELP_INSTRUCTION: &str = "Tell the customer what the shop can help with (orders, deliveries, products, coupons, refunds) and ask what they need.";

/// Far above the validator's limit; the validator drops the rest with a note for the reply.
const MAX_DRAFTS: usize = 200;

/// One planned lookup before ids and tool names are given.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Draft {
    instruction: String,
    kinds: Vec<ToolKind>,
}

impl Draft {
    fn new(instruction: impl Into<String>, kinds: &[ToolKind]) -> Self {
        Self { instruction: instruction.into(), kinds: kinds.to_vec() }
    }
}

/// A question of the message: its text and what it asks.
struct Clause {
    start: usize,
    end: usize,
    analysis: Analysis,
}

/// The plan JSON the orchestrator expects: `{"subtasks": [{id, instruction, tools, depends_on}]}`,
/// with `"handoff": true` when the customer asks for a person.
#[derive(Serialize)]
struct PlanJson<'a> {
    subtasks: &'a [Subtask],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    handoff: bool,
}

/// Words of a customer asking for a person rather than the assistant.
const ASK_FOR_A_PERSON: &[&str] = &[
    "human",
    "real person",
    "a person",
    "live agent",
    "support agent",
    "talk to someone",
    "speak to someone",
    "人工",
    "真人",
    "转人工",
];

/// Whether the customer asks to talk to a person.
pub(crate) fn asks_for_a_person(query: &str) -> bool {
    let lower = query.to_lowercase();
    ASK_FOR_A_PERSON.iter().any(|w| lower.contains(w))
}

/// Plans `query` against the catalogue `tools` and answers the plan as JSON text. A customer
/// asking for a person gets `"handoff": true`, and no subtask unless they also asked for something.
///
/// A follow-up is planned against `memory` (the earlier turns; empty for a first message): its
/// references are resolved to order ids first ([`recall::resolve`]), and a subtask about an order
/// memory holds facts of that cannot change gets them ([`recall::with_known_facts`]).
pub(crate) fn plan_json(query: &str, tools: &[ToolSpec], memory: &Memory) -> String {
    let handoff = asks_for_a_person(query);
    let mut subtasks = plan(&recall::resolve(query, memory), tools);
    for s in &mut subtasks {
        s.instruction = recall::with_known_facts(std::mem::take(&mut s.instruction), memory);
    }
    if handoff && subtasks.iter().all(|s| s.instruction == GREET_INSTRUCTION || s.instruction == HELP_INSTRUCTION) {
        subtasks.clear();
    }
    serde_json::to_string(&PlanJson { subtasks: &subtasks, handoff }).unwrap_or_else(|_| r#"{"subtasks":[]}"#.into())
}

/// The subtasks for `query`: one per independent question and entity, never empty.
pub(crate) fn plan(query: &str, tools: &[ToolSpec]) -> Vec<Subtask> {
    let clauses = clauses(query);
    let mut drafts: Vec<Draft> = Vec::new();
    for clause in &clauses {
        let text = &query[clause.start..clause.end];
        for d in drafts_for(text, &clause.analysis) {
            if !drafts.iter().any(|x| x.instruction == d.instruction) {
                drafts.push(d);
            }
        }
    }
    if drafts.is_empty() {
        let greeting = clauses.iter().any(|c| c.analysis.intents.greeting) || query.trim().is_empty();
        drafts.push(Draft::new(if greeting { GREET_INSTRUCTION } else { HELP_INSTRUCTION }, &[]));
    }
    drafts
        .into_iter()
        .take(MAX_DRAFTS)
        .enumerate()
        .map(|(n, d)| {
            let mut names: Vec<String> = Vec::new();
            for kind in &d.kinds {
                if let Some(t) = find_tool(*kind, tools)
                    && !names.contains(&t.name)
                {
                    names.push(t.name.clone());
                }
            }
            Subtask {
                id: SubtaskId::new(format!("w{:02}", n + 1)),
                instruction: d.instruction,
                tools: names,
                depends_on: Vec::new(),
            }
        })
        .collect()
}

/// Splits the message and merges follow-up pieces ("and when will it arrive",
/// "A1013", "我想退款") into the question they belong to.
fn clauses(query: &str) -> Vec<Clause> {
    let mut out: Vec<Clause> = Vec::new();
    // Split where the Simplified connectors are; folding keeps byte offsets, so the ranges hold for `query`.
    for piece in split_message(&crate::fold::fold_to_simplified(query)) {
        let analysis = analyse(&query[piece.range.clone()]);
        let w = &analysis.words;
        let e = &analysis.entities;
        let merge = !out.is_empty()
            && match piece.boundary {
                Boundary::Item => false,
                // "How much is it?" after a question about a product.
                Boundary::Sentence => e.is_empty() && w.pronoun && w.any_request() && !w.standalone(),
                // "A1013 and A1025" after "check my orders A1001", "I want a refund" after "order A1016 is broken".
                Boundary::Clause => !w.standalone() && (e.is_empty() || !w.any_request()),
            };
        match out.last_mut() {
            Some(last) if merge => {
                last.end = piece.range.end;
                last.analysis = analyse(&query[last.start..last.end]);
            }
            _ => out.push(Clause { start: piece.range.start, end: piece.range.end, analysis }),
        }
    }
    out
}

/// The customer's words as a refund reason: one line, no double quotes, bounded.
fn reason_of(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ").replace('"', "'");
    truncate_chars(flat.trim_end_matches(['.', '。', '!', '！', '?', '？']), 200)
}

/// "SKU-1013, SKU-1014 and SKU-1001".
fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn product_label(p: &Product) -> String {
    match p.quantity {
        Some(q) => format!("{q} × {}", p.name),
        None => p.name.clone(),
    }
}

/// The drafts one question asks for.
fn drafts_for(text: &str, a: &Analysis) -> Vec<Draft> {
    use ToolKind::*;
    let i = &a.intents;
    let e = &a.entities;
    let mut out = Vec::new();

    for id in &e.order_ids {
        if i.refund {
            out.push(Draft::new(
                format!("Refund order {id} if the shop allows it; the customer's reason: \"{}\".", reason_of(text)),
                &[GetOrder, Refund],
            ));
            continue;
        }
        match (i.status, i.shipment) {
            (true, false) => out.push(Draft::new(format!("Check the status of order {id}."), &[GetOrder])),
            (false, true) => out.push(Draft::new(
                format!("Check where the parcel of order {id} is and when it will arrive."),
                &[TrackShipment, GetOrder],
            )),
            (true, true) => out.push(Draft::new(
                format!("Check the status of order {id} and where its parcel is."),
                &[GetOrder, TrackShipment],
            )),
            (false, false) => {}
        }
    }
    if i.latest {
        out.push(match (i.status, i.shipment) {
            (true, true) => Draft::new(
                "Find the customer's most recent order, check its status and where its parcel is.",
                &[ListOrders, GetOrder, TrackShipment],
            ),
            (_, true) => Draft::new(
                "Find the customer's most recent order and check where its parcel is.",
                &[ListOrders, TrackShipment],
            ),
            _ => Draft::new("Find the customer's most recent order and check its status.", &[ListOrders, GetOrder]),
        });
    }
    if i.list {
        out.push(Draft::new("List the customer's orders and their status.", &[ListOrders]));
    }
    if i.refund_without_order {
        out.push(Draft::new(
            "Explain the refund policy and list the customer's orders so they can say which order to refund.",
            &[RefundPolicy, ListOrders],
        ));
    }
    if i.stock || i.price {
        let mut subjects: Vec<(String, bool)> = Vec::new();
        if !e.skus.is_empty() {
            subjects.push((join_and(&e.skus), e.skus.len() > 1));
        }
        if let Some(p) = &e.product {
            subjects.push((p.name.clone(), false));
        }
        for (subject, plural) in subjects {
            let be = if plural { "are" } else { "is" };
            // "the price of the air purifier", but "the price of SKU-1021" and "the price of 空气净化器".
            let the = if subject.is_ascii() && !subject.starts_with("SKU-") { "the " } else { "" };
            let instruction = match (i.stock, i.price) {
                (true, false) => format!("Check whether {subject} {be} in stock."),
                (false, true) => format!("Check the price of {the}{subject}."),
                _ => format!(
                    "Check the price of {the}{subject} and whether {} {be} in stock.",
                    if plural { "they" } else { "it" }
                ),
            };
            out.push(Draft::new(instruction, &[GetProduct]));
        }
    }
    if i.coupon {
        let target = match (&e.product, e.skus.first()) {
            (Some(p), _) => format!(" for {}", product_label(p)),
            (None, Some(sku)) => format!(" for {sku}"),
            (None, None) => String::new(),
        };
        for code in &e.codes {
            out.push(Draft::new(format!("Check whether coupon {code} can be used{target}."), &[CheckCoupon]));
        }
    }
    if i.coupon_without_code {
        out.push(Draft::new("Ask the customer which coupon code they want to check.", &[]));
    }
    if i.policy {
        out.push(Draft::new("Look up the shop's refund policy.", &[RefundPolicy]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_customer_asking_for_a_person_gets_a_handoff_and_still_the_answers_asked_for() {
        let only: serde_json::Value =
            serde_json::from_str(&plan_json("I want to talk to a human, please.", &catalogue(), &Memory::default()))
                .unwrap();
        assert_eq!(only, json!({"subtasks": [], "handoff": true}));
        let both: serde_json::Value = serde_json::from_str(&plan_json(
            "Where is order A1029? Then let me speak to a real person.",
            &catalogue(),
            &Memory::default(),
        ))
        .unwrap();
        assert_eq!(both["handoff"], true);
        assert_eq!(both["subtasks"].as_array().map(Vec::len), Some(1));
        let zh: serde_json::Value =
            serde_json::from_str(&plan_json("转人工", &catalogue(), &Memory::default())).unwrap();
        assert_eq!(zh["handoff"], true);
        let none: serde_json::Value =
            serde_json::from_str(&plan_json("Where is order A1029?", &catalogue(), &Memory::default())).unwrap();
        assert!(none.get("handoff").is_none());
    }

    fn catalogue() -> Vec<ToolSpec> {
        [
            "shop__get_order",
            "shop__list_customer_orders",
            "shop__track_shipment",
            "shop__get_product",
            "shop__check_coupon",
            "shop__get_refund_policy",
            "shop__refund",
        ]
        .into_iter()
        .map(|n| ToolSpec {
            name: n.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            side_effecting: false,
        })
        .collect()
    }

    fn instructions(query: &str) -> Vec<String> {
        plan(query, &catalogue()).into_iter().map(|s| s.instruction).collect()
    }

    #[test]
    fn each_listed_order_gets_its_own_subtask() {
        assert_eq!(
            instructions("Check all three of my orders A1001, A1013 and A1025 please."),
            vec![
                "Check the status of order A1001.",
                "Check the status of order A1013.",
                "Check the status of order A1025."
            ]
        );
    }

    #[test]
    fn questions_split_at_sentence_ends_and_connectors() {
        assert_eq!(
            instructions("我的订单 A1029 现在什么状态？另外优惠券 SAVE20 还能用吗？"),
            vec!["Check the status of order A1029.", "Check whether coupon SAVE20 can be used."]
        );
        assert_eq!(
            instructions(
                "Where is my parcel for order A1031 and when will it arrive? Also, is the Navy Down Jacket L back in stock?"
            ),
            vec![
                "Check where the parcel of order A1031 is and when it will arrive.",
                "Check whether Navy Down Jacket L is in stock."
            ]
        );
    }

    #[test]
    fn enumerated_questions_become_one_subtask_each() {
        let got = instructions(
            "Hi! A few things: (1) where's A1022, (2) did A1034 get delivered, (3) are the Grey Running Shoes 43 back in stock, \
             (4) can I use TECH100 for a mechanical keyboard, (5) how much is the air purifier?",
        );
        assert_eq!(
            got,
            vec![
                "Check where the parcel of order A1022 is and when it will arrive.",
                "Check the status of order A1034.",
                "Check whether Grey Running Shoes 43 is in stock.",
                "Check whether coupon TECH100 can be used for mechanical keyboard.",
                "Check the price of the air purifier.",
            ]
        );
    }

    #[test]
    fn a_lower_case_code_next_to_a_coupon_verb_is_its_own_question() {
        assert_eq!(
            instructions("hi, can you check order a1029 and tell me if save20 works for the blue linen shirt M"),
            vec!["Check the status of order A1029.", "Check whether coupon SAVE20 can be used for blue linen shirt M."]
        );
    }

    #[test]
    fn a_refund_request_keeps_the_customers_reason_and_gets_the_order_first() {
        let plan = plan("订单 A1016 的耳机有杂音，我想退款。", &catalogue());
        assert_eq!(plan.len(), 1);
        assert_eq!(
            plan[0].instruction,
            "Refund order A1016 if the shop allows it; the customer's reason: \"订单 A1016 的耳机有杂音，我想退款\"."
        );
        assert_eq!(plan[0].tools, vec!["shop__get_order", "shop__refund"]);
    }

    #[test]
    fn the_latest_order_question_is_one_subtask_with_two_tools() {
        let plan = plan("我最近的那笔订单到哪了？", &catalogue());
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].tools, vec!["shop__list_customer_orders", "shop__track_shipment"]);
    }

    #[test]
    fn a_greeting_gets_one_subtask_without_tools() {
        for q in ["你好", "hi", "thanks!", ""] {
            let plan = plan(q, &catalogue());
            assert_eq!(plan.len(), 1, "{q}");
            assert_eq!(plan[0].instruction, GREET_INSTRUCTION, "{q}");
            assert!(plan[0].tools.is_empty());
        }
        let other = plan("what is the meaning of life", &catalogue());
        assert_eq!(other[0].instruction, HELP_INSTRUCTION);
    }

    #[test]
    fn tools_missing_from_the_catalogue_are_left_out() {
        let only_orders: Vec<ToolSpec> = catalogue().into_iter().filter(|t| t.name == "shop__get_order").collect();
        let plan = plan("Where is A1031? Is SAVE20 valid?", &only_orders);
        assert_eq!(plan[0].tools, vec!["shop__get_order"]);
        assert!(plan[1].tools.is_empty());
    }

    #[test]
    fn a_follow_up_is_planned_for_the_order_memory_resolves_with_its_unchanging_facts() {
        use swarm_core::memory::{Fact, FactKind, KNOWN_FACTS_MARKER, RememberedFact, TurnMemory};
        let fact = |kind, value: &str, about: Option<&str>, label: Option<&str>| {
            let fact = Fact { kind, value: value.into(), about: about.map(Into::into), label: label.map(Into::into) };
            RememberedFact { stable: fact.is_stable(), fact, subtask: "w01".into(), tool: "shop__get_order".into() }
        };
        let memory = Memory {
            turns: vec![TurnMemory {
                turn: 0,
                customer: "我的订单 A1033 到了吗？".into(),
                reply: Some("订单 A1033 已送达。".into()),
                facts: vec![
                    fact(FactKind::OrderId, "A1033", None, None),
                    fact(FactKind::Status, "DELIVERED", Some("A1033"), Some("order")),
                    fact(FactKind::Amount, "1874.00 CNY", Some("A1033"), Some("paid")),
                ],
            }],
            dropped: 0,
        };
        let json: serde_json::Value =
            serde_json::from_str(&plan_json("它可以退款吗？", &catalogue(), &memory)).unwrap_or_default();
        let subtasks = json["subtasks"].as_array().cloned().unwrap_or_default();
        assert_eq!(subtasks.len(), 1, "{json}");
        assert_eq!(subtasks[0]["tools"], json!(["shop__get_order", "shop__refund"]), "still the order and the refund");
        assert_eq!(
            subtasks[0]["instruction"],
            format!(
                "Refund order A1033 if the shop allows it; the customer's reason: \"它 (order A1033)可以退款吗\".{KNOWN_FACTS_MARKER}order A1033: paid 1874.00 CNY."
            )
        );
        // The same message without memory has no order to refund.
        let alone = plan("它可以退款吗？", &catalogue());
        assert!(!alone[0].instruction.contains("A1033"));
    }

    #[test]
    fn the_plan_json_has_the_orchestrators_shape() {
        let json: serde_json::Value =
            serde_json::from_str(&plan_json("A1029?", &catalogue(), &Memory::default())).unwrap_or_default();
        assert_eq!(
            json,
            json!({"subtasks": [{"id": "w01", "instruction": "Check the status of order A1029.", "tools": ["shop__get_order"], "depends_on": []}]})
        );
    }
}
