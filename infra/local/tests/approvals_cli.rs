//! `swarm-local approvals --aws` against a stand-in of the deployed API's IAM-authorised routes, which re-signs every request with the operator's key as API Gateway does and refuses what does not match: the CLI signs with credentials from the AWS SDK's provider chain (here a named profile in the shared files, no `AWS_*` key in its environment), for the profile's region; `--json` prints the API's answer; a refusal prints one line with the API's reason, never a raw body.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_credential_types::Credentials;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use swarm_adapters::sigv4::{SigV4Signer, verify};

const REGION: &str = "eu-west-1";

fn operator_key() -> Credentials {
    Credentials::new("AKIDOPERATOR", "operator-secret-key", None, None, "test")
}

/// What the stand-in received: method, path and query, the `authorization` header.
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

async fn api(State(seen): State<Seen>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let signer = SigV4Signer::with_credentials("execute-api", REGION, operator_key());
    let authorization = parts.headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let target = parts.uri.path_and_query().map(|p| p.to_string()).unwrap_or_default();
    seen.lock().unwrap().push((parts.method.to_string(), target, authorization));
    if !verify(&signer, &operator_key(), &parts, &body, Duration::from_secs(300)) {
        // API Gateway's own answer to a bad signature.
        return (StatusCode::FORBIDDEN, axum::Json(json!({"message": "Forbidden"}))).into_response();
    }
    let approval = json!({"approval_id": "0190f5a2.w01.1", "conversation_id": "0190f5a2", "subtask_id": "w01",
        "customer_id": "C108", "tool": "shop__refund", "order_id": "A1033", "amount": "1874.00", "status": "pending",
        "created_at_ms": 1, "expires_at_ms": 2, "created_at": "1970-01-01T00:00:00.001Z", "expires_at": "1970-01-01T00:00:00.002Z"});
    if parts.method == "POST" {
        let decision: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(decision, json!({"decision": "approve"}));
        let decided = json!({"approval": {"approval_id": "0190f5a2.w01.1", "status": "approved",
            "decided_by": "arn:aws:sts::123456789012:assumed-role/operator/alice"}});
        return axum::Json(decided).into_response();
    }
    axum::Json(json!({"approvals": [approval], "next_cursor": "eyJ2IjoxfQ"})).into_response()
}

async fn stand_in() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = axum::Router::new().fallback(api).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// AWS shared files with an `operator` profile (its key and region) and a `stolen` one (a wrong key).
fn profiles(dir: &Path) {
    std::fs::write(
        dir.join("credentials"),
        "[operator]\naws_access_key_id = AKIDOPERATOR\naws_secret_access_key = operator-secret-key\n\n\
         [stolen]\naws_access_key_id = AKIDOPERATOR\naws_secret_access_key = guessed\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("config"),
        format!("[profile operator]\nregion = {REGION}\n\n[profile stolen]\nregion = {REGION}\n"),
    )
    .unwrap();
}

/// Runs `swarm-local approvals <args>` with only the shared files and `profile` to find credentials by.
async fn approvals(dir: &Path, profile: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_swarm-local"));
    command
        .env_clear()
        .env("HOME", dir)
        .env("AWS_CONFIG_FILE", dir.join("config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.join("credentials"))
        .env("AWS_PROFILE", profile)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .arg("approvals")
        .args(args);
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_signs_with_the_profile_s_credentials_and_region_and_a_refusal_is_one_line() {
    let (url, seen) = stand_in().await;
    let dir = std::env::temp_dir().join(format!("swarm-approvals-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    profiles(&dir);

    let listed = approvals(&dir, "operator", &["--aws", "--url", &url, "--json", "list", "--status", "pending"]).await;
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert!(listed.status.success(), "{stderr}");
    let answer: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(answer["approvals"][0]["approval_id"], "0190f5a2.w01.1");
    assert_eq!(answer["next_cursor"], "eyJ2IjoxfQ");
    {
        let seen = seen.lock().unwrap();
        let (method, target, authorization) = seen.last().unwrap();
        assert_eq!((method.as_str(), target.as_str()), ("GET", "/approvals?status=pending"));
        assert!(
            authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDOPERATOR/")
                && authorization.contains(&format!("/{REGION}/execute-api/aws4_request")),
            "{authorization}"
        );
    }

    let decided = approvals(&dir, "operator", &["--aws", "--url", &url, "approve", "0190f5a2.w01.1"]).await;
    assert!(decided.status.success(), "{}", String::from_utf8_lossy(&decided.stderr));
    assert_eq!(
        String::from_utf8_lossy(&decided.stdout).trim(),
        "0190f5a2.w01.1 is approved (decided by arn:aws:sts::123456789012:assumed-role/operator/alice)"
    );

    let refused = approvals(&dir, "stolen", &["--aws", "--url", &url, "list"]).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.trim(), "swarm-local: the approvals API answered 403: Forbidden", "one line, the API's reason");
    assert!(refused.stdout.is_empty());

    let nobody = approvals(&dir, "operator", &["--url", &url, "list"]).await;
    assert!(!nobody.status.success());
    assert!(String::from_utf8_lossy(&nobody.stderr).contains("give --operator-token"));
    std::fs::remove_dir_all(&dir).unwrap();
}
