//! The orchestrator's router with `oneshot` and no server: every status code in the one error shape (429 with `Retry-After` included), the caller's identity from a JWT's mapped `sub` or a protected claim, IAM callers and assumed roles, the local token table or nobody — always one canonical customer id — and the `events/` fixture through lambda_http's conversion.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpRequestContext;
use lambda_http::request::RequestContext;
use orchestrator::api::{Auth, JwtIdentity, TokenTable};
use orchestrator::{ApiState, Orchestrator, OrchestratorSettings};
use serde_json::{Value, json};
use swarm_adapters::config::ClaimMapping;
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::access::{AccessStore, CustomerLimits, Principal, RateWindow};
use swarm_core::domain::{ConversationId, now_ms};
use swarm_core::ports::{ConversationRecords, ConversationStore, TaskQueue, ToolError};
use swarm_core::roles::{RoleTable, TaskQueues};
use swarm_testing::{FlakyStore, ScriptedModel, StaticTools, StoreOp, text_response};
use tower::ServiceExt as _;

const TOKEN_C104: &str = "tok-c104-0123456789abcdef";

struct Rig {
    store: Arc<InMemoryConversationStore>,
    core: Arc<Orchestrator>,
}

fn rig_on(store: Arc<InMemoryConversationStore>, view: Arc<dyn ConversationStore>) -> Rig {
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Check order A1029", "tools": ["shop__get_order"]}]}"#;
    let tools = StaticTools::named(&["shop__get_order"], "{name} tool", json!({"type": "object"}))
        .only_for_role("planner")
        .on_any_call(|_, _| Err(ToolError::Permanent("the planner calls no tools".into())));
    let queues = TaskQueues::new(Arc::new(InMemoryQueue::new(QueueSettings::default())) as Arc<dyn TaskQueue>);
    let core = Orchestrator::new(
        view,
        queues,
        Arc::new(ScriptedModel::always(Ok(text_response(plan)))),
        Arc::new(tools),
        RoleTable::demo(),
        OrchestratorSettings::default(),
    );
    Rig { store, core: Arc::new(core) }
}

fn rig() -> Rig {
    let store = Arc::new(InMemoryConversationStore::new());
    rig_on(store.clone(), store)
}

fn router(rig: &Rig, auth: Auth) -> Router {
    orchestrator::router(ApiState::new(rig.core.clone(), auth))
}

fn tokens() -> Auth {
    Auth::Tokens(Arc::new(TokenTable::from_pairs([(TOKEN_C104, "C104")]).unwrap()))
}

fn request(method: &str, path: &str, body: &str) -> Request<Body> {
    Request::builder().method(method).uri(path).body(Body::from(body.to_owned())).unwrap()
}

fn post(body: &str) -> Request<Body> {
    request("POST", "/conversations", body)
}

fn with_header(mut request: Request<Body>, name: &'static str, value: &str) -> Request<Body> {
    request.headers_mut().insert(name, value.parse().unwrap());
    request
}

/// A request as lambda_http hands it over after an authorizer ran: the HTTP API request context in the extensions.
fn with_context(mut request: Request<Body>, context: Value) -> Request<Body> {
    let context: ApiGatewayV2httpRequestContext = serde_json::from_value(context).unwrap();
    request.extensions_mut().insert(RequestContext::ApiGatewayV2(context));
    request
}

/// An HTTP API (payload 2.0) request context with `authorizer`.
fn context(authorizer: Value) -> Value {
    json!({
        "routeKey": "POST /conversations",
        "stage": "$default",
        "http": {"method": "POST", "path": "/conversations", "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7"},
        "authorizer": authorizer
    })
}

fn jwt_context(claims: Value) -> Value {
    context(json!({"jwt": {"claims": claims, "scopes": null}}))
}

async fn send<B>(router: Router, request: Request<B>) -> (StatusCode, HeaderMap, Value)
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let response = router.oneshot(request).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    (status, headers, body)
}

