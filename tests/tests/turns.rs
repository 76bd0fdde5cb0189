//! A conversation of several turns across the functions, on both store backends (the embedded store and DynamoDB on the emulator): late messages of turn 0 (`Run`, `Deadline`, `Confirm`, a dead letter's count and release) arriving during turn 1 change nothing — no count, no aggregation, no re-arm — while turn 1's own deadline and the sweep cover turn 1; and on the local stack a follow-up is answered as a second turn (GET shows `turns[]` with the latest turn at top level), and one past the idle time is 410.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, Lease, NextTurn, Subtask, SubtaskId, SubtaskRecord,
    SubtaskResult, SubtaskStatus, TaskMessage, Usage, link_dependents, now_ms, sweep_shard,
};
use swarm_core::language::Language;
use swarm_core::ports::{ConversationStore, LeasePhase, QueueError, TaskQueue, TurnOutcome};
use swarm_core::roles::TaskQueues;
use swarm_local::{BackendChoice, EmulatorOptions, LocalStack, StackOptions};
use swarm_testing::{ScriptedModel, StaticTools};
use swarm_tests::emulator_endpoint;
use worker::{Closer, Outcome, Worker, WorkerSettings};

/// The store a test runs on: the embedded store, or a fresh table on the emulator.
async fn store_of(backend: &BackendChoice, test: &str) -> Arc<dyn ConversationStore> {
    match backend {
        BackendChoice::Embedded => Arc::new(swarm_adapters::embedded::InMemoryConversationStore::new()),
        BackendChoice::Emulator(options) => {
            let (client, _, _) = swarm_local::platform::emulator::emulator_clients(&options.endpoint, &options.region);
            let table = format!("turns-{test}-{}", ConversationId::new());
            swarm_local::platform::dynamo_table::create_table(&client, &table).await.unwrap();
            Arc::new(swarm_adapters::aws::dynamo::DynamoConversationStore::new(client, table))
        }
    }
}

fn emulator(test: &str) -> Option<BackendChoice> {
    emulator_endpoint(test).map(|endpoint| BackendChoice::Emulator(EmulatorOptions::new(endpoint)))
}

fn records(c: &Conversation, turn: u32) -> Vec<SubtaskRecord> {
    let id = |planned: &str| SubtaskId::in_turn(turn, planned);
    let subtask = |planned: &str, deps: &[&str]| Subtask {
        id: id(planned),
        instruction: format!("part {planned} of turn {turn}"),
        tools: vec!["shop__get_order".into()],
        depends_on: deps.iter().map(|d| id(d)).collect(),
    };
    let mut rs = vec![
        SubtaskRecord::new(c, subtask("w01", &[]), "support".into()),
        SubtaskRecord::new(c, subtask("w02", &["w01"]), "support".into()),
    ];
    link_dependents(&mut rs);
    rs
}

/// A conversation whose turn 0 (w01, then w02 after it) was answered, now on turn 1 (`t1~w01`,
/// `t1~w02` after it) `RUNNING` with both open and its deadline `turn_deadline_ms`.
async fn on_turn_one(store: &Arc<dyn ConversationStore>, turn_deadline_ms: i64) -> Conversation {
    let now = now_ms();
    let mut c = Conversation::new("C104", "where is A1029?", now - 300_000, 120);
    c.sweep_shard = Some(sweep_shard(&c.id, 8));
    c.expires_at_ms = Some(now + 3_600_000);
    store.create_conversation(&c).await.unwrap();
    let turn0 = records(&c, 0);
    assert!(store.start_run(&c.id, None, &turn0, &[], &Usage::default()).await.unwrap());
    let done = SubtaskResult::Succeeded { text: "A1029 ships today.".into(), tool_calls: vec![] };
    for r in &turn0 {
        store.record_result(&c.id, &r.subtask.id, &done, &Usage::default(), &[], now).await.unwrap();
        store.count_finished(&c.id, &r.subtask.id, &Usage::default()).await.unwrap();
    }
    store.acquire_lease(&c.id, LeasePhase::Aggregating { turn: 0 }, "agg", now, now + 60_000).await.unwrap();
    assert!(store.finish_conversation(&c.id, 0, "A1029 ships today.", &Usage::default()).await.unwrap());
    let t0 = store.get_conversation(&c.id).await.unwrap().unwrap();
    let next = NextTurn {
        turn: 1,
        query: "and is SAVE20 valid?".into(),
        language: Language::English,
        idempotency_key: None,
        request_hash: "h".into(),
        trace_parent: None,
        lease: Lease { holder: "orchestrator:t1".into(), until_ms: now + 35_000, turn: 1 },
        started_at_ms: now,
        deadline_ms: turn_deadline_ms,
        expires_at_ms: now + 3_600_000,
        sweep_shard: sweep_shard(&c.id, 8),
    };
    let TurnOutcome::Started(t1) = store.start_turn(&t0, &next, now).await.unwrap() else { panic!("not started") };
    assert!(store.start_run(&c.id, Some("orchestrator:t1"), &records(&t1, 1), &[], &Usage::default()).await.unwrap());
    store.get_conversation(&c.id).await.unwrap().unwrap()
}

