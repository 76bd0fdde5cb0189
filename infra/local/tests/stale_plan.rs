//! Defect M10 (issue 17): a planner that died after writing its plan's subtask items and before flipping the
//! conversation `PLANNING → RUNNING` (on DynamoDB `start_run` writes the items first: a plan can exceed a
//! transaction) leaves them behind; the same-key retry that takes over and plans differently must run, list and
//! count its own plan only. Runs on the embedded store (atomic: no items are left, the takeover's plan is checked)
//! and on DynamoDB (the emulator), where the dead planner's items are put into the table as it left them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

#[allow(unused_macros, dead_code)] // the contract macro and the plain store: these tests seed the table themselves
mod common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use orchestrator::core::CreateRequest;
use orchestrator::{Orchestrator, OrchestratorSettings};
use serde_json::json;
use swarm_adapters::aws::dynamo::DynamoConversationStore;
use swarm_adapters::aws::dynamo::codec::subtask_item;
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::domain::{
    Conversation, ConversationStatus, Lease, Subtask, SubtaskRecord, TaskMessage, Usage, now_ms, request_hash,
};
use swarm_core::ports::{
    ConversationRecords, ConversationStore, CountOutcome, CreateOutcome, SubtaskStore, TaskQueue, ToolError,
};
use swarm_core::roles::{RoleTable, TaskQueues};
use swarm_testing::{ScriptedModel, StaticTools, text_response};

const MESSAGE: &str = "where is A1029";
const KEY: &str = "client-key-1";

/// The conversation as its creator wrote it, whose planning lease ran out (the creator died planning).
fn abandoned() -> Conversation {
    let now = now_ms();
    let mut c = Conversation::new("C104", MESSAGE, now, 120);
    c.idempotency_key = Some(KEY.into());
    c.request_hash = Some(request_hash("C104", MESSAGE));
    c.lease = Some(Lease { holder: "orchestrator:dead".into(), until_ms: now - 1, turn: 0 });
    c
}

/// The dead planner's plan: three subtasks, none of which the takeover plans.
fn dead_plan(c: &Conversation) -> Vec<SubtaskRecord> {
    ["w01", "w02", "w03"]
        .iter()
        .map(|id| {
            let s = Subtask {
                id: (*id).into(),
                instruction: format!("the dead planner's {id}"),
                tools: vec!["shop__get_order".into()],
                depends_on: vec![],
            };
            SubtaskRecord::new(c, s, "support".into())
        })
        .collect()
}

/// The retry with the same key takes the planning over; its model plans `w01` only.
async fn take_over(store: Arc<dyn ConversationStore>, conv: &Conversation) -> Result<()> {
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Check order A1029", "tools": ["shop__get_order"]}]}"#;
    let tasks = InMemoryQueue::new(QueueSettings::default());
    let model = Arc::new(ScriptedModel::new((0..3).map(|_| Ok(text_response(plan)))));
    let catalogue = StaticTools::named(&["shop__get_order"], "{name} tool", json!({"type": "object"}))
        .only_for_role("planner")
        .on_any_call(|_, _| Err(ToolError::Permanent("the planner calls no tools".into())));
    let core = Orchestrator::new(
        store.clone(),
        TaskQueues::new(Arc::new(tasks.clone()) as Arc<dyn TaskQueue>),
        model,
        Arc::new(catalogue),
        RoleTable::demo(),
        OrchestratorSettings::default(),
    );
    let request =
        CreateRequest { message: MESSAGE.into(), customer_id: "C104".into(), idempotency_key: Some(KEY.into()) };
    let retry = core.create(request.clone()).await.map_err(|e| anyhow::anyhow!("retry refused: {e}"))?;
    assert_eq!(retry.conversation_id, conv.id);
    // A second retry finds it RUNNING and marked sent (`queued`): nothing more is sent, even inside the
    // takeover's live lease (where a retry does send for a creator killed before its send, issue 18).
    core.create(request).await.map_err(|e| anyhow::anyhow!("second retry refused: {e}"))?;
    let mut runs = Vec::new();
    for d in tasks.receive(10, Duration::ZERO).await? {
        if let TaskMessage::Run { subtask_id, .. } = serde_json::from_str::<TaskMessage>(&d.body)? {
            runs.push(subtask_id.to_string());
        }
    }
    assert_eq!(runs, ["w01"], "only the takeover's plan is sent, once");

    let after = store.get_conversation(&conv.id).await?.context("conversation missing")?;
    assert_eq!((after.status, after.total, after.remaining), (ConversationStatus::Running, 1, 1));
    let listed = store.list_subtasks(&conv.id).await?;
    assert_eq!(
        listed.iter().map(|r| (r.subtask.id.as_str(), r.subtask.instruction.as_str())).collect::<Vec<_>>(),
        [("w01", "Check order A1029")],
        "the dead planner's subtasks are not the conversation's"
    );
    // A subtask outside the plan never counts: the conversation waits for w01.
    assert_ne!(
        store.count_finished(&conv.id, &"w02".into(), &Usage::default()).await?,
        CountOutcome::Counted { remaining: 0 }
    );
    let after = store.get_conversation(&conv.id).await?.context("conversation missing")?;
    assert_eq!((after.remaining, after.finished.len()), (1, 0), "w02 counted for a conversation that never planned it");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_a_takeover_runs_lists_and_counts_its_own_plan_only() -> Result<()> {
    let store = Arc::new(InMemoryConversationStore::new());
    let conv = abandoned();
    assert_eq!(store.create_conversation(&conv).await?, CreateOutcome::Created);
    take_over(store, &conv).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_a_takeover_runs_lists_and_counts_its_own_plan_only_not_the_items_a_dead_planner_left() -> Result<()> {
    let Some((client, table)) = common::dynamo_table("stale_plan").await? else { return Ok(()) };
    let store = Arc::new(DynamoConversationStore::new(client.clone(), table.clone()));
    let conv = abandoned();
    assert_eq!(store.create_conversation(&conv).await?, CreateOutcome::Created);
    // What the dead planner's batch write left before its flip.
    for record in dead_plan(&conv) {
        client.put_item().table_name(&table).set_item(Some(subtask_item(&record)?)).send().await?;
    }
    assert_eq!(store.list_subtasks(&conv.id).await?.len(), 3, "the dead planner's items are in the table");
    take_over(store, &conv).await
}