/// The one error shape: an RFC 9457 problem document (`type`, `title`, `status`, `detail`)
/// that keeps `{"error": {"code", "message"}}`, and nothing else but, on a 503 of a recorded
/// conversation, `conversation` (its id and whether it started), as `application/problem+json`.
fn assert_error(answer: &(StatusCode, HeaderMap, Value), status: u16, code: &str) {
    let (got, headers, body) = answer;
    assert_eq!(got.as_u16(), status, "{body}");
    assert_eq!(headers.get(header::CONTENT_TYPE).unwrap(), "application/problem+json", "{code}");
    let recorded = body.get("conversation").is_some();
    if recorded {
        assert_eq!(status, 503, "{body}");
        assert!(body["conversation"]["conversation_id"].is_string(), "{body}");
        assert!(["no", "yes", "unknown"].contains(&body["conversation"]["started"].as_str().unwrap_or("")), "{body}");
    }
    assert_eq!(body.as_object().map(|o| o.len()), Some(5 + usize::from(recorded)), "{body}");
    assert_eq!(body["error"].as_object().map(|o| o.len()), Some(2), "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(!body["error"]["message"].as_str().unwrap_or("").is_empty(), "{body}");
    assert_eq!(body["type"], format!("urn:lambda-swarm:problem:{code}"), "{body}");
    assert_eq!((body["status"].as_u64(), &body["detail"]), (Some(u64::from(status)), &body["error"]["message"]));
}

async fn customer_of(rig: &Rig, answer: &Value) -> String {
    let id = ConversationId::parse(answer["conversation_id"].as_str().unwrap()).unwrap();
    rig.store.get_conversation(&id).await.unwrap().unwrap().customer_id
}

#[tokio::test]
async fn without_auth_the_body_names_the_customer_202_then_200() {
    let r = rig();
    let created = send(router(&r, Auth::None), post(r#"{"message": "where is A1029", "customer_id": "C104"}"#)).await;
    assert_eq!(created.0, StatusCode::ACCEPTED, "{}", created.2);
    let id = created.2["conversation_id"].as_str().unwrap().to_owned();
    assert_eq!(created.2["status_url"], format!("/conversations/{id}"));
    assert_eq!(customer_of(&r, &created.2).await, "C104");

    let (status, _, view) = send(router(&r, Auth::None), request("GET", &format!("/conversations/{id}"), "")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((view["conversation_id"].as_str(), view["customer_id"].as_str()), (Some(id.as_str()), Some("C104")));
    assert_error(&send(router(&r, Auth::None), post(r#"{"message": "hi"}"#)).await, 400, "missing_customer_id");
}

#[tokio::test]
async fn malformed_json_and_json_of_the_wrong_shape_are_400() {
    let r = rig();
    for body in ["{", "not json at all", "", r#"{"message": "hi", "customer_id": "C104""#] {
        assert_error(&send(router(&r, Auth::None), post(body)).await, 400, "bad_json");
    }
    for body in [r#"{"message": 5, "customer_id": "C104"}"#, r#"["hi"]"#, r#""hi""#] {
        assert_error(&send(router(&r, Auth::None), post(body)).await, 400, "bad_fields");
    }
    for (body, code) in [
        (r#"{"customer_id": "C104"}"#, "missing_message"),
        (r#"{"message": "  ", "customer_id": "C104"}"#, "empty_message"),
        (r#"{"message": "hi", "customer_id": "C1#META"}"#, "bad_customer_id"),
    ] {
        assert_error(&send(router(&r, Auth::None), post(body)).await, 400, code);
    }
    assert_eq!(r.store.conversation_count(), 0, "nothing written");
}

#[tokio::test]
async fn unknown_routes_are_404_and_wrong_methods_405_with_allow() {
    let r = rig();
    for path in ["/", "/anything/conversations", "/conversations/x/y", "/conversation"] {
        assert_error(&send(router(&r, Auth::None), request("POST", path, "{}")).await, 404, "not_found");
    }
    let missing =
        send(router(&r, Auth::None), request("GET", "/conversations/01900000-0000-7000-8000-000000000000", "")).await;
    assert_error(&missing, 404, "not_found");
    assert_error(
        &send(router(&r, Auth::None), request("GET", "/conversations/not-a-uuid", "")).await,
        404,
        "not_found",
    );

    let delete = send(router(&r, Auth::None), request("DELETE", "/conversations", "")).await;
    assert_error(&delete, 405, "method_not_allowed");
    assert_eq!(delete.1.get(header::ALLOW).unwrap(), "POST,GET,HEAD");
    let put =
        send(router(&r, Auth::None), request("PUT", "/conversations/01900000-0000-7000-8000-000000000000", "")).await;
    assert_error(&put, 405, "method_not_allowed");
    assert_eq!(put.1.get(header::ALLOW).unwrap(), "GET,HEAD");
    assert_eq!(r.store.conversation_count(), 0);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let r = rig();
    let message = "x".repeat(orchestrator::api::MAX_BODY_BYTES);
    let body = json!({"message": message, "customer_id": "C104"}).to_string();
    assert_error(&send(router(&r, Auth::None), post(&body)).await, 413, "body_too_large");
    // Just under the limit reaches validation (the message is too long, not the body).
    let body = json!({"message": "x".repeat(8_001), "customer_id": "C104"}).to_string();
    assert_error(&send(router(&r, Auth::None), post(&body)).await, 400, "message_too_long");
    assert_eq!(r.store.conversation_count(), 0);
}

#[tokio::test]
async fn a_store_that_is_down_is_503_in_the_same_shape() {
    let store = Arc::new(InMemoryConversationStore::new());
    let flaky = Arc::new(FlakyStore::new(store.clone()).fail(StoreOp::CreateConversation, "throttled (injected)"));
    let r = rig_on(store, flaky);
    let answer = send(router(&r, Auth::None), post(r#"{"message": "where is A1029", "customer_id": "C104"}"#)).await;
    assert_error(&answer, 503, "unavailable");
    // The conversation's own write failed: it names the conversation, which does not run.
    assert_eq!(answer.2["conversation"]["started"], "no", "{}", answer.2);
    assert!(answer.2["error"]["message"].as_str().unwrap().contains("nothing of it runs"), "{}", answer.2);
}

#[tokio::test]
async fn local_tokens_name_the_customer_and_a_missing_or_unknown_token_is_401() {
    let r = rig();
    let mine = with_header(post(r#"{"message": "where is A1029"}"#), "authorization", &format!("Bearer {TOKEN_C104}"));
    let created = send(router(&r, tokens()), mine).await;
    assert_eq!(created.0, StatusCode::ACCEPTED, "{}", created.2);
    assert_eq!(customer_of(&r, &created.2).await, "C104");
    let id = created.2["conversation_id"].as_str().unwrap().to_owned();

    for authorization in [None, Some("Bearer tok-unknown-0123456789"), Some(TOKEN_C104), Some("Basic YTpi")] {
        let mut request = post(r#"{"message": "hi", "customer_id": "C104"}"#);
        if let Some(value) = authorization {
            request = with_header(request, "authorization", value);
        }
        let answer = send(router(&r, tokens()), request).await;
        assert_error(&answer, 401, "unauthenticated");
        assert_eq!(answer.1.get(header::WWW_AUTHENTICATE).unwrap(), "Bearer", "{authorization:?}");
    }
    let anonymous_get = send(router(&r, tokens()), request("GET", &format!("/conversations/{id}"), "")).await;
    assert_error(&anonymous_get, 401, "unauthenticated");
    let own_get = with_header(
        request("GET", &format!("/conversations/{id}"), ""),
        "authorization",
        &format!("Bearer {TOKEN_C104}"),
    );
    assert_eq!(send(router(&r, tokens()), own_get).await.0, StatusCode::OK);
    assert_eq!(r.store.conversation_count(), 1, "only the authenticated request wrote");
}

#[tokio::test]
async fn an_authenticated_caller_naming_another_customer_is_403_and_cannot_read_theirs() {
    let r = rig();
    let bearer = format!("Bearer {TOKEN_C104}");
    let other = with_header(post(r#"{"message": "where is A1029", "customer_id": "C105"}"#), "authorization", &bearer);
    assert_error(&send(router(&r, tokens()), other).await, 403, "forbidden");
    let same = with_header(post(r#"{"message": "where is A1029", "customer_id": "C104"}"#), "authorization", &bearer);
    assert_eq!(send(router(&r, tokens()), same).await.0, StatusCode::ACCEPTED);

    // C105's conversation (made without auth) is not found for C104.
    let theirs = send(router(&r, Auth::None), post(r#"{"message": "where is A1030", "customer_id": "C105"}"#)).await;
    let path = format!("/conversations/{}", theirs.2["conversation_id"].as_str().unwrap());
    let read = send(router(&r, tokens()), with_header(request("GET", &path, ""), "authorization", &bearer)).await;
    assert_error(&read, 404, "not_found");
}

/// A directory where `sub:u-104` and the fixture's sub are C104 (one stored in lower case) and the assumed role `AROAEXAMPLEROLE` (any session) is C106.
async fn directory(r: &Rig) -> Arc<dyn AccessStore> {
    r.store.map_customer(&Principal::parse("sub:u-104").unwrap(), "C104").await.unwrap();
    // The sub of events/apigw-post-conversation-jwt.json.
    r.store.map_customer(&Principal::parse("sub:5c8e2f1a-0b3d-4e6f-8a9b-1c2d3e4f5a6b").unwrap(), "c104").await.unwrap();
    r.store.map_customer(&Principal::parse("iam:AROAEXAMPLEROLE").unwrap(), "C106").await.unwrap();
    r.store.map_customer(&Principal::parse("iam:AROAEXAMPLEROLE:alice").unwrap(), "C107").await.unwrap();
    r.store.clone()
}

#[tokio::test]
async fn a_jwt_sub_is_mapped_through_the_table_and_claims_the_user_can_write_are_ignored() {
    let r = rig();
    let auth = Auth::Jwt(JwtIdentity::mapped_sub(directory(&r).await));
    // customer_id / custom:customer_id claims (writable by a user or a pre-token trigger) never win over sub.
    let claims = json!({"sub": "u-104", "custom:customer_id": "C105", "customer_id": "C105"});
    let request = with_context(post(r#"{"message": "where is A1029"}"#), jwt_context(claims));
    let (status, _, body) = send(router(&r, auth.clone()), request).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(customer_of(&r, &body).await, "C104");

    let unmapped =
        with_context(post(r#"{"message": "hi"}"#), jwt_context(json!({"sub": "u-999", "customer_id": "C104"})));
    assert_error(&send(router(&r, auth.clone()), unmapped).await, 403, "unmapped_identity");
    let no_claims = with_context(post(r#"{"message": "hi", "customer_id": "C104"}"#), jwt_context(json!({"iss": "x"})));
    assert_error(&send(router(&r, auth.clone()), no_claims).await, 401, "unauthenticated");
    let no_context = post(r#"{"message": "hi", "customer_id": "C104"}"#);
    assert_error(&send(router(&r, auth.clone()), no_context).await, 401, "unauthenticated");
    let other = with_context(post(r#"{"message": "hi", "customer_id": "C105"}"#), jwt_context(json!({"sub": "u-104"})));
    assert_error(&send(router(&r, auth), other).await, 403, "forbidden");
    assert_eq!(r.store.conversation_count(), 1, "only the mapped caller wrote");
}

#[tokio::test]
async fn a_protected_claim_can_name_the_customer_directly_in_canonical_form() {
    let r = rig();
    let auth = Auth::Jwt(JwtIdentity {
        claim: "custom:customer_id".into(),
        mapping: ClaimMapping::Direct,
        directory: r.store.clone(),
    });
    let request = with_context(
        post(r#"{"message": "where is A1029", "customer_id": "C104"}"#),
        jwt_context(json!({"sub": "u-1", "custom:customer_id": "c104"})),
    );
    let (status, _, body) = send(router(&r, auth.clone()), request).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(customer_of(&r, &body).await, "C104", "canonical");
    let broken = with_context(post(r#"{"message": "hi"}"#), jwt_context(json!({"custom:customer_id": "C1#META"})));
    assert_error(&send(router(&r, auth), broken).await, 403, "unmapped_identity");
}

#[tokio::test]
async fn iam_callers_and_assumed_roles_are_mapped_by_session_then_by_role() {
    let r = rig();
    let auth = Auth::Iam(directory(&r).await);
    for (user_id, customer) in [("AROAEXAMPLEROLE:alice", "C107"), ("AROAEXAMPLEROLE:bob", "C106")] {
        let arn = format!("arn:aws:sts::123456789012:assumed-role/support-bot/{}", user_id.split(':').nth(1).unwrap());
        let context = context(json!({"iam": {"userId": user_id, "userArn": arn, "accountId": "123456789012"}}));
        let request = with_context(post(r#"{"message": "where is A1029"}"#), context);
        let (status, _, body) = send(router(&r, auth.clone()), request).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{user_id}: {body}");
        assert_eq!(customer_of(&r, &body).await, customer, "{user_id}");
    }
    let stranger = context(json!({"iam": {"userId": "AIDAEXAMPLEUSER", "accountId": "123456789012"}}));
    let request = with_context(post(r#"{"message": "where is A1029"}"#), stranger);
    assert_error(&send(router(&r, auth.clone()), request).await, 403, "unmapped_identity");
    let jwt_only = with_context(post(r#"{"message": "hi"}"#), jwt_context(json!({"sub": "u-104"})));
    assert_error(&send(router(&r, auth), jwt_only).await, 401, "unauthenticated");
}

#[tokio::test]
async fn a_lower_case_customer_id_is_the_same_customer_everywhere() {
    let r = rig();
    let created = send(router(&r, Auth::None), post(r#"{"message": "where is A1029", "customer_id": "c104"}"#)).await;
    assert_eq!(created.0, StatusCode::ACCEPTED, "{}", created.2);
    assert_eq!(customer_of(&r, &created.2).await, "C104");
    let path = format!("/conversations/{}", created.2["conversation_id"].as_str().unwrap());
    let bearer = format!("Bearer {TOKEN_C104}");
    let read = send(router(&r, tokens()), with_header(request("GET", &path, ""), "authorization", &bearer)).await;
    assert_eq!(read.0, StatusCode::OK, "C104 reads the conversation c104 started: {}", read.2);
    assert_eq!(read.2["customer_id"], "C104");
    let lower = Auth::Tokens(Arc::new(TokenTable::from_pairs([("tok-c105-0123456789abcdef", "c105")]).unwrap()));
    let theirs = with_header(request("GET", &path, ""), "authorization", "Bearer tok-c105-0123456789abcdef");
    assert_error(&send(router(&r, lower), theirs).await, 404, "not_found");
}

#[tokio::test]
async fn a_customer_over_their_conversations_per_minute_gets_429_with_retry_after_and_nothing_written() {
    // The limit is per calendar minute: an attempt whose requests straddle a minute boundary
    // proves nothing and is made again (two boundaries cannot fall inside one attempt).
    for _attempt in 0..2 {
        let window = RateWindow::containing(now_ms());
        let store = Arc::new(InMemoryConversationStore::new());
        let mut r = rig_on(store.clone(), store.clone());
        let limits = CustomerLimits { conversations_per_minute: 2, subtasks_per_conversation: 100 };
        let core = Arc::try_unwrap(r.core).ok().unwrap().with_limits(store.clone(), limits);
        r.core = Arc::new(core);
        let body = r#"{"message": "where is A1029", "customer_id": "C104"}"#;
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(send(router(&r, Auth::None), post(body)).await);
        }
        if RateWindow::containing(now_ms()) != window {
            continue;
        }
        assert_eq!(answers[0].0, StatusCode::ACCEPTED);
        assert_eq!(answers[1].0, StatusCode::ACCEPTED);
        assert_error(&answers[2], 429, "rate_limited");
        let retry_after: u64 = answers[2].1.get(header::RETRY_AFTER).unwrap().to_str().unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry_after), "{retry_after}");
        assert_eq!(store.conversation_count(), 2, "the refused request wrote no conversation");
        // Another customer has their own budget.
        let other = send(router(&r, Auth::None), post(r#"{"message": "where is A1030", "customer_id": "C105"}"#)).await;
        assert_eq!(other.0, StatusCode::ACCEPTED);
        return;
    }
    panic!("two attempts each straddled a minute boundary");
}

#[tokio::test]
async fn the_jwt_fixture_goes_through_lambda_http_into_the_router() {
    let r = rig();
    let event = include_str!("../../../events/apigw-post-conversation-jwt.json");
    let request = lambda_http::request::from_str(event).unwrap();
    let auth = Auth::Jwt(JwtIdentity::mapped_sub(directory(&r).await));
    let (status, _, body) = send(router(&r, auth), request).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(customer_of(&r, &body).await, "C104", "the mapped sub, not the body");
    // The same event with authentication off has no customer to act for.
    let request = lambda_http::request::from_str(event).unwrap();
    assert_error(&send(router(&r, Auth::None), request).await, 400, "missing_customer_id");
}

#[tokio::test]
async fn a_customer_lists_only_their_own_conversations_a_page_at_a_time() {
    let r = rig();
    let bearer = format!("Bearer {TOKEN_C104}");
    let mut mine = Vec::new();
    for message in ["where is A1029", "is SAVE20 valid", "where is A1022"] {
        let body = json!({ "message": message }).to_string();
        let created = send(router(&r, tokens()), with_header(post(&body), "authorization", &bearer)).await;
        assert_eq!(created.0, StatusCode::ACCEPTED, "{}", created.2);
        mine.push(created.2["conversation_id"].as_str().unwrap().to_owned());
        // Distinct creation times: the newest-first order is the creation order reversed.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let theirs = send(router(&r, Auth::None), post(r#"{"message": "hi", "customer_id": "C105"}"#)).await;
    assert_eq!(theirs.0, StatusCode::ACCEPTED);

    let mut listed = Vec::new();
    let mut path = "/conversations?limit=2".to_owned();
    for _ in 0..3 {
        let page = send(router(&r, tokens()), with_header(request("GET", &path, ""), "authorization", &bearer)).await;
        assert_eq!(page.0, StatusCode::OK, "{}", page.2);
        listed.extend(
            page.2["conversations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["conversation_id"].as_str().unwrap().to_owned()),
        );
        match page.2["next_cursor"].as_str() {
            Some(cursor) => path = format!("/conversations?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    mine.reverse();
    assert_eq!(listed, mine, "newest first, each once, none of another customer's");

    let other = with_header(request("GET", "/conversations?customer_id=C105", ""), "authorization", &bearer);
    assert_error(&send(router(&r, tokens()), other).await, 403, "forbidden");
    assert_error(&send(router(&r, tokens()), request("GET", "/conversations", "")).await, 401, "unauthenticated");
    assert_error(&send(router(&r, Auth::None), request("GET", "/conversations", "")).await, 400, "missing_customer_id");
    let junk = with_header(request("GET", "/conversations?cursor=bm90LWEtY3Vyc29y", ""), "authorization", &bearer);
    assert_error(&send(router(&r, tokens()), junk).await, 400, "bad_cursor");
}

#[tokio::test]
async fn an_idempotency_key_that_is_not_ascii_or_given_twice_is_400_and_nothing_written() {
    let r = rig();
    let body = r#"{"message": "where is A1029", "customer_id": "C104"}"#;
    for _ in 0..2 {
        let mut request = post(body);
        request.headers_mut().insert("idempotency-key", header::HeaderValue::from_bytes("clé-1".as_bytes()).unwrap());
        assert_error(&send(router(&r, Auth::None), request).await, 400, "bad_idempotency_key");
    }
    let mut twice = post(body);
    twice.headers_mut().append("idempotency-key", "key-a".parse().unwrap());
    twice.headers_mut().append("idempotency-key", "key-b".parse().unwrap());
    assert_error(&send(router(&r, Auth::None), twice).await, 400, "bad_idempotency_key");
    assert_eq!(r.store.conversation_count(), 0, "nothing written");
    // One ASCII key still works, and its retry is the same conversation.
    let first = send(router(&r, Auth::None), with_header(post(body), "idempotency-key", "key-a")).await;
    let again = send(router(&r, Auth::None), with_header(post(body), "idempotency-key", "key-a")).await;
    assert_eq!((first.0, again.0), (StatusCode::ACCEPTED, StatusCode::ACCEPTED), "{}", first.2);
    assert_eq!(first.2["conversation_id"], again.2["conversation_id"]);
    assert_eq!(r.store.conversation_count(), 1);
}

#[tokio::test]
async fn a_json_array_with_the_fields_in_order_is_not_the_object() {
    let r = rig();
    for body in [r#"["where is A1029", "C104"]"#, r#"  ["where is A1029", "C104"]"#] {
        assert_error(&send(router(&r, Auth::None), post(body)).await, 400, "bad_fields");
    }
    assert_eq!(r.store.conversation_count(), 0, "nothing written");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stops_short_is_408_at_the_read_deadline_and_nothing_written() {
    let r = rig();
    let part: Result<axum::body::Bytes, std::io::Error> = Ok(axum::body::Bytes::from_static(br#"{"message": "wh"#));
    let stalled = futures::stream::StreamExt::chain(futures::stream::iter([part]), futures::stream::pending());
    let started = tokio::time::Instant::now();
    let sent = send(router(&r, Auth::None), request_with(Body::from_stream(stalled)));
    let answer = tokio::time::timeout(std::time::Duration::from_secs(60), sent).await.expect("answered, not held open");
    assert_error(&answer, 408, "body_timeout");
    let waited = started.elapsed();
    // The bound docs/api.md gives: 10 seconds.
    let deadline = std::time::Duration::from_secs(10);
    assert!(waited >= deadline && waited < deadline + std::time::Duration::from_secs(1), "{waited:?}");
    assert_eq!(r.store.conversation_count(), 0, "nothing written");
}

fn request_with(body: Body) -> Request<Body> {
    Request::builder().method("POST").uri("/conversations").header("content-length", "60").body(body).unwrap()
}
