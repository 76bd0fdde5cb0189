//! The whole stack with IAM enforced on the emulator: every function signs with its own IAM user (its role's policies from template.yaml), and a conversation with an approved refund runs through the orchestrator, the refund worker, the approvals API and the aggregator, the refund once.
//!
//! Needs `SWARM_AWS_IAM_ENDPOINT` (`MOTO_IAM=1 infra/aws/moto.sh start` on a port of its own); without it
//! the test fails and says so, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::io::Write as _;
use std::time::Duration;

use swarm_core::domain::{ConversationStatus, SubtaskStatus};
use swarm_local::{BackendChoice, EmulatorOptions, LocalStack, StackOptions};

const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_refund_runs_once_with_every_function_signing_as_itself() {
    let test = "iam_stack::an_approved_refund_runs_once_with_every_function_signing_as_itself";
    let endpoint = match std::env::var("SWARM_AWS_IAM_ENDPOINT") {
        Ok(e) if !e.trim().is_empty() => e.trim().to_owned(),
        _ if std::env::var("SWARM_SKIP_AWS").as_deref() == Ok("1") => {
            let _ =
                writeln!(std::io::stderr(), "!!!!!!!! SKIPPED {test}: SWARM_SKIP_AWS=1 and no SWARM_AWS_IAM_ENDPOINT");
            return;
        }
        _ => panic!("{test} needs SWARM_AWS_IAM_ENDPOINT (MOTO_IAM=1 infra/aws/moto.sh start), or SWARM_SKIP_AWS=1"),
    };
    swarm_adapters::telemetry::init_with_default("warn");
    let stack = LocalStack::start(StackOptions {
        backend: BackendChoice::Emulator(EmulatorOptions::new(endpoint).with_iam(true)),
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let described = stack.describe_backend();
    let (status, body) = stack.post_conversation("Please refund order A1033.", "C108", None).await.unwrap();
    assert_eq!(status, 202, "{body}");
    let id = body["conversation_id"].as_str().unwrap().to_owned();
    let asked = stack.wait_finished(&id, PATIENCE).await;
    let approval = asked.as_ref().ok().and_then(|v| v.approvals.first()).map(|a| a.approval_id.clone());
    let decided = match &approval {
        Some(approval) => Some(stack.decide(approval, "approve").await),
        None => None,
    };
    // The approved refund runs on the refund queue; the conversation shows it done.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut refunds = Vec::new();
    while tokio::time::Instant::now() < deadline {
        refunds = stack.shop.refunds().await.unwrap();
        if !refunds.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let view = stack.view(&id).await;
    stack.shutdown().await;

    assert!(described.contains("IAM enforced"), "{described}");
    let asked = asked.unwrap();
    assert_eq!(asked.status, ConversationStatus::Done, "{asked:?}");
    let refund = asked.subtasks.iter().find(|s| s.effects.iter().any(|e| e.tool == "shop__refund")).unwrap();
    assert_eq!(refund.status, SubtaskStatus::AwaitingApproval, "{asked:?}");
    let (code, answer) = decided.expect("an approval was asked").unwrap();
    assert_eq!((code, answer["approval"]["status"].as_str()), (200, Some("approved")), "{answer}");
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    let view = view.unwrap();
    assert!(view.approvals.iter().all(|a| a.status != swarm_core::approval::ApprovalStatus::Pending), "{view:?}");
}
