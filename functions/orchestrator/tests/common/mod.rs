//! What the tests that run a Lambda binary under a stand-in of Lambda's Runtime and Extensions APIs share: the child process (killed when the test stops), a server on a free port, and the extension's registration.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test binary uses a part; a failed step is the test failing

use axum::Router;
use axum::response::IntoResponse;
use serde_json::json;

/// The function's process, killed if the test stops before it does.
pub struct Running(pub Option<std::process::Child>);

impl Running {
    pub fn get(&mut self) -> &mut std::process::Child {
        self.0.as_mut().unwrap()
    }

    pub fn take(&mut self) -> std::process::Child {
        self.0.take().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Serves `router` on a free loopback port; answers `host:port`.
pub async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr.to_string()
}

/// The Extensions API's registration answer.
pub async fn register() -> impl IntoResponse {
    let body = json!({"functionName": "orchestrator-fn", "functionVersion": "$LATEST", "handler": "bootstrap"});
    ([("lambda-extension-identifier", "ext-0001")], axum::Json(body))
}

/// Lambda's variables for a function whose Runtime API is at `runtime`.
pub fn lambda_env(command: &mut std::process::Command, runtime: &str, name: &str) {
    command
        .env("AWS_LAMBDA_RUNTIME_API", runtime)
        .env("AWS_LAMBDA_FUNCTION_NAME", name)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "2025/01/01/[$LATEST]abc")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}"))
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .env("AWS_ACCESS_KEY_ID", "AKIDTEST")
        .env("AWS_SECRET_ACCESS_KEY", "secret");
}
