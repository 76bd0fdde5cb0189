//! `POST /conversations/{id}/messages` through the router, with no worker behind it (the turn stays where the test puts it): 409 with `Retry-After` while a turn runs, 410 past the idle time (the stored `expires_at_ms` decides), 404 for another customer's conversation as for an unknown one, the same `Idempotency-Key` answering the same turn once, the planner of the new turn given its own message and its subtasks scoped to the turn, and a planner killed after the turn's start taken over by the retry.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use orchestrator::api::Auth;
use orchestrator::{ApiState, Orchestrator, OrchestratorSettings};
use serde_json::{Value, json};
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::domain::{ConversationId, ConversationStatus, TaskMessage, Usage, now_ms};
use swarm_core::faults::{CrashPoint, FaultPlan, Invocation, with_plan};
use swarm_core::ports::{AccountingStore, AnswerStore, ConversationRecords, LeasePhase, SubtaskStore, TaskQueue};
use swarm_core::roles::{RoleTable, TaskQueues};
use swarm_testing::{ScriptedModel, StaticTools, text_response};
use tower::ServiceExt as _;

struct Rig {
    store: Arc<InMemoryConversationStore>,
    queue: Arc<InMemoryQueue>,
    model: Arc<ScriptedModel>,
    router: Router,
}

fn rig(settings: OrchestratorSettings) -> Rig {
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Check it", "tools": ["shop__get_order"]}, {"id": "w02", "instruction": "Then this", "tools": ["shop__get_order"], "depends_on": ["w01"]}]}"#;
    let store = Arc::new(InMemoryConversationStore::new());
    let queue = Arc::new(InMemoryQueue::new(QueueSettings::default()));
    let model = Arc::new(ScriptedModel::always(Ok(text_response(plan))));
    let tools = StaticTools::named(&["shop__get_order"], "{name} tool", json!({"type": "object"}));
    let core = Orchestrator::new(
        store.clone(),
        TaskQueues::new(queue.clone() as Arc<dyn TaskQueue>),
        model.clone(),
        Arc::new(tools),
        RoleTable::demo(),
        settings,
    );
    let router = orchestrator::router(ApiState::new(Arc::new(core), Auth::None));
    Rig { store, queue, model, router }
}

async fn send(rig: &Rig, method: &str, path: &str, body: Value, key: Option<&str>) -> (StatusCode, HeaderMap, Value) {
    let mut request = Request::builder().method(method).uri(path).header("content-type", "application/json");
    if let Some(k) = key {
        request = request.header("idempotency-key", k);
    }
    let body = if body.is_null() { Body::empty() } else { Body::from(body.to_string()) };
    let response = rig.router.clone().oneshot(request.body(body).unwrap()).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, headers, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() })
}

async fn start(rig: &Rig, message: &str) -> ConversationId {
    let (status, _, body) =
        send(rig, "POST", "/conversations", json!({"message": message, "customer_id": "C104"}), None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["turn"], 0);
    ConversationId::parse(body["conversation_id"].as_str().unwrap()).unwrap()
}

async fn follow_up(
    rig: &Rig,
    id: &ConversationId,
    customer: &str,
    key: Option<&str>,
) -> (StatusCode, HeaderMap, Value) {
    let body = json!({"message": "and is coupon SAVE20 valid?", "customer_id": customer});
    send(rig, "POST", &format!("/conversations/{id}/messages"), body, key).await
}

