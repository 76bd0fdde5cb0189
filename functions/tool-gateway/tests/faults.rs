//! Gateway protection under faults: rate limits, hanging and failing upstreams (timeout, cancellation, breaker), upstreams down at discovery, forgotten sessions.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on a broken precondition

mod support;

use std::{sync::atomic::Ordering, time::Duration};

use serde_json::json;
use support::*;
use swarm_core::ports::{ToolError, ToolGateway};
use tool_gateway::protect::BreakerState;

const T: Duration = Duration::from_secs(5);

fn names(tools: &[swarm_core::ports::ToolSpec]) -> Vec<&str> {
    tools.iter().map(|t| t.name.as_str()).collect()
}

#[tokio::test]
async fn call_over_the_tool_rate_limit_gets_a_fallback_result_without_dispatch() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let mut shop = upstream("shop", &up.url);
    shop.rate_limit_per_sec = Some(0.001); // burst of one, then one per ~17 minutes
    let (gateway, url) = start_gateway(config(vec![shop])).await;
    let tools = adapter(&url);
    let first = tools.call_tool(&ctx("support", "C1"), "shop__get_product", json!({"sku": "A"}), T).await.unwrap();
    assert!(!first.is_error, "{}", first.text);
    let second = tools.call_tool(&ctx("support", "C1"), "shop__get_product", json!({"sku": "B"}), T).await.unwrap();
    assert!(second.is_error && second.refused, "marked refused before dispatch");
    assert!(!first.refused);
    assert!(second.text.contains("rate limit"), "{}", second.text);
    assert_eq!(up.fake.state.calls_of("get_product").len(), 1);
    assert_eq!(gateway.metrics().tools["shop__get_product"].rate_limited, 1);
}

#[tokio::test]
async fn global_rate_limit_covers_every_tool() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let mut cfg = config(vec![upstream("shop", &up.url)]);
    cfg.global_rate_limit_per_sec = Some(0.001);
    let (_gateway, url) = start_gateway(cfg).await;
    let tools = adapter(&url);
    let first = tools.call_tool(&ctx("support", "C1"), "shop__get_product", json!({"sku": "A"}), T).await.unwrap();
    assert!(!first.is_error);
    let other = tools.call_tool(&ctx("support", "C1"), "shop__get_order", json!({"order_id": "A1"}), T).await.unwrap();
    assert!(other.is_error && other.text.contains("rate limit"), "{}", other.text);
}

#[tokio::test]
async fn hanging_upstream_is_cancelled_opens_the_breaker_and_half_opens_after_the_open_time() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), true).await;
    let mut shop = upstream("shop", &up.url);
    shop.call_timeout_secs = 0.3;
    shop.breaker.failures = 2;
    shop.breaker.open_secs = 0.5;
    let (gateway, url) = start_gateway(config(vec![shop])).await;
    let tools = adapter(&url);
    up.fake.state.hang.store(true, Ordering::SeqCst);

    for i in 1..=2 {
        let out = tools.call_tool(&ctx("support", "C1"), "shop__slow", json!({}), T).await.unwrap();
        assert!(out.is_error);
        assert!(out.text.contains("did not answer within 0.3s and was cancelled"), "{}", out.text);
        eventually("the upstream saw the MCP cancellation", || up.fake.state.cancellations.load(Ordering::SeqCst) == i)
            .await;
    }
    assert_eq!(gateway.upstream_status()[0].breaker, BreakerState::Open);

    // While open: the fallback, and the upstream is not contacted.
    let out = tools.call_tool(&ctx("support", "C1"), "shop__get_product", json!({"sku": "A"}), T).await.unwrap();
    assert!(out.is_error && out.text.contains("circuit open"), "{}", out.text);
    assert!(up.fake.state.calls_of("get_product").is_empty());

    // After the open time one probe goes through; its success closes the breaker.
    up.fake.state.hang.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let out = tools.call_tool(&ctx("support", "C1"), "shop__get_product", json!({"sku": "A"}), T).await.unwrap();
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(gateway.upstream_status()[0].breaker, BreakerState::Closed);
    let transitions: Vec<BreakerState> = gateway.metrics().breaker_transitions.iter().map(|(_, s)| *s).collect();
    assert_eq!(transitions, [BreakerState::Open, BreakerState::HalfOpen, BreakerState::Closed]);
    assert_eq!(gateway.metrics().tools["shop__slow"].timeouts, 2);
}

