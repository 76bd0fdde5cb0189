//! SigV4 to `AWS_IAM` function URLs, end to end, on both hops: a stand-in for a function URL — which recomputes the signature from what arrived (method, host, path, `x-amz-date`, body) as AWS does — lets signed calls through and refuses unsigned or wrongly signed ones before any code runs; in front of the demo shop (the gateway's upstream client) and in front of the gateway itself (a worker's client, its role token then in `x-swarm-gateway-token` since the signature holds `Authorization`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on a broken precondition

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, GetExtensions, ServerResult};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use shop_tools::{CUSTOMER_HEADER, IDEMPOTENCY_HEADER, Shop, ShopAccess};
use swarm_adapters::mcp::sigv4::{LAMBDA_SERVICE, SigV4Signer};
use swarm_adapters::mcp::{McpHttpClient, McpToolGateway, RequestHeaders};
use swarm_core::domain::ConversationId;
use swarm_core::ports::{ToolContext, ToolGateway};
use tool_gateway::{DemoTokens, demo_config};
use tower::ServiceExt as _;

const T: Duration = Duration::from_secs(10);
const REGION: &str = "us-east-1";

fn role_credentials() -> Credentials {
    Credentials::new("ASIAGATEWAYROLE", "gateway-role-secret-key", Some("session-token-1".into()), None, "test")
}

struct FunctionUrl {
    function: axum::Router,
    verifier: SigV4Signer,
}

/// What AWS does for an `AWS_IAM` function URL: recompute the signature over the request that
/// arrived and refuse (403) unless it matches and is fresh; only then invoke the function.
async fn function_url(State(url): State<Arc<FunctionUrl>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let forbidden = || (StatusCode::FORBIDDEN, axum::Json(json!({"Message": "Forbidden"}))).into_response();
    let Ok(date) = chrono::NaiveDateTime::parse_from_str(&header("x-amz-date"), "%Y%m%dT%H%M%SZ") else {
        return forbidden();
    };
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(date.and_utc().timestamp() as u64);
    let skew = SystemTime::now().duration_since(at).unwrap_or_else(|e| e.duration());
    let uri = format!("http://{}{}", header("host"), parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    let expected = url.verifier.sign_at(&role_credentials(), parts.method.as_str(), &uri, &[], &body, at).unwrap();
    let expected_auth =
        expected.iter().find(|(n, _)| n == "authorization").map(|(_, v)| v.to_str().unwrap().to_owned());
    if skew > Duration::from_secs(300) || expected_auth.as_deref() != Some(header("authorization").as_str()) {
        return forbidden();
    }
    url.function.clone().oneshot(Request::from_parts(parts, Body::from(body))).await.unwrap()
}

/// Serves `function` behind a stand-in `AWS_IAM` function URL; its `/mcp` URL.
async fn behind_function_url(function: axum::Router) -> String {
    let state = Arc::new(FunctionUrl {
        function,
        verifier: SigV4Signer::with_credentials(LAMBDA_SERVICE, REGION, role_credentials()),
    });
    let app = axum::Router::new().fallback(function_url).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

async fn start() -> (String, Arc<Shop>) {
    let shop = Arc::new(Shop::demo().unwrap());
    // Behind AWS_IAM the shop needs no token of its own; AWS checked the caller.
    let shop_router = shop_tools::router(shop.clone(), ShopAccess::new(vec!["127.0.0.1".into()]));
    (behind_function_url(shop_router).await, shop)
}

fn client(signer: Option<SigV4Signer>) -> McpHttpClient {
    let client = McpHttpClient::new(reqwest::Client::new());
    match signer {
        Some(s) => client.signed(s),
        None => client,
    }
}

#[tokio::test]
async fn signed_calls_reach_the_shop_and_unsigned_or_forged_ones_are_refused_before_any_tool() {
    let (url, shop) = start().await;
    let transport = |c: McpHttpClient| {
        StreamableHttpClientTransport::with_client(c, StreamableHttpClientTransportConfig::with_uri(url.clone()))
    };

    let unsigned = tokio::time::timeout(T, ().serve(transport(client(None)))).await.unwrap();
    assert!(unsigned.is_err(), "an unsigned initialize is refused");
    let wrong_key = Credentials::new("ASIAGATEWAYROLE", "not-the-secret", Some("session-token-1".into()), None, "test");
    let forged = client(Some(SigV4Signer::with_credentials(LAMBDA_SERVICE, REGION, wrong_key)));
    assert!(tokio::time::timeout(T, ().serve(transport(forged))).await.unwrap().is_err(), "a forged signature too");

    let signer = SigV4Signer::with_credentials(LAMBDA_SERVICE, REGION, role_credentials());
    let session = tokio::time::timeout(T, ().serve(transport(client(Some(signer))))).await.unwrap().unwrap();
    let tools = session.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 8);
    // A refund with the identity headers on this request only, as the gateway sends it.
    let headers = RequestHeaders(Arc::new(vec![
        (http::HeaderName::from_static(CUSTOMER_HEADER), http::HeaderValue::from_static("C106")),
        (http::HeaderName::from_static(IDEMPOTENCY_HEADER), http::HeaderValue::from_static("conv/w01/1")),
    ]));
    let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("refund")
            .with_arguments(json!({"order_id": "A1007", "amount": 10.0}).as_object().unwrap().clone()),
    ));
    request.extensions_mut().insert(headers);
    let answer = session.send_request(request).await.unwrap();
    let ServerResult::CallToolResult(result) = answer else { panic!("a tool result") };
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let refunds = shop.refunds().await.unwrap();
    assert_eq!(refunds.len(), 1, "only the signed call moved money");
    assert_eq!((refunds[0].customer_id.as_str(), refunds[0].idempotency_key.as_str()), ("C106", "conv/w01/1"));
    session.cancel().await.unwrap();
}

