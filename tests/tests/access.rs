//! Who may do what, through the whole local stack: the demo shop answers the gateway only, a customer past their conversations per minute gets 429 on the Lambda path, on `serve`'s router and from a second orchestrator on the same table (embedded and emulator backends), and a failed subtask shows our words — never a provider's or the gateway's text.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use orchestrator::{Auth, Orchestrator, OrchestratorSettings};
use serde_json::{Value, json};
use swarm_adapters::embedded::{InMemoryQueue, QueueSettings};
use swarm_core::access::{CustomerLimits, RateWindow};
use swarm_core::domain::{ConversationStatus, FailureKind, SubtaskStatus, now_ms};
use swarm_core::llm::Models;
use swarm_core::ports::TaskQueue;
use swarm_core::ports::{LlmError, ToolContext, ToolError, ToolGateway, ToolOutput, ToolSpec};
use swarm_core::roles::{RoleTable, TaskQueues};
use swarm_local::{BackendChoice, EmulatorOptions, Function, LocalStack, StackOptions, Wraps};
use swarm_testing::StaticTools;
use swarm_tests::{ScriptedModel, emulator_endpoint, over_offline, text_response, with_plan};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_stacks_shop_refuses_a_direct_call_and_its_ledger_is_unchanged() {
    let stack = LocalStack::start(StackOptions::default()).await.unwrap();
    let http = reqwest::Client::new();
    let refund = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "refund", "arguments": {"customer_id": "C103", "order_id": "A1016", "idempotency_key": "k1"}}});
    for authorization in [None, Some("Bearer 00000000000000000000000000000000deadbeef")] {
        let mut request = http
            .post(&stack.shop_url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-swarm-customer-id", "C103")
            .header("x-swarm-idempotency-key", "k1")
            .body(refund.to_string());
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status().as_u16(), 401, "{authorization:?}");
    }
    assert!(stack.shop.refunds().await.unwrap().is_empty(), "the ledger is unchanged");
    stack.shutdown().await;
}

/// A second orchestrator instance on the stack's table (as a second Lambda would be): its own
/// model, tools and queue, the same counters.
fn second_instance(stack: &LocalStack, limits: CustomerLimits) -> axum::Router {
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Where is the parcel of A1031?", "tools": []}]}"#;
    let queue = InMemoryQueue::new(QueueSettings::default());
    let core = Orchestrator::new(
        stack.store(),
        TaskQueues::new(Arc::new(queue) as Arc<dyn TaskQueue>),
        Arc::new(ScriptedModel::always(Ok(text_response(plan)))),
        Arc::new(StaticTools::named(&[], "", json!({"type": "object"}))),
        RoleTable::demo(),
        OrchestratorSettings::default(),
    )
    .with_limits(stack.access(), limits);
    swarm_local::http::router(Arc::new(core), Auth::None)
}

/// POSTs `n` conversations of `customer` in turn through the stack's Lambda path (an HTTP API
/// event through lambda_http's conversion), a second orchestrator instance, and `serve`'s
/// router; the statuses, or `None` when the requests straddled a minute boundary (the limit is
/// per calendar minute).
async fn post_n(stack: &LocalStack, other: &axum::Router, customer: &str, n: usize) -> Option<Vec<u16>> {
    let window = RateWindow::containing(now_ms());
    let mut event: Value = serde_json::from_str(include_str!("../../events/apigw-post-conversation.json")).unwrap();
    let body = json!({"message": "Where is my parcel for order A1031?", "customer_id": customer}).to_string();
    event["headers"]["content-length"] = json!(body.len().to_string());
    event["body"] = json!(body);
    let mut statuses = Vec::new();
    for i in 0..n {
        let (status, answer) = match i % 3 {
            0 => stack.api_event(&event).await.unwrap(),
            1 => {
                let request = swarm_local::http::request("POST", "/conversations", Some(&body), &[]).unwrap();
                swarm_local::http::call(other.clone(), request).await.unwrap()
            }
            _ => stack.api("POST", "/conversations", Some(&body), &[]).await.unwrap(),
        };
        if status == 429 {
            assert_eq!(answer["error"]["code"], "rate_limited", "{answer}");
        }
        statuses.push(status);
    }
    (RateWindow::containing(now_ms()) == window).then_some(statuses)
}

