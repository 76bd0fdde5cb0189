//! The demo configuration in front of the real demo shop (`shop-tools`): only the refund role can move money, only with an approval for exactly that refund, the caller's customer always wins, and the shop answers the gateway only — a direct call without its credential, another customer's order or a lower-case customer id leave the ledger unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on a broken precondition

use std::{sync::Arc, time::Duration};

use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use shop_tools::{Shop, ShopAccess};
use swarm_adapters::mcp::McpToolGateway;
use swarm_core::approval::{ApprovalKey, ProposedAction, TokenClaim};
use swarm_core::domain::{ConversationId, now_ms};
use swarm_core::ports::{ToolContext, ToolError, ToolGateway};
use tool_gateway::{DemoTokens, demo_config};

const T: Duration = Duration::from_secs(10);

struct Stack {
    shop: Arc<Shop>,
    shop_url: String,
    tools: McpToolGateway,
    tokens: DemoTokens,
}

async fn stack() -> Stack {
    stack_with(None).await
}

/// The demo stack, its refunds needing approval above `above_cents` when given (the demo's: every refund).
async fn stack_with(above_cents: Option<i64>) -> Stack {
    let tokens = DemoTokens::generate();
    let shop = Arc::new(Shop::demo().unwrap());
    let access = ShopAccess::local(tokens.shop_upstream().clone()).unwrap();
    let (shop_addr, _shop_task) =
        shop_tools::serve("127.0.0.1:0".parse().unwrap(), shop.clone(), access).await.unwrap();
    let shop_url = format!("http://{shop_addr}/mcp");
    let mut config = demo_config(&shop_url, &tokens);
    if let Some(above) = above_cents {
        for consent in config.side_effects.values_mut().filter_map(|e| e.consent.as_mut()) {
            consent.above_cents = above;
        }
    }
    let (gateway_addr, _gateway_task) = tool_gateway::serve("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
    let tools = McpToolGateway::new(&format!("http://{gateway_addr}/mcp"), tokens.role_tokens(), T).unwrap();
    Stack { shop, shop_url, tools, tokens }
}

/// An operator's approval token for `customer`'s refund of `amount_cents` on `order` under `key` in conversation `conv-demo`.
fn approved(s: &Stack, customer: &str, order: &str, amount_cents: i64, key: &str) -> String {
    ApprovalKey::new(s.tokens.approval_key()).unwrap().sign(&TokenClaim {
        approval_id: "conv-demo.w01.1",
        conversation_id: "conv-demo",
        customer_id: customer,
        tool: "shop__refund",
        order_id: order,
        amount_cents,
        idempotency_key: key,
        expires_at_ms: now_ms() + 60_000,
    })
}

fn ctx(role: &str, customer: &str) -> ToolContext {
    ToolContext {
        role: role.into(),
        customer_id: customer.into(),
        conversation_id: ConversationId::from_trusted("conv-demo"),
        subtask_id: "w01".into(),
    }
}

#[tokio::test]
async fn demo_roles_see_their_tool_sets() {
    let s = stack().await;
    let names = |tools: Vec<swarm_core::ports::ToolSpec>| tools.into_iter().map(|t| t.name).collect::<Vec<_>>();
    assert_eq!(
        names(s.tools.list_tools(&ctx("support", "C104")).await.unwrap()),
        [
            "shop__check_coupon",
            "shop__get_order",
            "shop__get_product",
            "shop__get_refund_policy",
            "shop__list_customer_orders",
            "shop__track_shipment"
        ]
    );
    assert_eq!(
        names(s.tools.list_tools(&ctx("refund", "C104")).await.unwrap()),
        [
            "shop__get_order",
            "shop__get_refund_policy",
            "shop__list_customer_orders",
            "shop__open_ticket",
            "shop__refund"
        ]
    );
    assert_eq!(s.tools.list_tools(&ctx("planner", "C104")).await.unwrap().len(), 8);
    for tool in s.tools.list_tools(&ctx("planner", "C104")).await.unwrap() {
        let props = tool.input_schema.get("properties").cloned().unwrap_or_default();
        assert!(props.get("customer_id").is_none(), "{} shows customer_id", tool.name);
        assert!(props.get("idempotency_key").is_none(), "{} shows idempotency_key", tool.name);
    }
}

#[tokio::test]
async fn support_worker_asking_for_refund_is_refused_and_no_refund_happens() {
    let s = stack().await;
    let out = s
        .tools
        .call_tool(
            &ctx("support", "C106"),
            "shop__refund",
            json!({"order_id": "A1007", "amount": 10.0, "_idempotency_key": "conv-demo/w01/1"}),
            T,
        )
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(out.text, r#"{"error":"tool shop__refund is not permitted for role support"}"#);
    assert!(s.shop.refunds().await.unwrap().is_empty());
}

#[tokio::test]
async fn every_refund_waits_for_approval_and_with_it_runs_once_per_idempotency_key() {
    let s = stack().await;
    let args = json!({"order_id": "A1007", "amount": 10.0, "_idempotency_key": "conv-demo/w01/1"});
    let err = s.tools.call_tool(&ctx("refund", "C106"), "shop__refund", args.clone(), T).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        ToolError::ApprovalRequired(ProposedAction {
            tool: "shop__refund".into(),
            order_id: "A1007".into(),
            amount_cents: 1_000,
            reason: None
        })
        .to_string()
    );
    assert!(s.shop.refunds().await.unwrap().is_empty(), "the ledger is unchanged until a person approves");
    let mut with_token = args.clone();
    with_token["_approval"] = json!(approved(&s, "C106", "A1007", 1_000, "conv-demo/w01/1"));
    for _ in 0..2 {
        let out = s.tools.call_tool(&ctx("refund", "C106"), "shop__refund", with_token.clone(), T).await.unwrap();
        assert!(!out.is_error, "{}", out.text);
    }
    let refunds = s.shop.refunds().await.unwrap();
    assert_eq!(refunds.len(), 1);
    assert_eq!((refunds[0].customer_id.as_str(), refunds[0].order_id.as_str()), ("C106", "A1007"));
    assert_eq!(refunds[0].idempotency_key, "conv-demo/w01/1");
}

#[tokio::test]
async fn model_naming_another_customer_reads_nothing_of_theirs() {
    let s = stack().await;
    // A1007 belongs to C106; the caller acts for C104 and the model pretends otherwise.
    let out = s
        .tools
        .call_tool(&ctx("support", "C104"), "shop__get_order", json!({"order_id": "A1007", "customer_id": "C106"}), T)
        .await
        .unwrap();
    assert!(out.is_error, "{}", out.text);
    assert!(out.text.to_lowercase().contains("not found"), "{}", out.text);
    let own =
        s.tools.call_tool(&ctx("support", "C106"), "shop__get_order", json!({"order_id": "A1007"}), T).await.unwrap();
    assert!(!own.is_error, "{}", own.text);
    assert!(own.text.contains("A1007"), "{}", own.text);
}

#[tokio::test]
async fn the_shop_refuses_a_direct_call_without_the_gateways_credential_and_moves_no_money() {
    let s = stack().await;
    // What a caller who learned the shop's URL could try: a plain MCP client, no credential.
    let direct = ().serve(StreamableHttpClientTransport::from_uri(s.shop_url.clone())).await;
    assert!(direct.is_err(), "initialize is refused before any tool runs");
    // A forged bearer does no better.
    let config = StreamableHttpClientTransportConfig::with_uri(s.shop_url.clone())
        .auth_header("0000000000000000000000000000000000000000000000000000000000000000");
    assert!(().serve(StreamableHttpClientTransport::from_config(config)).await.is_err());
    // Through the gateway, as the refund role and with an operator's approval, it works (once).
    let token = approved(&s, "C106", "A1007", 1_000, "conv-demo/w01/1");
    let args = json!({"order_id": "A1007", "amount": 10.0, "_idempotency_key": "conv-demo/w01/1", "_approval": token});
    let out = s.tools.call_tool(&ctx("refund", "C106"), "shop__refund", args, T).await.unwrap();
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(s.shop.refunds().await.unwrap().len(), 1, "only the gateway's call moved money");
}

#[tokio::test]
async fn another_customers_order_or_a_lower_case_customer_leaves_the_ledger_unchanged() {
    let s = stack().await;
    // A1007 is C106's: the refund role acting for C104 cannot refund it, whatever the arguments say —
    // not even with an operator's approval for C104.
    let token = approved(&s, "C104", "A1007", 1_000, "conv-probe/w01/1");
    let probe = json!({"order_id": "A1007", "amount": 10.0, "customer_id": "C106", "_idempotency_key": "conv-probe/w01/1", "_approval": token});
    let out = s.tools.call_tool(&ctx("refund", "C104"), "shop__refund", probe, T).await.unwrap();
    assert!(out.is_error);
    assert_eq!(out.text, r#"{"code":"not_found","error":"order A1007 not found"}"#);
    // A lower-case customer never reaches the shop: the gateway wants the canonical form.
    let lower = json!({"order_id": "A1007", "_idempotency_key": "conv-probe/w01/2"});
    let out = s.tools.call_tool(&ctx("refund", "c106"), "shop__refund", lower, T).await.unwrap();
    assert!(out.is_error);
    assert_eq!(
        out.text,
        r#"{"error":"the x-swarm-customer-id header must hold a canonical customer id (upper case)"}"#
    );
    let read =
        s.tools.call_tool(&ctx("support", "c106"), "shop__get_order", json!({"order_id": "A1007"}), T).await.unwrap();
    assert!(read.is_error, "{}", read.text);
    assert!(s.shop.refunds().await.unwrap().is_empty(), "the ledger is unchanged");
}

/// Issue 17 point 11a: the threshold holds for the order, not for one call. With approvals above
/// 100, ten refunds of 99 on one order (sent at once, each with its own key) move 99 — the first
/// that lands — and the other nine wait for a person.
#[tokio::test]
async fn refunds_split_under_the_threshold_move_no_more_than_it_without_a_person() {
    let s = stack_with(Some(10_000)).await;
    let who = ctx("refund", "C108");
    let calls = (1..=10).map(|i| {
        let args = json!({"order_id": "A1033", "amount": 99.0, "_idempotency_key": format!("conv-demo/w{i:02}/1")});
        s.tools.call_tool(&who, "shop__refund", args, T)
    });
    let (mut ran, mut asked) = (0, 0);
    for answer in futures::future::join_all(calls).await {
        match answer {
            Ok(out) if !out.is_error => ran += 1,
            Err(ToolError::ApprovalRequired(action)) => {
                assert_eq!((action.order_id.as_str(), action.amount_cents), ("A1033", 9_900));
                asked += 1;
            }
            other => panic!("neither ran nor waits for a person: {other:?}"),
        }
    }
    let moved: i64 = s.shop.refunds().await.unwrap().iter().map(|r| r.amount_cents).sum();
    assert_eq!((ran, asked, moved), (1, 9, 9_900), "990 must not move without an operator");
}

/// Issue 17 point 11e: consent is asked only for a refund that could run. Another customer's
/// order, more than is refundable, an order not delivered yet: the shop's answer reaches the
/// model and no person is asked; the customer's own refundable order still waits for one.
#[tokio::test]
async fn a_person_is_asked_only_about_a_refund_the_shop_would_make() {
    let s = stack().await;
    for (customer, order, amount, why) in [
        ("C104", "A1007", 10.0, "order A1007 not found"),
        ("C106", "A1007", 99_999.0, "exceeds what is refundable"),
        ("C107", "A1032", 10.0, "not delivered"),
    ] {
        let args = json!({"order_id": order, "amount": amount, "_idempotency_key": format!("conv-demo/{customer}/1")});
        match s.tools.call_tool(&ctx("refund", customer), "shop__refund", args, T).await {
            Ok(out) => assert!(out.is_error && out.text.contains(why), "{customer} {order}: {}", out.text),
            Err(e) => panic!("a person was asked about a refund that cannot run ({customer}, {order}, {amount}): {e}"),
        }
    }
    let own = json!({"order_id": "A1007", "amount": 10.0, "_idempotency_key": "conv-demo/C106/2"});
    let err = s.tools.call_tool(&ctx("refund", "C106"), "shop__refund", own, T).await.unwrap_err();
    assert!(matches!(err, ToolError::ApprovalRequired(ref a) if a.amount_cents == 1_000), "{err:?}");
    assert!(s.shop.refunds().await.unwrap().is_empty(), "the ledger is unchanged");
}

/// Issue 17 point 11b: an approval moves its money once, whatever key it is presented with. One
/// operator's token for a refund of 10, presented with four idempotency keys, refunds 10: it binds
/// its key (the gateway refuses it with another), and the shop pays one approval once.
#[tokio::test]
async fn one_approval_presented_with_four_keys_refunds_once() {
    let s = stack().await;
    let token = approved(&s, "C106", "A1007", 1_000, "conv-demo/w01/1");
    let mut refused = 0;
    for key in ["conv-demo/w01/1", "conv-demo/w01/2", "conv-demo/w01/3", "replayed-key"] {
        let args = json!({"order_id": "A1007", "amount": 10.0, "_idempotency_key": key, "_approval": token});
        match s.tools.call_tool(&ctx("refund", "C106"), "shop__refund", args, T).await {
            Ok(out) if !out.is_error => {}
            Ok(_) | Err(ToolError::ApprovalRefused(_)) => refused += 1,
            Err(other) => panic!("{key}: {other:?}"),
        }
    }
    let refunds = s.shop.refunds().await.unwrap();
    let moved: i64 = refunds.iter().map(|r| r.amount_cents).sum();
    assert_eq!((refunds.len(), moved, refused), (1, 1_000, 3), "one approval, one refund: {refunds:?}");
    assert_eq!(refunds[0].idempotency_key, "conv-demo/w01/1");
}
