//! `swarm-local serve` for a browser: a preflight from an allowed origin is answered (and one from another origin is not), `GET /health`, `GET /openapi.json` and the console's page and assets need no credential even with token authentication on, and an answer lets the page read `Location`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The server, stopped when the test ends however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `swarm-local serve --port 0 <extra>` and answers its base URL.
fn serve(extra: &[&str]) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_swarm-local"))
        .args(["serve", "--port", "0", "--time-scale", "0.1"])
        .args(extra)
        .env_remove("LLM_BASE_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.trim().strip_prefix("API").map(str::trim) {
                let base = url.split_whitespace().next().unwrap_or_default().trim_end_matches("/conversations");
                let _ = tx.send(base.to_owned());
            }
        }
    });
    let base = rx.recv_timeout(Duration::from_secs(120)).expect("serve printed its API URL");
    (server, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_s_preflight_succeeds_and_the_open_routes_need_no_credential() {
    let (_server, base) = serve(&[
        "--auth",
        "tokens",
        "--token",
        "tok-c104-0123456789=C104",
        "--allow-origin",
        "https://console.example.com",
    ]);
    let http = reqwest::Client::new();
    let preflight = |origin: &str| {
        http.request(reqwest::Method::OPTIONS, format!("{base}/conversations"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization,content-type")
            .send()
    };
    let allowed = preflight("https://console.example.com").await.unwrap();
    assert!(allowed.status().is_success(), "{}", allowed.status());
    assert_eq!(allowed.headers()["access-control-allow-origin"], "https://console.example.com");
    assert!(allowed.headers()["access-control-allow-headers"].to_str().unwrap().contains("authorization"));
    let other = preflight("http://localhost:3000").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none(), "only the listed origins");

    let health = http.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200, "no credential needed");
    let contract: serde_json::Value =
        http.get(format!("{base}/openapi.json")).send().await.unwrap().json().await.unwrap();
    assert_eq!(contract["openapi"], "3.1.0");
    let console = http.get(format!("{base}/console")).send().await.unwrap();
    assert_eq!(console.status().as_u16(), 200, "the console needs no credential: its reads carry one");
    assert_eq!(console.headers()["content-type"], "text/html; charset=utf-8");
    assert!(console.headers()["content-security-policy"].to_str().unwrap().contains("script-src 'self'"));
    assert!(console.text().await.unwrap().contains(r#"<script src="/console/console.js" defer></script>"#));
    let script = http.get(format!("{base}/console/console.js")).send().await.unwrap();
    assert_eq!(script.headers()["content-type"], "text/javascript; charset=utf-8");
    assert!(script.text().await.unwrap().contains("function follow("));
    let unauthenticated = http.get(format!("{base}/conversations/x")).send().await.unwrap();
    assert_eq!(unauthenticated.status().as_u16(), 401, "the conversations still need one");
    assert_eq!(unauthenticated.headers()["content-type"], "application/problem+json");

    let created = http
        .post(format!("{base}/conversations"))
        .header("origin", "https://console.example.com")
        .bearer_auth("tok-c104-0123456789")
        .json(&serde_json::json!({"message": "Where is A1029?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 202);
    assert!(created.headers()["location"].to_str().unwrap().starts_with("/conversations/"));
    assert!(created.headers()["access-control-expose-headers"].to_str().unwrap().contains("location"));
}
