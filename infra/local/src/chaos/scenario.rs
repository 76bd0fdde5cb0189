//! The chaos run's conversations: customer messages the mock LLM's agent follows as scripts (`mock_llm::ScriptStep`), each a plan of M subtasks over the demo shop with dependencies (a chain, a join of two parents), a subtask that opens two support tickets about the customer's order — two side effects in two rounds of one loop, neither waiting for a person — and, in a share of them, one refund of a known amount on the customer's own refundable order.
//!
//! Every refund's `reason` and every ticket's `subject` carry the subtask's tag (`chaos
//! <conversation>/<subtask>`), so the shop's ledger tells which subtask each was made for without
//! asking the swarm.

use mock_llm::ScriptStep;
use serde_json::json;

/// Customers of the demo shop with an order delivered inside the refund window (`policy.now`
/// 2026-11-30, 7 days): `(customer, order)`.
pub const REFUNDABLE: [(&str, &str); 4] = [("C106", "A1007"), ("C103", "A1016"), ("C108", "A1033"), ("C109", "A1034")];
/// The amount of every scripted refund, CNY.
pub const REFUND_AMOUNT: f64 = 1.0;
const SKUS: [&str; 4] = ["SKU-1001", "SKU-1002", "SKU-1004", "SKU-1007"];
const COUPONS: [&str; 4] = ["SAVE20", "TECH100", "HOME10", "WELCOME50"];

/// One scripted conversation.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Its place in the run, from 0.
    pub index: usize,
    pub customer_id: String,
    /// The order its refund is for.
    pub order_id: String,
    pub steps: Vec<ScriptStep>,
    /// The subtask id of the refund, when there is one.
    pub refund_step: Option<String>,
}

/// The tag a refund's reason carries: `chaos c<index>/<subtask>`.
pub fn refund_tag(index: usize, subtask: &str) -> String {
    format!("chaos c{index:05}/{subtask}")
}

/// `(conversation index, subtask id)` of a ledger reason holding a [`refund_tag`].
pub fn parse_refund_tag(reason: &str) -> Option<(usize, String)> {
    let rest = &reason[reason.find("chaos c")? + "chaos c".len()..];
    let (index, rest) = rest.split_once('/')?;
    let subtask: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
    if subtask.is_empty() {
        return None;
    }
    Some((index.parse().ok()?, subtask))
}

/// Whether conversation `index` is scripted with a refund when a `share` of them are: spread
/// evenly (share 0.25: every fourth), none at 0, all at 1.
pub fn has_refund(index: usize, share: f64) -> bool {
    let share = share.clamp(0.0, 1.0);
    ((index + 1) as f64 * share).floor() > (index as f64 * share).floor()
}

impl Scenario {
    /// Conversation `index` with `subtasks` steps (at least 1): step 1 reads the order; every
    /// fourth step depends on the one before it; with 5 or more, the second to last joins steps
    /// 1 and 2; step 3 opens two support tickets about the order, one per round; with `refund`
    /// and 2 or more, the last refunds [`REFUND_AMOUNT`] on the order after step 1. The others read shipments, products, coupons, the order list and the policy.
    pub fn new(index: usize, subtasks: usize, refund: bool) -> Self {
        // Every customer in turn, shifted every round, so every fourth conversation is not always the same customer.
        let (customer, order) = REFUNDABLE[(index + index / REFUNDABLE.len()) % REFUNDABLE.len()];
        let n = subtasks.max(1);
        let id = |i: usize| format!("w{i:02}");
        let mut steps = Vec::with_capacity(n);
        let mut refund_step = None;
        for i in 1..=n {
            let sid = id(i);
            let mut after: Vec<String> = Vec::new();
            let (text, tool, args) = if i == 1 {
                (format!("Look up order {order}"), "shop__get_order", json!({"order_id": order}))
            } else if refund && i == n {
                after.push(id(1));
                let tag = refund_tag(index, &sid);
                refund_step = Some(sid.clone());
                (
                    format!("Refund {REFUND_AMOUNT:.2} CNY on order {order}"),
                    "shop__refund",
                    json!({"order_id": order, "amount": REFUND_AMOUNT, "reason": tag}),
                )
            } else if i == 3 {
                // Two side effects in two rounds of one loop, neither waiting for a person.
                let tag = refund_tag(index, &sid);
                let text = format!("Open a support ticket about the parcel of {order}, then one about its invoice");
                let ticket = |about: &str| json!({"order_id": order, "subject": format!("{about} ({tag})")});
                steps.push(
                    ScriptStep::new(&sid, &[], &text, Some(("shop__open_ticket", ticket("Parcel"))))
                        .then_call("shop__open_ticket", ticket("Invoice")),
                );
                continue;
            } else {
                if n >= 5 && i == n - 1 {
                    after.extend([id(1), id(2)]);
                } else if i % 4 == 0 {
                    after.push(id(i - 1));
                }
                let k = index + i;
                match i % 5 {
                    0 => (format!("Track the parcel of {order}"), "shop__track_shipment", json!({"order_id": order})),
                    1 => (
                        format!("Is {} in stock?", SKUS[k % SKUS.len()]),
                        "shop__get_product",
                        json!({"sku": SKUS[k % SKUS.len()]}),
                    ),
                    2 => (
                        format!("Can I use coupon {}?", COUPONS[k % COUPONS.len()]),
                        "shop__check_coupon",
                        json!({"code": COUPONS[k % COUPONS.len()]}),
                    ),
                    3 => ("List my orders".to_owned(), "shop__list_customer_orders", json!({})),
                    _ => ("What is the refund policy?".to_owned(), "shop__get_refund_policy", json!({})),
                }
            };
            let after: Vec<&str> = after.iter().map(String::as_str).collect();
            steps.push(ScriptStep::new(&sid, &after, &text, Some((tool, args))));
        }
        Self { index, customer_id: customer.to_owned(), order_id: order.to_owned(), steps, refund_step }
    }

