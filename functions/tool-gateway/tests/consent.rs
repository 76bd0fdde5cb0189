//! Consent before money moves, enforced by the gateway with the upstream's help: a refund without an approval goes upstream limited by the configured amount, and past it is refused (typed) with what a person must approve; with a token it runs only if the token is valid for exactly that approval, conversation, customer, order and amount; below the amount it runs as before; a side-effecting call that never answered is reported as "outcome unknown", never as refused.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on a broken precondition

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;
use support::*;
use swarm_adapters::mcp::SIDE_EFFECTING_META;
use swarm_core::approval::{ApprovalKey, ProposedAction, TokenClaim};
use swarm_core::domain::now_ms;
use swarm_core::ports::{ToolError, ToolGateway};

const T: Duration = Duration::from_secs(5);
const APPROVAL: &str = "conv-test.w01.1";

fn token(customer: &str, order: &str, amount_cents: i64, expires_at_ms: i64) -> String {
    ApprovalKey::new(APPROVAL_KEY).unwrap().sign(&TokenClaim {
        approval_id: APPROVAL,
        conversation_id: "conv-test",
        customer_id: customer,
        tool: "shop__refund",
        order_id: order,
        amount_cents,
        idempotency_key: "swarm:conv-test:w01:1",
        expires_at_ms,
    })
}

fn refund(order: &str, amount: f64, approval: Option<&str>) -> serde_json::Value {
    let mut args = json!({"order_id": order, "amount": amount, "reason": "it broke\u{1b}[2J", "_idempotency_key": "swarm:conv-test:w01:1"});
    if let Some(t) = approval {
        args["_approval"] = json!(t);
    }
    args
}

#[tokio::test]
async fn a_refund_above_the_amount_is_refused_with_what_a_person_must_approve() {
    let up = start_upstream(FakeUpstream::new(consent_shop_tools()), false).await;
    let (gateway, url) = start_gateway(with_consent(config(vec![upstream("shop", &up.url)]), 0)).await;
    let tools = adapter(&url);
    let listed = tools.list_tools(&ctx("refund", "C104")).await.unwrap();
    let flags: Vec<(String, bool)> = listed.iter().map(|t| (t.name.clone(), t.side_effecting)).collect();
    assert_eq!(
        flags,
        [("shop__get_order".to_owned(), false), ("shop__refund".to_owned(), true)],
        "from the gateway's configuration"
    );

    let err =
        tools.call_tool(&ctx("refund", "C104"), "shop__refund", refund("A1033", 1874.0, None), T).await.unwrap_err();
    let ToolError::ApprovalRequired(action) = err else { panic!("typed refusal expected, got {err:?}") };
    assert_eq!(
        action,
        ProposedAction {
            tool: "shop__refund".into(),
            order_id: "A1033".into(),
            amount_cents: 187_400,
            reason: Some("it broke[2J".into())
        }
    );
    let asked = up.fake.state.calls_of("refund");
    assert_eq!(asked.len(), 1, "the shop checked it, limited to the threshold");
    assert_eq!(asked[0].arguments["consent_limit_cents"], 0);
    assert_eq!(gateway.metrics().refusals, 1);
    assert!(SIDE_EFFECTING_META.contains("side_effecting"));
}

#[tokio::test]
async fn a_refund_without_an_amount_or_with_a_bad_order_id_is_not_put_before_a_person() {
    let up = start_upstream(FakeUpstream::new(consent_shop_tools()), false).await;
    let (_gateway, url) = start_gateway(with_consent(config(vec![upstream("shop", &up.url)]), 0)).await;
    let tools = adapter(&url);
    let everything = json!({"order_id": "A1033", "_idempotency_key": "k"});
    let out = tools.call_tool(&ctx("refund", "C104"), "shop__refund", everything, T).await.unwrap();
    assert!(out.is_error && out.text.contains("give amount as a number"), "{}", out.text);
    let odd = refund("A1033; DROP TABLE", 10.0, None);
    let out = tools.call_tool(&ctx("refund", "C104"), "shop__refund", odd, T).await.unwrap();
    assert!(out.is_error && out.text.contains("give order_id as the order id"), "{}", out.text);
    assert!(up.fake.state.calls_of("refund").is_empty());
}

