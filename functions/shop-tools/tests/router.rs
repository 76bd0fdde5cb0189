//! Router tests without a socket: raw JSON-RPC over the axum app, as the gateway sends it.

use std::sync::Arc;

use axum::body::Body;
use http::{Request, StatusCode, header};
use serde_json::{Value, json};
use shop_tools::{Shop, router};
use tower::ServiceExt;

fn post(host: &str, body: Value) -> anyhow::Result<Request<Body>> {
    Ok(Request::builder()
        .method("POST")
        .uri("/mcp")
        .header(header::HOST, host)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(Body::from(body.to_string()))?)
}

async fn body_json(response: axum::response::Response) -> anyhow::Result<Value> {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await?;
    Ok(serde_json::from_slice(&bytes)?)
}

#[tokio::test]
async fn a_sessionless_tools_call_is_answered_with_plain_json() -> anyhow::Result<()> {
    let app = router(Arc::new(Shop::demo()?), vec![]);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "track_shipment", "arguments": {"customer_id": "C106", "order_id": "A1031"}}});
    let response = app.oneshot(post("127.0.0.1:8931", call)?).await?;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(content_type.starts_with("application/json"), "content type: {content_type}");
    let body = body_json(response).await?;
    assert_eq!(body["id"], 7);
    let text = body["result"]["content"][0]["text"].as_str().unwrap_or("");
    let track: Value = serde_json::from_str(text)?;
    assert_eq!(track["eta_passed"], true);
    assert_eq!(track["tracking_no"], "SF250638245935");
    Ok(())
}

#[tokio::test]
async fn a_foreign_host_is_rejected_unless_allowed() -> anyhow::Result<()> {
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let local = router(Arc::new(Shop::demo()?), vec![]);
    let refused = local.oneshot(post("evil.example.com", list.clone())?).await?;
    assert!(refused.status().is_client_error(), "status: {}", refused.status());

    let open = router(Arc::new(Shop::demo()?), vec!["*".to_string()]);
    let answered = open.oneshot(post("abc.execute-api.eu-west-1.amazonaws.com", list)?).await?;
    assert_eq!(answered.status(), StatusCode::OK);
    let body = body_json(answered).await?;
    assert_eq!(body["result"]["tools"].as_array().map(Vec::len), Some(7));
    Ok(())
}

#[tokio::test]
async fn health_answers_ok() -> anyhow::Result<()> {
    let app = router(Arc::new(Shop::demo()?), vec![]);
    let response = app.oneshot(Request::builder().uri("/health").body(Body::empty())?).await?;
    assert_eq!(response.status(), StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn missing_arguments_get_the_same_json_error_shape_as_refusals() -> anyhow::Result<()> {
    let app = router(Arc::new(Shop::demo()?), vec![]);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "refund", "arguments": {"customer_id": "C103", "order_id": "A1016"}}});
    let body = body_json(app.oneshot(post("localhost", call)?).await?).await?;
    assert_eq!(body["result"]["isError"], true);
    let text = body["result"]["content"][0]["text"].as_str().unwrap_or("");
    let error: Value = serde_json::from_str(text)?;
    assert_eq!(error, json!({"error": "invalid arguments for refund: missing field `idempotency_key`"}));
    Ok(())
}
