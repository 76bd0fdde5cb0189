//! The orchestrator on embedded adapters: plan retry with the validation error shown, the single-subtask fallback, roles from the tool table, what gets enqueued.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::time::Duration;

use orchestrator::core::CreateRequest;
use orchestrator::{Orchestrator, OrchestratorSettings};
use serde_json::json;
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::domain::{ConversationStatus, SubtaskStatus, TaskMessage};
use swarm_core::ports::{ChatMessage, ConversationRecords, SubtaskStore, TaskQueue, ToolError};
use swarm_core::roles::{DEFAULT_ROLE, RoleTable, TaskQueues};
use swarm_testing::{ScriptedModel, StaticTools, text_response};

/// The planner's model: answers `answers` in order, keeping every request.
fn planner(answers: &[&str]) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(answers.iter().map(|a| Ok(text_response(a)))))
}

/// The shop's catalogue as the planner credential lists it; the planner calls no tools.
fn catalogue() -> StaticTools {
    StaticTools::named(
        &["shop__get_order", "shop__check_coupon", "shop__refund"],
        "{name} tool",
        json!({"type": "object"}),
    )
    .only_for_role("planner")
    .on_any_call(|_, _| Err(ToolError::Permanent("the planner calls no tools".into())))
}

struct Rig {
    store: Arc<InMemoryConversationStore>,
    tasks: InMemoryQueue,
    refunds: InMemoryQueue,
    model: Arc<ScriptedModel>,
    core: Orchestrator,
}

fn rig(answers: &[&str]) -> Rig {
    rig_with_roles(answers, RoleTable::demo())
}

fn rig_with_roles(answers: &[&str], roles: RoleTable) -> Rig {
    let store = Arc::new(InMemoryConversationStore::new());
    let tasks = InMemoryQueue::new(QueueSettings::default());
    let refunds = InMemoryQueue::new(QueueSettings { name: "refund".into(), ..QueueSettings::default() });
    let model = planner(answers);
    let queues = TaskQueues::new(Arc::new(tasks.clone()) as Arc<dyn TaskQueue>)
        .with_role("refund", Arc::new(refunds.clone()) as Arc<dyn TaskQueue>);
    let core = Orchestrator::new(
        store.clone(),
        queues,
        model.clone(),
        Arc::new(catalogue()),
        roles,
        OrchestratorSettings::default(),
    );
    Rig { store, tasks, refunds, model, core }
}

fn request(message: &str) -> CreateRequest {
    CreateRequest { message: message.into(), customer_id: "C104".into(), idempotency_key: None }
}

async fn drain(q: &InMemoryQueue) -> Vec<TaskMessage> {
    q.receive(10, Duration::ZERO).await.unwrap().iter().map(|d| serde_json::from_str(&d.body).unwrap()).collect()
}

