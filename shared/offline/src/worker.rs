//! The offline worker: reads a subtask instruction and the transcript so far, asks for the next tool calls, and writes the final factual answer.
//!
//! Each round recomputes, from the instruction and the results so far, every
//! call the subtask needs (a fixpoint): calls whose inputs are known and that
//! were not made yet are asked for; when none is left, the answer is written.

use std::sync::LazyLock;

use serde_json::{Value, json};

use swarm_core::language::Language;
use swarm_core::ports::{ChatMessage, ToolCall, ToolSpec};
use swarm_core::prompts::{CUSTOMER_MESSAGE_MARKER, DEPENDENCY_RESULTS_MARKER, SUBTASK_MARKER, split_answer_language};

use crate::catalog::{ToolKind, arguments, find_tool};
use crate::intent::{Analysis, analyse};
use crate::lang::{say, zh};
use crate::planner::GREET_INSTRUCTION;
use crate::render;
use crate::text::{self, Pat};

/// Tool rounds after which the worker answers with what it has.
const MAX_ROUNDS: usize = 6;
/// Opens a line of a compressed transcript: `• <tool> <args JSON> → <facts>`.
pub(crate) const SUMMARY_BULLET: &str = "• ";
/// Separates the arguments from the facts in a summary line.
pub(crate) const SUMMARY_ARROW: &str = " → ";

