//! A mock OpenAI-compatible chat-completions server for tests and benchmarks: scripted answers, a generic agent, latency, injected faults and request statistics.
//!
//! Routes: `POST /v1/chat/completions` (and `/chat/completions`),
//! `GET /v1/models`, `GET /_stats` (the [`Stats`] as JSON), `POST /_reset`
//! (clears the statistics). Every fate — latency, injected fault — is drawn
//! from one RNG seeded with [`MockConfig::seed`], in arrival order, so a run
//! with the same seed and the same arrival order answers the same way.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{Value, json};

/// How the mock answers requests that no fault hit.
#[derive(Clone, Debug)]
pub enum Mode {
    /// Answers from the queue, in order; once it is empty, 500 "script exhausted".
    Scripted(Vec<ScriptedResponse>),
    /// The generic agent ([`AgentConfig`]).
    Agent(AgentConfig),
}

/// One canned answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptedResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Error reading a case file line.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    #[error("line {line}: not JSON: {source}")]
    Json { line: usize, source: serde_json::Error },
    #[error("line {line}: {message}")]
    Shape { line: usize, message: String },
}

impl ScriptedResponse {
    /// A JSON answer with `content-type: application/json`.
    pub fn json(status: u16, body: &Value) -> Self {
        Self { status, headers: vec![("content-type".into(), "application/json".into())], body: body.to_string() }
    }

    /// From one case of `llm-responses.jsonl`: `{"status", "headers"?, "body"}`;
    /// a string body is sent as is, any other JSON body serialised (with
    /// `content-type: application/json` unless the case sets one).
    pub fn from_case(case: &Value) -> Result<Self, String> {
        let status = case
            .get("status")
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok())
            .filter(|s| (100..600).contains(s))
            .ok_or("missing or bad \"status\"")?;
        let mut headers: Vec<(String, String)> = match case.get("headers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
                .collect(),
            Some(_) => return Err("\"headers\" must be an object".into()),
        };
        let body = match case.get("body") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                if !headers.iter().any(|(k, _)| k == "content-type") {
                    headers.push(("content-type".into(), "application/json".into()));
                }
                other.to_string()
            }
        };
        Ok(Self { status, headers, body })
    }
}

/// Reads a JSON-lines case file: `(name, response)` per non-empty line.
pub fn load_cases(text: &str) -> Result<Vec<(String, ScriptedResponse)>, CaseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|source| CaseError::Json { line: i + 1, source })?;
        let name = v.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
        let r = ScriptedResponse::from_case(&v).map_err(|message| CaseError::Shape { line: i + 1, message })?;
        out.push((name, r));
    }
    Ok(out)
}

/// The generic agent used by swarm benchmarks.
///
/// - with `tools` and no `tool` message yet: one call of the first tool whose
///   name contains `tool_match` (else the first tool) with `tool_args`;
/// - with `tools` after a tool result: `final_text`, or `"Done: <last tool result>"`;
/// - without tools, when the system prompt contains `"subtasks"`: a plan of
///   `plan_subtasks` subtasks `{"id":"w001","instruction":plan_instruction,"tools":[plan_tool]}`;
/// - otherwise `reply_text`.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub tool_match: String,
    pub tool_args: Value,
    pub final_text: Option<String>,
    pub plan_subtasks: usize,
    pub plan_instruction: String,
    pub plan_tool: String,
    pub reply_text: String,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            tool_match: "get_order".into(),
            tool_args: json!({"order_id": "A1029"}),
            final_text: None,
            plan_subtasks: 3,
            plan_instruction: "Check order A1029".into(),
            plan_tool: "shop__get_order".into(),
            reply_text: "Here is what we found about your request.".into(),
        }
    }
}

/// Time taken before answering.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Latency {
    #[default]
    None,
    Fixed(Duration),
    /// Uniform in `[min, max]`.
    Uniform {
        min: Duration,
        max: Duration,
    },
}

