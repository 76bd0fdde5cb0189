//! Defect M7 (issue 17): a DynamoDB write applied by the table whose answer is lost (HTTP 500
//! `InternalServerError`, which DynamoDB documents as "the request may or may not have succeeded",
//! or a timeout) is retried in place by `AwsRetryPolicy`; the retry's condition then fails on the
//! first attempt's own write, and the adapter must recognise it as its own, not someone else's. Runs on
//! the emulator (`SWARM_AWS_ENDPOINT`), through a proxy that lets the first matching request reach the
//! table and answers it with a 500. (The embedded store has no answer to lose in place; the contract
//! suite pins a caller's retry after a lost answer on both adapters.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use orchestrator::core::CreateRequest;
use orchestrator::{Orchestrator, OrchestratorSettings};
use serde_json::json;
use swarm_adapters::aws::dynamo::DynamoConversationStore;
use swarm_adapters::embedded::{InMemoryQueue, QueueSettings};
use swarm_core::domain::{ConversationStatus, SubtaskStatus, TaskMessage};
use swarm_core::ports::{AccountingStore, ConversationRecords, SubtaskStore, TaskQueue, ToolError};
use swarm_core::roles::{RoleTable, TaskQueues};
use swarm_local::platform::dynamo_table::create_table;
use swarm_testing::{ScriptedModel, StaticTools, text_response};

/// Forwards every request to the emulator; the first whose target is `target` and whose body
/// holds `marker` reaches the table, and its answer is replaced by a 500.
struct Proxy {
    upstream: String,
    target: &'static str,
    marker: &'static str,
    fired: AtomicBool,
    http: reqwest::Client,
}

async fn forward(State(p): State<Arc<Proxy>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 16 << 20).await.unwrap();
    let mut headers = parts.headers.clone();
    headers.remove("host");
    headers.remove("content-length");
    let target = headers.get("x-amz-target").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let url = format!("{}{}", p.upstream, parts.uri.path_and_query().map(|q| q.as_str()).unwrap_or("/"));
    let answer = p.http.request(parts.method.clone(), url).headers(headers).body(bytes.clone()).send().await.unwrap();
    let text = String::from_utf8_lossy(&bytes);
    if target.ends_with(p.target) && text.contains(p.marker) && !p.fired.swap(true, Ordering::SeqCst) {
        eprintln!("proxy: {target} reached the table (HTTP {}); answering 500 instead", answer.status());
        return Response::builder()
            .status(500)
            .header("content-type", "application/x-amz-json-1.0")
            .body(Body::from(
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}"#,
            ))
            .unwrap();
    }
    let mut out = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if name != "content-length" && name != "transfer-encoding" {
            out = out.header(name, value);
        }
    }
    out.body(Body::from(answer.bytes().await.unwrap())).unwrap()
}

/// A DynamoDB store on a fresh table, reached through the proxy; `None` (loudly) when
/// `SWARM_SKIP_AWS=1` names no emulator.
async fn store_behind_proxy(
    test: &str,
    target: &'static str,
    marker: &'static str,
) -> Option<Arc<DynamoConversationStore>> {
    let Ok(endpoint) = std::env::var("SWARM_AWS_ENDPOINT") else {
        assert_eq!(std::env::var("SWARM_SKIP_AWS").as_deref(), Ok("1"), "{test} needs SWARM_AWS_ENDPOINT");
        eprintln!("!!!!!!!! SKIPPED {test}: SWARM_SKIP_AWS=1 and no SWARM_AWS_ENDPOINT");
        return None;
    };
    let client_for = |url: String| {
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .endpoint_url(url)
                .region(Region::new("us-east-1"))
                .credentials_provider(Credentials::new("test", "test", None, None, "defects"))
                .build(),
        )
    };
    let table = format!(
        "defects-{}-{}",
        test.replace('_', "-").chars().take(40).collect::<String>(),
        uuid::Uuid::now_v7().simple()
    );
    create_table(&client_for(endpoint.clone()), &table).await.unwrap();
    let proxy = Arc::new(Proxy {
        upstream: endpoint.trim_end_matches('/').to_owned(),
        target,
        marker,
        fired: AtomicBool::new(false),
        http: reqwest::Client::new(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, axum::Router::new().fallback(forward).with_state(proxy)).await.unwrap();
    });
    Some(Arc::new(DynamoConversationStore::new(client_for(format!("http://{addr}")), table)))
}