#[tokio::test]
async fn upstream_internal_errors_open_the_breaker_but_bad_arguments_do_not() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let mut shop = upstream("shop", &up.url);
    shop.breaker.failures = 2;
    let (gateway, url) = start_gateway(config(vec![shop])).await;
    let tools = adapter(&url);
    up.fake.state.fail.store(true, Ordering::SeqCst);
    for _ in 0..2 {
        let out = tools.call_tool(&ctx("support", "C1"), "shop__get_product", json!({"sku": "A"}), T).await.unwrap();
        assert!(out.is_error && out.text.contains("injected failure"), "{}", out.text);
        assert!(!out.refused, "the upstream's own error answer");
    }
    assert_eq!(gateway.upstream_status()[0].breaker, BreakerState::Open);
    let out = tools.call_tool(&ctx("support", "C1"), "shop__get_product", json!({"sku": "A"}), T).await.unwrap();
    assert!(out.text.contains("circuit open"), "{}", out.text);
    assert!(out.is_error && out.refused, "the open breaker's refusal is marked: a replay never records it");
    assert_eq!(up.fake.state.calls_of("get_product").len(), 2);
}

#[tokio::test]
async fn worker_timeout_is_reported_and_the_cancellation_reaches_the_upstream() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), true).await;
    let mut shop = upstream("shop", &up.url);
    shop.call_timeout_secs = 30.0;
    let (_gateway, url) = start_gateway(config(vec![shop])).await;
    up.fake.state.hang.store(true, Ordering::SeqCst);
    let err = adapter(&url)
        .call_tool(&ctx("support", "C1"), "shop__slow", json!({}), Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Timeout(d) if d == Duration::from_millis(300)), "{err:?}");
    eventually("the upstream handler was cancelled", || up.fake.state.cancellations.load(Ordering::SeqCst) == 1).await;
}

#[tokio::test]
async fn upstream_down_at_discovery_is_reported_retried_and_the_others_stay_listed() {
    let shop = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    // Reserve a free port, then close it: the second upstream is down at start.
    let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let down_addr = probe.local_addr().unwrap();
    drop(probe);
    let down_url = format!("http://{down_addr}/mcp");
    let (gateway, url) = start_gateway(config(vec![upstream("shop", &shop.url), upstream("ev", &down_url)])).await;

    let status = gateway.upstream_status();
    assert_eq!(status[0].tools, 4);
    assert!(status[1].last_error.is_some(), "{status:?}");
    assert!(gateway.metrics().discovery_failures["ev"] >= 1);

    let tools = adapter(&url);
    let listed = tools.list_tools(&ctx("support", "C1")).await.unwrap();
    assert_eq!(names(&listed), ["shop__get_order", "shop__get_product", "shop__slow"]);

    // The upstream comes up: the next listing after the retry interval has its tools.
    let extra = vec![rmcp::model::Tool::new("echo", "Echo", std::sync::Arc::new(serde_json::Map::new()))];
    let listener = tokio::net::TcpListener::bind(down_addr).await.unwrap();
    let _ev = start_upstream_on(FakeUpstream::new(extra), false, listener, down_addr);
    // Retried in the background (a failing upstream never slows listings down):
    // poll the listing until its tools appear.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let listed = loop {
        let listed = tools.list_tools(&ctx("support", "C1")).await.unwrap();
        if listed.len() == 4 || tokio::time::Instant::now() > deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(names(&listed), ["ev__echo", "shop__get_order", "shop__get_product", "shop__slow"]);
    assert_eq!(gateway.upstream_status()[1].last_error, None);
    let out = tools.call_tool(&ctx("support", "C1"), "ev__echo", json!({}), T).await.unwrap();
    assert!(!out.is_error, "{}", out.text);
}