    /// The customer's message: a greeting line, then one line per step.
    pub fn message(&self) -> String {
        let mut m = format!("Hello, this is chaos conversation {}. Please handle each part:\n", self.index);
        for s in &self.steps {
            m.push_str(&s.line());
            m.push('\n');
        }
        m
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn a_conversation_has_a_chain_a_join_and_a_refund_after_the_order_lookup() {
        let s = Scenario::new(42, 8, true);
        assert_eq!((s.customer_id.as_str(), s.order_id.as_str()), ("C106", "A1007"));
        let after: Vec<(&str, Vec<String>)> = s.steps.iter().map(|st| (st.id.as_str(), st.after.clone())).collect();
        assert_eq!(after[3], ("w04", vec!["w03".to_owned()]), "every fourth step follows the one before");
        assert_eq!(after[6], ("w07", vec!["w01".to_owned(), "w02".to_owned()]), "the join");
        assert_eq!(after[7], ("w08", vec!["w01".to_owned()]));
        assert_eq!(s.refund_step.as_deref(), Some("w08"));
        let (tool, args) = s.steps[7].call.clone().unwrap();
        assert_eq!(tool, "shop__refund");
        assert_eq!(args, json!({"order_id": "A1007", "amount": 1.0, "reason": "chaos c00042/w08"}));
        let (tool, args) = s.steps[2].call.clone().unwrap();
        assert_eq!(tool, "shop__open_ticket");
        assert_eq!(args, json!({"order_id": "A1007", "subject": "Parcel (chaos c00042/w03)"}));
        let [(tool, args)] = s.steps[2].then.clone().try_into().unwrap();
        assert_eq!(tool, "shop__open_ticket", "a second side effect in the next round: no approval ends the loop");
        assert_eq!(args, json!({"order_id": "A1007", "subject": "Invoice (chaos c00042/w03)"}));
        assert_eq!(mock_llm::script_steps(&s.message()), s.steps, "the mock reads back what was scripted");
        assert!(s.message().len() < 4_000, "well inside the API's 8,000 characters at 20 steps too");
    }

    #[test]
    fn a_refund_tag_is_read_back_from_a_reason_however_the_model_worded_the_rest() {
        assert_eq!(parse_refund_tag("chaos c00042/w08 (draft 17)"), Some((42, "w08".to_owned())));
        assert_eq!(parse_refund_tag(&refund_tag(7, "w20")), Some((7, "w20".to_owned())));
        assert_eq!(parse_refund_tag("customer asked"), None);
        assert_eq!(parse_refund_tag("chaos c12/"), None);
        let big = Scenario::new(3, 20, true);
        assert!(big.message().len() < 4_000, "{}", big.message().len());
        assert_eq!(Scenario::new(3, 1, true).refund_step, None, "one step is the order lookup only");
        assert_eq!(Scenario::new(3, 6, false).refund_step, None);
    }

    #[test]
    fn a_share_of_refunds_is_spread_evenly_over_every_customer() {
        let with: Vec<usize> = (0..16).filter(|i| has_refund(*i, 0.25)).collect();
        assert_eq!(with, vec![3, 7, 11, 15]);
        let customers: Vec<String> = with.iter().map(|i| Scenario::new(*i, 4, true).customer_id).collect();
        assert_eq!(customers, vec!["C109", "C106", "C103", "C108"]);
        assert_eq!((0..10).filter(|i| has_refund(*i, 0.0)).count(), 0);
        assert_eq!((0..10).filter(|i| has_refund(*i, 1.0)).count(), 10);
    }
}
