//! End-to-end test: the server on a real socket, spoken to by an rmcp Streamable HTTP client carrying the gateway's credential and identity headers — and refused without the credential.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use shop_tools::{CUSTOMER_HEADER, IDEMPOTENCY_HEADER, Shop, ShopAccess, TOOL_NAMES, generate_token, serve};

/// Every network wait in this test has this deadline.
const DEADLINE: Duration = Duration::from_secs(20);

fn args(value: Value) -> anyhow::Result<serde_json::Map<String, Value>> {
    value.as_object().cloned().ok_or_else(|| anyhow::anyhow!("arguments must be an object"))
}

fn text_json(result: &rmcp::model::CallToolResult) -> anyhow::Result<Value> {
    anyhow::ensure!(result.content.len() == 1, "one content block expected, got {}", result.content.len());
    let text = result.content[0].as_text().ok_or_else(|| anyhow::anyhow!("text content expected"))?;
    Ok(serde_json::from_str(&text.text)?)
}

/// A client session as the gateway opens one: its bearer credential, and (fixed for this
/// session) the customer and idempotency key headers.
async fn session(
    url: &str,
    token: Option<&SecretString>,
    customer: &str,
    key: Option<&str>,
) -> anyhow::Result<rmcp::service::RunningService<rmcp::RoleClient, ()>> {
    let mut headers = HashMap::new();
    headers.insert(HeaderName::from_static(CUSTOMER_HEADER), HeaderValue::from_str(customer)?);
    if let Some(key) = key {
        headers.insert(HeaderName::from_static(IDEMPOTENCY_HEADER), HeaderValue::from_str(key)?);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(headers);
    if let Some(token) = token {
        config = config.auth_header(token.expose_secret());
    }
    Ok(tokio::time::timeout(DEADLINE, ().serve(StreamableHttpClientTransport::from_config(config))).await??)
}

#[tokio::test]
async fn an_mcp_client_with_the_gateways_credential_lists_the_seven_tools_and_calls_them_over_http()
-> anyhow::Result<()> {
    let shop = Arc::new(Shop::demo()?);
    let token = generate_token();
    let (addr, server) =
        serve("127.0.0.1:0".parse()?, shop.clone(), ShopAccess::local(token.clone()).map_err(anyhow::Error::msg)?)
            .await?;
    let url = format!("http://{addr}/mcp");
    let client = session(&url, Some(&token), "C104", None).await?;

    let tools = tokio::time::timeout(DEADLINE, client.list_all_tools()).await??;
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    let mut expected: Vec<String> = TOOL_NAMES.iter().map(|n| n.to_string()).collect();
    expected.sort();
    assert_eq!(names, expected);
    let refund = tools.iter().find(|t| t.name == "refund").ok_or_else(|| anyhow::anyhow!("refund listed"))?;
    let required = refund.input_schema.get("required").cloned().unwrap_or(Value::Null);
    assert_eq!(required, json!(["order_id"]), "customer and key come from the gateway's headers");
    let props = refund.input_schema.get("properties").cloned().unwrap_or(Value::Null);
    assert!(props.get("customer_id").is_some() && props.get("idempotency_key").is_some(), "the gateway hides them");

    let order = tokio::time::timeout(
        DEADLINE,
        client.call_tool(CallToolRequestParams::new("get_order").with_arguments(args(json!({"order_id": "a1029"}))?)),
    )
    .await??;
    assert_ne!(order.is_error, Some(true));
    let body = text_json(&order)?;
    assert_eq!(body["order_id"], "A1029");
    assert_eq!(body["status"], "PAID");
    assert_eq!(body["total"], 3105.0);

    let hidden = tokio::time::timeout(
        DEADLINE,
        client.call_tool(
            CallToolRequestParams::new("get_order")
                .with_arguments(args(json!({"customer_id": "C106", "order_id": "A1007"}))?),
        ),
    )
    .await??;
    assert_eq!(hidden.is_error, Some(true));
    assert_eq!(
        text_json(&hidden)?,
        json!({"error": "order A1007 not found", "code": "not_found"}),
        "C106's order, asked for as C104"
    );
    tokio::time::timeout(DEADLINE, client.cancel()).await??;

    let refunder = session(&url, Some(&token), "C103", Some("http-1")).await?;
    for _ in 0..2 {
        let refunded = tokio::time::timeout(
            DEADLINE,
            refunder
                .call_tool(CallToolRequestParams::new("refund").with_arguments(args(json!({"order_id": "A1016"}))?)),
        )
        .await??;
        let body = text_json(&refunded)?;
        assert_eq!(
            (body["refunded"].clone(), body["amount"].clone(), body["refund_id"].clone()),
            (json!(true), json!(797.0), json!("RF-A1016-1"))
        );
    }
    assert_eq!(shop.refunds().await?.len(), 1);

    let policy =
        tokio::time::timeout(DEADLINE, refunder.call_tool(CallToolRequestParams::new("get_refund_policy"))).await??;
    assert_eq!(text_json(&policy)?["refund_window_days_after_delivery"], 7);

    tokio::time::timeout(DEADLINE, refunder.cancel()).await??;
    server.abort();
    Ok(())
}

#[tokio::test]
async fn an_mcp_client_without_the_credential_cannot_even_initialize() -> anyhow::Result<()> {
    let shop = Arc::new(Shop::demo()?);
    let token = generate_token();
    let (addr, server) =
        serve("127.0.0.1:0".parse()?, shop.clone(), ShopAccess::local(token).map_err(anyhow::Error::msg)?).await?;
    let url = format!("http://{addr}/mcp");
    let wrong = generate_token();
    for credential in [None, Some(&wrong)] {
        let refused = session(&url, credential, "C103", Some("direct-1")).await;
        assert!(refused.is_err(), "initialize must fail without the gateway's credential");
    }
    assert!(shop.refunds().await.unwrap().is_empty());
    server.abort();
    Ok(())
}
