//! Router tests without a socket: raw JSON-RPC over the axum app, as the gateway sends it — and as anyone else might: without the gateway's credential nothing reaches a tool, and the customer and idempotency key come only from the gateway's headers.

use std::sync::Arc;

use axum::body::Body;
use http::{Request, StatusCode, header};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use shop_tools::{CUSTOMER_HEADER, IDEMPOTENCY_HEADER, Shop, ShopAccess, generate_token, router};
use tower::ServiceExt;

struct Rig {
    shop: Arc<Shop>,
    token: SecretString,
    access: ShopAccess,
}

impl Rig {
    fn new() -> anyhow::Result<Self> {
        let token = generate_token();
        let access = ShopAccess::local(token.clone()).map_err(anyhow::Error::msg)?;
        Ok(Self { shop: Arc::new(Shop::demo()?), token, access })
    }

    fn app(&self) -> axum::Router {
        router(self.shop.clone(), self.access.clone())
    }

    /// What the gateway sends: its credential and the caller's customer (and key, for refunds).
    fn as_gateway(&self, customer: &str, key: Option<&str>, body: Value) -> anyhow::Result<Request<Body>> {
        let mut request = post("127.0.0.1:8931", body)?;
        let headers = request.headers_mut();
        headers.insert(header::AUTHORIZATION, format!("Bearer {}", self.token.expose_secret()).parse()?);
        headers.insert(CUSTOMER_HEADER, customer.parse()?);
        if let Some(key) = key {
            headers.insert(IDEMPOTENCY_HEADER, key.parse()?);
        }
        Ok(request)
    }
}

fn post(host: &str, body: Value) -> anyhow::Result<Request<Body>> {
    Ok(Request::builder()
        .method("POST")
        .uri("/mcp")
        .header(header::HOST, host)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(Body::from(body.to_string()))?)
}

