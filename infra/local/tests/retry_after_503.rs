//! Defect M5 (issue 17): a client's retry with the same `Idempotency-Key` right after a 503 — inside the planning
//! lease the failed request took — gets a conversation that moves on (its subtasks sent, its deadline armed, not
//! `FAILED`), never a 202 for one nothing moves. Runs on the embedded store and on DynamoDB (the emulator).

#[macro_use]
mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use async_trait::async_trait;
use orchestrator::core::{CreateRequest, Started};
use orchestrator::{Orchestrator, OrchestratorSettings};
use serde_json::json;
use swarm_adapters::embedded::{InMemoryQueue, QueueSettings};
use swarm_core::domain::{ConversationStatus, SubtaskStatus, TaskMessage};
use swarm_core::ports::{ConversationStore, QueueError, StoreOp, TaskQueue, ToolError};
use swarm_core::roles::{RoleTable, TaskQueues};
use swarm_testing::{ScriptedModel, StaticTools, text_response};

type Store = Arc<dyn ConversationStore>;

contract_tests!(
    a_plan_write_whose_answer_was_lost_is_read_back_sent_and_answered_202,
    a_retry_inside_the_lease_of_a_creator_killed_before_enqueueing_sends_the_subtasks,
    a_retry_inside_the_lease_after_a_503_from_enqueueing_sends_the_subtasks,
    a_retry_inside_the_lease_after_a_503_from_arming_the_deadline_plans_the_conversation,
);

/// The tasks queue with SQS throttling the next `runs` sends of `Run` and `deadlines` sends of `Deadline` messages
/// (after the SDK's retries); every send it lets through is kept with its delay.
struct Throttled {
    inner: InMemoryQueue,
    runs: AtomicU32,
    deadlines: AtomicU32,
    sent: Mutex<Vec<(TaskMessage, u32)>>,
}

#[async_trait]
impl TaskQueue for Throttled {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn send(&self, messages: &[TaskMessage], delay_seconds: u32) -> Result<(), QueueError> {
        let take = |n: &AtomicU32| n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        let throttled = messages.iter().any(|m| match m {
            TaskMessage::Run { .. } => take(&self.runs),
            TaskMessage::Deadline { .. } => take(&self.deadlines),
            _ => false,
        });
        if throttled {
            return Err(QueueError::Transient("RequestThrottled (injected)".into()));
        }
        TaskQueue::send(&self.inner, messages, delay_seconds).await?;
        let mut sent = self.sent.lock().map_err(|_| QueueError::Permanent("lock poisoned".into()))?;
        sent.extend(messages.iter().map(|m| (m.clone(), delay_seconds)));
        Ok(())
    }

    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        TaskQueue::change_visibility(&self.inner, receipt_handle, seconds).await
    }
}

struct Rig {
    store: Store,
    tasks: InMemoryQueue,
    queue: Arc<Throttled>,
    core: Orchestrator,
}

fn rig(store: Store, run_sends_failing: u32, deadline_sends_failing: u32) -> Rig {
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Check order A1029", "tools": ["shop__get_order"]}]}"#;
    let tasks = InMemoryQueue::new(QueueSettings::default());
    let queue = Arc::new(Throttled {
        inner: tasks.clone(),
        runs: AtomicU32::new(run_sends_failing),
        deadlines: AtomicU32::new(deadline_sends_failing),
        sent: Mutex::new(Vec::new()),
    });
    let model = Arc::new(ScriptedModel::new((0..3).map(|_| Ok(text_response(plan)))));
    let catalogue = StaticTools::named(&["shop__get_order"], "{name} tool", json!({"type": "object"}))
        .only_for_role("planner")
        .on_any_call(|_, _| Err(ToolError::Permanent("the planner calls no tools".into())));
    let core = Orchestrator::new(
        store.clone(),
        TaskQueues::new(queue.clone() as Arc<dyn TaskQueue>),
        model,
        Arc::new(catalogue),
        RoleTable::demo(),
        OrchestratorSettings::default(),
    );
    Rig { store, tasks, queue, core }
}

fn request() -> CreateRequest {
    CreateRequest {
        message: "where is A1029".into(),
        customer_id: "C104".into(),
        idempotency_key: Some("client-key-1".into()),
    }
}

/// The `Run` messages a worker can receive now.
async fn runs_sent(q: &InMemoryQueue) -> Result<Vec<TaskMessage>> {
    let mut out = Vec::new();
    for d in q.receive(10, Duration::ZERO).await? {
        let m: TaskMessage = serde_json::from_str(&d.body)?;
        if matches!(m, TaskMessage::Run { .. }) {
            out.push(m);
        }
    }
    Ok(out)
}

