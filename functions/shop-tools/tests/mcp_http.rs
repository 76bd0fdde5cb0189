//! End-to-end test: the server on a real socket, spoken to by an rmcp Streamable HTTP client.

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use shop_tools::{Shop, TOOL_NAMES, serve};

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

#[tokio::test]
async fn an_mcp_client_lists_the_seven_tools_and_calls_them_over_http() -> anyhow::Result<()> {
    let shop = Arc::new(Shop::demo()?);
    let (addr, server) = serve("127.0.0.1:0".parse()?, shop.clone()).await?;
    let url = format!("http://{addr}/mcp");
    let client = tokio::time::timeout(DEADLINE, ().serve(StreamableHttpClientTransport::from_uri(url))).await??;

    let tools = tokio::time::timeout(DEADLINE, client.list_all_tools()).await??;
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    let mut expected: Vec<String> = TOOL_NAMES.iter().map(|n| n.to_string()).collect();
    expected.sort();
    assert_eq!(names, expected);
    let refund = tools.iter().find(|t| t.name == "refund").ok_or_else(|| anyhow::anyhow!("refund listed"))?;
    let required = refund.input_schema.get("required").cloned().unwrap_or(Value::Null);
    assert_eq!(required, json!(["customer_id", "order_id", "idempotency_key"]));

    let order = tokio::time::timeout(
        DEADLINE,
        client.call_tool(
            CallToolRequestParams::new("get_order")
                .with_arguments(args(json!({"customer_id": "C104", "order_id": "a1029"}))?),
        ),
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
                .with_arguments(args(json!({"customer_id": "C100", "order_id": "A1005"}))?),
        ),
    )
    .await??;
    assert_eq!(hidden.is_error, Some(true));
    assert_eq!(text_json(&hidden)?, json!({"error": "order A1005 not found"}));

    let refund_args = args(json!({"customer_id": "C103", "order_id": "A1016", "idempotency_key": "http-1"}))?;
    for _ in 0..2 {
        let refunded = tokio::time::timeout(
            DEADLINE,
            client.call_tool(CallToolRequestParams::new("refund").with_arguments(refund_args.clone())),
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
        tokio::time::timeout(DEADLINE, client.call_tool(CallToolRequestParams::new("get_refund_policy"))).await??;
    assert_eq!(text_json(&policy)?["refund_window_days_after_delivery"], 7);

    tokio::time::timeout(DEADLINE, client.cancel()).await??;
    server.abort();
    Ok(())
}