fn worker(store: Arc<dyn ConversationStore>, queue: Arc<Recording>) -> Worker {
    let model = Arc::new(ScriptedModel::new([]));
    let tools = Arc::new(StaticTools::named(&["shop__get_order"], "", serde_json::json!({"type": "object"})));
    let queues = TaskQueues::new(queue as Arc<dyn TaskQueue>);
    Worker::new(store, queues, model.clone(), model, tools, WorkerSettings::default())
}

/// A queue that keeps what was sent to it (delayed messages included), for the test to take.
#[derive(Default)]
struct Recording {
    sent: Mutex<Vec<TaskMessage>>,
}

#[async_trait]
impl TaskQueue for Recording {
    fn name(&self) -> &str {
        "tasks"
    }

    async fn send(&self, messages: &[TaskMessage], _delay_seconds: u32) -> Result<(), QueueError> {
        self.sent.lock().unwrap().extend_from_slice(messages);
        Ok(())
    }

    async fn change_visibility(&self, _receipt_handle: &str, _seconds: u32) -> Result<(), QueueError> {
        Ok(())
    }
}

/// Every message sent since the last call.
fn drain(queue: &Recording) -> Vec<TaskMessage> {
    std::mem::take(&mut *queue.sent.lock().unwrap())
}

fn lambda_deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(60)
}

