//! `swarm-local admin` on the emulator's table, as an operator runs it: the mapping it writes is what the orchestrator's JWT caller reads (`sub` → customer), bad input writes nothing, and unmapping refuses the identity again.
//!
//! Needs `SWARM_AWS_ENDPOINT` (moto); without it the test fails, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::process::Command;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpRequestContext;
use lambda_http::request::RequestContext;
use orchestrator::api::{Auth, JwtIdentity};
use orchestrator::{ApiState, Orchestrator, OrchestratorSettings};
use serde_json::json;
use swarm_adapters::aws::dynamo::DynamoConversationStore;
use swarm_adapters::embedded::{InMemoryQueue, QueueSettings};
use swarm_core::ports::TaskQueue;
use swarm_core::roles::{RoleTable, TaskQueues};
use swarm_local::platform::dynamo_table::create_table;
use swarm_local::platform::emulator::emulator_clients;
use swarm_testing::{ScriptedModel, StaticTools, text_response};

const BIN: &str = env!("CARGO_BIN_EXE_swarm-local");

fn admin(endpoint: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(BIN).arg("admin").arg("--aws-endpoint").arg(endpoint).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A POST as lambda_http hands it over after the JWT authorizer accepted a token with `sub`.
fn jwt_post(sub: &str) -> Request<Body> {
    let mut request = Request::builder()
        .method("POST")
        .uri("/conversations")
        .body(Body::from(r#"{"message": "where is A1029"}"#))
        .unwrap();
    let context: ApiGatewayV2httpRequestContext = serde_json::from_value(json!({
        "routeKey": "POST /conversations", "stage": "$default",
        "http": {"method": "POST", "path": "/conversations", "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7"},
        "authorizer": {"jwt": {"claims": {"sub": sub, "customer_id": "C999"}, "scopes": null}}
    }))
    .unwrap();
    request.extensions_mut().insert(RequestContext::ApiGatewayV2(context));
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapping_written_by_the_admin_command_is_the_customer_a_jwt_acts_for() {
    let endpoint = match std::env::var("SWARM_AWS_ENDPOINT") {
        Ok(e) if !e.trim().is_empty() => e.trim().to_owned(),
        _ if std::env::var("SWARM_SKIP_AWS").as_deref() == Ok("1") => {
            eprintln!("!!!!!!!! SKIPPED admin_cli: SWARM_SKIP_AWS=1; the admin command was NOT run");
            return;
        }
        _ => panic!("admin_cli needs SWARM_AWS_ENDPOINT (infra/aws/moto.sh start), or SWARM_SKIP_AWS=1"),
    };
    let (dynamodb, _, _) = emulator_clients(&endpoint, "us-east-1");
    let table = format!("admin-cli-{}", uuid::Uuid::now_v7().simple());
    create_table(&dynamodb, &table).await.unwrap();
    let sub = "5c8e2f1a-0b3d-4e6f-8a9b-1c2d3e4f5a6b";

    let (ok, text) = admin(&endpoint, &["map-customer", "--table", &table, &format!("sub:{sub}"), "c104"]);
    assert!(ok, "{text}");
    assert_eq!(text.trim(), format!("sub:{sub} -> C104"), "stored canonical");
    let (ok, text) = admin(&endpoint, &["show-customer", "--table", &table, &format!("sub:{sub}")]);
    assert!(ok && text.contains("-> C104"), "{text}");
    for bad in [
        vec!["map-customer", "--table", &table, "jwt:x", "C104"],
        vec!["map-customer", "--table", &table, "sub:y", "C1#META"],
    ] {
        let (ok, text) = admin(&endpoint, &bad);
        assert!(!ok, "{bad:?}: {text}");
    }
    let (ok, _) = admin(&endpoint, &["show-customer", "--table", &table, "sub:y"]);
    assert!(!ok, "bad input wrote nothing");

    let store = Arc::new(DynamoConversationStore::new(dynamodb.clone(), table.clone()));
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Check order A1029", "tools": []}]}"#;
    let core = Orchestrator::new(
        store.clone(),
        TaskQueues::new(Arc::new(InMemoryQueue::new(QueueSettings::default())) as Arc<dyn TaskQueue>),
        Arc::new(ScriptedModel::always(Ok(text_response(plan)))),
        Arc::new(StaticTools::named(&[], "", json!({"type": "object"}))),
        RoleTable::demo(),
        OrchestratorSettings::default(),
    );
    let router = orchestrator::router(ApiState::new(Arc::new(core), Auth::Jwt(JwtIdentity::mapped_sub(store.clone()))));
    let (status, body) = swarm_local::http::call(router.clone(), jwt_post(sub)).await.unwrap();
    assert_eq!(status, 202, "{body}");
    let id = body["conversation_id"].as_str().unwrap();
    let (status, view) = swarm_local::http::call(router.clone(), {
        let mut get = jwt_post(sub);
        *get.method_mut() = axum::http::Method::GET;
        *get.uri_mut() = format!("/conversations/{id}").parse().unwrap();
        get
    })
    .await
    .unwrap();
    assert_eq!((status, view["customer_id"].as_str()), (200, Some("C104")), "{view}");

    let (ok, text) = admin(&endpoint, &["unmap-customer", "--table", &table, &format!("sub:{sub}")]);
    assert!(ok && text.contains("link removed"), "{text}");
    let (status, body) = swarm_local::http::call(router, jwt_post(sub)).await.unwrap();
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("unmapped_identity")), "{body}");
    let _ = dynamodb.delete_table().table_name(&table).send().await;
}