#[tokio::test]
async fn expired_upstream_session_is_reinitialized_for_listing_and_safe_calls() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), true).await;
    let mut cfg = config(vec![upstream("shop", &up.url)]);
    cfg.list_ttl_secs = 0.05;
    let (_gateway, url) = start_gateway(cfg).await;
    let tools = adapter(&url);
    let lists_before = up.fake.state.lists.load(Ordering::SeqCst);

    up.forget_sessions().await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    let listed = tools.list_tools(&ctx("support", "C1")).await.unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(up.fake.state.lists.load(Ordering::SeqCst), lists_before + 1, "re-listed once on a new session");

    up.forget_sessions().await;
    let out = tools.call_tool(&ctx("support", "C1"), "shop__get_product", json!({"sku": "A"}), T).await.unwrap();
    assert!(!out.is_error, "a read-only call is retried on the new session: {}", out.text);
    assert_eq!(up.fake.state.calls_of("get_product").len(), 1);
}

#[tokio::test]
async fn side_effecting_call_is_never_retried_after_a_session_loss() {
    let up = start_upstream(FakeUpstream::new(shop_tools()), true).await;
    let (_gateway, url) = start_gateway(config(vec![upstream("shop", &up.url)])).await;
    let tools = adapter(&url);
    up.forget_sessions().await;
    let args = json!({"order_id": "A1029", "_idempotency_key": "k-1"});
    let out = tools.call_tool(&ctx("refund", "C1"), "shop__refund", args.clone(), T).await.unwrap();
    assert!(out.is_error, "{}", out.text);
    assert!(out.text.contains("unavailable"), "{}", out.text);
    assert!(up.fake.state.calls_of("refund").is_empty());
    // The session was re-opened for the next call.
    let out = tools.call_tool(&ctx("refund", "C1"), "shop__refund", args, T).await.unwrap();
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(up.fake.state.calls_of("refund").len(), 1);
}

#[tokio::test]
async fn failing_upstream_is_retried_in_the_background_without_holding_up_listings() {
    let shop = start_upstream(FakeUpstream::new(shop_tools()), false).await;
    let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let down_addr = probe.local_addr().unwrap();
    drop(probe);
    let mut ev = upstream("ev", &format!("http://{down_addr}/mcp"));
    ev.discovery_timeout_secs = 30.0;
    let (gateway, url) = start_gateway(config(vec![upstream("shop", &shop.url), ev])).await;

    // It comes back but hangs on tools/list: listings must still answer at once.
    let extra = vec![rmcp::model::Tool::new("echo", "Echo", std::sync::Arc::new(serde_json::Map::new()))];
    let fake = FakeUpstream::new(extra);
    fake.state.hang_list.store(true, Ordering::SeqCst);
    let listener = tokio::net::TcpListener::bind(down_addr).await.unwrap();
    let ev_up = start_upstream_on(fake, false, listener, down_addr);
    tokio::time::sleep(Duration::from_millis(60)).await;
    let tools = adapter(&url);
    let listed = tokio::time::timeout(Duration::from_secs(10), tools.list_tools(&ctx("support", "C1")))
        .await
        .expect("a listing must not wait for a hanging upstream's 30 s discovery")
        .unwrap();
    assert_eq!(names(&listed), ["shop__get_order", "shop__get_product", "shop__slow"]);
    eventually("the background retry reached the upstream", || ev_up.fake.state.lists.load(Ordering::SeqCst) >= 1)
        .await;

    ev_up.fake.state.hang_list.store(false, Ordering::SeqCst);
    eventually("the upstream's tools are exposed", || gateway.upstream_status()[1].tools == 1).await;
    let listed = tools.list_tools(&ctx("support", "C1")).await.unwrap();
    assert_eq!(names(&listed)[0], "ev__echo");
}