static REASON: LazyLock<Pat> = LazyLock::new(|| Pat::new(r#"(?i)\breason:\s*"([^"]*)"\.?"#));
static CALL_ID: LazyLock<Pat> = LazyLock::new(|| Pat::new(r"^call_(\d+)$"));

/// What the model answers in a work round.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    Calls(Vec<ToolCall>),
    Answer(String),
}

/// A tool call already made, with its result when it came back.
#[derive(Clone, Debug)]
struct Done {
    id: String,
    name: String,
    args: Value,
    result: Option<String>,
    /// The result is already rendered facts (from a compressed transcript).
    summarized: bool,
}

/// A call the subtask needs.
#[derive(Clone, Debug)]
struct Want {
    kind: ToolKind,
    name: String,
    args: Value,
}

/// The subtask as read from the transcript.
struct Subtask {
    instruction: String,
    reason: Option<String>,
    analysis: Analysis,
    /// The language the answer is written in: the one the subtask message names, else the one
    /// the customer's message reads as.
    language: Language,
}

/// One work round.
pub(crate) fn work(messages: &[ChatMessage], tools: &[ToolSpec]) -> Outcome {
    let subtask = read_subtask(messages);
    let done = read_calls(messages);
    let rounds = messages
        .iter()
        .filter(|m| matches!(m, ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty()))
        .count();
    let mut state = State { tools, done: &done, wants: Vec::new(), missing: Vec::new(), lines: Vec::new() };
    state.plan(&subtask);
    let pending: Vec<&Want> = state.wants.iter().filter(|w| state.find_done(w).is_none()).collect();
    if !pending.is_empty() && rounds < MAX_ROUNDS {
        let mut next = next_call_number(&done);
        let calls = pending
            .into_iter()
            .map(|w| {
                let id = format!("call_{next}");
                next += 1;
                ToolCall { id, name: w.name.clone(), arguments: w.args.to_string() }
            })
            .collect();
        return Outcome::Calls(calls);
    }
    Outcome::Answer(state.answer(&subtask))
}

fn read_subtask(messages: &[ChatMessage]) -> Subtask {
    let users: Vec<&str> = messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::User { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let customer_query =
        users.iter().find_map(|u| u.strip_prefix(CUSTOMER_MESSAGE_MARKER)).unwrap_or_default().to_owned();
    let own = users.iter().rev().find(|u| u.starts_with(SUBTASK_MARKER)).or(users.last()).copied().unwrap_or_default();
    let (own, named) = split_answer_language(own);
    let language = named.unwrap_or_else(|| Language::detect(&customer_query, None));
    let (head, deps) = match own.split_once(DEPENDENCY_RESULTS_MARKER) {
        Some((head, deps)) => (head, deps),
        None => (own, ""),
    };
    // "Subtask w01: <instruction>"
    let instruction =
        head.strip_prefix(SUBTASK_MARKER).and_then(|rest| rest.split_once(": ").map(|(_, i)| i)).unwrap_or(head).trim();
    // Facts handed over from earlier turns are context, not what to do: the subtask is the rest.
    let instruction = swarm_core::memory::split_known_facts(instruction).0.trim().to_owned();
    let reason = REASON.captures(&instruction).and_then(|c| c.get(1)).map(|m| m.as_str().trim().to_owned());
    let without_reason = match REASON.find(&instruction) {
        Some(m) => format!("{}{}", &instruction[..m.start()], &instruction[m.end()..]),
        None => instruction.clone(),
    };
    let mut analysis = analyse(&without_reason);
    // "Track the order found by w01": take the order ids from the dependency results.
    if analysis.entities.order_ids.is_empty() && !deps.trim().is_empty() {
        let ids = text::order_ids(deps);
        if !ids.is_empty() {
            analysis = analyse(&format!("{without_reason} ({})", ids.join(", ")));
        }
    }
    Subtask { instruction, reason, analysis, language }
}

fn read_calls(messages: &[ChatMessage]) -> Vec<Done> {
    let mut done: Vec<Done> = Vec::new();
    for m in messages {
        match m {
            ChatMessage::Assistant { tool_calls, content, .. } => {
                for c in tool_calls {
                    let args = serde_json::from_str(&c.arguments).unwrap_or(Value::Null);
                    done.push(Done { id: c.id.clone(), name: c.name.clone(), args, result: None, summarized: false });
                }
                if let Some(text) = content {
                    done.extend(summary_calls(text));
                }
            }
            ChatMessage::Tool { tool_call_id, content } => {
                if let Some(d) = done.iter_mut().rev().find(|d| &d.id == tool_call_id && d.result.is_none()) {
                    d.result = Some(content.clone());
                }
            }
            ChatMessage::User { content } | ChatMessage::System { content } => done.extend(summary_calls(content)),
        }
    }
    done
}

/// Calls recorded in a compressed transcript (lines written by [`crate::reply::compress`]).
fn summary_calls(text: &str) -> Vec<Done> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(SUMMARY_BULLET)?;
            let (name, rest) = rest.split_once(' ')?;
            let (args, facts) = rest.split_once(SUMMARY_ARROW)?;
            let args: Value = serde_json::from_str(args).ok()?;
            Some(Done {
                id: String::new(),
                name: name.to_owned(),
                args,
                result: Some(facts.to_owned()),
                summarized: true,
            })
        })
        .collect()
}

/// The next free `call_<n>`: after the highest used, and after the number of calls made.
fn next_call_number(done: &[Done]) -> usize {
    let highest = done
        .iter()
        .filter_map(|d| CALL_ID.captures(&d.id).and_then(|c| c.get(1)).and_then(|n| n.as_str().parse::<usize>().ok()))
        .max()
        .unwrap_or(0);
    highest.max(done.len()) + 1
}

struct State<'a> {
    tools: &'a [ToolSpec],
    done: &'a [Done],
    wants: Vec<Want>,
    missing: Vec<ToolKind>,
    lines: Vec<String>,
}

