//! The API contract held to the handlers: `openapi.json`'s schemas are the ones `schemars` derives from the types the handlers read and serialise (`SWARM_BLESS_OPENAPI=1` writes them), every documented operation is served and every answer of the router — successes and problem documents alike — validates against the schema the document gives its status; `GET /openapi.json` serves the file; the template's default CORS origins are the API's one list.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use orchestrator::api::{
    AllowedOrigins, ApprovalPage, ConversationPage, CreateBody, Created, DecideBody, Decided, Health, OperatorAnswer,
    OperatorAnswerBody, OperatorAuth, Problem, TokenTable, cors,
};
use orchestrator::{ApiState, Approvals, Auth, Orchestrator, OrchestratorSettings};
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::approval::{Approval, ApprovalKey, ApprovalStatus, ProposedAction, approval_id};
use swarm_core::domain::{ConversationId, now_ms};
use swarm_core::ports::{ApprovalStore, TaskQueue, ToolError};
use swarm_core::roles::{RoleTable, TaskQueues};
use swarm_core::timings::Timings;
use swarm_core::view::ConversationView;
use swarm_testing::{ScriptedModel, StaticTools, text_response};
use tower::ServiceExt as _;

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
const OPERATOR: &str = "op-token-0123456789abcdef";

fn document() -> Value {
    serde_json::from_str(&std::fs::read_to_string(PATH).unwrap()).unwrap()
}

/// The schemas of every body type, as `schemars` derives them (JSON Schema 2020-12, OpenAPI 3.1's dialect).
fn derived() -> BTreeMap<String, Value> {
    let mut generator =
        SchemaSettings::draft2020_12().with(|s| s.definitions_path = "#/components/schemas/".into()).into_generator();
    let mut roots = BTreeMap::new();
    macro_rules! root {
        ($($ty:ty),+) => {$(
            let schema = generator.root_schema_for::<$ty>();
            let mut schema = schema.to_value();
            if let Some(o) = schema.as_object_mut() {
                o.remove("$schema");
                o.remove("$defs");
            }
            roots.insert(<$ty as schemars::JsonSchema>::schema_name().into_owned(), schema);
        )+};
    }
    root!(
        CreateBody,
        Created,
        ConversationView,
        ConversationPage,
        ApprovalPage,
        DecideBody,
        Decided,
        OperatorAnswerBody,
        OperatorAnswer,
        Health,
        Problem
    );
    for (name, schema) in generator.take_definitions(true) {
        roots.entry(name).or_insert(schema);
    }
    roots
}

#[test]
fn the_document_s_schemas_are_the_handlers_types() {
    let derived = derived();
    let mut doc = document();
    if std::env::var("SWARM_BLESS_OPENAPI").is_ok_and(|v| v == "1") {
        doc["components"]["schemas"] = serde_json::to_value(&derived).unwrap();
        std::fs::write(PATH, serde_json::to_string_pretty(&doc).unwrap() + "\n").unwrap();
    }
    let documented: BTreeMap<String, Value> =
        serde_json::from_value(doc["components"]["schemas"].clone()).unwrap_or_default();
    for (name, schema) in &derived {
        assert_eq!(
            documented.get(name),
            Some(schema),
            "components.schemas.{name} differs from the type (SWARM_BLESS_OPENAPI=1 cargo test -p orchestrator --test openapi rewrites it)"
        );
    }
    let stale: Vec<&String> = documented.keys().filter(|k| !derived.contains_key(*k)).collect();
    assert!(stale.is_empty(), "schemas no type has: {stale:?}");
    assert_eq!(doc["openapi"], "3.1.0");
}

