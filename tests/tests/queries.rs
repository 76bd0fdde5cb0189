//! Every customer message of the cases runs through the local stack with the offline model and meets its expectations.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::time::Duration;

use swarm_local::{LocalStack, StackOptions};
use swarm_tests::{Case, cases, unmet_expectations};

async fn run_case(case: &Case) -> (LocalStack, swarm_core::view::ConversationView) {
    let stack = LocalStack::start(StackOptions::default()).await.expect("stack starts");
    let (status, body) = stack.post_conversation(&case.query, &case.customer_id, None).await.expect("post");
    assert_eq!(status, 202, "{}: {body}", case.id);
    let id = body["conversation_id"].as_str().expect("id").to_owned();
    assert_eq!(body["status_url"], format!("/conversations/{id}"));
    let view = stack.wait_finished(&id, Duration::from_secs(60)).await.expect("finishes");
    (stack, view)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_message_meets_its_expectations() {
    let mut failures = Vec::new();
    for case in cases() {
        let (stack, view) = run_case(&case).await;
        let problems = unmet_expectations(&case, &view);
        let reply = view.reply.clone().unwrap_or_default();
        if !reply.contains("offline model") {
            failures.push(format!("{}: reply does not say it came from the offline model", case.id));
        }
        if !problems.is_empty() {
            failures.push(format!("{}: {}\nreply: {reply}", case.id, problems.join("; ")));
        }
        stack.shutdown().await;
    }
    assert!(failures.is_empty(), "{} case(s) fall short:\n{}", failures.len(), failures.join("\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refund_request_moves_money_once_even_when_sent_again() {
    let case = swarm_tests::case("q04");
    let stack =
        LocalStack::start(StackOptions { duplicate_deliveries: true, ..StackOptions::default() }).await.unwrap();
    // The same request three times: twice with one Idempotency-Key, once without.
    let (_, first) = stack.post_conversation(&case.query, &case.customer_id, Some("refund-1")).await.unwrap();
    let (_, again) = stack.post_conversation(&case.query, &case.customer_id, Some("refund-1")).await.unwrap();
    assert_eq!(first["conversation_id"], again["conversation_id"], "same key, same conversation");
    let id = first["conversation_id"].as_str().unwrap().to_owned();
    let view = stack.wait_finished(&id, Duration::from_secs(60)).await.unwrap();
    assert!(unmet_expectations(&case, &view).is_empty(), "{:?}", unmet_expectations(&case, &view));
    // Every refund waits for a person (the demo's consent): nothing moved yet.
    assert!(stack.shop.refunds().await.unwrap().is_empty());
    assert_eq!(view.approvals.len(), 1, "{view:?}");
    let (status, _) = stack.decide(&view.approvals[0].approval_id, "approve").await.unwrap();
    assert_eq!(status, 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while stack.shop.refunds().await.unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the approved refund never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, third) = stack.post_conversation(&case.query, &case.customer_id, None).await.unwrap();
    let third_id = third["conversation_id"].as_str().unwrap().to_owned();
    assert_ne!(third_id, id);
    stack.wait_finished(&third_id, Duration::from_secs(60)).await.unwrap();
    let refunds: Vec<_> = stack.shop.refunds().await.unwrap().into_iter().filter(|r| r.order_id == "A1016").collect();
    assert_eq!(refunds.len(), 1, "exactly one refund on A1016: {refunds:?}");
    assert!(refunds[0].amount_cents <= 79_700 && refunds[0].amount_cents > 0, "{refunds:?}");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refund_outside_policy_moves_no_money_and_says_why() {
    let case = swarm_tests::case("q06");
    let (stack, view) = run_case(&case).await;
    assert!(unmet_expectations(&case, &view).is_empty(), "{:?}", unmet_expectations(&case, &view));
    let refunds = stack.shop.refunds().await.unwrap();
    assert!(refunds.is_empty(), "no refund may happen: {refunds:?}");
    let reply = view.reply.unwrap_or_default().to_lowercase();
    assert!(reply.contains("not delivered") || reply.contains("not made") || reply.contains("refused"), "{reply}");
    stack.shutdown().await;
}