impl<'a> State<'a> {
    fn find_done(&self, w: &Want) -> Option<&'a Done> {
        let done: &'a [Done] = self.done;
        done.iter().find(|d| d.name == w.name && d.args == w.args)
    }

    /// The result of a wanted call, once it is back (rendered facts when summarized).
    fn result_of(&self, w: &Want) -> Option<(&'a str, bool)> {
        self.find_done(w).and_then(|d| d.result.as_deref().map(|r| (r, d.summarized)))
    }

    /// Adds a wanted call for `kind` (noting the kind as missing when no tool does it); returns it.
    fn want(&mut self, kind: ToolKind, canonical: &[(&str, Value)]) -> Option<Want> {
        let Some(tool) = find_tool(kind, self.tools) else {
            if !self.missing.contains(&kind) {
                self.missing.push(kind);
            }
            return None;
        };
        let w = Want { kind, name: tool.name.clone(), args: arguments(tool, canonical) };
        if !self.wants.iter().any(|x| x.name == w.name && x.args == w.args) {
            self.wants.push(w.clone());
        }
        Some(w)
    }

    fn has_tool(&self, kind: ToolKind) -> bool {
        find_tool(kind, self.tools).is_some()
    }

    /// Every call the subtask needs given the results so far, in answer order.
    fn plan(&mut self, s: &Subtask) {
        let i = s.analysis.intents;
        let e = s.analysis.entities.clone();

        if (i.latest || i.list || i.refund_without_order)
            && let Some(list) = self.want(ToolKind::ListOrders, &[])
            && i.latest
            && let Some((result, summarized)) = self.result_of(&list)
            && let Some(newest) = if summarized {
                // A compressed list keeps the shop's order: newest first.
                text::order_ids(result).into_iter().next()
            } else {
                render::newest_order(result, s.language).map(|(id, _)| id)
            }
        {
            if i.status {
                self.want(ToolKind::GetOrder, &[("order_id", json!(newest))]);
            }
            if i.shipment {
                self.want(ToolKind::TrackShipment, &[("order_id", json!(newest))]);
            }
        }
        for id in &e.order_ids {
            if i.refund {
                self.plan_refund(id, s);
                continue;
            }
            if i.status {
                self.want(ToolKind::GetOrder, &[("order_id", json!(id))]);
            }
            if i.shipment
                && let Some(track) = self.want(ToolKind::TrackShipment, &[("order_id", json!(id))])
                && !i.status
                && let Some((result, false)) = self.result_of(&track)
                && render::is_error(result)
                && self.has_tool(ToolKind::GetOrder)
            {
                // Not shipped yet, no parcel, or unknown: the order lookup says which.
                self.want(ToolKind::GetOrder, &[("order_id", json!(id))]);
            }
        }
        if i.stock || i.price {
            for sku in &e.skus {
                self.want(ToolKind::GetProduct, &[("sku", json!(sku))]);
            }
            if let Some(p) = &e.product {
                self.want(ToolKind::GetProduct, &[("name", json!(p.name))]);
            }
        }
        if i.coupon {
            for code in &e.codes {
                let mut args = vec![("code", json!(code))];
                match (&e.product, e.skus.first()) {
                    (Some(p), _) => {
                        args.push(("product_name", json!(p.name)));
                        if let Some(q) = p.quantity {
                            args.push(("quantity", json!(q)));
                        }
                    }
                    (None, Some(sku)) => args.push(("sku", json!(sku))),
                    (None, None) => {}
                }
                self.want(ToolKind::CheckCoupon, &args);
            }
        }
        if i.policy || i.refund_without_order {
            self.want(ToolKind::RefundPolicy, &[]);
        }
    }

    /// The order first (when it can be looked up), then the refund of exactly what is refundable
    /// (an approval is for an exact amount) unless the order rules it out.
    fn plan_refund(&mut self, id: &str, s: &Subtask) {
        let reason = s.reason.clone().unwrap_or_else(|| "requested by the customer".into());
        if !self.has_tool(ToolKind::GetOrder) {
            self.want(ToolKind::Refund, &[("order_id", json!(id)), ("reason", json!(reason))]);
            return;
        }
        let Some(order) = self.want(ToolKind::GetOrder, &[("order_id", json!(id))]) else { return };
        let Some((result, summarized)) = self.result_of(&order) else { return };
        if summarized || render::is_error(result) {
            return;
        }
        let status = render::field(result, "status").and_then(|v| v.as_str().map(str::to_owned));
        let l = s.language;
        match (render::field(result, "refundable"), status.as_deref()) {
            (Some(Value::Bool(false)), _) => self.lines.push(say!(
                l,
                "No refund was made for order {id}: the shop marks it as not refundable.",
                "订单 {id} 未退款：商店将该订单标记为不可退款。",
                "訂單 {id} 未退款：商店將該訂單標記為不可退款。"
            )),
            (Some(Value::Number(n)), _) if n.as_f64().is_some_and(|v| v <= 0.0) => self.lines.push(say!(
                l,
                "No refund was made for order {id}: nothing is left to refund on it.",
                "订单 {id} 未退款：该订单已没有可退的金额。",
                "訂單 {id} 未退款：該訂單已沒有可退的金額。"
            )),
            (_, Some(status)) if status != "DELIVERED" => {
                let word = render::status_word(status, l);
                self.lines.push(say!(
                    l,
                    "No refund was made for order {id}: it is {status}, not delivered, and the refund window starts at delivery.",
                    "订单 {id} 未退款：该订单{word}，尚未送达，退款期限从送达时开始计算。",
                    "訂單 {id} 未退款：該訂單{word}，尚未送達，退款期限從送達時開始計算。"
                ))
            }
            (Some(Value::Number(n)), _) => {
                let amount = n.clone();
                self.want(
                    ToolKind::Refund,
                    &[("order_id", json!(id)), ("amount", Value::Number(amount)), ("reason", json!(reason))],
                );
            }
            _ => {
                self.want(ToolKind::Refund, &[("order_id", json!(id)), ("reason", json!(reason))]);
            }
        }
    }

    /// The final answer: the facts of every result in plan order, then what could not be done.
    fn answer(&self, s: &Subtask) -> String {
        let i = s.analysis.intents;
        let l = s.language;
        let mut lines: Vec<String> = Vec::new();
        let mut stock: (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
        for w in &self.wants {
            let Some((result, summarized)) = self.result_of(w) else { continue };
            if summarized {
                lines.push(result.to_owned());
                continue;
            }
            if w.kind == ToolKind::ListOrders
                && i.latest
                && let Some((_, line)) = render::newest_order(result, l)
            {
                lines.push(line);
                continue;
            }
            if w.kind == ToolKind::GetProduct
                && let Some(p) = render::chosen_product(result, w.args.get("sku").and_then(Value::as_str))
            {
                let label = w
                    .args
                    .get("sku")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| p.get("sku").and_then(Value::as_str).map(str::to_owned));
                match (render::in_stock(&p), label) {
                    (Some(true), Some(l)) => stock.0.push(l),
                    (Some(false), Some(l)) => stock.1.push(l),
                    _ => {}
                }
            }
            lines.extend(render::render(Some(w.kind), &w.args, result, l));
        }
        lines.extend(self.lines.iter().cloned());
        if stock.0.len() + stock.1.len() >= 3 {
            let mut summary = Vec::new();
            let sep = if l == Language::English { ", " } else { "、" };
            if !stock.1.is_empty() {
                let out = stock.1.join(sep);
                summary.push(say!(l, "Out of stock: {out}.", "缺货：{out}。", "缺貨：{out}。"));
            }
            if !stock.0.is_empty() {
                let have = stock.0.join(sep);
                summary.push(say!(l, "In stock: {have}.", "有货：{have}。", "有貨：{have}。"));
            }
            lines.push(summary.join(if l == Language::English { " " } else { "" }));
        }
        for kind in &self.missing {
            lines.push(match l {
                Language::English => {
                    format!("I have no tool to {} right now, so I could not check this.", kind.action())
                }
                _ => {
                    let action = kind.action_zh(l);
                    zh!(
                        l,
                        "我目前没有可以{action}的工具，因此无法查询这一项。",
                        "我目前沒有可以{action}的工具，因此無法查詢這一項。"
                    )
                }
            });
        }
        let mut unique: Vec<String> = Vec::new();
        for l in lines {
            if !l.trim().is_empty() && !unique.contains(&l) {
                unique.push(l);
            }
        }
        if unique.is_empty() {
            return no_lookup_answer(s);
        }
        unique.join("\n")
    }
}