/// A router with a store holding one pending approval, and an operator token.
async fn rig() -> (Router, String) {
    let store = Arc::new(InMemoryConversationStore::new());
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Check order A1029", "tools": ["shop__get_order"]}]}"#;
    let tools = StaticTools::named(&["shop__get_order"], "{name} tool", json!({"type": "object"}))
        .on_any_call(|_, _| Err(ToolError::Permanent("the planner calls no tools".into())));
    let queues = TaskQueues::new(Arc::new(InMemoryQueue::new(QueueSettings::default())) as Arc<dyn TaskQueue>);
    let core = Orchestrator::new(
        store.clone(),
        queues.clone(),
        Arc::new(ScriptedModel::always(Ok(text_response(plan)))),
        Arc::new(tools),
        RoleTable::demo(),
        OrchestratorSettings::default(),
    );
    let conversation = ConversationId::new();
    let now = now_ms();
    let approval = Approval {
        id: approval_id(&conversation, &"w01".into(), 1),
        conversation_id: conversation,
        subtask_id: "w01".into(),
        ordinal: 1,
        customer_id: "C108".into(),
        role: "refund".into(),
        action: ProposedAction {
            tool: "shop__refund".into(),
            order_id: "A1033".into(),
            amount_cents: 187_400,
            reason: Some("damaged on arrival".into()),
        },
        status: ApprovalStatus::Pending,
        created_at_ms: now,
        expires_at_ms: now + 900_000,
        decided_by: None,
        decided_at_ms: None,
        token: None,
        reissued_at_ms: None,
        outcome: None,
        finished_at_ms: None,
        ttl: now / 1000 + 86_400,
    };
    store.create_approval(&approval).await.unwrap();
    let key = ApprovalKey::new("approval-key-for-the-openapi-test-0123456789").unwrap();
    let approvals = Approvals::new(store, queues, key, Timings::standard());
    let operators = TokenTable::operators([(OPERATOR, "alice")]).unwrap();
    let state = ApiState::new(Arc::new(core), Auth::None)
        .with_approvals(Arc::new(approvals), OperatorAuth::Tokens(Arc::new(operators)))
        .with_cors(AllowedOrigins::defaults());
    (orchestrator::router(state), approval.id)
}