#[tokio::test]
async fn a_worker_signs_its_calls_to_an_aws_iam_gateway_and_keeps_its_role_token_in_its_own_header() {
    let tokens = DemoTokens::generate();
    let shop = Arc::new(Shop::demo().unwrap());
    let access = ShopAccess::local(tokens.shop_upstream().clone()).unwrap();
    let (shop_addr, _shop) = shop_tools::serve("127.0.0.1:0".parse().unwrap(), shop.clone(), access).await.unwrap();
    let mut config = demo_config(&format!("http://{shop_addr}/mcp"), &tokens);
    config.allowed_hosts = vec!["127.0.0.1".into()];
    let gateway = tool_gateway::Gateway::start(config).await.unwrap();
    let url = behind_function_url(gateway.router()).await;
    let ctx = ToolContext {
        role: "support".into(),
        customer_id: "C104".into(),
        conversation_id: ConversationId::from_trusted("conv-sigv4"),
        subtask_id: "w01".into(),
    };

    let unsigned = McpToolGateway::new(&url, tokens.role_tokens(), T).unwrap();
    assert!(unsigned.list_tools(&ctx).await.is_err(), "AWS refuses the unsigned call");
    let signer = SigV4Signer::with_credentials(LAMBDA_SERVICE, REGION, role_credentials());
    let signed = McpToolGateway::new(&url, tokens.role_tokens(), T).unwrap().signed(signer);
    let tools = signed.list_tools(&ctx).await.unwrap();
    assert_eq!(tools.len(), 6, "the support role's tools: the role token got through beside the signature");
    let order = signed.call_tool(&ctx, "shop__get_order", json!({"order_id": "A1029"}), T).await.unwrap();
    assert!(!order.is_error && order.text.contains("A1029"), "{}", order.text);
    let refused = signed.call_tool(&ctx, "shop__refund", json!({"order_id": "A1029", "_idempotency_key": "k"}), T);
    assert!(refused.await.unwrap().is_error, "the role still decides");
    assert!(shop.refunds().await.unwrap().is_empty());
}