#[tokio::test]
async fn unusable_plan_is_retried_once_with_the_validation_error_shown() {
    let good = r#"{"subtasks": [{"id": "w01", "instruction": "Check order A1029", "tools": ["get_order"]}, {"id": "w02", "instruction": "Refund A1029", "tools": ["shop__refund"], "depends_on": ["w01"]}]}"#;
    let r = rig(&[r#"{"subtasks": [{"id": "w01", "instruction": "x", "tools": ["delete_db"]}]}"#, good]);
    let created = r.core.create(request("where is A1029, refund it")).await.unwrap();
    let seen = r.model.requests();
    assert_eq!(seen.len(), 2);
    let retry = seen[1].messages.last().unwrap();
    assert!(
        matches!(retry, ChatMessage::User { content } if content.contains("delete_db")),
        "the model sees what was wrong: {retry:?}"
    );

    let conv = r.store.get_conversation(&created.conversation_id).await.unwrap().unwrap();
    assert_eq!(conv.status, ConversationStatus::Running);
    assert_eq!((conv.total, conv.remaining), (2, 2));
    let subtasks = r.store.list_subtasks(&created.conversation_id).await.unwrap();
    assert_eq!(subtasks[0].subtask.tools, vec!["shop__get_order"], "unprefixed name resolved");
    assert_eq!(subtasks[0].role, "support");
    assert_eq!(subtasks[1].role, "refund", "role from the tool table, not the model");
    assert_eq!(subtasks[1].status, SubtaskStatus::Pending);
    // w01 is queued now; w02 (the refund role's) too, whatever its dependency: it waits for w01 on its
    // own queue, because no other function may send there. The deadline message is delayed.
    let queued = drain(&r.tasks).await;
    assert_eq!(queued, vec![TaskMessage::run(&created.conversation_id, &"w01".into())]);
    assert_eq!(drain(&r.refunds).await, vec![TaskMessage::run(&created.conversation_id, &"w02".into())]);
}

#[tokio::test]
async fn plans_that_stay_unusable_fall_back_to_one_subtask_that_cannot_move_money() {
    let r = rig(&["I cannot plan that.", "Still no JSON."]);
    let created = r.core.create(request("do everything")).await.unwrap();
    let subtasks = r.store.list_subtasks(&created.conversation_id).await.unwrap();
    assert_eq!(subtasks.len(), 1);
    assert!(subtasks[0].subtask.instruction.contains("do everything"));
    assert!(!subtasks[0].subtask.tools.iter().any(|t| t.ends_with("refund")), "{:?}", subtasks[0].subtask.tools);
    assert_eq!(subtasks[0].role, DEFAULT_ROLE);
    let conv = r.store.get_conversation(&created.conversation_id).await.unwrap().unwrap();
    assert_eq!(conv.notes.len(), 1);
}

#[tokio::test]
async fn the_fallback_subtask_gets_the_tools_the_role_table_leaves_to_the_default_role() {
    // This table gives coupons to the refund role and leaves refunds to support workers.
    let r = rig_with_roles(&["no plan", "still none"], RoleTable::parse("check_coupon=refund").unwrap());
    let created = r.core.create(request("do everything")).await.unwrap();
    let subtasks = r.store.list_subtasks(&created.conversation_id).await.unwrap();
    assert_eq!(subtasks.len(), 1);
    assert_eq!(subtasks[0].subtask.tools, ["shop__get_order", "shop__refund"]);
    assert_eq!(subtasks[0].role, DEFAULT_ROLE);
    assert_eq!(drain(&r.tasks).await, vec![TaskMessage::run(&created.conversation_id, &"w01".into())]);
}

#[tokio::test]
async fn same_idempotency_key_returns_the_same_conversation_and_plans_once() {
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Check order A1029", "tools": ["shop__get_order"]}]}"#;
    let r = rig(&[plan, plan]);
    let mut req = request("where is A1029");
    req.idempotency_key = Some("abc".into());
    let a = r.core.create(req.clone()).await.unwrap();
    let b = r.core.create(req).await.unwrap();
    assert_eq!(a.conversation_id, b.conversation_id);
    assert!(a.new && !b.new);
    assert_eq!(r.model.calls(), 1);
    assert_eq!(r.store.conversation_count(), 1);
}

#[tokio::test]
async fn another_customers_conversation_is_not_found() {
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Check order A1029", "tools": ["shop__get_order"]}]}"#;
    let r = rig(&[plan]);
    let created = r.core.create(request("where is A1029")).await.unwrap();
    let id = created.conversation_id.to_string();
    assert!(r.core.status(&id, Some("C104")).await.is_ok());
    assert_eq!(r.core.status(&id, Some("C999")).await.unwrap_err().status(), 404);
}

#[tokio::test]
async fn a_customers_fan_out_limit_cuts_the_plan_and_says_so() {
    let plan = r#"{"subtasks": [
        {"id": "w01", "instruction": "Check order A1029", "tools": ["shop__get_order"]},
        {"id": "w02", "instruction": "Check coupon SAVE20", "tools": ["shop__check_coupon"]},
        {"id": "w03", "instruction": "Check order A1030", "tools": ["shop__get_order"]}]}"#;
    let mut r = rig(&[plan]);
    let limits = swarm_core::access::CustomerLimits { conversations_per_minute: 10, subtasks_per_conversation: 2 };
    r.core = r.core.with_limits(r.store.clone(), limits);
    let created = r.core.create(request("three questions")).await.unwrap();
    let subtasks = r.store.list_subtasks(&created.conversation_id).await.unwrap();
    let ids: Vec<&str> = subtasks.iter().map(|s| s.subtask.id.as_str()).collect();
    assert_eq!(ids, ["w01", "w02"]);
    let conversation = r.store.get_conversation(&created.conversation_id).await.unwrap().unwrap();
    assert_eq!(conversation.total, 2);
    assert_eq!(conversation.notes, ["The request had more than 2 separate parts; 1 of them were not handled."]);
    let queued: Vec<TaskMessage> = drain(&r.tasks).await;
    assert_eq!(
        queued,
        [
            TaskMessage::run(&created.conversation_id, &"w01".into()),
            TaskMessage::run(&created.conversation_id, &"w02".into())
        ]
    );
}