/// `(status, content type, body)` of one request.
async fn call(router: &Router, method: &str, path: &str, body: &str, headers: &[(&str, &str)]) -> (u16, String, Value) {
    let mut request = Request::builder().method(method).uri(path).header("content-type", "application/json");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = router.clone().oneshot(request.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, content_type, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Follows `$ref`s within the document.
fn resolve<'a>(doc: &'a Value, mut node: &'a Value) -> &'a Value {
    while let Some(r) = node.get("$ref").and_then(Value::as_str) {
        node = doc.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("{r} does not resolve"));
    }
    node
}

/// Asserts the answer is one the document gives for this operation: its status is listed, its
/// content type is the listed one, and its body validates against the listed schema.
fn conforms(doc: &Value, path: &str, method: &str, answer: &(u16, String, Value)) {
    let (status, content_type, body) = answer;
    let operation = &doc["paths"][path][method];
    assert!(operation.is_object(), "{method} {path} is not documented");
    let response = resolve(doc, &operation["responses"][status.to_string()]);
    assert!(response.is_object(), "{method} {path} answered {status}, which it does not document: {body}");
    let media = content_type.split(';').next().unwrap_or_default();
    let schema = &response["content"][media]["schema"];
    assert!(schema.is_object(), "{method} {path} {status}: {media} is not documented: {body}");
    let mut root = doc.clone();
    root["$ref"] = json!(format!("#{}", "/components/schemas/__answer"));
    root["components"]["schemas"]["__answer"] = schema.clone();
    let validator = jsonschema::draft202012::new(&root).unwrap();
    let errors: Vec<String> = validator.iter_errors(body).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{method} {path} {status} does not match its schema: {errors:?}\n{body}");
}

#[tokio::test]
async fn every_answer_matches_the_document() {
    let doc = document();
    let (router, approval) = rig().await;
    let op = [("authorization", &*format!("Bearer {OPERATOR}"))];

    let created =
        call(&router, "POST", "/conversations", r#"{"message": "Where is A1029?", "customer_id": "C104"}"#, &[]).await;
    conforms(&doc, "/conversations", "post", &created);
    assert_eq!(created.0, 202);
    let url = created.2["status_url"].as_str().unwrap().to_owned();
    for (body, status) in [("{", 400), (r#"{"message": 5}"#, 400), (r#"{"customer_id": "C104"}"#, 400)] {
        let answer = call(&router, "POST", "/conversations", body, &[]).await;
        assert_eq!(answer.0, status, "{body}: {:?}", answer.2);
        conforms(&doc, "/conversations", "post", &answer);
    }
    let list = call(&router, "GET", "/conversations?customer_id=C104&limit=5", "", &[]).await;
    assert_eq!(format!("/conversations/{}", list.2["conversations"][0]["conversation_id"].as_str().unwrap()), url);
    conforms(&doc, "/conversations", "get", &list);
    conforms(&doc, "/conversations", "get", &call(&router, "GET", "/conversations", "", &[]).await);
    conforms(
        &doc,
        "/conversations",
        "get",
        &call(&router, "GET", "/conversations?customer_id=C104&cursor=x", "", &[]).await,
    );
    let view = call(&router, "GET", &url, "", &[]).await;
    assert_eq!(view.0, 200);
    conforms(&doc, "/conversations/{id}", "get", &view);
    // The fields added beside today's: each upper-case status in lower case, and the times.
    let lower = |v: &Value| v.as_str().unwrap().to_ascii_lowercase();
    assert_eq!(view.2["state"], lower(&view.2["status"]));
    for subtask in view.2["subtasks"].as_array().unwrap() {
        assert_eq!(subtask["state"], lower(&subtask["status"]), "{subtask}");
    }
    assert_eq!(list.2["conversations"][0]["state"], lower(&list.2["conversations"][0]["status"]));
    let (created, updated) = (view.2["created_at_ms"].as_i64().unwrap(), view.2["updated_at_ms"].as_i64().unwrap());
    assert!(updated >= created, "{}", view.2);
    assert_eq!(view.2["updated_at"], swarm_core::view::rfc3339(updated));
    conforms(&doc, "/conversations/{id}", "get", &call(&router, "GET", "/conversations/nope", "", &[]).await);

    let page = call(&router, "GET", "/approvals?status=pending&limit=10", "", &op).await;
    assert_eq!(page.2["approvals"][0]["approval_id"], approval.as_str(), "{:?}", page.2);
    let asked = &page.2["approvals"][0];
    assert_eq!(
        (&asked["updated_at_ms"], &asked["updated_at"]),
        (&asked["created_at_ms"], &asked["created_at"]),
        "{asked}"
    );
    conforms(&doc, "/approvals", "get", &page);
    conforms(&doc, "/approvals", "get", &call(&router, "GET", "/approvals", "", &[]).await);
    conforms(&doc, "/approvals", "get", &call(&router, "GET", "/approvals?cursor=junk", "", &op).await);
    let decided = call(&router, "POST", &format!("/approvals/{approval}"), r#"{"decision": "reject"}"#, &op).await;
    assert_eq!(decided.0, 200, "{:?}", decided.2);
    let rejected = &decided.2["approval"];
    assert_eq!(rejected["updated_at_ms"], rejected["decided_at_ms"], "the decision is its last change: {rejected}");
    conforms(&doc, "/approvals/{id}", "post", &decided);
    let conflict = call(&router, "POST", &format!("/approvals/{approval}"), r#"{"decision": "approve"}"#, &op).await;
    assert_eq!(conflict.0, 409);
    conforms(&doc, "/approvals/{id}", "post", &conflict);

    // The operator's routes: a conversation read as its customer reads it; an answer only to a hand-off.
    let operator_url = format!("/operator{url}");
    let read = call(&router, "GET", &operator_url, "", &op).await;
    assert_eq!((read.0, &read.2["turns"][0]["author"]), (200, &json!("customer")), "{:?}", read.2);
    conforms(&doc, "/operator/conversations/{id}", "get", &read);
    conforms(&doc, "/operator/conversations/{id}", "get", &call(&router, "GET", &operator_url, "", &[]).await);
    let answer_url = format!("{operator_url}/messages");
    let not_handed_off = call(&router, "POST", &answer_url, r#"{"text": "Hello"}"#, &op).await;
    assert_eq!((not_handed_off.0, &not_handed_off.2["error"]["code"]), (409, &json!("not_handed_off")));
    conforms(&doc, "/operator/conversations/{id}/messages", "post", &not_handed_off);
    let empty = call(&router, "POST", &answer_url, r#"{"text": " "}"#, &op).await;
    assert_eq!(empty.0, 400, "{:?}", empty.2);
    conforms(&doc, "/operator/conversations/{id}/messages", "post", &empty);

    // The OpenAI routes (on AWS the streaming function URL's): the list, and errors in OpenAI's shape.
    let models = call(&router, "GET", "/v1/models", "", &[]).await;
    assert_eq!((models.0, &models.2["data"][0]["id"]), (200, &json!("lambda-swarm")));
    conforms(&doc, "/v1/models", "get", &models);
    let refused = call(&router, "POST", "/v1/chat/completions", r#"{"model": "gpt-4", "messages": []}"#, &[]).await;
    assert_eq!((refused.0, &refused.2["error"]["code"]), (400, &json!("model_not_found")));
    conforms(&doc, "/v1/chat/completions", "post", &refused);

    let health = call(&router, "GET", "/health", "", &[]).await;
    assert_eq!((health.0, health.2["status"].as_str()), (200, Some("ok")));
    conforms(&doc, "/health", "get", &health);
    let served = call(&router, "GET", "/openapi.json", "", &[]).await;
    conforms(&doc, "/openapi.json", "get", &served);
    assert_eq!(served.2, doc, "GET /openapi.json serves the file");
}

#[tokio::test]
async fn every_documented_operation_is_served() {
    let doc = document();
    let (router, _) = rig().await;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let concrete = path.replace("{id}", "x");
            let (status, _, body) = call(&router, &method.to_uppercase(), &concrete, "{}", &[]).await;
            assert!(
                !(status == 404
                    && body["error"]["code"] == "not_found"
                    && body["detail"].as_str().is_some_and(|d| d.starts_with("no route")))
                    && status != 405,
                "{method} {path} is documented but not served: {status} {body}"
            );
        }
    }
}

#[tokio::test]
async fn a_problem_keeps_today_s_error_member_beside_rfc_9457_s() {
    let (router, _) = rig().await;
    let (status, content_type, body) = call(&router, "DELETE", "/conversations", "", &[]).await;
    assert_eq!((status, content_type.as_str()), (405, "application/problem+json"));
    assert_eq!(body["type"], "urn:lambda-swarm:problem:method_not_allowed");
    assert_eq!(body["title"], "Method Not Allowed");
    assert_eq!(body["status"], 405);
    assert_eq!(body["detail"], body["error"]["message"]);
    assert_eq!(body["error"]["code"], "method_not_allowed");
    let problem: Problem = serde_json::from_value(body).unwrap();
    assert_eq!(problem.error.code, "method_not_allowed");
}

#[tokio::test]
async fn a_browser_s_preflight_from_an_allowed_origin_is_answered_and_others_are_not() {
    let (router, _) = rig().await;
    let preflight = |origin: &'static str| {
        Request::builder()
            .method("OPTIONS")
            .uri("/conversations")
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type,idempotency-key")
            .body(Body::empty())
            .unwrap()
    };
    let allowed = router.clone().oneshot(preflight("http://localhost:3000")).await.unwrap();
    assert!(allowed.status().is_success(), "{}", allowed.status());
    let h = allowed.headers();
    assert_eq!(h["access-control-allow-origin"], "http://localhost:3000");
    let methods = h["access-control-allow-methods"].to_str().unwrap();
    assert!(methods.contains("POST"), "{methods}");
    let headers = h["access-control-allow-headers"].to_str().unwrap();
    assert!(headers.contains("idempotency-key") && headers.contains("content-type"), "{headers}");
    let other = router.clone().oneshot(preflight("https://evil.example.com")).await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none(), "another origin gets no allowance");
    // A real request from the allowed origin can read Location.
    let post = Request::builder()
        .method("POST")
        .uri("/conversations")
        .header("origin", "http://localhost:3000")
        .header("content-type", "application/json")
        .body(Body::from(r#"{"message": "Where is A1029?", "customer_id": "C104"}"#))
        .unwrap();
    let answered = router.oneshot(post).await.unwrap();
    assert_eq!(answered.status().as_u16(), 202);
    assert!(answered.headers()["location"].to_str().unwrap().starts_with("/conversations/"));
    assert!(answered.headers()["access-control-expose-headers"].to_str().unwrap().contains("location"));
}

#[test]
fn the_template_s_cors_origins_are_the_api_s_one_list() {
    let template = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml")).unwrap();
    let section = template.split("\n  CorsAllowOrigins:\n").nth(1).expect("a CorsAllowOrigins parameter");
    let default = section
        .lines()
        .take_while(|l| l.starts_with("    "))
        .find_map(|l| l.trim().strip_prefix("Default:"))
        .expect("a default")
        .trim()
        .trim_matches('"');
    let listed: Vec<&str> = default.split(',').map(str::trim).collect();
    assert_eq!(listed, cors::DEFAULT_ALLOWED_ORIGINS);
}