#[tokio::test]
async fn a_valid_token_lets_exactly_its_call_through_and_nothing_else() {
    let up = start_upstream(FakeUpstream::new(consent_shop_tools()), false).await;
    let (_gateway, url) = start_gateway(with_consent(config(vec![upstream("shop", &up.url)]), 0)).await;
    let tools = adapter(&url);
    let later = now_ms() + 60_000;
    let good = token("C104", "A1033", 187_400, later);
    let out =
        tools.call_tool(&ctx("refund", "C104"), "shop__refund", refund("A1033", 1874.0, Some(&good)), T).await.unwrap();
    assert!(!out.is_error, "{}", out.text);
    let calls = up.fake.state.calls_of("refund");
    assert_eq!(calls.len(), 1);
    assert!(calls[0].arguments.get("_approval").is_none(), "the token never goes upstream");

    // The same token for another amount, order, customer or idempotency key; an expired one; one signed with another key.
    let mut under_another_key = refund("A1033", 1874.0, Some(&good));
    under_another_key["_idempotency_key"] = json!("swarm:conv-test:w01:2");
    let refused = [
        (ctx("refund", "C104"), under_another_key),
        (ctx("refund", "C104"), refund("A1033", 5000.0, Some(&good))),
        (ctx("refund", "C104"), refund("A1034", 1874.0, Some(&good))),
        (ctx("refund", "C105"), refund("A1033", 1874.0, Some(&good))),
        (ctx("refund", "C104"), refund("A1033", 1874.0, Some(&token("C104", "A1033", 187_400, now_ms() - 1)))),
        (
            ctx("refund", "C104"),
            refund(
                "A1033",
                1874.0,
                Some(&ApprovalKey::new("an-attacker-key-0123456789abcdef0123").unwrap().sign(&TokenClaim {
                    approval_id: APPROVAL,
                    conversation_id: "conv-test",
                    customer_id: "C104",
                    tool: "shop__refund",
                    order_id: "A1033",
                    amount_cents: 187_400,
                    idempotency_key: "swarm:conv-test:w01:1",
                    expires_at_ms: later,
                })),
            ),
        ),
    ];
    for (who, args) in refused {
        let err = tools.call_tool(&who, "shop__refund", args.clone(), T).await.unwrap_err();
        assert!(matches!(err, ToolError::ApprovalRefused(_)), "{args}: {err:?}");
    }
    assert_eq!(up.fake.state.calls_of("refund").len(), 1, "none of them reached the shop");
}

#[tokio::test]
async fn below_the_amount_a_refund_runs_as_before_and_above_it_waits() {
    let up = start_upstream(FakeUpstream::new(consent_shop_tools()), false).await;
    let (_gateway, url) = start_gateway(with_consent(config(vec![upstream("shop", &up.url)]), 10_000)).await;
    let tools = adapter(&url);
    let out = tools.call_tool(&ctx("refund", "C104"), "shop__refund", refund("A1033", 99.5, None), T).await.unwrap();
    assert!(!out.is_error, "{}", out.text);
    let at_limit = tools.call_tool(&ctx("refund", "C104"), "shop__refund", refund("A1033", 100.0, None), T).await;
    assert!(at_limit.is_ok_and(|o| !o.is_error), "the amount itself needs no approval");
    let above = tools.call_tool(&ctx("refund", "C104"), "shop__refund", refund("A1033", 100.01, None), T).await;
    assert!(matches!(above, Err(ToolError::ApprovalRequired(ref a)) if a.amount_cents == 10_001), "{above:?}");
    assert_eq!(up.fake.state.calls_of("refund").len(), 3, "the shop checks every call, at its limit");
    let calls = up.fake.state.calls_of("refund");
    assert!(
        calls.iter().all(|c| c.arguments["consent_limit_cents"] == 10_000),
        "the upstream holds the order to the threshold: {calls:?}"
    );
}

#[tokio::test]
async fn a_side_effect_that_timed_out_is_outcome_unknown() {
    // `slow` hangs while told to; here it takes an idempotency key and is declared side-effecting.
    let mut tools_of_upstream: Vec<rmcp::model::Tool> = shop_tools().into_iter().filter(|t| t.name != "slow").collect();
    let schema = json!({"type": "object", "properties": {"idempotency_key": {"type": "string"}}, "required": ["idempotency_key"]});
    let serde_json::Value::Object(schema) = schema else { unreachable!() };
    tools_of_upstream.push(rmcp::model::Tool::new("slow", "hangs while told to", std::sync::Arc::new(schema)));
    let up = start_upstream(FakeUpstream::new(tools_of_upstream), false).await;
    let mut cfg = config(vec![upstream("shop", &up.url)]);
    cfg.side_effects.insert("shop__slow".to_owned(), Default::default());
    cfg.roles.get_mut("refund").unwrap().tools.push("shop__slow".to_owned());
    let (_gateway, url) = start_gateway(cfg).await;
    let tools = adapter(&url);
    up.fake.state.hang.store(true, Ordering::SeqCst);
    let err =
        tools.call_tool(&ctx("refund", "C104"), "shop__slow", json!({"_idempotency_key": "k-2"}), T).await.unwrap_err();
    assert!(matches!(err, ToolError::Unavailable(ref m) if m.contains("not known")), "{err:?}");
    assert_eq!(up.fake.state.calls_of("slow").len(), 1, "dispatched once, never retried by the gateway");
}

#[tokio::test]
async fn a_side_effect_that_never_answered_is_outcome_unknown_not_refused() {
    let up = start_upstream(FakeUpstream::new(consent_shop_tools()), false).await;
    let (_gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let tools = adapter(&url);
    up.fake.state.fail.store(false, Ordering::SeqCst);
    up.task.abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let args = json!({"order_id": "A1029", "_idempotency_key": "k-9"});
    let err = tools.call_tool(&ctx("refund", "C104"), "shop__refund", args, T).await.unwrap_err();
    assert!(matches!(err, ToolError::Unavailable(ref m) if m.contains("not known")), "{err:?}");
    assert!(err.is_transient(), "the worker replays it with the same key");
    // A read-only call to the same dead upstream is an ordinary error result.
    let out =
        tools.call_tool(&ctx("refund", "C104"), "shop__get_order", json!({"order_id": "A1029"}), T).await.unwrap();
    assert!(out.is_error, "{}", out.text);
}
