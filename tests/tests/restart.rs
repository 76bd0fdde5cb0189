//! A restart loses nothing on the emulator: the local stack on a named stack (`--stack`) is killed mid-run the way `kill -9` kills the process (every mapping, invocation, trigger and schedule dropped, no drain, no teardown) and started again on the same stack; every conversation accepted before the kill is answered exactly once — none lost, none aggregated twice, no count applied twice — read from the table's own stream across both runs.
//!
//! Needs `SWARM_AWS_ENDPOINT`; without it the test fails, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::time::Duration;

use swarm_core::access::CustomerLimits;
use swarm_core::domain::{ConversationId, ConversationStatus};
use swarm_core::llm::Models;
use swarm_core::time::now_ms;
use swarm_local::chaos::audit::AuditLog;
use swarm_local::{BackendChoice, EmulatorOptions, LocalStack, StackOptions};
use swarm_tests::{over_offline, with_plan};

/// Conversations accepted before the kill.
const CONVERSATIONS: usize = 10;

/// How long the restarted stack has for each conversation: the deadline (12 s at this scale)
/// plus room for a busy machine; the deadline path answers whatever the workers did not finish.
const PATIENCE: Duration = Duration::from_secs(90);

/// The table's timings × 1/10: deadline 12 s, the tasks queue's visibility timeout 36 s.
const TIME_SCALE: f64 = 0.1;

/// Three subtasks, each with a tool call.
fn three_subtasks() -> Models {
    let plan = serde_json::json!({"subtasks": [
        {"id": "w01", "instruction": "Check the status of order A1029.", "tools": ["shop__get_order"]},
        {"id": "w02", "instruction": "Check whether coupon SAVE20 can be used.", "tools": ["shop__check_coupon"]},
        {"id": "w03", "instruction": "Check the status of order A1030.", "tools": ["shop__get_order"]}
    ]});
    Models::single(Arc::new(with_plan(over_offline(), &plan.to_string())))
}

fn options(endpoint: &str, stack: &str, fresh: bool, worker_concurrency: Option<usize>) -> StackOptions {
    StackOptions {
        backend: BackendChoice::Emulator(EmulatorOptions::new(endpoint).on_stack(stack, fresh).unwrap()),
        models: Some(three_subtasks()),
        time_scale: TIME_SCALE,
        worker_concurrency,
        limits: CustomerLimits { conversations_per_minute: 100_000, ..CustomerLimits::DEFAULT },
        ..StackOptions::default()
    }
}

/// Every record of the stack's table stream, from its start (both runs), read until it answers
/// nothing three times in a row.
async fn whole_stream(stack: &LocalStack) -> AuditLog {
    let mut feed = stack.change_feed().await.unwrap();
    let mut log = AuditLog::default();
    let mut empty = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while empty < 3 {
        assert!(tokio::time::Instant::now() < deadline, "the stream was still answering records after 60 s");
        let records = feed.next_records(Duration::from_millis(500)).await.unwrap();
        if records.is_empty() {
            empty += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        } else {
            empty = 0;
        }
        for r in &records {
            log.apply(r, now_ms());
        }
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stack_killed_mid_run_and_restarted_on_the_same_stack_answers_every_accepted_conversation_exactly_once() {
    swarm_adapters::telemetry::init_with_default("warn");
    let Some(endpoint) = swarm_tests::emulator_endpoint("restart") else { return };
    let name = format!("restart-{}-{}", std::process::id(), now_ms());

    // One worker invocation at a time: a backlog is still queued when the stack dies.
    let first = LocalStack::start(options(&endpoint, &name, true, Some(1))).await.unwrap();
    assert!(first.describe_backend().contains(&format!("stack {name} created")), "{}", first.describe_backend());
    let mut accepted = Vec::new();
    for i in 0..CONVERSATIONS {
        let customer = format!("C1{:02}", i % 12);
        let (status, body) =
            first.post_conversation("Where are A1029 and A1030, and can I use SAVE20?", &customer, None).await.unwrap();
        assert_eq!(status, 202, "{body}");
        accepted.push(body["conversation_id"].as_str().unwrap().to_owned());
    }
    let store = first.store();
    first.kill().await;

    let mut open_at_kill = 0;
    for id in &accepted {
        let c = store.get_conversation(&ConversationId::from_trusted(id.clone())).await.unwrap().unwrap();
        open_at_kill += usize::from(!c.status.is_terminal());
    }
    assert!(open_at_kill > 0, "every conversation had ended before the kill: nothing was in flight");

    let second = LocalStack::start(options(&endpoint, &name, false, None)).await.unwrap();
    let backend = second.describe_backend();
    let mut views = Vec::new();
    for id in &accepted {
        views.push(second.wait_finished(id, PATIENCE).await);
    }
    let counters = second.counters().snapshot();
    let audit = whole_stream(&second).await;
    second.shutdown().await;
    // The stack outlives its processes: a third start with --fresh empties it.
    LocalStack::start(options(&endpoint, &name, true, None)).await.unwrap().shutdown().await;

    assert!(backend.contains(&format!("stack {name} reused")), "{backend}");
    assert!(
        counters.worker_invocations + counters.aggregator_invocations + counters.sweep_invocations > 0,
        "the restarted stack did nothing: {counters:?}"
    );
    for (id, view) in accepted.iter().zip(views) {
        let view = view.unwrap_or_else(|e| panic!("{id} was not answered after the restart: {e:#}"));
        assert!(view.status.is_terminal(), "{id}: {view:?}");
        let seen = audit.conversations.get(id).unwrap_or_else(|| panic!("{id} is not in the stream"));
        // A conversation none of whose subtasks began before the deadline (a backlog the restart
        // could not reach in time) ran nothing: it ends FAILED without a reply (docs/api.md),
        // never DONE with a reply about work that never ran. Every other one is answered once.
        if view.subtasks.iter().all(|s| s.started_at.is_none()) {
            assert_eq!(view.status, ConversationStatus::Failed, "{id}: nothing began: {view:?}");
            assert!(view.reply.is_none(), "{id}: nothing began, yet a reply: {view:?}");
            assert_eq!(seen.reply_writes, 0, "{id}: nothing began, yet aggregated");
        } else {
            assert!(view.reply.as_deref().is_some_and(|r| !r.is_empty()), "{id} has no reply: {view:?}");
            assert_eq!(seen.reply_writes, 1, "{id} aggregated {} times", seen.reply_writes);
        }
        assert!(seen.flips <= 1, "{id} flipped to AGGREGATING {} times", seen.flips);
        assert_eq!((seen.double_counts, seen.lost_counts, seen.dropped_ids), (0, 0, 0), "{id}: {seen:?}");
        assert!(view.subtasks.iter().all(|s| s.status.is_terminal()), "{id}: a subtask left open: {view:?}");
    }
    for ((conversation, subtask), seen) in &audit.subtasks {
        assert!(seen.results_recorded <= 1, "{conversation}/{subtask}: {} results recorded", seen.results_recorded);
    }
    eprintln!("restart: {open_at_kill} of {CONVERSATIONS} conversations open at the kill; restarted: {counters:?}");
}