fn orchestrator(store: Arc<DynamoConversationStore>, tasks: &InMemoryQueue) -> Orchestrator {
    orchestrator_over(store, tasks)
}

fn orchestrator_over(store: Arc<dyn swarm_core::ports::ConversationStore>, tasks: &InMemoryQueue) -> Orchestrator {
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Check order A1029", "tools": ["shop__get_order"]}]}"#;
    let model = Arc::new(ScriptedModel::new((0..3).map(|_| Ok(text_response(plan)))));
    let catalogue = StaticTools::named(&["shop__get_order"], "{name} tool", json!({"type": "object"}))
        .only_for_role("planner")
        .on_any_call(|_, _| Err(ToolError::Permanent("the planner calls no tools".into())));
    Orchestrator::new(
        store,
        TaskQueues::new(Arc::new(tasks.clone()) as Arc<dyn TaskQueue>),
        model,
        Arc::new(catalogue),
        RoleTable::demo(),
        OrchestratorSettings::default(),
    )
}

async fn runs(q: &InMemoryQueue) -> Vec<TaskMessage> {
    q.receive(10, Duration::ZERO)
        .await
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str::<TaskMessage>(&d.body).unwrap())
        .filter(|m| matches!(m, TaskMessage::Run { .. }))
        .collect()
}

/// `start_run`'s flip (`PLANNING → RUNNING`, `#total = :total`) is applied, its answer lost; the
/// in-place retry's condition fails on that very flip, `start_run` answers `false` ("another request
/// moved it on") and the orchestrator answers 202 without enqueueing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_conversation_whose_flip_answer_was_lost_still_gets_its_subtasks_sent() {
    let Some(store) = store_behind_proxy("flip_answer_lost", "UpdateItem", "#total = :total").await else { return };
    let tasks = InMemoryQueue::new(QueueSettings::default());
    let core = orchestrator(store.clone(), &tasks);
    let created = core
        .create(CreateRequest { message: "where is A1029".into(), customer_id: "C104".into(), idempotency_key: None })
        .await;
    eprintln!("create: {created:?}");
    let id = created.unwrap().conversation_id;
    let conv = store.get_conversation(&id).await.unwrap().unwrap();
    let subtasks = store.list_subtasks(&id).await.unwrap();
    let sent = runs(&tasks).await;
    eprintln!("conversation {}; w01 {}; Run messages sent {sent:?}", conv.status, subtasks[0].status);
    assert_eq!((conv.status, subtasks[0].status), (ConversationStatus::Running, SubtaskStatus::Queued));
    assert_eq!(
        sent,
        vec![TaskMessage::run(&id, &"w01".into())],
        "answered 202, but w01 was never sent: it fails at the deadline"
    );
}

/// `create_conversation`'s transaction (the conversation and its `IDEM#` claim) is applied, its answer
/// lost; the retry finds the key claimed — by this very request — answers `Existing`, and the
/// request meets its own live planning lease: 409 `request_in_progress` to the first and only
/// request, and nobody plans the conversation for the lease's 35 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_request_whose_create_answer_was_lost_is_planned_not_told_409() {
    let Some(store) = store_behind_proxy("create_answer_lost", "TransactWriteItems", "IDEM#").await else { return };
    let tasks = InMemoryQueue::new(QueueSettings::default());
    let core = orchestrator(store.clone(), &tasks);
    let created = core
        .create(CreateRequest {
            message: "where is A1029".into(),
            customer_id: "C104".into(),
            idempotency_key: Some("first-and-only".into()),
        })
        .await;
    eprintln!("create: {created:?}");
    let created = created.unwrap_or_else(|e| panic!("the first request was answered {} {}: {e}", e.status(), e.code()));
    let conv = store.get_conversation(&created.conversation_id).await.unwrap().unwrap();
    assert_eq!(conv.status, ConversationStatus::Running, "planned by the request that created it");
}