async fn late_messages_of_turn_zero_change_nothing_in_turn_one(backend: BackendChoice) {
    let store = store_of(&backend, "late").await;
    // Turn 1's deadline has passed too: only its own deadline message (or the sweep) may close it.
    let before = on_turn_one(&store, now_ms() - 1_000).await;
    let subtasks_before = store.list_subtasks(&before.id).await.unwrap();
    let history_before = store.conversation_history(&before.id).await.unwrap();
    let queue = Arc::new(Recording::default());
    let w = worker(store.clone(), queue.clone());
    let closer =
        Closer::new(store.clone(), TaskQueues::new(queue.clone() as Arc<dyn TaskQueue>), &WorkerSettings::default());
    let id = before.id.clone();

    let run = w.handle(TaskMessage::run(&id, &"w01".into()), lambda_deadline()).await;
    assert!(matches!(&run, Outcome::Ignored(why) if why.contains("turn 0")), "{run:?}");
    let deadline = w.handle(TaskMessage::Deadline { conversation_id: id.clone(), turn: 0 }, lambda_deadline()).await;
    assert!(matches!(&deadline, Outcome::Ignored(why) if why.contains("turn 0")), "{deadline:?}");
    let confirm = TaskMessage::Confirm { conversation_id: id.clone(), subtask_id: "w02".into(), attempt: 0 };
    assert!(matches!(w.handle(confirm, lambda_deadline()).await, Outcome::Ignored(_)));
    // A dead-lettered run of turn 0's parent: recorded as it stands, counted (not in turn 1's plan)
    // and its dependent's release tried (turn 0's w02, finished: nothing to release).
    let dead = closer.handle_dead_letter(TaskMessage::run(&id, &"w01".into())).await;
    assert_eq!(dead, Outcome::Finished(SubtaskStatus::Succeeded));

    assert_eq!(store.get_conversation(&id).await.unwrap().unwrap(), before, "no count, no aggregation, no lease");
    assert_eq!(store.list_subtasks(&id).await.unwrap(), subtasks_before, "turn 1's subtasks untouched");
    assert_eq!(store.conversation_history(&id).await.unwrap(), history_before, "turn 0's untouched");
    assert_eq!(drain(&queue), vec![], "nothing sent: no re-arm, no release");

    // Turn 1's own deadline closes turn 1's subtasks (only them) and re-arms for turn 1.
    let own = w.handle(TaskMessage::Deadline { conversation_id: id.clone(), turn: 1 }, lambda_deadline()).await;
    assert!(matches!(&own, Outcome::Ignored(why) if why.contains("2 open subtasks closed")), "{own:?}");
    let after = store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!((after.turn, after.status, after.remaining), (1, ConversationStatus::Running, 0));
    let statuses: Vec<(String, SubtaskStatus)> =
        store.list_subtasks(&id).await.unwrap().into_iter().map(|r| (r.subtask.id.to_string(), r.status)).collect();
    assert_eq!(statuses, [("t1~w01".into(), SubtaskStatus::Failed), ("t1~w02".into(), SubtaskStatus::Skipped)]);
    let history = store.conversation_history(&id).await.unwrap();
    let turn0: Vec<SubtaskStatus> =
        history.subtasks.iter().filter(|r| r.subtask.id.turn() == 0).map(|r| r.status).collect();
    assert_eq!(turn0, [SubtaskStatus::Succeeded, SubtaskStatus::Succeeded], "turn 0's results stand");
    assert_eq!(drain(&queue), vec![TaskMessage::Deadline { conversation_id: id.clone(), turn: 1 }]);
    // The next deadline message of turn 1 ends it: none of turn 1's subtasks began, so turn 1 is
    // failed, not answered; turn 0's reply is kept.
    let answered = w.handle(TaskMessage::Deadline { conversation_id: id.clone(), turn: 1 }, lambda_deadline()).await;
    assert_eq!(answered, Outcome::Concluded(ConversationStatus::Failed));
    let failed = store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!((failed.turn, failed.status, failed.reply), (1, ConversationStatus::Failed, None));
    assert_eq!(failed.error.as_deref(), Some(swarm_core::answer::NEVER_STARTED));
    assert_eq!(history.turns[0].reply.as_deref(), Some("A1029 ships today."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_messages_of_turn_zero_change_nothing_in_turn_one_on_the_embedded_store() {
    late_messages_of_turn_zero_change_nothing_in_turn_one(BackendChoice::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_messages_of_turn_zero_change_nothing_in_turn_one_on_dynamodb() {
    let Some(backend) = emulator("turns::late messages on the emulator") else { return };
    late_messages_of_turn_zero_change_nothing_in_turn_one(backend).await;
}

async fn the_sweep_covers_a_later_turn(backend: BackendChoice) {
    let store = store_of(&backend, "sweep").await;
    let c = on_turn_one(&store, now_ms() - 1_000).await;
    let queue = Arc::new(Recording::default());
    let closer = Closer::new(store.clone(), TaskQueues::new(queue as Arc<dyn TaskQueue>), &WorkerSettings::default());
    // The index is eventually consistent on DynamoDB: a few sweeps at most.
    let mut moved = 0;
    for _ in 0..20 {
        let report = closer.sweep(tokio::time::Instant::now() + Duration::from_secs(20)).await;
        moved += report.moved + report.answered;
        if moved > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(moved > 0, "the sweep found turn 1 past its deadline");
    let after = store.get_conversation(&c.id).await.unwrap().unwrap();
    assert_eq!((after.turn, after.remaining), (1, 0), "turn 1's subtasks closed by the sweep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_covers_a_later_turn_on_the_embedded_store() {
    the_sweep_covers_a_later_turn(BackendChoice::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_covers_a_later_turn_on_dynamodb() {
    let Some(backend) = emulator("turns::sweep on the emulator") else { return };
    the_sweep_covers_a_later_turn(backend).await;
}

/// Two turns through the local stack's API, workers, stream and aggregator.
async fn a_follow_up_is_answered_as_a_second_turn(backend: BackendChoice) {
    let stack = LocalStack::start(StackOptions { backend, ..StackOptions::default() }).await.unwrap();
    let (status, created) = stack.post_conversation("Where is my parcel for order A1031?", "C106", None).await.unwrap();
    assert_eq!(status, 202, "{created}");
    let id = created["conversation_id"].as_str().unwrap().to_owned();
    let first = stack.wait_finished(&id, Duration::from_secs(60)).await.unwrap();
    assert_eq!(first.status, ConversationStatus::Done, "{first:?}");

    let body = serde_json::json!({"message": "Is coupon SAVE20 still valid?", "customer_id": "C106"}).to_string();
    let path = format!("/conversations/{id}/messages");
    let (status, second) = stack.api("POST", &path, Some(&body), &[]).await.unwrap();
    assert_eq!((status, second["turn"].as_u64()), (202, Some(1)), "{second}");
    // Answered as a new turn: wait for turn 1 to be over.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let view = loop {
        let view = stack.view(&id).await.unwrap();
        if view.turn == 1 && view.status.is_terminal() {
            break view;
        }
        assert!(tokio::time::Instant::now() < deadline, "turn 1 not answered: {view:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert_eq!(view.turns.len(), 2);
    let (t0, t1) = (&view.turns[0], &view.turns[1]);
    assert_eq!((t0.turn, t0.message.as_str()), (0, "Where is my parcel for order A1031?"));
    assert_eq!(t0.reply, first.reply, "turn 0's reply stays readable");
    assert!(t0.reply.as_deref().unwrap().contains("SF Express"), "{t0:?}");
    assert_eq!((t1.turn, t1.message.as_str()), (1, "Is coupon SAVE20 still valid?"));
    assert_eq!(t1.reply, view.reply, "the top level is the latest turn");
    assert!(view.reply.as_deref().unwrap().contains("SAVE20"), "{view:?}");
    assert_ne!(view.reply, first.reply);
    assert!(t1.subtasks.iter().all(|s| s.id.starts_with("t1~")), "{t1:?}");
    assert!(t0.subtasks.iter().all(|s| !s.id.contains('~')), "{t0:?}");
    assert_eq!(view.subtasks, t1.subtasks);
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_is_answered_as_a_second_turn_on_the_embedded_backend() {
    a_follow_up_is_answered_as_a_second_turn(BackendChoice::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_is_answered_as_a_second_turn_on_the_emulator() {
    let Some(backend) = emulator("turns::two turns on the emulator") else { return };
    a_follow_up_is_answered_as_a_second_turn(backend).await;
}

/// Past the idle time (a short one here) the stored `expires_at_ms` refuses a follow-up: 410 (moto
/// never expires TTL items, so the item is still there to compare).
async fn a_follow_up_past_the_idle_time_is_410(backend: BackendChoice) {
    let mut timings = swarm_core::timings::Timings::standard().clone();
    timings.conversation.idle_expiry = Duration::from_secs(2);
    let stack = LocalStack::start(StackOptions { backend, timings, ..StackOptions::default() }).await.unwrap();
    let (_, created) = stack.post_conversation("Where is my parcel for order A1031?", "C106", None).await.unwrap();
    let id = created["conversation_id"].as_str().unwrap().to_owned();
    stack.wait_finished(&id, Duration::from_secs(60)).await.unwrap();
    let stored = stack.store().get_conversation(&ConversationId::parse(&id).unwrap()).await.unwrap().unwrap();
    while now_ms() <= stored.expires_at_ms.unwrap() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = serde_json::json!({"message": "Is coupon SAVE20 still valid?", "customer_id": "C106"}).to_string();
    let (status, answer) = stack.api("POST", &format!("/conversations/{id}/messages"), Some(&body), &[]).await.unwrap();
    assert_eq!((status, answer["error"]["code"].as_str()), (410, Some("conversation_expired")), "{answer}");
    let after = stack.store().get_conversation(&ConversationId::parse(&id).unwrap()).await.unwrap().unwrap();
    assert_eq!(after, stored, "nothing written");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_past_the_idle_time_is_410_on_the_embedded_backend() {
    a_follow_up_past_the_idle_time_is_410(BackendChoice::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_past_the_idle_time_is_410_on_the_emulator() {
    let Some(backend) = emulator("turns::expiry on the emulator") else { return };
    a_follow_up_past_the_idle_time_is_410(backend).await;
}
