//! Federation with a server nobody here wrote: the official `@modelcontextprotocol/server-everything` as a second upstream beside the demo shop, listed and called through the gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on a broken precondition

mod node;

use std::{sync::Arc, time::Duration};

use serde_json::json;
use swarm_adapters::mcp::McpToolGateway;
use swarm_core::domain::ConversationId;
use swarm_core::ports::{ToolContext, ToolGateway};
use tool_gateway::{DemoTokens, UpstreamConfig, demo_config};

#[tokio::test]
async fn server_everything_tools_are_listed_and_called_through_the_gateway_beside_the_shop() {
    let Some(dir) = node::node_or_skip("server_everything_federation") else { return };
    let port = node::free_port();
    let _everything = node::start_node_server(
        &dir,
        &["node_modules/@modelcontextprotocol/server-everything/dist/index.js", "streamableHttp"],
        port,
    )
    .await;
    let tokens = DemoTokens::generate();
    let shop = Arc::new(shop_tools::Shop::demo().unwrap());
    let access = shop_tools::ShopAccess::local(tokens.shop_upstream().clone()).unwrap();
    let (shop_addr, _shop) = shop_tools::serve("127.0.0.1:0".parse().unwrap(), shop, access).await.unwrap();

    let mut config = demo_config(&format!("http://{shop_addr}/mcp"), &tokens);
    config.upstreams.push(UpstreamConfig::new("everything", &format!("http://127.0.0.1:{port}/mcp")));
    config.roles.get_mut("support").unwrap().tools.push("everything__*".into());
    let (addr, _gateway) = tool_gateway::serve("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
    let tools =
        McpToolGateway::new(&format!("http://{addr}/mcp"), tokens.role_tokens(), Duration::from_secs(10)).unwrap();
    let ctx = ToolContext {
        role: "support".into(),
        customer_id: "C104".into(),
        conversation_id: ConversationId::from_trusted("conv-fed"),
        subtask_id: "w01".into(),
    };

    let listed = tools.list_tools(&ctx).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
    for expected in ["everything__echo", "everything__get-sum", "shop__get_order", "shop__track_shipment"] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    assert!(!names.contains(&"shop__refund"));
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "listed in name order");
    let sum = listed.iter().find(|t| t.name == "everything__get-sum").unwrap();
    assert!(sum.input_schema["properties"]["a"].is_object(), "{}", sum.input_schema);

    let echo = tools
        .call_tool(&ctx, "everything__echo", json!({"message": "hello gateway"}), Duration::from_secs(10))
        .await
        .unwrap();
    assert!(!echo.is_error, "{}", echo.text);
    assert_eq!(echo.text, "Echo: hello gateway");
    let sum =
        tools.call_tool(&ctx, "everything__get-sum", json!({"a": 2, "b": 3}), Duration::from_secs(10)).await.unwrap();
    assert!(!sum.is_error, "{}", sum.text);
    assert!(sum.text.contains('5'), "{}", sum.text);
    let order =
        tools.call_tool(&ctx, "shop__get_order", json!({"order_id": "A1029"}), Duration::from_secs(10)).await.unwrap();
    assert!(!order.is_error && order.text.contains("A1029"), "{}", order.text);
}