async fn limits_hold_on(backend: BackendChoice) {
    let limits = CustomerLimits { conversations_per_minute: 2, subtasks_per_conversation: 100 };
    let stack = LocalStack::start(StackOptions { backend, limits, ..StackOptions::default() }).await.unwrap();
    let other = second_instance(&stack, limits);
    let mut checked = false;
    for customer in ["C106", "C107"] {
        let Some(statuses) = post_n(&stack, &other, customer, 4).await else { continue };
        assert_eq!(statuses, [202, 202, 429, 429], "{customer}: the count is the table's, not an instance's");
        // Another customer has a budget of their own.
        assert_eq!(post_n(&stack, &other, "C108", 1).await.map(|s| s[0]).unwrap_or(202), 202);
        checked = true;
        break;
    }
    assert!(checked, "two attempts each straddled a minute boundary");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_past_their_conversations_per_minute_gets_429_from_every_instance_on_the_embedded_backend() {
    limits_hold_on(BackendChoice::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_past_their_conversations_per_minute_gets_429_from_every_instance_on_dynamodb() {
    let Some(endpoint) = emulator_endpoint("access::limits on the emulator") else { return };
    limits_hold_on(BackendChoice::Emulator(EmulatorOptions::new(endpoint))).await;
}

/// The gateway refusing one subtask's credential, as its error text says it.
struct RefusingFor {
    inner: Arc<dyn ToolGateway>,
    subtask: &'static str,
}

const GATEWAY_TEXT: &str = "tool gateway error: unauthorized: unknown gateway token (role support, 10.0.3.7)";

#[async_trait]
impl ToolGateway for RefusingFor {
    async fn list_tools(&self, ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        if ctx.subtask_id == self.subtask {
            return Err(ToolError::Permanent(GATEWAY_TEXT.into()));
        }
        self.inner.list_tools(ctx).await
    }

    async fn call_tool(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        self.inner.call_tool(ctx, name, arguments, timeout).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_subtask_shows_our_words_never_the_providers_body_or_the_gateways_text() {
    let provider_body = r#"{"error":{"message":"Insufficient Balance: account acct_9f2 has 0.00 USD","type":"insufficient_quota","param":null,"code":"billing_hard_limit_reached"}}"#;
    let plan = json!({"subtasks": [
        {"id": "w01", "instruction": "Check the status of order A1029.", "tools": ["shop__get_order"]},
        {"id": "w02", "instruction": "Check whether coupon SAVE20 can be used.", "tools": ["shop__check_coupon"]},
        {"id": "w03", "instruction": "Where is the parcel of order A1005?", "tools": ["shop__track_shipment"]}
    ]})
    .to_string();
    let model = with_plan(over_offline(), &plan)
        .fail_work_on("A1029", Err(LlmError::Permanent { status: 402, message: provider_body.into() }));
    let stack = LocalStack::start(StackOptions {
        models: Some(Models::single(Arc::new(model))),
        wraps: Wraps::default().tools(
            &[Function::Worker, Function::RefundWorker],
            Arc::new(|inner| Arc::new(RefusingFor { inner, subtask: "w02" }) as Arc<dyn ToolGateway>),
        ),
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let (status, created) = stack.post_conversation("A1029? SAVE20? A1005?", "C104", None).await.unwrap();
    assert_eq!(status, 202, "{created}");
    let id = created["conversation_id"].as_str().unwrap().to_owned();
    let view = stack.wait_finished(&id, WAIT).await.unwrap();
    // The gateway refused w02's tools (policy): the conversation is answered and handed to a person.
    assert_eq!(view.status, ConversationStatus::Handoff);
    let (_, body) = stack.api("GET", &format!("/conversations/{id}"), None, &[]).await.unwrap();
    let text = body.to_string();
    for leaked in [
        "Insufficient",
        "insufficient_quota",
        "acct_9f2",
        "billing",
        "402",
        "unauthorized",
        "gateway token",
        "10.0.3.7",
    ] {
        assert!(!text.contains(leaked), "{leaked:?} reached the customer: {text}");
    }
    let by_id = |id: &str| view.subtasks.iter().find(|s| s.id == id).unwrap();
    assert_eq!((by_id("w01").status, by_id("w01").error_code), (SubtaskStatus::Failed, Some(FailureKind::ModelFailed)));
    assert_eq!(by_id("w01").error.as_deref(), Some(FailureKind::ModelFailed.customer_message()));
    assert_eq!(
        (by_id("w02").status, by_id("w02").error_code),
        (SubtaskStatus::Failed, Some(FailureKind::ToolsRefused))
    );
    assert_eq!(by_id("w02").error.as_deref(), Some(FailureKind::ToolsRefused.customer_message()));
    assert_eq!(by_id("w03").status, SubtaskStatus::Succeeded);
    // The detail stays with the operators: the item keeps the recorded reason.
    let stored = stack.store().list_subtasks(&swarm_core::domain::ConversationId::parse(&id).unwrap()).await.unwrap();
    let reason = |i: usize| match &stored[i].result {
        Some(swarm_core::domain::SubtaskResult::Failed { reason, .. }) => reason.clone(),
        other => panic!("{other:?}"),
    };
    assert!(reason(0).contains("Insufficient Balance"), "{}", reason(0));
    assert!(reason(1).contains("unknown gateway token"), "{}", reason(1));
    stack.shutdown().await;
}