/// The aggregator's `RUNNING → AGGREGATING` flip (`#lease_turn = :lease_turn`) is applied, its answer
/// lost; the retry's condition fails on its own lease, the adapter reads the item back and answers
/// `Held` by... this very aggregator, which stops ("another trigger aggregates"). Nobody writes the
/// reply until the 90 s lease has expired and the deadline path (or the sweep) takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregation_whose_flip_answer_was_lost_still_writes_the_reply() {
    use swarm_core::domain::{Conversation, Subtask, SubtaskRecord, SubtaskResult, Usage, now_ms};
    let Some(store) = store_behind_proxy("lease_answer_lost", "UpdateItem", "#lease_turn = :lease_turn").await else {
        return;
    };
    let conversation = Conversation::new("C104", "where is A1029", now_ms(), 120);
    store.create_conversation(&conversation).await.unwrap();
    let subtask = Subtask { id: "w01".into(), instruction: "Check A1029".into(), tools: vec![], depends_on: vec![] };
    let recs = vec![SubtaskRecord::new(&conversation, subtask, "support".into())];
    assert!(store.start_run(&conversation.id, None, &recs, &[], &Usage::default()).await.unwrap());
    let done = SubtaskResult::Succeeded { text: "A1029 has shipped.".into(), tool_calls: vec![] };
    store.record_result(&conversation.id, &"w01".into(), &done, &Usage::default(), &[], now_ms()).await.unwrap();
    store.count_finished(&conversation.id, &"w01".into(), &Usage::default()).await.unwrap();
    let model = Arc::new(ScriptedModel::new([Ok(text_response("Your order A1029 has shipped."))]));
    let aggregator = aggregator::Aggregator::new(store.clone(), model, aggregator::core::AggregatorSettings::default());
    let outcome = aggregator.aggregate(&conversation.id).await;
    let conv = store.get_conversation(&conversation.id).await.unwrap().unwrap();
    eprintln!("aggregate: {outcome:?}; conversation {} lease {:?}", conv.status, conv.lease);
    assert_eq!(conv.status, ConversationStatus::Done, "the only trigger stopped at its own lease: {outcome:?}");
}

/// The caller's side of a lost answer (issue 18, found by the chaos run's `store_answer_lost`):
/// `start_run` applied, its answer lost before it reached the orchestrator. The orchestrator reads the
/// conversation back, finds its own flip (`RUNNING`, its plan, no `queued` marker) and goes on: it
/// sends the subtasks, marks them sent and answers 202, so the client need not retry. (It used to
/// answer 503 and leave the subtasks to a retry.) A retry with the same key answers the same
/// conversation and sends nothing twice. On the embedded store, through the library's lost-answer
/// decorator.
#[tokio::test]
async fn a_flip_whose_answer_was_lost_is_read_back_and_its_subtasks_sent_once_retry_or_not() {
    use swarm_adapters::embedded::InMemoryConversationStore;
    use swarm_core::ports::{ConversationStore, StoreOp};
    use swarm_local::platform::store_faults::losing;

    let memory: Arc<dyn ConversationStore> = Arc::new(InMemoryConversationStore::new());
    let (decorator, lossy) = losing(&memory);
    decorator.lose(StoreOp::StartRun).unwrap();
    let tasks = InMemoryQueue::new(QueueSettings::default());
    let core = orchestrator_over(lossy, &tasks);
    let request = || CreateRequest {
        message: "where is A1029".into(),
        customer_id: "C104".into(),
        idempotency_key: Some("lost-flip".into()),
    };
    let first = core.create(request()).await;
    let id =
        first.unwrap_or_else(|e| panic!("the planner's own flip is read back: {} {e}", e.status())).conversation_id;
    let conv = memory.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!(conv.status, ConversationStatus::Running);
    assert!(conv.queued_at_ms.is_some(), "the subtasks are marked sent before the 202");
    assert_eq!(runs(&tasks).await, vec![TaskMessage::run(&id, &"w01".into())], "the 202 leaves w01 sent");

    let again = core.create(request()).await.unwrap();
    assert_eq!(again.conversation_id, id, "the retry answers the same conversation");
    assert_eq!(runs(&tasks).await, vec![], "and sends nothing twice");
}
