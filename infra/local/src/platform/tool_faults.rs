//! A fault-injecting tool server: an HTTP proxy in front of an MCP server (the demo shop), federated by the gateway in its place, that answers `tools/call` with errors, holds answers back, and refuses everything during a window of downtime — each decided by the run's [`Chaos`].
//!
//! The proxy forwards every request as it came (method, path, headers but `Host`, body) and
//! the answer as it came back. Faults, per `tools/call` request:
//! - an **error** without reaching the server: half of them a tool result with `isError: true`
//!   (how MCP reports a failed tool), half a JSON-RPC `-32603` error;
//! - a **hang**: the request is forwarded (the tool runs, a refund is made) and its answer held
//!   back for the hang time — the caller's timeout, not the proxy, decides what it sees;
//! - **downtime**: from the configured `tools/call` on, for the configured time, every request
//!   (`initialize`, `tools/list` included) is refused with 503 before reaching the server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::chaos::{Chaos, FaultKind};

/// Largest request body the proxy reads (MCP requests are small).
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

struct Proxy {
    upstream: String,
    client: reqwest::Client,
    chaos: Arc<Chaos>,
    /// `tools/call` requests seen.
    calls: AtomicU64,
    /// Until when the server is down, once the window opened.
    down_until: Mutex<Option<Instant>>,
}

/// Starts the proxy on a free loopback port in front of `upstream` (an MCP URL such as
/// `http://127.0.0.1:4000/mcp`); answers the URL to give the gateway instead (the same path on
/// the proxy) and the server task (abort it to stop).
///
/// Errors: the port cannot be bound; `upstream` is not an `http://host:port/path` URL.
pub async fn start(upstream: &str, chaos: Arc<Chaos>) -> anyhow::Result<(String, JoinHandle<()>)> {
    let parsed = reqwest::Url::parse(upstream)?;
    let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
        anyhow::bail!("the tool server URL {upstream} names no host");
    };
    let origin = format!("{}://{host}:{port}", parsed.scheme());
    let path = parsed.path().to_owned();
    let client = reqwest::Client::builder().pool_max_idle_per_host(16).build()?;
    let proxy =
        Arc::new(Proxy { upstream: origin, client, chaos, calls: AtomicU64::new(0), down_until: Mutex::new(None) });
    let app = axum::Router::new().fallback(forward).with_state(proxy);
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "tool fault proxy stopped");
        }
    });
    tracing::info!(%addr, %upstream, "tool fault proxy in front of the tool server");
    Ok((format!("http://{addr}{path}"), task))
}

impl Proxy {
    /// Whether the server is down now; a `tools/call` numbered as configured opens the window.
    fn down(&self, is_call: bool) -> bool {
        let tools = &self.chaos.settings().tools;
        let mut until = self.down_until.lock().unwrap_or_else(PoisonError::into_inner);
        if is_call {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            if until.is_none() && tools.down_after_calls == Some(n) && !tools.down_for.is_zero() {
                tracing::warn!(after_calls = n, down_for = ?tools.down_for, "injected fault: the tool server goes down");
                *until = Some(Instant::now() + tools.down_for);
            }
        }
        until.is_some_and(|t| Instant::now() < t)
    }
}

async fn forward(State(p): State<Arc<Proxy>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("request body: {e}")).into_response(),
    };
    let rpc: Option<Value> = serde_json::from_slice(&body).ok();
    let is_call = rpc.as_ref().and_then(|r| r.get("method")).and_then(Value::as_str) == Some("tools/call");
    if p.down(is_call) {
        p.chaos.record(FaultKind::ToolUpstreamDown);
        return (StatusCode::SERVICE_UNAVAILABLE, "tool server down (injected)").into_response();
    }
    let mut hang = false;
    if is_call {
        let id = rpc.as_ref().and_then(|r| r.get("id")).cloned().unwrap_or(Value::Null);
        if p.chaos.decide(FaultKind::ToolError) {
            return injected_error(id, p.chaos.coin());
        }
        hang = p.chaos.decide(FaultKind::ToolHang);
    }
    let url = format!("{}{}", p.upstream, parts.uri.path_and_query().map_or("/", |pq| pq.as_str()));
    let mut headers = parts.headers.clone();
    headers.remove(header::HOST);
    headers.remove(header::CONTENT_LENGTH);
    let sent = p.client.request(parts.method.clone(), &url).headers(headers).body(body).send().await;
    let answer = match sent {
        Ok(r) => {
            let status = r.status();
            let headers = r.headers().clone();
            match r.bytes().await {
                Ok(bytes) => relay(status, &headers, bytes),
                Err(e) => (StatusCode::BAD_GATEWAY, format!("tool server answer: {e}")).into_response(),
            }
        }
        Err(e) => (StatusCode::BAD_GATEWAY, format!("tool server unreachable: {e}")).into_response(),
    };
    if hang {
        // The tool ran; its answer comes late (the caller has likely given up by then).
        tokio::time::sleep(p.chaos.settings().tools.hang_for).await;
    }
    answer
}

