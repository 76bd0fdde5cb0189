//! A conversation still `PLANNING` at its deadline is failed by the deadline path with no subtask left open, on both stores: on DynamoDB a plan's write puts its subtask items before the conditional flip to `RUNNING`, so a planner killed (or cut by its budget) between the two leaves items that, with no plan on the conversation, are listed as its subtasks; the path closes them (`deadline_passed`, never sent) before it fails the conversation — and leaves a conversation whose planning lease is live to its planner.
//!
//! The emulator instantiations need `SWARM_AWS_ENDPOINT`; without it they fail, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;

use anyhow::Result;
use swarm_adapters::aws::dynamo::DynamoConversationStore;
use swarm_adapters::aws::dynamo::codec::subtask_item;
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::domain::{
    Conversation, ConversationStatus, FailureKind, Lease, Subtask, SubtaskRecord, SubtaskResult, SubtaskStatus,
    link_dependents, now_ms,
};
use swarm_core::ports::{ConversationStore, TaskQueue};
use swarm_core::roles::TaskQueues;
use worker::{Closer, Outcome, WorkerSettings};

// The both-adapters macro and the store helper stay unused here (the raw client writes the leftovers).
#[allow(dead_code, unused_macros)]
mod common;

/// A conversation created two minutes ago with a deadline of 60 s: `PLANNING`, its planner's lease
/// ending at `lease_until_ms`.
fn overdue_planning(lease_until_ms: i64) -> Conversation {
    let mut c = Conversation::new("C104", "Where is A1029?", now_ms() - 120_000, 60);
    c.lease = Some(Lease { holder: "orchestrator:dead".into(), until_ms: lease_until_ms, turn: 0 });
    c
}

/// The items a plan's write of `w01` and `w02` (after it) puts before its flip.
fn plan_items(c: &Conversation) -> Vec<SubtaskRecord> {
    let s = |id: &str, deps: &[&str]| Subtask {
        id: id.into(),
        instruction: format!("Check order A1029 ({id})."),
        tools: vec!["shop__get_order".into()],
        depends_on: deps.iter().map(|d| (*d).into()).collect(),
    };
    let mut records = vec![
        SubtaskRecord::new(c, s("w01", &[]), "support".into()),
        SubtaskRecord::new(c, s("w02", &["w01"]), "support".into()),
    ];
    link_dependents(&mut records);
    records
}

fn closer(store: Arc<dyn ConversationStore>) -> Closer {
    let queue: Arc<dyn TaskQueue> = Arc::new(InMemoryQueue::new(QueueSettings {
        name: "tasks".into(),
        visibility_timeout: std::time::Duration::from_secs(30),
        max_receive_count: 3,
    }));
    Closer::new(store, TaskQueues::new(queue), &WorkerSettings::default())
}

/// The deadline path fails an overdue `PLANNING` conversation and closes every subtask item it
/// lists; `leftovers` says whether the store holds items of a plan never flipped.
async fn failed_with_nothing_open(store: Arc<dyn ConversationStore>, c: &Conversation, leftovers: bool) -> Result<()> {
    let closer = closer(store.clone());
    assert_eq!(closer.deadline(&c.id, 0).await, Outcome::Concluded(ConversationStatus::Failed));
    let failed = store.get_conversation(&c.id).await?.unwrap();
    assert_eq!(failed.status, ConversationStatus::Failed);
    assert_eq!(failed.error.as_deref(), Some("planning did not finish before the deadline"));
    let listed = store.list_subtasks(&c.id).await?;
    assert_eq!(listed.len(), if leftovers { 2 } else { 0 });
    for r in &listed {
        assert_eq!(r.status, SubtaskStatus::Failed, "{}", r.subtask.id);
        assert_eq!(r.attempts, 0);
        match &r.result {
            Some(SubtaskResult::Failed { kind, reason }) => {
                assert_eq!(*kind, FailureKind::DeadlinePassed);
                assert_eq!(reason, "planning did not finish before the deadline: it was never sent");
            }
            other => panic!("{}: {other:?}", r.subtask.id),
        }
    }
    // Run again (a redelivered deadline message): nothing changes.
    assert!(matches!(closer.deadline(&c.id, 0).await, Outcome::Ignored(_)));
    assert_eq!(store.list_subtasks(&c.id).await?, listed);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_items_of_a_plan_never_flipped_are_closed_before_the_conversation_fails() -> Result<()> {
    let Some((client, table)) = common::dynamo_table("plan_never_flipped").await? else { return Ok(()) };
    let store: Arc<dyn ConversationStore> = Arc::new(DynamoConversationStore::new(client.clone(), table.clone()));
    let c = overdue_planning(now_ms() - 1_000);
    store.create_conversation(&c).await?;
    // What a planner killed between the plan's items and its flip leaves: the items, PLANNING.
    for r in plan_items(&c) {
        client.put_item().table_name(&table).set_item(Some(subtask_item(&r)?)).send().await?;
    }
    let open: Vec<SubtaskStatus> = store.list_subtasks(&c.id).await?.iter().map(|r| r.status).collect();
    assert_eq!(open, [SubtaskStatus::Queued, SubtaskStatus::Pending], "listed: no plan filters them");
    failed_with_nothing_open(store, &c, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_an_overdue_planning_conversation_fails_with_nothing_listed() -> Result<()> {
    let store: Arc<dyn ConversationStore> = Arc::new(InMemoryConversationStore::new());
    let c = overdue_planning(now_ms() - 1_000);
    store.create_conversation(&c).await?;
    failed_with_nothing_open(store, &c, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_whose_planning_lease_is_live_is_left_to_its_planner_past_the_deadline() -> Result<()> {
    let store: Arc<dyn ConversationStore> = Arc::new(InMemoryConversationStore::new());
    let c = overdue_planning(now_ms() + 60_000);
    store.create_conversation(&c).await?;
    let outcome = closer(store.clone()).deadline(&c.id, 0).await;
    assert!(matches!(&outcome, Outcome::Ignored(why) if why.starts_with("still being planned")), "{outcome:?}");
    assert_eq!(store.get_conversation(&c.id).await?.unwrap().status, ConversationStatus::Planning);
    Ok(())
}