/// Answers the conversation's current turn as the workers and the aggregator would: every subtask
/// finished and counted, the aggregation lease taken, the reply written.
async fn answer(rig: &Rig, id: &ConversationId, reply: &str) {
    let c = rig.store.get_conversation(id).await.unwrap().unwrap();
    let done = swarm_core::domain::SubtaskResult::Succeeded { text: "ok".into(), tool_calls: vec![] };
    for r in rig.store.list_subtasks(id).await.unwrap() {
        rig.store.record_result(id, &r.subtask.id, &done, &Usage::default(), &[], now_ms()).await.unwrap();
        rig.store.count_finished(id, &r.subtask.id, &Usage::default()).await.unwrap();
    }
    let now = now_ms();
    rig.store.acquire_lease(id, LeasePhase::Aggregating { turn: c.turn }, "agg", now, now + 60_000).await.unwrap();
    assert!(rig.store.finish_conversation(id, c.turn, reply, &Usage::default()).await.unwrap());
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn a_follow_up_while_the_turn_runs_is_409_with_retry_after_and_writes_nothing() {
    let r = rig(OrchestratorSettings::default());
    let id = start(&r, "where is order A1029?").await;
    let before = r.store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!(before.status, ConversationStatus::Running);
    let (status, headers, body) = follow_up(&r, &id, "C104", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_code(&body), "turn_in_progress");
    let retry: u64 = headers.get(header::RETRY_AFTER).unwrap().to_str().unwrap().parse().unwrap();
    assert!((1..=120).contains(&retry), "Retry-After {retry} s: at most the turn's deadline away");
    assert_eq!(r.store.get_conversation(&id).await.unwrap().unwrap(), before, "nothing written");
}

#[tokio::test]
async fn a_follow_up_starts_the_next_turn_planned_from_its_own_message_and_get_shows_every_turn() {
    let r = rig(OrchestratorSettings::default());
    let id = start(&r, "where is order A1029?").await;
    answer(&r, &id, "A1029 ships today.").await;
    let (status, headers, body) = follow_up(&r, &id, "C104", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!((body["turn"].as_u64(), body["conversation_id"].as_str()), (Some(1), Some(id.as_str())));
    assert_eq!(headers.get(header::LOCATION).unwrap(), &format!("/conversations/{id}"));
    // The planner of turn 1 was asked about turn 1's message, with turn 0 in the memory block just before it.
    let asked = r.model.requests();
    let messages = &asked.last().unwrap().messages;
    let text = |m: &swarm_core::ports::ChatMessage| serde_json::to_string(m).unwrap();
    let (memory, message) = (text(&messages[messages.len() - 2]), text(&messages[messages.len() - 1]));
    assert!(message.contains("coupon SAVE20") && !message.contains("A1029"), "{message}");
    assert!(memory.contains("<earlier-turns>") && memory.contains("where is order A1029?"), "{memory}");
    assert!(memory.contains("A1029 ships today.") && !memory.contains("SAVE20"), "{memory}");
    // Turn 1's subtasks are its own: ids scoped to the turn, the first sent with turn 1's deadline.
    let c = r.store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!((c.turn, c.status, c.total), (1, ConversationStatus::Running, 2));
    let received = r.queue.receive(10, Duration::ZERO).await.unwrap();
    let sent: Vec<TaskMessage> = received.iter().map(|m| serde_json::from_str(&m.body).unwrap()).collect();
    assert!(sent.contains(&TaskMessage::run(&id, &"t1~w01".into())), "{sent:?}");
    assert!(!sent.contains(&TaskMessage::run(&id, &"t1~w02".into())), "w02 waits for w01");

    answer(&r, &id, "SAVE20 is valid.").await;
    let (status, _, view) = send(&r, "GET", &format!("/conversations/{id}"), Value::Null, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((view["turn"].as_u64(), view["status"].as_str()), (Some(1), Some("DONE")));
    assert_eq!(view["reply"], "SAVE20 is valid.", "the top level is the latest turn");
    let turns = view["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!((turns[0]["turn"].as_u64(), turns[0]["reply"].as_str()), (Some(0), Some("A1029 ships today.")));
    assert_eq!(turns[0]["message"], "where is order A1029?");
    let ids = |t: &Value| -> Vec<String> {
        t["subtasks"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(ids(&turns[0]), ["w01", "w02"]);
    assert_eq!(ids(&turns[1]), ["t1~w01", "t1~w02"]);
    assert_eq!(turns[1]["message"], "and is coupon SAVE20 valid?");
    assert_eq!(turns[1]["reply"], view["reply"]);
}

#[tokio::test]
async fn another_customer_s_conversation_is_404_like_an_unknown_one() {
    let r = rig(OrchestratorSettings::default());
    let id = start(&r, "where is order A1029?").await;
    answer(&r, &id, "r0").await;
    let theirs = follow_up(&r, &id, "C105", None).await;
    let unknown = follow_up(&r, &ConversationId::new(), "C105", None).await;
    assert_eq!((theirs.0, unknown.0), (StatusCode::NOT_FOUND, StatusCode::NOT_FOUND));
    assert_eq!(theirs.2, unknown.2, "the same answer: nothing says it exists");
    let bad =
        send(&r, "POST", "/conversations/not-an-id/messages", json!({"message": "x", "customer_id": "C105"}), None);
    assert_eq!(bad.await.0, StatusCode::NOT_FOUND);
    assert_eq!(r.store.get_conversation(&id).await.unwrap().unwrap().turn, 0, "nothing written");
}

#[tokio::test]
async fn past_its_idle_time_a_conversation_answers_410_and_writes_nothing() {
    let settings = OrchestratorSettings { idle_expiry: Duration::from_millis(50), ..OrchestratorSettings::default() };
    let r = rig(settings);
    let id = start(&r, "where is order A1029?").await;
    answer(&r, &id, "r0").await;
    let stored = r.store.get_conversation(&id).await.unwrap().unwrap();
    let expires_at = stored.expires_at_ms.unwrap();
    assert!(expires_at <= stored.created_at_ms + 50, "the expiry is stored on the item");
    while now_ms() <= expires_at {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, _, body) = follow_up(&r, &id, "C104", None).await;
    assert_eq!(status, StatusCode::GONE, "{body}");
    assert_eq!(error_code(&body), "conversation_expired");
    assert_eq!(r.store.get_conversation(&id).await.unwrap().unwrap(), stored, "nothing written");
}

#[tokio::test]
async fn the_same_idempotency_key_answers_the_same_turn_once_and_another_message_with_it_is_422() {
    let r = rig(OrchestratorSettings::default());
    let id = start(&r, "where is order A1029?").await;
    answer(&r, &id, "r0").await;
    let first = follow_up(&r, &id, "C104", Some("follow-1")).await;
    assert_eq!(first.0, StatusCode::ACCEPTED, "{}", first.2);
    let again = follow_up(&r, &id, "C104", Some("follow-1")).await;
    assert_eq!((again.0, &again.2), (StatusCode::ACCEPTED, &first.2), "same key, same answer");
    assert_eq!(r.store.get_conversation(&id).await.unwrap().unwrap().turn, 1, "one turn");
    let other = json!({"message": "something else", "customer_id": "C104"});
    let reused = send(&r, "POST", &format!("/conversations/{id}/messages"), other, Some("follow-1")).await;
    assert_eq!((reused.0, error_code(&reused.2)), (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused"));
    // Once a later turn started, the key still answers its own turn.
    answer(&r, &id, "r1").await;
    let body = json!({"message": "and my refund?", "customer_id": "C104"});
    let third = send(&r, "POST", &format!("/conversations/{id}/messages"), body, Some("follow-2")).await;
    assert_eq!(third.2["turn"], 2);
    let late = follow_up(&r, &id, "C104", Some("follow-1")).await;
    assert_eq!((late.0, late.2["turn"].as_u64()), (StatusCode::ACCEPTED, Some(1)));
    assert_eq!(r.store.get_conversation(&id).await.unwrap().unwrap().turn, 2, "no turn started by the repeat");
}

/// Kills the invocation at one crash point.
struct KillAt(CrashPoint);

impl FaultPlan for KillAt {
    fn crash(&self, point: CrashPoint) -> bool {
        point == self.0
    }
}

#[tokio::test]
async fn a_planner_killed_after_the_turn_started_is_taken_over_by_the_retry_once_its_lease_ends() {
    let settings =
        OrchestratorSettings { planning_lease: Duration::from_millis(100), ..OrchestratorSettings::default() };
    let r = rig(settings);
    let id = start(&r, "where is order A1029?").await;
    answer(&r, &id, "r0").await;
    let killed = Invocation::new(Arc::new(KillAt(CrashPoint::OrchestratorAfterStartTurn)));
    tokio::select! {
        answered = with_plan(killed.clone(), follow_up(&r, &id, "C104", Some("k"))) => panic!("not killed: {answered:?}"),
        () = killed.killed() => {}
    }
    let stranded = r.store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!((stranded.turn, stranded.status), (1, ConversationStatus::Planning));
    assert!(stranded.sweep_shard.is_some(), "the sweep would fail it past its deadline");
    // Inside the dead planner's lease the retry is told to come back; after it, the retry plans.
    let early = follow_up(&r, &id, "C104", Some("k")).await;
    assert_eq!((early.0, error_code(&early.2)), (StatusCode::CONFLICT, "request_in_progress"));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let retried = follow_up(&r, &id, "C104", Some("k")).await;
    assert_eq!((retried.0, retried.2["turn"].as_u64()), (StatusCode::ACCEPTED, Some(1)), "{}", retried.2);
    let c = r.store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!((c.turn, c.status, c.total), (1, ConversationStatus::Running, 2));
}