/// The upstream's answer, as it came (hop-by-hop headers dropped).
fn relay(status: StatusCode, headers: &HeaderMap, body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    for (name, value) in headers {
        if name != header::CONNECTION && name != header::TRANSFER_ENCODING && name != header::CONTENT_LENGTH {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
}

/// An injected failure of a `tools/call` with JSON-RPC id `id`: a tool result flagged
/// `isError` (`as_result`) or a JSON-RPC internal error.
fn injected_error(id: Value, as_result: bool) -> Response {
    let body = if as_result {
        json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{"type": "text", "text": "the tool failed: upstream error (injected)"}],
            "isError": true
        }})
    } else {
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "internal error (injected)"}})
    };
    let mut response = Response::new(Body::from(body.to_string()));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::platform::chaos::{ChaosSettings, KindCount, ToolFaults};

    async fn echo_server() -> (String, Arc<AtomicU64>) {
        let seen = Arc::new(AtomicU64::new(0));
        let s = seen.clone();
        let app = axum::Router::new().route(
            "/mcp",
            axum::routing::post(move |body: Bytes| {
                let s = s.clone();
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    let rpc: Value = serde_json::from_slice(&body).unwrap();
                    axum::Json(json!({"jsonrpc": "2.0", "id": rpc["id"], "result": {"echo": rpc["method"]}}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("http://{addr}/mcp"), seen)
    }

    async fn call(url: &str, id: u64, method: &str) -> (u16, Value) {
        let r = reqwest::Client::new()
            .post(url)
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, serde_json::from_str(&r.text().await.unwrap()).unwrap_or(Value::Null))
    }

    fn counts(chaos: &Chaos) -> BTreeMap<FaultKind, KindCount> {
        chaos.counts().into_iter().collect()
    }

    #[tokio::test]
    async fn errors_never_reach_the_server_and_answer_the_callers_request_id() {
        let (upstream, seen) = echo_server().await;
        let mut s = ChaosSettings::quiet(1);
        s.tools = ToolFaults { error: 1.0, ..ToolFaults::default() };
        let chaos = Arc::new(Chaos::new(s).unwrap());
        let (url, _task) = start(&upstream, chaos.clone()).await.unwrap();
        assert!(url.ends_with("/mcp"), "{url}");
        let (status, list) = call(&url, 1, "tools/list").await;
        assert_eq!((status, &list["result"]["echo"]), (200, &json!("tools/list")), "only tools/call is faulted");
        let mut shapes = Vec::new();
        for id in 2..10 {
            let (status, answer) = call(&url, id, "tools/call").await;
            assert_eq!((status, &answer["id"]), (200, &json!(id)));
            shapes.push(answer.get("error").is_some());
            if let Some(result) = answer.get("result") {
                assert_eq!(result["isError"], true);
            }
        }
        assert!(shapes.contains(&true) && shapes.contains(&false), "both shapes of error: {shapes:?}");
        assert_eq!(seen.load(Ordering::SeqCst), 1, "no faulted call reached the server");
        assert_eq!(counts(&chaos)[&FaultKind::ToolError], KindCount { opportunities: 8, injected: 8 });
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_call_reaches_the_server_and_its_answer_comes_after_the_hang() {
        let (upstream, seen) = echo_server().await;
        let mut s = ChaosSettings::quiet(1);
        s.tools = ToolFaults { hang: 1.0, hang_for: Duration::from_secs(30), ..ToolFaults::default() };
        let chaos = Arc::new(Chaos::new(s).unwrap());
        let (url, _task) = start(&upstream, chaos.clone()).await.unwrap();
        let started = Instant::now();
        let (status, answer) = call(&url, 4, "tools/call").await;
        assert_eq!((status, &answer["result"]["echo"]), (200, &json!("tools/call")));
        assert!(started.elapsed() >= Duration::from_secs(30), "held back {:?}", started.elapsed());
        assert_eq!(seen.load(Ordering::SeqCst), 1, "the call ran on the server");
    }

    #[tokio::test(start_paused = true)]
    async fn the_server_is_down_from_the_configured_call_for_its_window_then_back() {
        let (upstream, seen) = echo_server().await;
        let mut s = ChaosSettings::quiet(1);
        s.tools = ToolFaults { down_after_calls: Some(2), down_for: Duration::from_secs(10), ..ToolFaults::default() };
        let chaos = Arc::new(Chaos::new(s).unwrap());
        let (url, _task) = start(&upstream, chaos.clone()).await.unwrap();
        assert_eq!(call(&url, 1, "tools/call").await.0, 200);
        assert_eq!(call(&url, 2, "tools/call").await.0, 503, "the second call opens the window");
        assert_eq!(call(&url, 3, "tools/list").await.0, 503, "everything is refused while down");
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(call(&url, 4, "tools/call").await.0, 200);
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        assert_eq!(counts(&chaos)[&FaultKind::ToolUpstreamDown], KindCount { opportunities: 2, injected: 2 });
    }
}
