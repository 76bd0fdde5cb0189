//! Gateway permissions and customer scoping, driven through the worker's MCP adapter against a fake upstream.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on a broken precondition

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;
use swarm_core::ports::{ToolError, ToolGateway};
use tool_gateway::GatewayError;

const T: Duration = Duration::from_secs(5);

#[tokio::test]
async fn support_role_neither_sees_nor_can_call_refund_and_nothing_reaches_the_upstream() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let (gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let tools = adapter(&url);

    let listed: Vec<String> =
        tools.list_tools(&ctx("support", "C104")).await.unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(listed, ["shop__get_order", "shop__get_product", "shop__slow"]);

    let out = tools
        .call_tool(&ctx("support", "C104"), "shop__refund", json!({"order_id": "A1029", "_idempotency_key": "k1"}), T)
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(out.text, r#"{"error":"tool shop__refund is not permitted for role support"}"#);
    assert!(up.fake.state.calls_of("refund").is_empty(), "a refused call must never be forwarded");
    let metrics = gateway.metrics();
    assert_eq!(metrics.refusals, 1);
    assert_eq!(metrics.tools["shop__refund"].refusals, 1);
}

#[tokio::test]
async fn refund_role_call_reaches_the_upstream_with_header_customer_and_idempotency_key() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let (_gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let tools = adapter(&url);

    let listed: Vec<String> =
        tools.list_tools(&ctx("refund", "C104")).await.unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(listed, ["shop__get_order", "shop__refund"]);
    let out = tools
        .call_tool(&ctx("refund", "C104"), "shop__refund", json!({"order_id": "A1029", "_idempotency_key": "key-7"}), T)
        .await
        .unwrap();
    assert!(!out.is_error, "{}", out.text);
    let calls = up.fake.state.calls_of("refund");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        serde_json::Value::Object(calls[0].arguments.clone()),
        json!({"order_id": "A1029", "customer_id": "C104", "idempotency_key": "key-7"})
    );
}

#[tokio::test]
async fn customer_id_from_the_model_is_overridden_by_the_header() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let (_gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let out = adapter(&url)
        .call_tool(&ctx("support", "C104"), "shop__get_order", json!({"order_id": "A2001", "customer_id": "C999"}), T)
        .await
        .unwrap();
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(echoed(&out.text)["arguments"]["customer_id"], "C104");
    assert_eq!(up.fake.state.calls_of("get_order")[0].arguments["customer_id"], "C104");
}

#[tokio::test]
async fn customer_and_idempotency_arguments_are_hidden_from_listed_schemas() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let (_gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let tools = adapter(&url).list_tools(&ctx("refund", "C104")).await.unwrap();
    let refund = tools.iter().find(|t| t.name == "shop__refund").unwrap();
    assert_eq!(
        refund.input_schema,
        json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]})
    );
    assert_eq!(refund.description, "Refund an order");
}

#[tokio::test]
async fn customer_scoped_call_without_customer_header_is_refused_before_dispatch() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let (_gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let out = adapter(&url)
        .call_tool(&ctx("support", ""), "shop__get_order", json!({"order_id": "A2001", "customer_id": "C999"}), T)
        .await
        .unwrap();
    assert!(out.is_error);
    assert!(out.text.contains("x-swarm-customer-id"), "{}", out.text);
    assert!(up.fake.state.calls_of("get_order").is_empty());
}

#[tokio::test]
async fn side_effecting_call_without_idempotency_key_is_refused_before_dispatch() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let (_gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let out = adapter(&url)
        .call_tool(
            &ctx("refund", "C104"),
            "shop__refund",
            json!({"order_id": "A1029", "idempotency_key": "model-made"}),
            T,
        )
        .await
        .unwrap();
    assert!(out.is_error);
    assert!(out.text.contains("x-swarm-idempotency-key"), "{}", out.text);
    assert!(up.fake.state.calls_of("refund").is_empty());
}