/// Injected faults: each a probability in `[0, 1]` per request (their sum ≤ 1).
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// 429 with `retry_after`.
    pub rate_limit: f64,
    /// Sent as `retry-after` (whole seconds) or `retry-after-ms`; `None` sends neither.
    pub retry_after: Option<Duration>,
    /// 500 with a JSON error or 502 with an HTML body.
    pub server_error: f64,
    /// No answer for `hang_for`, then 504.
    pub hang: f64,
    pub hang_for: Duration,
    /// 200 with a truncated JSON body.
    pub malformed: f64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            rate_limit: 0.0,
            retry_after: Some(Duration::from_secs(1)),
            server_error: 0.0,
            hang: 0.0,
            hang_for: Duration::from_secs(600),
            malformed: 0.0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct MockConfig {
    pub seed: u64,
    pub mode: Mode,
    pub latency: Latency,
    pub faults: Faults,
    /// Keep request bodies for [`MockHandle::bodies`] (at most 10,000).
    pub record_bodies: bool,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            mode: Mode::Agent(AgentConfig::default()),
            latency: Latency::None,
            faults: Faults::default(),
            record_bodies: true,
        }
    }
}

impl MockConfig {
    /// Scripted mode with these answers, no latency, no faults.
    pub fn scripted(responses: Vec<ScriptedResponse>) -> Self {
        Self { mode: Mode::Scripted(responses), ..Self::default() }
    }
}

/// One chat request as the mock saw it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Arrival {
    /// 0, 1, 2… in arrival order.
    pub seq: u64,
    /// Since the server started, milliseconds.
    pub arrived_ms: f64,
    /// When the answer was sent, milliseconds since start; `None` while pending or hung.
    pub responded_ms: Option<f64>,
    pub status: u16,
    /// The `Retry-After` sent, milliseconds.
    pub retry_after_ms: Option<u64>,
    /// The last user message (at most 200 characters): tells the calls of a burst apart.
    pub key: String,
    /// What answered: `agent`, `script`, `rate_limit`, `server_error`, `hang`, `malformed`, `bad_request`.
    pub kind: &'static str,
}

/// Counters, readable with [`MockHandle::stats`] and `GET /_stats`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub requests: u64,
    /// Most chat requests in progress at once.
    pub max_concurrent: usize,
    /// In arrival order, at most 100,000.
    pub arrivals: Vec<Arrival>,
}

struct Shared {
    started: Instant,
    config: MockConfig,
    inner: Mutex<Inner>,
    in_flight: AtomicUsize,
}

struct Inner {
    rng: StdRng,
    script: VecDeque<ScriptedResponse>,
    stats: Stats,
    bodies: Vec<Value>,
}

const MAX_BODIES: usize = 10_000;
/// Arrivals kept in [`Stats::arrivals`]; `requests` keeps counting past it.
const MAX_ARRIVALS: usize = 100_000;

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1000.0
    }
}

