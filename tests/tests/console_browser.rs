//! The live console in a real browser: the app `swarm-local serve` serves (API, console, CORS) on a free port over the local stack with the offline model and an operator token, and `tests/browser/console.test.mjs` driving Debian's chromium through playwright-core against it — a conversation drawn live as it runs (a plan with dependencies, a failed subtask and the one it skips), a refund approved on the page — then the shop's ledger: the refund ran exactly once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use orchestrator::api::{AllowedOrigins, TokenTable};
use orchestrator::{Auth, OperatorAuth};
use serde_json::Value;
use swarm_core::domain::Usage;
use swarm_core::llm::Models;
use swarm_core::ports::{ChatMessage, ChatModel, ChatRequest, ChatResponse, LlmError, Purpose};
use swarm_local::{LocalStack, StackOptions};
use swarm_offline::OfflineModel;
use swarm_testing::text_response;

const OPERATOR: &str = "ops-0123456789abcdef";

/// The plan of the conversation the page watches (its message carries [`GRAPH`]): an order and its
/// parcel after it, a coupon, a product lookup that fails, and what depends on it (skipped).
const PLAN: &str = r#"{"subtasks": [
  {"id": "w01", "instruction": "Check the status of order A1029.", "tools": ["shop__get_order"]},
  {"id": "w02", "instruction": "Where is the parcel of order A1029?", "tools": ["shop__track_shipment"], "depends_on": ["w01"]},
  {"id": "w03", "instruction": "Check whether coupon SAVE20 can be used.", "tools": ["shop__check_coupon"]},
  {"id": "w04", "instruction": "Find when the sold-out keyboard KB-87 is back in stock.", "tools": ["shop__get_product"]},
  {"id": "w05", "instruction": "Say whether SAVE20 applies to keyboard KB-87.", "tools": ["shop__check_coupon"], "depends_on": ["w03", "w04"]}
]}"#;
/// What marks the watched conversation's message (the refund's is planned by the offline model).
const GRAPH: &str = "Can I still use SAVE20?";
/// What marks the subtask whose model call fails (permanently, with a provider's text the page must not show).
const FAILS: &str = "back in stock";

/// The offline model with [`PLAN`] for the watched conversation and a failure for [`FAILS`],
/// reporting tokens and a cost per call (the offline model reports none) so the page has usage to show.
struct Console(OfflineModel);

#[async_trait]
impl ChatModel for Console {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let asks = |marker: &str| {
            request.messages.iter().any(|m| matches!(m, ChatMessage::User { content } if content.contains(marker)))
        };
        let mut response = match request.purpose {
            Purpose::Plan if asks(GRAPH) => text_response(PLAN),
            Purpose::Work if asks(FAILS) => {
                return Err(LlmError::Permanent { status: 400, message: "provider says: secret internals".into() });
            }
            _ => self.0.complete(request).await?,
        };
        response.usage = Usage {
            prompt_tokens: Some(412),
            completion_tokens: Some(58),
            cached_tokens: Some(0),
            cost_usd: Some(0.00021),
        };
        Ok(response)
    }
    fn label(&self) -> String {
        "offline model with a scripted plan".into()
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Debian's chromium (/usr/bin/chromium) and `npm ci` in tests/browser; infra/test.sh runs it as its own step"]
async fn the_console_draws_a_conversation_live_and_an_approval_decided_on_it_refunds_once() {
    let models = Models::single(Arc::new(Console(OfflineModel::new())));
    let stack = LocalStack::start(StackOptions { models: Some(models), time_scale: 0.1, ..StackOptions::default() })
        .await
        .unwrap();
    let operators = TokenTable::operators(vec![TokenTable::entry(&format!("{OPERATOR}=alice")).unwrap()]).unwrap();
    let app = swarm_local::console::app(
        &stack,
        Auth::None,
        OperatorAuth::Tokens(Arc::new(operators)),
        &AllowedOrigins::defaults(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let shots = root().join("target/console");
    let started = Instant::now();
    let mut node = Command::new(std::env::var("SWARM_NODE").unwrap_or_else(|_| "node".into()));
    node.arg("console.test.mjs")
        .current_dir(root().join("tests/browser"))
        .env("SWARM_CONSOLE_BASE", &base)
        .env("SWARM_CONSOLE_OPERATOR_TOKEN", OPERATOR)
        .env("SWARM_CONSOLE_SHOTS", &shots);
    let out = tokio::task::spawn_blocking(move || node.output()).await.unwrap().expect("running node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "the console checks failed after {:?}:\n{stdout}\n{stderr}", started.elapsed());
    assert!(stdout.contains("all console checks passed"), "{stdout}");
    let result: Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("console-result "))
        .map(|json| serde_json::from_str(json).unwrap())
        .expect("the script's result line");

    // The approval decided on the page ran the refund once: one ledger entry for the order, its
    // approval executed and decided by the operator whose token the page sent.
    let refunds = stack.shop.refunds().await.unwrap();
    let a1033: Vec<_> = refunds.iter().filter(|r| r.order_id == "A1033").collect();
    assert_eq!(a1033.len(), 1, "one refund of A1033: {refunds:?}");
    assert_eq!(a1033[0].amount_cents, 187_400);
    assert_eq!(refunds.len(), 1, "no other refund: {refunds:?}");
    let approval = stack.store().get_approval(result["approval"].as_str().unwrap()).await.unwrap().unwrap();
    assert_eq!(approval.status, swarm_core::approval::ApprovalStatus::Executed);
    assert_eq!(approval.decided_by.as_deref(), Some("alice"));
    assert_eq!(approval.conversation_id.to_string(), result["refund"].as_str().unwrap());
    for shot in ["console-conversation.png", "console-approval-waiting.png", "console-approval-decided.png"] {
        assert!(std::fs::metadata(shots.join(shot)).unwrap().len() > 10_000, "{shot} written");
    }
    server.abort();
    stack.shutdown().await;
}