#[tokio::test]
async fn planner_lists_every_tool_but_may_call_none() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let (_gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let tools = adapter(&url);
    assert_eq!(tools.list_tools(&ctx("planner", "C104")).await.unwrap().len(), 4);
    let out = tools.call_tool(&ctx("planner", "C104"), "shop__get_product", json!({"sku": "X"}), T).await.unwrap();
    assert!(out.is_error);
    assert!(out.text.contains("role planner may list tools but not call them"), "{}", out.text);
    assert!(up.fake.state.calls_of("get_product").is_empty());
}

#[tokio::test]
async fn unknown_token_gets_an_unauthorized_error_not_a_tool_list() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let (_gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let err = adapter(&url).list_tools(&ctx("intruder", "C104")).await.unwrap_err();
    assert!(matches!(&err, ToolError::Permanent(m) if m.contains("unauthorized")), "{err:?}");
    let err = adapter(&url)
        .call_tool(&ctx("intruder", "C104"), "shop__get_product", json!({"sku": "X"}), T)
        .await
        .unwrap_err();
    assert!(matches!(&err, ToolError::Permanent(m) if m.contains("unauthorized")), "{err:?}");
    assert!(up.fake.state.calls_of("get_product").is_empty());
}

#[tokio::test]
async fn role_without_a_configured_token_fails_in_the_adapter_without_a_request() {
    let err = adapter("http://127.0.0.1:9/mcp").list_tools(&ctx("nobody", "C104")).await.unwrap_err();
    assert!(matches!(&err, ToolError::Local(m) if m.contains("nobody")), "{err:?}");
}

#[tokio::test]
async fn unprefixed_upstreams_offering_the_same_tool_fail_start_up_naming_both() {
    let a = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let b = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let mut first = upstream("alpha", &a.url);
    first.prefix = tool_gateway::Prefix::Off;
    let mut second = upstream("beta", &b.url);
    second.prefix = tool_gateway::Prefix::Off;
    let err = tool_gateway::Gateway::start(config(vec![first, second])).await.unwrap_err();
    let GatewayError::Collision(text) = &err else { panic!("expected a collision, got {err:?}") };
    assert!(text.contains("alpha") && text.contains("beta") && text.contains("get_order"), "{text}");
}

#[tokio::test]
async fn adapter_joins_text_and_strips_the_idempotency_argument() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let (_gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let out = adapter(&url)
        .call_tool(&ctx("support", "C1"), "shop__get_product", json!({"sku": "JKT-BLU-M", "_idempotency_key": "k"}), T)
        .await
        .unwrap();
    assert_eq!(echoed(&out.text), json!({"tool": "get_product", "arguments": {"sku": "JKT-BLU-M"}}));
    let err = adapter(&url)
        .call_tool(&ctx("support", "C1"), "shop__get_product", json!({"sku": "X", "_idempotency_key": 5}), T)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Permanent(_)));
    let err = adapter(&url).call_tool(&ctx("support", "C1"), "shop__get_product", json!(["x"]), T).await.unwrap_err();
    assert!(matches!(err, ToolError::Permanent(_)));
}

#[tokio::test]
async fn adapter_reuses_a_role_listing_within_its_ttl_and_burst_lists_once() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let mut cfg = config(vec![upstream("shop", &up.url)]);
    cfg.list_ttl_secs = 0.001; // every gateway listing goes to the upstream
    let (_gateway, url) = start_gateway(cfg).await;
    let before = up.fake.state.lists.load(std::sync::atomic::Ordering::SeqCst);
    let cached = adapter(&url).with_list_ttl(Duration::from_secs(60));
    let support = ctx("support", "C1");
    let burst = futures::future::join_all((0..20).map(|_| cached.list_tools(&support))).await;
    assert!(burst.iter().all(|r| r.as_ref().is_ok_and(|t| t.len() == 3)));
    assert_eq!(up.fake.state.lists.load(std::sync::atomic::Ordering::SeqCst), before + 1);
    // Another role is another listing.
    assert_eq!(cached.list_tools(&ctx("refund", "C1")).await.unwrap().len(), 2);
    assert_eq!(up.fake.state.lists.load(std::sync::atomic::Ordering::SeqCst), before + 2);
}