/// The running server; dropping it stops the server.
pub struct MockHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl MockHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL for an OpenAI client, `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn stats(&self) -> Stats {
        self.shared.lock().stats.clone()
    }

    /// Request bodies received, in arrival order (when `record_bodies`).
    pub fn bodies(&self) -> Vec<Value> {
        self.shared.lock().bodies.clone()
    }

    /// Clears statistics and recorded bodies (not the script or the RNG).
    pub fn reset(&self) {
        let mut inner = self.shared.lock();
        inner.stats = Stats::default();
        inner.bodies.clear();
    }

    /// Stops the server and waits (at most 5 s) for it to finish.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
    }
}

impl Drop for MockHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

/// Entry point.
pub struct MockLlm;

impl MockLlm {
    /// Starts the server in-process on `127.0.0.1:0`; errors when it cannot bind.
    pub async fn start(config: MockConfig) -> std::io::Result<(SocketAddr, MockHandle)> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), config).await
    }

    /// Starts the server on `addr`.
    pub async fn start_on(addr: SocketAddr, config: MockConfig) -> std::io::Result<(SocketAddr, MockHandle)> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let script = match &config.mode {
            Mode::Scripted(s) => s.iter().cloned().collect(),
            Mode::Agent(_) => VecDeque::new(),
        };
        let shared = Arc::new(Shared {
            started: Instant::now(),
            inner: Mutex::new(Inner {
                rng: StdRng::seed_from_u64(config.seed),
                script,
                stats: Stats::default(),
                bodies: Vec::new(),
            }),
            config,
            in_flight: AtomicUsize::new(0),
        });
        let app = router(shared.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "mock-llm server stopped");
            }
        });
        Ok((addr, MockHandle { addr, shared, stop: Some(stop), task }))
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/_stats", get(stats))
        .route("/_reset", post(reset))
        .with_state(shared)
}

async fn models(State(s): State<Arc<Shared>>) -> Response {
    let _ = &s;
    axum::Json(json!({"object": "list", "data": [{"id": "mock-llm", "object": "model"}]})).into_response()
}

async fn stats(State(s): State<Arc<Shared>>) -> Response {
    axum::Json(s.lock().stats.clone()).into_response()
}

async fn reset(State(s): State<Arc<Shared>>) -> Response {
    let mut inner = s.lock();
    inner.stats = Stats::default();
    inner.bodies.clear();
    StatusCode::NO_CONTENT.into_response()
}

/// Decrements the in-flight counter however the request ends.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

enum Fate {
    Normal,
    RateLimit,
    ServerError { html: bool },
    Hang,
    Malformed,
}

async fn chat(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let _guard = InFlight(&s.in_flight);
    let arrived_ms = s.now_ms();
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let key = parsed.as_ref().map(last_user_text).unwrap_or_default();
    let faults = &s.config.faults;

    // Every random draw happens here, under one lock, in arrival order.
    let (seq, fate, delay, scripted) = {
        let mut inner = s.lock();
        let seq = inner.stats.requests;
        inner.stats.requests += 1;
        inner.stats.max_concurrent = inner.stats.max_concurrent.max(now);
        let fate = if parsed.is_none() {
            Fate::Normal
        } else {
            let u: f64 = inner.rng.random();
            let rate_limit = faults.rate_limit;
            let server_error = rate_limit + faults.server_error;
            let hang = server_error + faults.hang;
            let malformed = hang + faults.malformed;
            if u < rate_limit {
                Fate::RateLimit
            } else if u < server_error {
                Fate::ServerError { html: inner.rng.random_bool(0.5) }
            } else if u < hang {
                Fate::Hang
            } else if u < malformed {
                Fate::Malformed
            } else {
                Fate::Normal
            }
        };
        let delay = match s.config.latency {
            Latency::None => Duration::ZERO,
            Latency::Fixed(d) => d,
            Latency::Uniform { min, max } if max > min => {
                Duration::from_micros(inner.rng.random_range(min.as_micros() as u64..=max.as_micros() as u64))
            }
            Latency::Uniform { min, .. } => min,
        };
        let scripted = match (&fate, &s.config.mode, &parsed) {
            (Fate::Normal, Mode::Scripted(_), Some(_)) => Some(inner.script.pop_front()),
            _ => None,
        };
        if s.config.record_bodies
            && inner.bodies.len() < MAX_BODIES
            && let Some(v) = &parsed
        {
            inner.bodies.push(v.clone());
        }
        (seq, fate, delay, scripted)
    };

    let (status, retry_after_ms, kind, response) = match (&parsed, fate) {
        (None, _) => {
            let r = error_response(StatusCode::BAD_REQUEST, "mock-llm: request body is not JSON");
            (400, None, "bad_request", r)
        }
        (Some(_), Fate::RateLimit) => {
            let mut r =
                error_response(StatusCode::TOO_MANY_REQUESTS, "mock-llm: injected rate limit, please retry later");
            let ms = faults.retry_after.map(|d| d.as_millis() as u64);
            if let Some(d) = faults.retry_after {
                let (name, value) = if d.subsec_millis() == 0 {
                    ("retry-after", d.as_secs().to_string())
                } else {
                    ("retry-after-ms", d.as_millis().to_string())
                };
                if let Ok(v) = HeaderValue::from_str(&value) {
                    r.headers_mut().insert(HeaderName::from_static(name), v);
                }
            }
            (429, ms, "rate_limit", r)
        }
        (Some(_), Fate::ServerError { html: false }) => (
            500,
            None,
            "server_error",
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "mock-llm: injected server error"),
        ),
        (Some(_), Fate::ServerError { html: true }) => {
            let r = (
                StatusCode::BAD_GATEWAY,
                [(header::CONTENT_TYPE, "text/html")],
                "<html><body>mock-llm: upstream connect error</body></html>",
            )
                .into_response();
            (502, None, "server_error", r)
        }
        (Some(_), Fate::Hang) => {
            record_arrival(&s, seq, arrived_ms, 504, None, key.clone(), "hang");
            tokio::time::sleep(faults.hang_for).await;
            return error_response(StatusCode::GATEWAY_TIMEOUT, "mock-llm: injected hang ended");
        }
        (Some(_), Fate::Malformed) => {
            let r = (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"id":"chatcmpl-mock","choices":[{"index":0,"message":{"role":"assistant","content":"Your order"#,
            )
                .into_response();
            (200, None, "malformed", r)
        }
        (Some(req), Fate::Normal) => match (&s.config.mode, scripted) {
            (Mode::Scripted(_), Some(Some(sr))) => (sr.status, None, "script", scripted_response(&sr)),
            (Mode::Scripted(_), _) => {
                (500, None, "script", error_response(StatusCode::INTERNAL_SERVER_ERROR, "mock-llm: script exhausted"))
            }
            (Mode::Agent(agent), _) => {
                let r = axum::Json(agent_answer(agent, req, seq, body.len())).into_response();
                (200, None, "agent", r)
            }
        },
    };
    record_arrival(&s, seq, arrived_ms, status, retry_after_ms, key, kind);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let responded = s.now_ms();
    if let Some(a) = s.lock().stats.arrivals.iter_mut().rev().find(|a| a.seq == seq) {
        a.responded_ms = Some(responded);
    }
    response
}

fn record_arrival(
    s: &Shared,
    seq: u64,
    arrived_ms: f64,
    status: u16,
    retry_after_ms: Option<u64>,
    key: String,
    kind: &'static str,
) {
    let mut inner = s.lock();
    if inner.stats.arrivals.len() < MAX_ARRIVALS {
        inner.stats.arrivals.push(Arrival { seq, arrived_ms, responded_ms: None, status, retry_after_ms, key, kind });
    }
}

fn error_response(status: StatusCode, message: &str) -> Response {
    let kind = if status == StatusCode::TOO_MANY_REQUESTS { "rate_limit_error" } else { "server_error" };
    (status, axum::Json(json!({"error": {"message": message, "type": kind}}))).into_response()
}

fn scripted_response(sr: &ScriptedResponse) -> Response {
    let status = StatusCode::from_u16(sr.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers = HeaderMap::new();
    for (k, v) in &sr.headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
            headers.insert(k, v);
        }
    }
    (status, headers, sr.body.clone()).into_response()
}

fn messages(req: &Value) -> &[Value] {
    req.get("messages").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or("")
}

fn text(m: &Value) -> &str {
    m.get("content").and_then(Value::as_str).unwrap_or("")
}

fn last_user_text(req: &Value) -> String {
    let t = messages(req).iter().rev().find(|m| role(m) == "user").map_or("", text);
    t.chars().take(200).collect()
}

fn agent_answer(agent: &AgentConfig, req: &Value, seq: u64, body_len: usize) -> Value {
    let msgs = messages(req);
    let tools = req.get("tools").and_then(Value::as_array).filter(|t| !t.is_empty());
    let (content, tool_calls, finish) = match tools {
        Some(tools) if !msgs.iter().any(|m| role(m) == "tool") => {
            let name_of = |t: &Value| t.pointer("/function/name").and_then(Value::as_str).unwrap_or("").to_owned();
            let name =
                tools.iter().map(name_of).find(|n| n.contains(&agent.tool_match)).unwrap_or_else(|| name_of(&tools[0]));
            let call = json!({
                "id": format!("call_{seq}_0"),
                "type": "function",
                "function": {"name": name, "arguments": agent.tool_args.to_string()},
            });
            (Value::Null, Some(vec![call]), "tool_calls")
        }
        Some(_) => {
            let text = agent.final_text.clone().unwrap_or_else(|| {
                let last = msgs.iter().rev().find(|m| role(m) == "tool").map_or("", text);
                format!("Done: {}", last.chars().take(200).collect::<String>())
            });
            (Value::String(text), None, "stop")
        }
        None => {
            let system = msgs.iter().find(|m| role(m) == "system").map_or("", text);
            if system.contains("\"subtasks\"") {
                let subtasks: Vec<Value> = (1..=agent.plan_subtasks)
                    .map(|i| {
                        json!({"id": format!("w{i:03}"), "instruction": agent.plan_instruction, "tools": [agent.plan_tool]})
                    })
                    .collect();
                (Value::String(json!({ "subtasks": subtasks }).to_string()), None, "stop")
            } else {
                (Value::String(agent.reply_text.clone()), None, "stop")
            }
        }
    };
    let completion_tokens = content.as_str().map_or(12, |c| c.len() / 4 + 1);
    let mut message = json!({"role": "assistant", "content": content});
    if let Some(calls) = tool_calls {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": format!("chatcmpl-mock-{seq}"),
        "object": "chat.completion",
        "created": 1_764_500_000u64,
        "model": req.get("model").and_then(Value::as_str).unwrap_or("mock-llm"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": body_len / 4 + 1,
            "completion_tokens": completion_tokens,
            "total_tokens": body_len / 4 + 1 + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    async fn post(url: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, String) {
        let r = reqwest::Client::new().post(url).json(body).send().await.unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        (status, headers, r.text().await.unwrap())
    }

    fn work_request(with_result: bool) -> Value {
        let mut messages = vec![
            json!({"role": "system", "content": "You are a worker"}),
            json!({"role": "user", "content": "Subtask w1"}),
        ];
        if with_result {
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "shop__get_order", "arguments": "{}"}}]}));
            messages.push(json!({"role": "tool", "tool_call_id": "c1", "content": "{\"status\":\"shipped\"}"}));
        }
        json!({"model": "m", "messages": messages, "tools": [
            {"type": "function", "function": {"name": "shop__check_coupon", "parameters": {}}},
            {"type": "function", "function": {"name": "shop__get_order", "parameters": {}}},
        ]})
    }

    #[tokio::test]
    async fn agent_calls_the_matching_tool_then_answers_with_its_result() {
        let (_, h) = MockLlm::start(MockConfig::default()).await.unwrap();
        let url = format!("{}/chat/completions", h.base_url());
        let (status, _, body) = post(&url, &work_request(false)).await;
        assert_eq!(status, 200);
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v.pointer("/choices/0/message/tool_calls/0/function/name"), Some(&json!("shop__get_order")));
        assert_eq!(
            v.pointer("/choices/0/message/tool_calls/0/function/arguments"),
            Some(&json!("{\"order_id\":\"A1029\"}"))
        );
        let (_, _, body) = post(&url, &work_request(true)).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v.pointer("/choices/0/message/content"), Some(&json!("Done: {\"status\":\"shipped\"}")));
        assert_eq!(h.stats().requests, 2);
    }

    #[tokio::test]
    async fn agent_plans_the_configured_number_of_subtasks() {
        let config = MockConfig {
            mode: Mode::Agent(AgentConfig { plan_subtasks: 5, ..AgentConfig::default() }),
            ..MockConfig::default()
        };
        let (_, h) = MockLlm::start(config).await.unwrap();
        let req = json!({"model": "m", "messages": [{"role": "system", "content": "Answer {\"subtasks\": [...]}"}, {"role": "user", "content": "hi"}]});
        let (_, _, body) = post(&format!("{}/chat/completions", h.base_url()), &req).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        let plan: Value =
            serde_json::from_str(v.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap()).unwrap();
        let subtasks = plan["subtasks"].as_array().unwrap();
        assert_eq!(subtasks.len(), 5);
        assert_eq!(
            subtasks[4],
            json!({"id": "w005", "instruction": "Check order A1029", "tools": ["shop__get_order"]})
        );
    }

    #[tokio::test]
    async fn same_seed_gives_the_same_faults_in_the_same_order() {
        let mut runs = Vec::new();
        for _ in 0..2 {
            let config = MockConfig {
                seed: 42,
                faults: Faults { rate_limit: 0.3, server_error: 0.2, ..Faults::default() },
                ..MockConfig::default()
            };
            let (_, h) = MockLlm::start(config).await.unwrap();
            for _ in 0..40 {
                post(&format!("{}/chat/completions", h.base_url()), &work_request(false)).await;
            }
            runs.push(h.stats().arrivals.iter().map(|a| a.status).collect::<Vec<_>>());
        }
        assert_eq!(runs[0], runs[1]);
        let limited = runs[0].iter().filter(|s| **s == 429).count();
        assert!((4..=22).contains(&limited), "{limited} of 40 rate-limited");
        assert!(runs[0].iter().any(|s| *s >= 500));
    }

    #[tokio::test]
    async fn rate_limits_carry_retry_after_and_stats_are_served() {
        let config = MockConfig { faults: Faults { rate_limit: 1.0, ..Faults::default() }, ..MockConfig::default() };
        let (addr, h) = MockLlm::start(config).await.unwrap();
        let (status, headers, _) = post(&format!("http://{addr}/v1/chat/completions"), &work_request(false)).await;
        assert_eq!(status, 429);
        assert_eq!(headers.get("retry-after").unwrap(), "1");
        let s: Value = reqwest::get(format!("http://{addr}/_stats")).await.unwrap().json().await.unwrap();
        assert_eq!(s["requests"], 1);
        assert_eq!(s["arrivals"][0]["retry_after_ms"], 1000);
        assert_eq!(s["arrivals"][0]["key"], "Subtask w1");
        h.shutdown().await;
    }

    #[tokio::test]
    async fn scripted_answers_come_in_order_then_the_script_is_exhausted() {
        let cases = load_cases(
            "{\"name\":\"a\",\"status\":503,\"headers\":{\"content-type\":\"text/html\"},\"body\":\"<html>x</html>\"}\n\n{\"name\":\"b\",\"status\":200,\"body\":{\"choices\":[]}}\n",
        )
        .unwrap();
        assert_eq!(cases.len(), 2);
        let (addr, _h) =
            MockLlm::start(MockConfig::scripted(cases.into_iter().map(|(_, r)| r).collect())).await.unwrap();
        let url = format!("http://{addr}/v1/chat/completions");
        let (s1, h1, b1) = post(&url, &json!({})).await;
        assert_eq!(
            (s1, h1.get("content-type").unwrap().to_str().unwrap(), b1.as_str()),
            (503, "text/html", "<html>x</html>")
        );
        let (s2, _, b2) = post(&url, &json!({})).await;
        assert_eq!((s2, b2.as_str()), (200, "{\"choices\":[]}"));
        let (s3, _, _) = post(&url, &json!({})).await;
        assert_eq!(s3, 500);
    }
}
