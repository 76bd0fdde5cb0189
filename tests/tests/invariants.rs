//! The design's invariants on whole conversations: exactly-once accounting, one aggregation, no hang, dependency order, bad input changes nothing, the concurrency cap.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::time::Duration;

use swarm_core::domain::{ConversationId, ConversationStatus, FailureKind, SubtaskStatus};
use swarm_core::llm::Models;
use swarm_core::timings::Timings;
use swarm_local::{LocalStack, Queue, StackOptions};
use swarm_tests::{case, failing_to_begin, insufficient_balance, over_offline, unmet_expectations, with_plan};

async fn ask(stack: &LocalStack, message: &str, customer: &str) -> swarm_core::view::ConversationView {
    let (status, body) = stack.post_conversation(message, customer, None).await.unwrap();
    assert_eq!(status, 202, "{body}");
    let id = body["conversation_id"].as_str().unwrap().to_owned();
    stack.wait_finished(&id, Duration::from_secs(60)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_delivery_counts_each_subtask_once_and_aggregates_once() {
    let case = case("q11");
    let single = Arc::new(over_offline());
    let stack =
        LocalStack::start(StackOptions { models: Some(Models::single(single.clone())), ..StackOptions::default() })
            .await
            .unwrap();
    let baseline = ask(&stack, &case.query, &case.customer_id).await;
    stack.shutdown().await;

    let doubled = Arc::new(over_offline());
    let stack = LocalStack::start(StackOptions {
        models: Some(Models::single(doubled.clone())),
        duplicate_deliveries: true,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let view = ask(&stack, &case.query, &case.customer_id).await;
    assert!(unmet_expectations(&case, &view).is_empty(), "{:?}", unmet_expectations(&case, &view));
    assert_eq!(view.progress.total, 5);
    assert_eq!(view.progress.finished, 5, "each subtask counted exactly once");
    assert!(view.subtasks.iter().all(|s| s.status == SubtaskStatus::Succeeded));
    let counters = stack.counters();
    // Batches of up to `worker.batch_size` messages: every message reached the worker twice.
    assert!(
        counters.worker_records.load(std::sync::atomic::Ordering::SeqCst) >= 10,
        "every message was delivered twice"
    );
    assert!(
        counters.aggregator_invocations.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "the stream trigger fired twice"
    );
    let (_, work_single, reply_single) = single.counts();
    let (_, work_doubled, reply_doubled) = doubled.counts();
    assert_eq!(reply_single, 1);
    assert_eq!(reply_doubled, 1, "the aggregator ran once despite two triggers");
    assert_eq!(work_doubled, work_single, "a duplicate delivery never re-runs LLM work");
    assert_eq!(baseline.subtasks.len(), view.subtasks.len());
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_subtask_gives_a_degraded_reply_without_its_error_text() {
    let model = over_offline().fail_work_on("SAVE20", insufficient_balance());
    let stack =
        LocalStack::start(StackOptions { models: Some(Models::single(Arc::new(model))), ..StackOptions::default() })
            .await
            .unwrap();
    let view = ask(&stack, "我的订单 A1029 现在什么状态？另外优惠券 SAVE20 还能用吗？", "C104").await;
    assert_eq!(view.status, ConversationStatus::Done);
    let failed: Vec<_> = view.subtasks.iter().filter(|s| s.status == SubtaskStatus::Failed).collect();
    assert_eq!(failed.len(), 1, "{:?}", view.subtasks);
    assert_eq!(
        failed[0].error.as_deref(),
        Some(FailureKind::ModelFailed.customer_message()),
        "our words, not the provider's"
    );
    assert_eq!(failed[0].error_code, Some(FailureKind::ModelFailed));
    let reply = view.reply.unwrap();
    assert!(reply.contains("A1029"), "the other branch is answered: {reply}");
    assert!(reply.to_lowercase().contains("could not"), "says plainly what could not be done: {reply}");
    assert!(
        !reply.contains("Insufficient") && !reply.contains("402"),
        "error text never passed on as an answer: {reply}"
    );
    stack.shutdown().await;
}

fn chain_plan() -> String {
    serde_json::json!({"subtasks": [
        {"id": "w01", "instruction": "List the customer's orders.", "tools": ["shop__list_customer_orders"]},
        {"id": "w02", "instruction": "Check the status of order A1003.", "tools": ["shop__get_order"], "depends_on": ["w01"]},
        {"id": "w03", "instruction": "Where is the parcel of order A1003?", "tools": ["shop__track_shipment"], "depends_on": ["w02"]},
        {"id": "w04", "instruction": "Check whether coupon SAVE20 can be used.", "tools": ["shop__check_coupon"], "depends_on": ["w01", "w02"]}
    ]})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependency_chain_runs_in_order() {
    let model = with_plan(over_offline(), &chain_plan());
    let stack =
        LocalStack::start(StackOptions { models: Some(Models::single(Arc::new(model))), ..StackOptions::default() })
            .await
            .unwrap();
    let view = ask(&stack, "Where is my latest order A1003 and can I use SAVE20?", "C102").await;
    assert_eq!(view.status, ConversationStatus::Done);
    assert!(view.subtasks.iter().all(|s| s.status == SubtaskStatus::Succeeded), "{:?}", view.subtasks);
    let id = ConversationId::parse(&view.conversation_id).unwrap();
    let records = stack.store().list_subtasks(&id).await.unwrap();
    let at = |sid: &str| records.iter().find(|r| r.subtask.id == sid).unwrap().clone();
    for (parent, child) in [("w01", "w02"), ("w02", "w03"), ("w01", "w04"), ("w02", "w04")] {
        let (p, c) = (at(parent), at(child));
        assert!(c.started_at_ms.unwrap() >= p.finished_at_ms.unwrap(), "{child} started before {parent} finished");
        assert_eq!(c.attempts, 1, "{child} was enqueued exactly once");
    }
    assert!(view.reply.unwrap().contains("ZTO"), "the dependent's answer reached the reply");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependents_of_a_failed_subtask_are_skipped_not_hung() {
    let model =
        with_plan(over_offline(), &chain_plan()).fail_work_on("List the customer's orders", insufficient_balance());
    let stack =
        LocalStack::start(StackOptions { models: Some(Models::single(Arc::new(model))), ..StackOptions::default() })
            .await
            .unwrap();
    let view = ask(&stack, "Where is my latest order and can I use SAVE20?", "C102").await;
    assert_eq!(view.status, ConversationStatus::Done);
    let status = |sid: &str| view.subtasks.iter().find(|s| s.id == sid).unwrap().status;
    assert_eq!(status("w01"), SubtaskStatus::Failed);
    for s in ["w02", "w03", "w04"] {
        assert_eq!(status(s), SubtaskStatus::Skipped, "{s}");
    }
    assert_eq!(view.progress.finished, 4);
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_4xx_and_writes_nothing() {
    let stack = LocalStack::start(StackOptions::default()).await.unwrap();
    let long = "x".repeat(8001);
    let cases: Vec<(Option<String>, &str)> = vec![
        (Some(r#"{"message": "", "customer_id": "C104"}"#.into()), "empty_message"),
        (Some(r#"{"message": "   ", "customer_id": "C104"}"#.into()), "empty_message"),
        (Some(serde_json::json!({"message": long, "customer_id": "C104"}).to_string()), "message_too_long"),
        (Some(r#"{"message": "hi", "customer_id": "C104""#.into()), "bad_json"),
        (Some("not json at all".into()), "bad_json"),
        (None, "bad_json"),
        (Some(r#"{"customer_id": "C104"}"#.into()), "missing_message"),
        (Some(r#"{"message": "where is A1029"}"#.into()), "missing_customer_id"),
        (Some(r#"{"message": "hi", "customer_id": "C1#META"}"#.into()), "bad_customer_id"),
    ];
    for (body, code) in cases {
        let (status, answer) = stack.api("POST", "/conversations", body.as_deref(), &[]).await.unwrap();
        assert_eq!(status, 400, "{code}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        assert!(!answer["error"]["message"].as_str().unwrap_or("").is_empty());
    }
    let (status, answer) =
        stack.api("GET", "/conversations/01900000-0000-7000-8000-000000000000", None, &[]).await.unwrap();
    assert_eq!(status, 404, "{answer}");
    let (status, _) = stack.api("GET", "/conversations/not-a-uuid", None, &[]).await.unwrap();
    assert_eq!(status, 404);
    let (status, answer) = stack.api("DELETE", "/conversations", None, &[]).await.unwrap();
    assert_eq!(status, 405, "{answer}");
    assert_eq!(answer["error"]["code"], "method_not_allowed");
    assert_eq!(stack.conversation_count().await.unwrap(), 0, "no item written");
    assert_eq!(stack.queue_depth(Queue::Tasks).await.unwrap().total(), 0, "no message sent");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_concurrency_cap_is_honoured() {
    let plan = serde_json::json!({"subtasks": (1..=12).map(|i| serde_json::json!({
        "id": format!("w{i:02}"), "instruction": format!("Check whether SKU-10{i:02} is in stock."), "tools": ["shop__get_product"]
    })).collect::<Vec<_>>()})
    .to_string();
    let model = with_plan(over_offline(), &plan).work_delay(Duration::from_millis(40));
    let stack = LocalStack::start(StackOptions {
        models: Some(Models::single(Arc::new(model))),
        worker_concurrency: Some(3),
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let view = ask(&stack, "stock check", "C105").await;
    assert_eq!(view.progress.finished, 12);
    let max = stack.counters().max_concurrent_workers.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(max, 3, "at most (and, under load, exactly) 3 concurrent worker invocations");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversation_past_its_deadline_is_aggregated_with_what_it_has() {
    let model = over_offline().stall_work_on("SAVE20", Duration::from_secs(30));
    let mut timings = Timings::standard().clone();
    // A stalled subtask stops 5 s (the conversation margin) before this deadline, after one round
    // started (5 s needed), and records what it has.
    timings.conversation.deadline = Duration::from_secs(12);
    let stack = LocalStack::start(StackOptions {
        models: Some(Models::single(Arc::new(model))),
        timings,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let view = ask(&stack, "我的订单 A1029 现在什么状态？另外优惠券 SAVE20 还能用吗？", "C104").await;
    assert!(started.elapsed() < Duration::from_secs(20), "the deadline path finished it, not the stalled worker");
    assert_eq!(view.status, ConversationStatus::Done);
    let coupon = view.subtasks.iter().find(|s| s.instruction.contains("SAVE20")).unwrap();
    assert_eq!(coupon.status, SubtaskStatus::Failed);
    assert_eq!(coupon.error.as_deref(), Some(FailureKind::DeadlinePassed.customer_message()));
    assert_eq!(coupon.error_code, Some(FailureKind::DeadlinePassed));
    let reply = view.reply.unwrap();
    assert!(reply.contains("A1029"), "{reply}");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_that_keeps_failing_reaches_the_dlq_and_is_recorded_failed() {
    // Time at 1/240: the failing message comes back after the tasks queue's visibility
    // timeout, 720 s → 3 s, no sooner. The standard deadline (120 s → 0.5 s) would fail the
    // subtask long before two visibility timeouts passed, so this drill lifts it (3600 s → 15 s).
    let mut timings = Timings::standard().clone();
    timings.queues.max_receive_count = 2;
    timings.conversation.deadline = Duration::from_secs(3600);
    let stack = LocalStack::start(StackOptions {
        wrap_store: Some(Arc::new(|inner| failing_to_begin(inner, "w02"))),
        timings,
        time_scale: 1.0 / 240.0,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let view = ask(&stack, "我的订单 A1029 现在什么状态？另外优惠券 SAVE20 还能用吗？", "C104").await;
    assert_eq!(view.status, ConversationStatus::Done);
    let w02 = view.subtasks.iter().find(|s| s.id == "w02").unwrap();
    assert_eq!(w02.status, SubtaskStatus::Failed);
    assert_eq!(w02.error.as_deref(), Some(FailureKind::DeadLetter.customer_message()));
    assert_eq!(w02.error_code, Some(FailureKind::DeadLetter));
    assert_eq!(view.progress.finished, 2);
    assert_eq!(
        stack.queue_depth(Queue::Tasks).await.unwrap().total(),
        1,
        "only the (not yet due) deadline message is left"
    );
    assert_eq!(
        stack.queue_depth(Queue::TasksDeadLetters).await.unwrap().total(),
        0,
        "the DLQ consumer acknowledged it"
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_short_of_time_hands_back_and_resumes_without_repeating_tool_calls() {
    // Invocation of 5 s minus the 3 s safety margin leaves 2 s; a round needs 1 s
    // to start and takes 1.2 s, so the second round no longer fits the first attempt.
    let model = over_offline().work_delay(Duration::from_millis(1200));
    let mut timings = Timings::standard().clone();
    timings.worker.timeout = Duration::from_secs(5);
    timings.worker.min_round = Duration::from_secs(1);
    timings.worker.handback_delay = Duration::from_secs(1);
    let stack = LocalStack::start(StackOptions {
        models: Some(Models::single(Arc::new(model))),
        timings,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let view = ask(&stack, "What is the status of order A1029?", "C104").await;
    assert_eq!(view.status, ConversationStatus::Done);
    assert_eq!(view.subtasks.len(), 1);
    let s = &view.subtasks[0];
    assert_eq!(s.status, SubtaskStatus::Succeeded, "{s:?}");
    assert_eq!(s.tools_used, vec!["shop__get_order".to_owned()], "the finished tool call was not repeated");
    let id = ConversationId::parse(&view.conversation_id).unwrap();
    let rec = stack.store().get_subtask(&id, &s.id.as_str().into()).await.unwrap().unwrap();
    assert_eq!(rec.attempts, 2, "handed back once, resumed once");
    assert!(rec.checkpoint.is_none(), "the checkpoint is cleared with the result");
    assert!(view.reply.unwrap().contains("A1029"));
    stack.shutdown().await;
}