fn call(tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

async fn body_json(response: axum::response::Response) -> anyhow::Result<Value> {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// The JSON object a tool answered with (its one text content).
async fn tool_answer(response: axum::response::Response) -> anyhow::Result<(bool, Value)> {
    let body = body_json(response).await?;
    let text = body["result"]["content"][0]["text"].as_str().unwrap_or("");
    Ok((body["result"]["isError"] == true, serde_json::from_str(text)?))
}

#[tokio::test]
async fn a_sessionless_tools_call_from_the_gateway_is_answered_with_plain_json() -> anyhow::Result<()> {
    let rig = Rig::new()?;
    let request = rig.as_gateway("C106", None, call("track_shipment", json!({"order_id": "A1031"})))?;
    let response = rig.app().oneshot(request).await?;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(content_type.starts_with("application/json"), "content type: {content_type}");
    let (is_error, track) = tool_answer(response).await?;
    assert!(!is_error, "{track}");
    assert_eq!(track["eta_passed"], true);
    assert_eq!(track["tracking_no"], "SF250638245935");
    Ok(())
}

#[tokio::test]
async fn a_direct_call_without_the_gateways_credential_is_refused_and_moves_no_money() -> anyhow::Result<()> {
    let rig = Rig::new()?;
    let refund = call("refund", json!({"customer_id": "C103", "order_id": "A1016", "idempotency_key": "direct-1"}));
    for authorization in [None, Some("Bearer 0000000000000000000000000000000000000000"), Some("Basic YTpi")] {
        let mut request = post("127.0.0.1:8931", refund.clone())?;
        request.headers_mut().insert(CUSTOMER_HEADER, "C103".parse()?);
        request.headers_mut().insert(IDEMPOTENCY_HEADER, "direct-1".parse()?);
        if let Some(value) = authorization {
            request.headers_mut().insert(header::AUTHORIZATION, value.parse()?);
        }
        let response = rig.app().oneshot(request).await?;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{authorization:?}");
        assert_eq!(response.headers().get(header::WWW_AUTHENTICATE).map(|v| v.as_bytes()), Some(&b"Bearer"[..]));
        assert_eq!(body_json(response).await?, json!({"error": "this server answers the tool gateway only"}));
    }
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    assert_eq!(rig.app().oneshot(post("localhost", list)?).await?.status(), StatusCode::UNAUTHORIZED);
    assert!(rig.shop.refunds().await.unwrap().is_empty(), "the ledger is unchanged");
    Ok(())
}

#[tokio::test]
async fn a_foreign_host_is_refused_even_with_the_credential() -> anyhow::Result<()> {
    let rig = Rig::new()?;
    let mut request = rig.as_gateway("C104", None, json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))?;
    request.headers_mut().insert(header::HOST, "evil.example.com".parse()?);
    assert_eq!(rig.app().oneshot(request).await?.status(), StatusCode::FORBIDDEN);

    let lambda = router(rig.shop.clone(), ShopAccess::function_url("eu-west-1"));
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let answered = lambda.clone().oneshot(post("x7k2ab.lambda-url.eu-west-1.on.aws", list.clone())?).await?;
    assert_eq!(answered.status(), StatusCode::OK);
    let body = body_json(answered).await?;
    assert_eq!(body["result"]["tools"].as_array().map(Vec::len), Some(8));
    let refused = lambda.oneshot(post("abc.execute-api.eu-west-1.amazonaws.com", list)?).await?;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    Ok(())
}

#[tokio::test]
async fn the_customer_comes_from_the_gateways_header_never_from_the_arguments() -> anyhow::Result<()> {
    let rig = Rig::new()?;
    // A1007 belongs to C106. The arguments name C106; the header (the caller) is C104.
    let request =
        rig.as_gateway("C104", None, call("get_order", json!({"customer_id": "C106", "order_id": "A1007"})))?;
    let (is_error, answer) = tool_answer(rig.app().oneshot(request).await?).await?;
    assert!(is_error);
    assert_eq!(answer, json!({"error": "order A1007 not found", "code": "not_found"}));
    // Without the header, a customer-scoped tool refuses whatever the arguments say.
    let mut request = post("localhost", call("list_customer_orders", json!({"customer_id": "C100"})))?;
    request.headers_mut().insert(header::AUTHORIZATION, format!("Bearer {}", rig.token.expose_secret()).parse()?);
    let (is_error, answer) = tool_answer(rig.app().oneshot(request).await?).await?;
    assert!(is_error);
    assert_eq!(
        answer,
        json!({"error": "list_customer_orders acts for a customer: the tool gateway sets x-swarm-customer-id", "code": "invalid_arguments"})
    );
    Ok(())
}

#[tokio::test]
async fn a_lower_case_customer_names_nobody_and_moves_no_money() -> anyhow::Result<()> {
    let rig = Rig::new()?;
    let refund = call("refund", json!({"order_id": "A1016"}));
    let (is_error, answer) =
        tool_answer(rig.app().oneshot(rig.as_gateway("c103", Some("k-lower"), refund)?).await?).await?;
    assert!(is_error);
    assert_eq!(answer, json!({"error": "customer c103 not found", "code": "not_found"}));
    assert!(rig.shop.refunds().await.unwrap().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_refunds_idempotency_key_is_the_gateways_header() -> anyhow::Result<()> {
    let rig = Rig::new()?;
    // The model-reachable argument changes every time; the header does not: one refund.
    for model_key in ["m-1", "m-2", "m-3"] {
        let refund = call("refund", json!({"order_id": "A1016", "idempotency_key": model_key}));
        let (is_error, receipt) =
            tool_answer(rig.app().oneshot(rig.as_gateway("C103", Some("conv/w01/1"), refund)?).await?).await?;
        assert!(!is_error, "{receipt}");
        assert_eq!(receipt["refund_id"], "RF-A1016-1");
    }
    let refunds = rig.shop.refunds().await.unwrap();
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0].idempotency_key, "conv/w01/1");
    // No key header: refused, nothing recorded.
    let refund = call("refund", json!({"order_id": "A1016", "idempotency_key": "m-4"}));
    let (is_error, answer) = tool_answer(rig.app().oneshot(rig.as_gateway("C103", None, refund)?).await?).await?;
    assert!(is_error);
    assert_eq!(
        answer,
        json!({"error": "refund moves money: the tool gateway sets x-swarm-idempotency-key", "code": "invalid_arguments"})
    );
    assert_eq!(rig.shop.refunds().await.unwrap().len(), 1);
    Ok(())
}

#[tokio::test]
async fn health_answers_ok_without_a_credential() -> anyhow::Result<()> {
    let rig = Rig::new()?;
    let response = rig.app().oneshot(Request::builder().uri("/health").body(Body::empty())?).await?;
    assert_eq!(response.status(), StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn missing_arguments_get_the_same_json_error_shape_as_refusals() -> anyhow::Result<()> {
    let rig = Rig::new()?;
    let request = rig.as_gateway("C103", Some("k1"), call("refund", json!({"amount": 10.0})))?;
    let (is_error, error) = tool_answer(rig.app().oneshot(request).await?).await?;
    assert!(is_error);
    assert_eq!(
        error,
        json!({"error": "invalid arguments for refund: missing field `order_id`", "code": "invalid_arguments"})
    );
    Ok(())
}

#[tokio::test]
async fn a_refund_the_policy_rules_out_names_its_rule_and_figures_beside_the_reason() -> anyhow::Result<()> {
    let rig = Rig::new()?;
    let refund = call("refund", json!({"order_id": "A1006"}));
    let (is_error, answer) = tool_answer(rig.app().oneshot(rig.as_gateway("C105", Some("k1"), refund)?).await?).await?;
    assert!(is_error);
    assert_eq!(
        answer,
        json!({"error": "order A1006 was delivered on 2026-11-18 06:00: the 7-day refund window closed on 2026-11-25 06:00",
               "code": "refund_window_closed", "order_id": "A1006", "delivered_at": "2026-11-18T06:00:00+08:00",
               "window_days": 7, "window_closed_at": "2026-11-25T06:00:00+08:00"})
    );
    let refund = call("refund", json!({"order_id": "A1016", "amount": 900.0}));
    let (_, answer) = tool_answer(rig.app().oneshot(rig.as_gateway("C103", Some("k2"), refund)?).await?).await?;
    assert_eq!(
        answer,
        json!({"error": "a refund of 900.00 CNY exceeds what is refundable on order A1016: 797.00 CNY (797.00 CNY paid minus 0.00 CNY already refunded)",
               "code": "exceeds_refundable", "order_id": "A1016", "amount": 900.0, "refundable": 797.0, "paid": 797.0,
               "refunded": 0.0, "currency": "CNY"})
    );
    assert!(rig.shop.refunds().await.unwrap().is_empty());
    Ok(())
}