/// Enqueueing fails once (503 "retry with the same Idempotency-Key"); the retry comes at once, well inside the
/// 35 s planning lease the failed request took, and finds the conversation `RUNNING` with `w01` never sent.
async fn a_retry_inside_the_lease_after_a_503_from_enqueueing_sends_the_subtasks(store: Store) -> Result<()> {
    let r = rig(store, 1, 0);
    let first = r.core.create(request()).await.err().context("the throttled enqueue must answer 503")?;
    ensure!(first.status() == 503, "{first}");
    ensure!(first.recorded().map(|(_, started)| started) == Some(Started::Yes), "the plan is stored: {first}");
    let retry = r.core.create(request()).await?;
    ensure!(!retry.new, "the retry is answered with the same conversation");
    let id = retry.conversation_id;
    let conv = r.store.get_conversation(&id).await?.context("conversation missing")?;
    let subtasks = r.store.list_subtasks(&id).await?;
    let sent = runs_sent(&r.tasks).await?;
    assert_eq!(conv.status, ConversationStatus::Running);
    assert_eq!(
        subtasks.iter().map(|s| (s.subtask.id.as_str(), s.status)).collect::<Vec<_>>(),
        [("w01", SubtaskStatus::Queued)]
    );
    assert_eq!(
        sent,
        vec![TaskMessage::run(&id, &"w01".into())],
        "202 for a conversation whose only subtask nobody will ever send: it fails at the deadline"
    );
    Ok(())
}

/// Arming the deadline fails once (503); the retry at once, inside the failed request's planning lease, gets the
/// conversation planned — its deadline armed and `w01` sent — not one already `FAILED` ("could not schedule").
async fn a_retry_inside_the_lease_after_a_503_from_arming_the_deadline_plans_the_conversation(
    store: Store,
) -> Result<()> {
    let r = rig(store, 0, 1);
    let first = r.core.create(request()).await.err().context("the throttled deadline must answer 503")?;
    ensure!(first.status() == 503, "{first}");
    ensure!(first.recorded().map(|(_, started)| started) == Some(Started::No), "nothing was planned: {first}");
    let retry = r.core.create(request()).await.map_err(|e| anyhow::anyhow!("retry refused: {} {e}", e.status()))?;
    let id = retry.conversation_id;
    let conv = r.store.get_conversation(&id).await?.context("conversation missing")?;
    assert_eq!(
        (conv.status, conv.error.as_deref()),
        (ConversationStatus::Running, None),
        "the retry the 503 asked for must get a planned conversation"
    );
    assert_eq!(runs_sent(&r.tasks).await?, vec![TaskMessage::run(&id, &"w01".into())], "w01 sent");
    let deadlines = r
        .queue
        .sent
        .lock()
        .map_err(|_| anyhow::anyhow!("lock poisoned"))?
        .iter()
        .filter(|(m, _)| *m == TaskMessage::Deadline { conversation_id: id.clone(), turn: 0 })
        .map(|(_, delay)| *delay)
        .collect::<Vec<_>>();
    // The deadline path's first run is when the retry's planning lease (35 s) ends; it re-arms for the deadline.
    ensure!(
        deadlines.len() == 1 && (30..=36).contains(&deadlines[0]),
        "one deadline message armed about the planning lease (35 s) out: {deadlines:?}"
    );
    Ok(())
}

/// The plan's write is applied and its answer lost (a 500 or an attempt timeout after DynamoDB applied
/// it): the orchestrator reads the conversation back, finds its own flip, sends `w01`, writes the
/// marker and answers 202 — not a 503 `unknown` for a conversation that is stored.
async fn a_plan_write_whose_answer_was_lost_is_read_back_sent_and_answered_202(store: Store) -> Result<()> {
    let (lossy, store) = common::lossy::losing(&store);
    lossy.lose(StoreOp::StartRun)?;
    let r = rig(store, 0, 0);
    let created = r.core.create(request()).await.map_err(|e| anyhow::anyhow!("{} {e}", e.status()))?;
    let id = created.conversation_id;
    let conv = r.store.get_conversation(&id).await?.context("conversation missing")?;
    ensure!(conv.status == ConversationStatus::Running, "{:?}", conv.status);
    ensure!(conv.queued_at_ms.is_some(), "sent and marked");
    assert_eq!(runs_sent(&r.tasks).await?, vec![TaskMessage::run(&id, &"w01".into())], "w01 sent once");
    Ok(())
}

/// Issue 18 (found by the chaos run's verdict "a 202 whose conversation ended with no subtask ever
/// begun"): the creator is killed after `start_run`, before it enqueues (no 503, no lease handed
/// back: the client sees no answer). The client's retry comes at once, inside the dead creator's
/// planning lease, and must get `w01` sent — not a 202 for a conversation nobody sends.
async fn a_retry_inside_the_lease_of_a_creator_killed_before_enqueueing_sends_the_subtasks(store: Store) -> Result<()> {
    use swarm_core::faults::{self, CrashPoint, FaultPlan, Invocation};
    struct At;
    impl FaultPlan for At {
        fn crash(&self, point: CrashPoint) -> bool {
            point == CrashPoint::OrchestratorAfterStartRun
        }
    }
    let r = rig(store, 0, 0);
    let invocation = Invocation::new(Arc::new(At));
    let died = tokio::select! {
        _ = faults::with_plan(invocation.clone(), r.core.create(request())) => false,
        () = invocation.killed() => true,
    };
    ensure!(died, "the creator dies after start_run");
    let retry = r.core.create(request()).await?;
    ensure!(!retry.new, "the retry is answered with the same conversation");
    let id = retry.conversation_id;
    let conv = r.store.get_conversation(&id).await?.context("conversation missing")?;
    assert_eq!(conv.status, ConversationStatus::Running);
    assert_eq!(
        runs_sent(&r.tasks).await?,
        vec![TaskMessage::run(&id, &"w01".into())],
        "202 inside the dead creator's lease, and w01 never sent"
    );
    Ok(())
}
