//! Who may decide approvals when callers are IAM principals (`AuthMode=iam`, and the approvals routes everywhere): only a configured operator — never a customer's principal, whatever IAM grants it, never any other signed caller. A refused decision changes nothing and queues nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpRequestContext;
use lambda_http::request::RequestContext;
use orchestrator::api::{Auth, IamOperators, OperatorAllowlist, OperatorAuth};
use orchestrator::{ApiState, Approvals, Orchestrator, OrchestratorSettings};
use serde_json::{Value, json};
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::access::{AccessStore, Principal};
use swarm_core::approval::{Approval, ApprovalKey, ApprovalStatus, ProposedAction};
use swarm_core::domain::{ConversationId, now_ms};
use swarm_core::ports::{ApprovalStore, TaskQueue};
use swarm_core::roles::{RoleTable, TaskQueues};
use swarm_core::timings::Timings;
use swarm_testing::{ScriptedModel, StaticTools, text_response};
use tower::ServiceExt as _;

const ACCOUNT: &str = "123456789012";
const APPROVAL: &str = "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07.w01.1";

struct Rig {
    store: Arc<InMemoryConversationStore>,
    queue: Arc<InMemoryQueue>,
    router: Router,
}

/// The API with IAM callers and the approvals on, one pending approval of C108's refund, and
/// `AIDACUSTOMERC108` (an IAM user C108 signs in as) mapped to C108.
async fn rig() -> Rig {
    let store = Arc::new(InMemoryConversationStore::new());
    let queue = Arc::new(InMemoryQueue::new(QueueSettings::default()));
    let queues = TaskQueues::new(queue.clone() as Arc<dyn TaskQueue>);
    let core = Orchestrator::new(
        store.clone(),
        queues.clone(),
        Arc::new(ScriptedModel::always(Ok(text_response(r#"{"subtasks": []}"#)))),
        Arc::new(StaticTools::named(&[], "", json!({"type": "object"}))),
        RoleTable::demo(),
        OrchestratorSettings::default(),
    );
    let key = ApprovalKey::new("0123456789abcdef0123456789abcdef-operators").unwrap();
    let approvals = Approvals::new(store.clone(), queues, key, Timings::standard());
    store.map_customer(&Principal::parse("iam:AIDACUSTOMERC108").unwrap(), "C108").await.unwrap();
    let now = now_ms();
    let approval = Approval {
        id: APPROVAL.into(),
        conversation_id: ConversationId::from_trusted("0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07"),
        subtask_id: "w01".into(),
        ordinal: 1,
        customer_id: "C108".into(),
        role: "refund".into(),
        action: ProposedAction {
            tool: "shop__refund".into(),
            order_id: "A1033".into(),
            amount_cents: 187_400,
            reason: None,
        },
        status: ApprovalStatus::Pending,
        created_at_ms: now,
        expires_at_ms: now + 3_600_000,
        decided_by: None,
        decided_at_ms: None,
        token: None,
        reissued_at_ms: None,
        outcome: None,
        finished_at_ms: None,
        ttl: now / 1000 + 86_400,
    };
    store.create_approval(&approval).await.unwrap();
    let state =
        ApiState::new(Arc::new(core), Auth::Iam(store.clone())).with_approvals(Arc::new(approvals), operators(&store));
    Rig { store, queue, router: orchestrator::router(state) }
}

/// The operators: the IAM role `approvers` (any of its sessions) and the IAM user `ops-lead`.
fn operators(directory: &Arc<InMemoryConversationStore>) -> OperatorAuth {
    let list = format!("arn:aws:iam::{ACCOUNT}:role/approvers, arn:aws:iam::{ACCOUNT}:user/ops-lead");
    OperatorAuth::Iam(IamOperators::new(&OperatorAllowlist::parse(&list).unwrap(), directory.clone()))
}

/// An HTTP API request as lambda_http hands it over after IAM authorization of `user_id` / `arn`.
fn signed(method: &str, path: &str, body: &str, user_id: &str, arn: &str) -> Request<Body> {
    let context: ApiGatewayV2httpRequestContext = serde_json::from_value(json!({
        "routeKey": format!("{method} {path}"),
        "stage": "$default",
        "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7"},
        "authorizer": {"iam": {"userId": user_id, "userArn": arn, "accountId": ACCOUNT}}
    }))
    .unwrap();
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    request.extensions_mut().insert(RequestContext::ApiGatewayV2(context));
    request
}

async fn status(router: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn approve(user_id: &str, arn: &str) -> Request<Body> {
    signed("POST", &format!("/approvals/{APPROVAL}"), r#"{"decision": "approve"}"#, user_id, arn)
}

async fn still_pending(r: &Rig) {
    let approval = r.store.get_approval(APPROVAL).await.unwrap().unwrap();
    assert_eq!((approval.status, approval.token.is_none()), (ApprovalStatus::Pending, true), "{approval:?}");
    assert_eq!(r.queue.depth(), 0, "nothing was queued");
}

/// Issue 17 point 11c: with `AuthMode=iam` every signed caller was an operator, so a customer
/// whose principal holds the simplest `execute-api:Invoke` grant approved their own refund.
#[tokio::test]
async fn a_customer_principal_cannot_approve_its_own_refund() {
    let r = rig().await;
    let customer = ("AIDACUSTOMERC108", format!("arn:aws:iam::{ACCOUNT}:user/customer-c108"));
    let (got, body) = status(&r.router, approve(customer.0, &customer.1)).await;
    assert_eq!(got, StatusCode::FORBIDDEN, "{body}");
    let list = signed("GET", "/approvals", "", customer.0, &customer.1);
    assert_eq!(status(&r.router, list).await.0, StatusCode::FORBIDDEN);
    still_pending(&r).await;
}

#[tokio::test]
async fn a_signed_caller_that_is_not_a_configured_operator_decides_nothing() {
    let r = rig().await;
    let (got, body) = status(&r.router, approve("AIDAINTERN", &format!("arn:aws:iam::{ACCOUNT}:user/intern"))).await;
    assert_eq!(got, StatusCode::FORBIDDEN, "{body}");
    // An operator's principal mapped to a customer is a customer: never an operator.
    r.store.map_customer(&Principal::parse("iam:AIDAOPSLEAD").unwrap(), "C104").await.unwrap();
    let lead = approve("AIDAOPSLEAD", &format!("arn:aws:iam::{ACCOUNT}:user/ops-lead"));
    assert_eq!(status(&r.router, lead).await.0, StatusCode::FORBIDDEN);
    // No IAM caller at all.
    let unsigned = Request::builder()
        .method("POST")
        .uri(format!("/approvals/{APPROVAL}"))
        .body(Body::from(r#"{"decision": "approve"}"#))
        .unwrap();
    assert_eq!(status(&r.router, unsigned).await.0, StatusCode::UNAUTHORIZED);
    still_pending(&r).await;
}

#[tokio::test]
async fn a_configured_operator_decides_and_is_recorded() {
    let r = rig().await;
    let arn = format!("arn:aws:sts::{ACCOUNT}:assumed-role/approvers/alice");
    let (got, body) = status(&r.router, approve("AROAAPPROVERS:alice", &arn)).await;
    assert_eq!(got, StatusCode::OK, "{body}");
    assert_eq!(body["approval"]["decided_by"], arn.as_str());
    assert_eq!(r.queue.depth(), 1, "the approved refund is queued");
}