/// The answer of a subtask that looked nothing up.
fn no_lookup_answer(s: &Subtask) -> String {
    let i = s.analysis.intents;
    let l = s.language;
    if i.coupon_without_code {
        return say!(
            l,
            "Which coupon code would you like me to check? Please send it and I will look it up.",
            "请问您想查询哪个优惠券代码？请发给我，我来帮您查询。",
            "請問您想查詢哪個優惠券代碼？請發給我，我來幫您查詢。"
        );
    }
    if i.greeting || s.instruction == GREET_INSTRUCTION {
        return crate::lang::greeting(l);
    }
    if i.actionable() {
        return say!(
            l,
            "I could not find anything to look up for this part of the question.",
            "这部分问题我没有找到可以查询的内容。",
            "這部分問題我沒有找到可以查詢的內容。"
        );
    }
    say!(
        l,
        "I can check your orders and deliveries, product stock and prices, coupons and refunds. What would you like me to look up?",
        "我可以帮您查询订单和物流、商品库存和价格、优惠券以及退款。请问您想查询什么？",
        "我可以幫您查詢訂單和物流、商品庫存和價格、優惠券以及退款。請問您想查詢什麼？"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_core::prompts::{work_messages, work_messages_in};

    fn tool(name: &str, props: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object", "properties": props}),
            side_effecting: false,
        }
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            tool("shop__get_order", json!({"order_id": {}})),
            tool("shop__list_customer_orders", json!({})),
            tool("shop__track_shipment", json!({"order_id": {}, "tracking_no": {}})),
            tool("shop__get_product", json!({"sku": {}, "name": {}})),
            tool("shop__check_coupon", json!({"code": {}, "sku": {}, "product_name": {}, "quantity": {}})),
            tool("shop__get_refund_policy", json!({})),
            tool("shop__refund", json!({"order_id": {}, "reason": {}, "amount": {}})),
        ]
    }

    fn calls(outcome: &Outcome) -> Vec<(String, Value)> {
        match outcome {
            Outcome::Calls(c) => {
                c.iter().map(|c| (c.name.clone(), serde_json::from_str(&c.arguments).unwrap_or_default())).collect()
            }
            Outcome::Answer(_) => Vec::new(),
        }
    }

    #[test]
    fn the_first_round_calls_every_tool_the_instruction_needs_in_parallel() {
        let msgs =
            work_messages("q", &"w01".into(), "Check whether SKU-1016, SKU-1019 and SKU-1001 are in stock.", &[]);
        let out = work(&msgs, &tools());
        assert_eq!(
            calls(&out),
            vec![
                ("shop__get_product".to_owned(), json!({"sku": "SKU-1016"})),
                ("shop__get_product".to_owned(), json!({"sku": "SKU-1019"})),
                ("shop__get_product".to_owned(), json!({"sku": "SKU-1001"})),
            ]
        );
        let Outcome::Calls(c) = out else { panic!("calls expected") };
        assert_eq!(c.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), vec!["call_1", "call_2", "call_3"]);
    }

    #[test]
    fn instructions_written_by_a_real_planner_are_understood_too() {
        let cases = [
            ("Look up the stock of the Navy Down Jacket L", json!({"name": "Navy Down Jacket L"}), "shop__get_product"),
            ("Check inventory for sku-1016", json!({"sku": "SKU-1016"}), "shop__get_product"),
            ("Get the shipment tracking for order a1031", json!({"order_id": "A1031"}), "shop__track_shipment"),
            ("Check if coupon save20 is valid", json!({"code": "SAVE20"}), "shop__check_coupon"),
            ("查询订单 A1029 的状态", json!({"order_id": "A1029"}), "shop__get_order"),
            ("查询羽绒服的库存", json!({"name": "羽绒服"}), "shop__get_product"),
        ];
        for (instruction, args, tool) in cases {
            let msgs = work_messages("q", &"w01".into(), instruction, &[]);
            assert_eq!(calls(&work(&msgs, &tools())), vec![(tool.to_owned(), args)], "{instruction}");
        }
    }

    #[test]
    fn a_refund_looks_at_the_order_before_moving_money() {
        let instruction = "Refund order A1016 if the shop allows it; the customer's reason: \"耳机有杂音\".";
        let mut msgs = work_messages("q", &"w01".into(), instruction, &[]);
        assert_eq!(calls(&work(&msgs, &tools())), vec![("shop__get_order".to_owned(), json!({"order_id": "A1016"}))]);
        msgs.push(ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "shop__get_order".into(),
                arguments: r#"{"order_id":"A1016"}"#.into(),
            }],
            reasoning_content: None,
        });
        msgs.push(ChatMessage::Tool {
            tool_call_id: "call_1".into(),
            content: json!({"order_id": "A1016", "status": "DELIVERED", "refundable": 797.0}).to_string(),
        });
        assert_eq!(
            calls(&work(&msgs, &tools())),
            vec![("shop__refund".to_owned(), json!({"order_id": "A1016", "amount": 797.0, "reason": "耳机有杂音"}))]
        );
    }

    #[test]
    fn a_parcel_that_is_not_shipped_yet_is_explained_by_the_order() {
        let mut msgs =
            work_messages("q", &"w01".into(), "Check where the parcel of order A1029 is and when it will arrive.", &[]);
        msgs.push(ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "shop__track_shipment".into(),
                arguments: r#"{"order_id":"A1029"}"#.into(),
            }],
            reasoning_content: None,
        });
        msgs.push(ChatMessage::Tool {
            tool_call_id: "call_1".into(),
            content: json!({"error": "order A1029 has no shipment yet (status PAID)"}).to_string(),
        });
        let out = work(&msgs, &tools());
        assert_eq!(calls(&out), vec![("shop__get_order".to_owned(), json!({"order_id": "A1029"}))]);
        let Outcome::Calls(c) = out else { panic!("calls expected") };
        assert_eq!(c[0].id, "call_2");
    }

    #[test]
    fn a_refund_with_facts_from_memory_still_looks_at_the_order_then_asks_for_the_refund() {
        let instruction = format!(
            "Refund order A1033 if the shop allows it; the customer's reason: \"refund it\".{}order A1033: items SKU-1021 White Air Purifier; paid 1874.00 CNY.",
            swarm_core::memory::KNOWN_FACTS_MARKER
        );
        let mut msgs = work_messages("q", &"w01".into(), &instruction, &[]);
        let first = work(&msgs, &tools());
        assert_eq!(
            calls(&first),
            vec![("shop__get_order".to_owned(), json!({"order_id": "A1033"}))],
            "the order, not memory"
        );
        msgs.push(ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "shop__get_order".into(),
                arguments: r#"{"order_id":"A1033"}"#.into(),
            }],
            reasoning_content: None,
        });
        msgs.push(ChatMessage::Tool {
            tool_call_id: "call_1".into(),
            content: json!({"order_id": "A1033", "status": "DELIVERED", "paid": 1874.0, "refundable": 1874.0})
                .to_string(),
        });
        let second = calls(&work(&msgs, &tools()));
        assert_eq!(second.len(), 1, "{second:?}");
        assert_eq!((second[0].0.as_str(), &second[0].1["order_id"]), ("shop__refund", &json!("A1033")));
        assert!(!second[0].1["reason"].as_str().unwrap_or_default().contains("SKU-1021"), "{second:?}");
    }

    #[test]
    fn nothing_left_to_refund_means_no_refund_call() {
        let mut msgs = work_messages("q", &"w01".into(), "Refund order A1027.", &[]);
        msgs.push(ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "shop__get_order".into(),
                arguments: r#"{"order_id":"A1027"}"#.into(),
            }],
            reasoning_content: None,
        });
        msgs.push(ChatMessage::Tool {
            tool_call_id: "call_1".into(),
            content: json!({"order_id": "A1027", "status": "REFUNDED", "refundable": 0.0}).to_string(),
        });
        let Outcome::Answer(text) = work(&msgs, &tools()) else { panic!("answer expected") };
        assert!(text.contains("No refund was made for order A1027"), "{text}");
    }

    #[test]
    fn order_ids_come_from_dependency_results_when_the_instruction_has_none() {
        let deps = [swarm_core::prompts::DependencyResult {
            id: "w01".into(),
            instruction: "x".into(),
            answer: "Your order is A1003.".into(),
        }];
        let msgs = work_messages("q", &"w02".into(), "Track the parcel of the order found in w01.", &deps);
        assert_eq!(
            calls(&work(&msgs, &tools())),
            vec![("shop__track_shipment".to_owned(), json!({"order_id": "A1003"}))]
        );
    }

    #[test]
    fn calls_in_a_compressed_summary_are_not_repeated() {
        let mut msgs = work_messages("q", &"w01".into(), "Check the status of order A1029.", &[]);
        msgs.push(ChatMessage::User {
            content: format!(
                "Facts:\n{SUMMARY_BULLET}shop__get_order {{\"order_id\":\"A1029\"}}{SUMMARY_ARROW}Order A1029 is paid."
            ),
        });
        assert_eq!(work(&msgs, &tools()), Outcome::Answer("Order A1029 is paid.".into()));
    }

    #[test]
    fn without_tools_a_greeting_is_answered_in_the_customers_language_too() {
        let msgs = work_messages("你好", &"w01".into(), GREET_INSTRUCTION, &[]);
        let Outcome::Answer(text) = work(&msgs, &[]) else { panic!("answer expected") };
        assert_eq!(text, "您好！请问有什么可以帮您？我可以查询订单和物流、商品库存和价格、优惠券以及退款。");
        // The language the subtask message names wins over the one the message reads as (你好 reads as both).
        let msgs = work_messages_in("你好", &"w01".into(), GREET_INSTRUCTION, &[], Language::TraditionalChinese);
        let Outcome::Answer(text) = work(&msgs, &[]) else { panic!("answer expected") };
        assert_eq!(text, "您好！請問有什麼可以幫您？我可以查詢訂單和物流、商品庫存和價格、優惠券以及退款。");
    }

    #[test]
    fn a_needed_tool_that_is_not_offered_is_reported_not_invented() {
        let msgs = work_messages("q", &"w01".into(), "Check the status of order A1029.", &[]);
        let Outcome::Answer(text) = work(&msgs, &[]) else { panic!("answer expected") };
        assert_eq!(text, "I have no tool to look up orders right now, so I could not check this.");
        let msgs =
            work_messages_in("q", &"w01".into(), "Check the status of order A1029.", &[], Language::TraditionalChinese);
        let Outcome::Answer(text) = work(&msgs, &[]) else { panic!("answer expected") };
        assert_eq!(text, "我目前沒有可以查詢訂單的工具，因此無法查詢這一項。");
    }

    #[test]
    fn the_answer_is_written_in_the_language_the_subtask_message_names() {
        let instruction = "Refund order A1032 if the shop allows it; the customer's reason: \"late\".";
        for (language, expected) in [
            (
                Language::English,
                "No refund was made for order A1032: it is SHIPPED, not delivered, and the refund window starts at delivery.",
            ),
            (Language::SimplifiedChinese, "订单 A1032 未退款：该订单已发货，尚未送达，退款期限从送达时开始计算。"),
            (Language::TraditionalChinese, "訂單 A1032 未退款：該訂單已發貨，尚未送達，退款期限從送達時開始計算。"),
        ] {
            let mut msgs = work_messages_in("Please refund A1032", &"w01".into(), instruction, &[], language);
            msgs.push(ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "shop__get_order".into(),
                    arguments: r#"{"order_id":"A1032"}"#.into(),
                }],
                reasoning_content: None,
            });
            msgs.push(ChatMessage::Tool {
                tool_call_id: "call_1".into(),
                content: json!({"order_id": "A1032", "status": "SHIPPED", "refundable": 100.0}).to_string(),
            });
            let Outcome::Answer(text) = work(&msgs, &tools()) else { panic!("answer expected") };
            assert_eq!(text.lines().last(), Some(expected), "{language}");
        }
    }
}
