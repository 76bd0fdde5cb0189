//! A mock OpenAI-compatible chat-completions server for tests and benchmarks: scripted answers, a generic agent with provider quirks, latency, injected faults and request statistics.
//!
//! Routes: `POST /v1/chat/completions` (and `/chat/completions`),
//! `GET /v1/models`, `GET /_stats` (the [`Stats`] as JSON), `POST /_reset`
//! (clears the statistics). Every fate — latency, injected fault — is drawn
//! from one RNG seeded with [`MockConfig::seed`], in arrival order, so a run
//! with the same seed and the same arrival order answers the same way.

use std::collections::{BTreeMap, VecDeque};
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

/// The generic agent used by swarm benchmarks and whole-conversation tests.
///
/// - a plan request (no tools, the system prompt contains `"subtasks"`): the
///   configured [`subtasks`](Self::subtasks) as `w01`, `w02`…, or else a plan of
///   `plan_subtasks` subtasks `{"id":"w001","instruction":plan_instruction,"tools":[plan_tool]}`;
/// - a work request with tools, no tool result yet and `tool_choice` not `"none"`:
///   the calls of its configured subtask (the `Subtask wNN:` message names it),
///   all in one answer, or else one call of the first tool whose name contains
///   `tool_match` (else the first tool) with `tool_args`;
/// - a work request after tool results (as `tool` messages, or flattened into a
///   user message) or with `tool_choice: "none"`: `final_text`, or
///   `"Done: <each tool result, at most 2,000 characters, joined by \" | \">"`;
/// - a reply request (`Subtask results (JSON):`) with `reply_from_results`: the
///   results' answers, one per line (a failed one as `<id>: could not be done`);
/// - otherwise `reply_text`.
///
/// With [`plan_from_message`](Self::plan_from_message), the customer's message is a
/// script the agent follows ([`script_steps`]): each line `- <id>[ after <id>,<id>]: <text>`
/// becomes a subtask (`depends_on` from `after`), and a `[call <tool> <JSON arguments>]` at the
/// end of its text is the call its worker makes (the instruction keeps it, so the work
/// request carries it back). [`vary_reasons`](Self::vary_reasons) makes free text differ
/// between two answers to the same request, as a real model's does.
///
/// [`quirks`](Self::quirks) make it behave like a particular provider.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub tool_match: String,
    pub tool_args: Value,
    pub final_text: Option<String>,
    pub plan_subtasks: usize,
    pub plan_instruction: String,
    pub plan_tool: String,
    pub reply_text: String,
    /// Planned instead of `plan_subtasks` copies when not empty.
    pub subtasks: Vec<AgentSubtask>,
    pub reply_from_results: bool,
    /// Plan (and call) what the customer's message scripts, when it scripts anything.
    pub plan_from_message: bool,
    /// A `reason` argument of a scripted call gets ` (draft <request seq>)` appended: the
    /// free text of two answers to the same request differs, as a real model's does.
    pub vary_reasons: bool,
    pub quirks: Quirks,
}

/// One subtask the agent plans, and the tool calls it makes for it (in one answer).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSubtask {
    pub instruction: String,
    /// `(tool name, arguments)`.
    pub calls: Vec<(String, Value)>,
}

impl AgentSubtask {
    pub fn new(instruction: &str, calls: &[(&str, Value)]) -> Self {
        Self {
            instruction: instruction.to_owned(),
            calls: calls.iter().map(|(t, a)| ((*t).to_owned(), a.clone())).collect(),
        }
    }
}

/// Provider behaviour the agent emulates; each is off by default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quirks {
    /// A thinking model: every answer carries `reasoning_content`, tool-call answers included.
    pub thinking: bool,
    /// Kimi's thinking models: an assistant tool-call message sent back without
    /// `reasoning_content` is answered 400 "thinking is enabled but reasoning_content
    /// is missing in assistant tool call message at index N".
    pub require_reasoning: bool,
    /// Tokens a thinking answer spends on reasoning first: a request whose output limit
    /// (`max_tokens` or `max_completion_tokens`) leaves less than [`ANSWER_ROOM_TOKENS`]
    /// after it is answered `finish_reason: "length"` with reasoning only.
    pub reasoning_tokens: Option<u32>,
    /// A Bedrock-style gateway: a transcript with tool calls or results but no tool
    /// definitions is answered 400 "The toolConfig field must be defined…"; like such
    /// gateways, it drops the tools of a `tool_choice: "none"` request (Bedrock has no "none").
    pub bedrock: bool,
    /// Context window, estimated tokens (4 ASCII characters or 1 other character make a
    /// token): a longer request is answered 400 `context_length_exceeded`.
    pub context_tokens: Option<u64>,
    /// Newer OpenAI models: `max_tokens` is answered 400 "Unsupported parameter".
    pub reject_max_tokens: bool,
    /// OpenAI's schema check: a tool whose parameters have a non-object root, a property
    /// without `type` or an array without `items` is answered 400 "Invalid schema for function".
    pub strict_schemas: bool,
}

/// Tokens a thinking answer needs after its reasoning ([`Quirks::reasoning_tokens`]).
pub const ANSWER_ROOM_TOKENS: u32 = 256;

impl Quirks {
    /// A named provider: `kimi-thinking` (reasoning every turn, 400 without it, 3,000
    /// tokens of reasoning), `bedrock`, `openai-reasoning` (refuses `max_tokens`, 3,000
    /// tokens of reasoning), `openai-strict` (schema check), `none`.
    pub fn named(name: &str) -> Option<Self> {
        Some(match name {
            "kimi-thinking" => {
                Self { thinking: true, require_reasoning: true, reasoning_tokens: Some(3_000), ..Self::default() }
            }
            "bedrock" => Self { bedrock: true, ..Self::default() },
            "openai-reasoning" => Self { reject_max_tokens: true, reasoning_tokens: Some(3_000), ..Self::default() },
            "openai-strict" => Self { strict_schemas: true, ..Self::default() },
            "none" => Self::default(),
            _ => return None,
        })
    }
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
            subtasks: Vec::new(),
            reply_from_results: false,
            plan_from_message: false,
            vary_reasons: false,
            quirks: Quirks::default(),
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
    /// Agent mode: the answer cut off by the output limit (`finish_reason: "length"`): its text
    /// halved, or its last tool call's arguments cut mid-JSON. Scripted mode answers as usual.
    pub truncated: f64,
    /// Space each kind's faults instead of drawing a fate per request: a kind of rate `r` comes
    /// every `1/r` requests times a factor drawn from `[0.5, 1.5]` (its own seeded stream), the
    /// first within `1/r` requests — so `n ≥ 1/r` requests always see it. A kind due while
    /// another is injected waits for the next request.
    pub spaced: bool,
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
            truncated: 0.0,
            spaced: false,
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
    /// What answered: `agent`, `script`, `rate_limit`, `server_error`, `hang`, `malformed`,
    /// `truncated`, `bad_request`, or `quirk` (the agent refused the request as its [`Quirks`] say).
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
    /// Requests by [`Arrival::kind`], every request counted (also past the arrivals kept).
    pub by_kind: BTreeMap<&'static str, u64>,
}

struct Shared {
    started: Instant,
    config: MockConfig,
    inner: Mutex<Inner>,
    in_flight: AtomicUsize,
}

struct Inner {
    rng: StdRng,
    /// With [`Faults::spaced`]: per kind (rate limit, server error, hang, malformed, truncated)
    /// its stream, mean gap in requests and the request number it is due at.
    spacing: Vec<(StdRng, f64, f64)>,
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
                spacing: spacing(&config.faults, config.seed),
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
    Truncated,
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
        } else if faults.spaced {
            let agent = matches!(s.config.mode, Mode::Agent(_));
            match spaced_fate(&mut inner.spacing, seq + 1, agent) {
                Some(0) => Fate::RateLimit,
                Some(1) => Fate::ServerError { html: inner.rng.random_bool(0.5) },
                Some(2) => Fate::Hang,
                Some(3) => Fate::Malformed,
                Some(_) => Fate::Truncated,
                None => Fate::Normal,
            }
        } else {
            let u: f64 = inner.rng.random();
            let rate_limit = faults.rate_limit;
            let server_error = rate_limit + faults.server_error;
            let hang = server_error + faults.hang;
            let malformed = hang + faults.malformed;
            let truncated = malformed + faults.truncated;
            if u < rate_limit {
                Fate::RateLimit
            } else if u < server_error {
                Fate::ServerError { html: inner.rng.random_bool(0.5) }
            } else if u < hang {
                Fate::Hang
            } else if u < malformed {
                Fate::Malformed
            } else if u < truncated && matches!(s.config.mode, Mode::Agent(_)) {
                Fate::Truncated
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
        (Some(req), Fate::Truncated) => match &s.config.mode {
            Mode::Agent(agent) => {
                let answer = truncate_answer(agent_answer(agent, req, seq, body.len()));
                (200, None, "truncated", axum::Json(answer).into_response())
            }
            Mode::Scripted(_) => {
                (500, None, "script", error_response(StatusCode::INTERNAL_SERVER_ERROR, "mock-llm: script exhausted"))
            }
        },
        (Some(req), Fate::Normal) => match (&s.config.mode, scripted) {
            (Mode::Scripted(_), Some(Some(sr))) => (sr.status, None, "script", scripted_response(&sr)),
            (Mode::Scripted(_), _) => {
                (500, None, "script", error_response(StatusCode::INTERNAL_SERVER_ERROR, "mock-llm: script exhausted"))
            }
            (Mode::Agent(agent), _) => match quirk_refusal(&agent.quirks, req) {
                Some(refusal) => (400, None, "quirk", (StatusCode::BAD_REQUEST, axum::Json(refusal)).into_response()),
                None => {
                    let r = axum::Json(agent_answer(agent, req, seq, body.len())).into_response();
                    (200, None, "agent", r)
                }
            },
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

/// The spaced streams of the five fault kinds, in [`spaced_fate`]'s order.
fn spacing(f: &Faults, seed: u64) -> Vec<(StdRng, f64, f64)> {
    [f.rate_limit, f.server_error, f.hang, f.malformed, f.truncated]
        .iter()
        .enumerate()
        .map(|(i, rate)| {
            let mut rng = StdRng::seed_from_u64(seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            if *rate <= 0.0 {
                return (rng, f64::INFINITY, f64::INFINITY);
            }
            let gap = 1.0 / rate.min(1.0);
            let first = 1.0 + rng.random::<f64>() * (gap - 1.0);
            (rng, gap, first)
        })
        .collect()
}

/// With [`Faults::spaced`]: the kind (index into [`spacing`]) request number `n` (from 1) gets,
/// if one is due; truncation only in agent mode.
fn spaced_fate(spacing: &mut [(StdRng, f64, f64)], n: u64, agent: bool) -> Option<usize> {
    let n = n as f64;
    let kind = spacing.iter().enumerate().position(|(i, (_, _, due))| *due <= n && (i < 4 || agent))?;
    let (rng, gap, due) = &mut spacing[kind];
    let jitter = (0.5f64).min((*gap - 1.0) / *gap);
    while *due <= n {
        *due += *gap * rng.random_range(1.0 - jitter..=1.0 + jitter);
    }
    Some(kind)
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
    *inner.stats.by_kind.entry(kind).or_default() += 1;
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

/// The 400 body a provider with these quirks answers `req` with, if it refuses it.
fn quirk_refusal(q: &Quirks, req: &Value) -> Option<Value> {
    let error = |message: String, code: &str| json!({"error": {"message": message, "type": "invalid_request_error", "code": code}});
    if q.reject_max_tokens && req.get("max_tokens").is_some() {
        return Some(error(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
                .into(),
            "unsupported_parameter",
        ));
    }
    if q.strict_schemas {
        for t in offered_tools(req) {
            let name = t.pointer("/function/name").and_then(Value::as_str).unwrap_or("");
            let params = t.pointer("/function/parameters").unwrap_or(&Value::Null);
            if let Some(context) = schema_problem(params, &mut Vec::new()) {
                return Some(error(
                    format!(
                        "Invalid schema for function '{name}': In context=({context}), schema must have a 'type' key."
                    ),
                    "invalid_function_parameters",
                ));
            }
        }
    }
    if let Some(window) = q.context_tokens {
        let used = request_tokens(req);
        if used > window {
            return Some(error(
                format!(
                    "This model's maximum context length is {window} tokens. However, your messages resulted in {used} tokens. Please reduce the length of the messages."
                ),
                "context_length_exceeded",
            ));
        }
    }
    let msgs = messages(req);
    if q.bedrock {
        let history = msgs.iter().any(|m| role(m) == "tool" || has_tool_calls(m));
        let tools_defined = !offered_tools(req).is_empty() && req.get("tool_choice") != Some(&json!("none"));
        if history && !tools_defined {
            return Some(
                json!({"error": {"message": "litellm.BadRequestError: BedrockException - {\"message\":\"The toolConfig field must be defined when using toolUse and toolResult content blocks.\"}", "type": null, "code": "400"}}),
            );
        }
    }
    if q.require_reasoning
        && let Some(index) =
            msgs.iter().position(|m| has_tool_calls(m) && !m.get("reasoning_content").is_some_and(Value::is_string))
    {
        return Some(error(
            format!(
                "thinking is enabled but reasoning_content is missing in assistant tool call message at index {index}"
            ),
            "invalid_request_error",
        ));
    }
    None
}

fn offered_tools(req: &Value) -> &[Value] {
    req.get("tools").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn has_tool_calls(m: &Value) -> bool {
    role(m) == "assistant" && m.get("tool_calls").and_then(Value::as_array).is_some_and(|c| !c.is_empty())
}

/// Where a tool's parameters break OpenAI's schema rules (`'properties', 'x'`), if anywhere.
fn schema_problem(schema: &Value, path: &mut Vec<String>) -> Option<String> {
    let context = |path: &[String]| path.iter().map(|p| format!("'{p}'")).collect::<Vec<_>>().join(", ");
    let Some(o) = schema.as_object() else { return Some(context(path)) };
    if path.is_empty() && o.get("type") != Some(&json!("object")) {
        return Some("'parameters'".into());
    }
    let typed = o.contains_key("type") || ["$ref", "anyOf", "oneOf", "allOf"].iter().any(|k| o.contains_key(*k));
    if !typed {
        return Some(context(path));
    }
    if o.get("type") == Some(&json!("array")) && !o.contains_key("items") {
        path.push("items".into());
        return Some(context(path));
    }
    for key in ["properties"] {
        if let Some(props) = o.get(key).and_then(Value::as_object) {
            for (name, prop) in props {
                path.extend([key.to_owned(), name.clone()]);
                if let Some(p) = schema_problem(prop, path) {
                    return Some(p);
                }
                path.truncate(path.len() - 2);
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = o.get(key).filter(|v| v.is_object()) {
            path.push(key.to_owned());
            if let Some(p) = schema_problem(sub, path) {
                return Some(p);
            }
            path.pop();
        }
    }
    None
}

/// Estimated prompt tokens: 4 ASCII characters or 1 other character make a token.
fn request_tokens(req: &Value) -> u64 {
    fn tokens(s: &str) -> u64 {
        let ascii = s.chars().filter(char::is_ascii).count() as u64;
        ascii.div_ceil(4) + (s.chars().count() as u64 - ascii)
    }
    messages(req)
        .iter()
        .map(|m| {
            4 + tokens(text(m))
                + m.get("reasoning_content").and_then(Value::as_str).map_or(0, tokens)
                + m.get("tool_calls").map_or(0, |c| tokens(&c.to_string()))
        })
        .sum::<u64>()
        + offered_tools(req).iter().map(|t| tokens(&t.to_string())).sum::<u64>()
}

/// The id of a work request's subtask (`Subtask w01: …` → `w01`).
fn subtask_id(req: &Value) -> Option<String> {
    messages(req).iter().rev().filter(|m| role(m) == "user").find_map(|m| {
        let rest = text(m).strip_prefix("Subtask ")?;
        Some(rest.split(':').next()?.trim().to_owned())
    })
}

/// Opens the user message of a flattened round's tool results (as the swarm's client writes it).
const FLATTENED_RESULTS: &str = "Results of the tools called above:";
/// Opens the JSON of a reply request (as the swarm's aggregator writes it).
const REPLY_RESULTS: &str = "Subtask results (JSON):\n";

fn agent_answer(agent: &AgentConfig, req: &Value, seq: u64, body_len: usize) -> Value {
    let msgs = messages(req);
    let tools = req.get("tools").and_then(Value::as_array).filter(|t| !t.is_empty());
    let choice_none = req.get("tool_choice") == Some(&json!("none"));
    let results: Vec<&str> = msgs
        .iter()
        .filter(|m| role(m) == "tool" || (role(m) == "user" && text(m).starts_with(FLATTENED_RESULTS)))
        .map(text)
        .collect();
    let work = subtask_id(req).is_some();
    let (content, tool_calls, finish) = match tools {
        Some(tools) if results.is_empty() && !choice_none => {
            let name_of = |t: &Value| t.pointer("/function/name").and_then(Value::as_str).unwrap_or("").to_owned();
            let planned = subtask_id(req)
                .and_then(|id| id.strip_prefix('w').and_then(|n| n.parse::<usize>().ok()))
                .and_then(|n| agent.subtasks.get(n.wrapping_sub(1)));
            let scripted = if agent.plan_from_message { scripted_call(req) } else { None };
            let calls: Vec<(String, String)> = match (planned, scripted) {
                (Some(s), _) if !s.calls.is_empty() => {
                    s.calls.iter().map(|(t, a)| (t.clone(), a.to_string())).collect()
                }
                (_, Some((tool, mut args))) => {
                    if agent.vary_reasons
                        && let Some(Value::String(reason)) = args.get_mut("reason")
                    {
                        reason.push_str(&format!(" (draft {seq})"));
                    }
                    vec![(tool, args.to_string())]
                }
                _ => {
                    let name = tools
                        .iter()
                        .map(name_of)
                        .find(|n| n.contains(&agent.tool_match))
                        .unwrap_or_else(|| name_of(&tools[0]));
                    vec![(name, agent.tool_args.to_string())]
                }
            };
            let calls = calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": format!("call_{seq}_{i}"), "type": "function", "function": {"name": name, "arguments": args}})
                })
                .collect();
            (Value::Null, Some(calls), "tool_calls")
        }
        _ if tools.is_some() || !results.is_empty() || (work && choice_none) => {
            let text = agent.final_text.clone().unwrap_or_else(|| {
                let facts: Vec<String> = results.iter().map(|r| r.chars().take(2_000).collect()).collect();
                format!("Done: {}", facts.join(" | "))
            });
            (Value::String(text), None, "stop")
        }
        _ => {
            let system = msgs.iter().find(|m| role(m) == "system").map_or("", text);
            let user = msgs.iter().rev().find(|m| role(m) == "user").map_or("", text);
            let script = if agent.plan_from_message { customer_script(msgs) } else { Vec::new() };
            if system.contains("\"subtasks\"") {
                let subtasks: Vec<Value> = if !script.is_empty() {
                    script
                        .iter()
                        .map(|step| {
                            let tools: Vec<&str> = step.call.iter().map(|(t, _)| t.as_str()).collect();
                            json!({"id": step.id, "instruction": step.instruction, "tools": tools, "depends_on": step.after})
                        })
                        .collect()
                } else if agent.subtasks.is_empty() {
                    (1..=agent.plan_subtasks)
                        .map(|i| {
                            json!({"id": format!("w{i:03}"), "instruction": agent.plan_instruction, "tools": [agent.plan_tool]})
                        })
                        .collect()
                } else {
                    agent
                        .subtasks
                        .iter()
                        .enumerate()
                        .map(|(i, s)| {
                            let mut tools: Vec<&str> = s.calls.iter().map(|(t, _)| t.as_str()).collect();
                            tools.dedup();
                            json!({"id": format!("w{:02}", i + 1), "instruction": s.instruction, "tools": tools})
                        })
                        .collect()
                };
                (Value::String(json!({ "subtasks": subtasks }).to_string()), None, "stop")
            } else if agent.reply_from_results
                && let Some((_, json_text)) = user.split_once(REPLY_RESULTS)
            {
                (Value::String(reply_from_results(json_text)), None, "stop")
            } else {
                (Value::String(agent.reply_text.clone()), None, "stop")
            }
        }
    };
    let q = &agent.quirks;
    let limit = req.get("max_tokens").or_else(|| req.get("max_completion_tokens")).and_then(Value::as_u64);
    let starved = q.thinking
        && q.reasoning_tokens.is_some_and(|r| limit.is_some_and(|l| l < u64::from(r) + u64::from(ANSWER_ROOM_TOKENS)));
    let mut completion_tokens = content.as_str().map_or(12, |c| c.len() / 4 + 1);
    let mut message = json!({"role": "assistant", "content": content});
    let finish = if starved {
        // The whole budget went to reasoning: no answer, no call.
        let spent = limit.unwrap_or(0) as usize;
        message = json!({"role": "assistant", "content": "", "reasoning_content": "Let me think about this step by step. ".repeat(spent / 9 + 1)});
        completion_tokens = spent;
        "length"
    } else {
        if let Some(calls) = tool_calls {
            message["tool_calls"] = Value::Array(calls);
        }
        if q.thinking {
            let thought =
                if finish == "tool_calls" { "I need facts: I will call the tools." } else { "I have what I need." };
            message["reasoning_content"] = Value::String(thought.into());
        }
        finish
    };
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

/// Opens the user message that carries the customer's text (as the swarm's planner writes it).
const CUSTOMER_MESSAGE: &str = "Customer message:\n";
/// Opens a scripted call at the end of a step's text.
const CALL_OPEN: &str = "[call ";

/// One step of a customer message the agent follows ([`AgentConfig::plan_from_message`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptStep {
    /// The subtask id, e.g. `w03`.
    pub id: String,
    /// Ids of the steps this one needs first.
    pub after: Vec<String>,
    /// The subtask's instruction: the step's text, its `[call …]` included.
    pub instruction: String,
    /// `(tool, arguments)` of the call its worker makes, if any.
    pub call: Option<(String, Value)>,
}

impl ScriptStep {
    /// A step with text `text` and, optionally, the call its worker makes.
    pub fn new(id: &str, after: &[&str], text: &str, call: Option<(&str, Value)>) -> Self {
        let instruction = match &call {
            Some((tool, args)) => format!("{text} {CALL_OPEN}{tool} {args}]"),
            None => text.to_owned(),
        };
        Self {
            id: id.to_owned(),
            after: after.iter().map(|a| (*a).to_owned()).collect(),
            instruction,
            call: call.map(|(t, a)| (t.to_owned(), a)),
        }
    }

    /// The step as one line of a customer message: `- <id>[ after <ids>]: <instruction>`.
    pub fn line(&self) -> String {
        let after = if self.after.is_empty() { String::new() } else { format!(" after {}", self.after.join(",")) };
        format!("- {}{after}: {}", self.id, self.instruction)
    }
}

/// The steps a customer message scripts: every line `- <id>[ after <id>,<id>]: <text>`, where the
/// id is 1–16 ASCII letters or digits; a text ending in `[call <tool> <JSON object>]` names the
/// call. Other lines are ignored; a line whose call does not parse is a step without a call.
pub fn script_steps(text: &str) -> Vec<ScriptStep> {
    text.lines().filter_map(script_step).collect()
}

fn script_step(line: &str) -> Option<ScriptStep> {
    let (head, instruction) = line.trim().strip_prefix("- ")?.split_once(": ")?;
    let (id, after) = match head.split_once(" after ") {
        Some((id, after)) => (id, after.split(',').map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect()),
        None => (head, Vec::new()),
    };
    let id_ok = (1..=16).contains(&id.len()) && id.chars().all(|c| c.is_ascii_alphanumeric());
    if !id_ok {
        return None;
    }
    let instruction = instruction.trim().to_owned();
    let call = parse_call(&instruction);
    Some(ScriptStep { id: id.to_owned(), after, instruction, call })
}

/// The `[call <tool> <JSON object>]` at the end of `text`, if there is one.
fn parse_call(text: &str) -> Option<(String, Value)> {
    let start = text.rfind(CALL_OPEN)?;
    let inner = text[start + CALL_OPEN.len()..].trim_end().strip_suffix(']')?;
    let (tool, args) = inner.split_once(' ')?;
    let args: Value = serde_json::from_str(args.trim()).ok().filter(Value::is_object)?;
    Some((tool.to_owned(), args))
}

/// The steps of the customer message of a plan request.
fn customer_script(msgs: &[Value]) -> Vec<ScriptStep> {
    msgs.iter()
        .filter(|m| role(m) == "user")
        .find_map(|m| text(m).strip_prefix(CUSTOMER_MESSAGE))
        .map(script_steps)
        .unwrap_or_default()
}

/// The call a work request's subtask scripts: the `[call …]` ending the first line of its
/// `Subtask <id>: <instruction>` message.
fn scripted_call(req: &Value) -> Option<(String, Value)> {
    let own = messages(req).iter().rev().filter(|m| role(m) == "user").find(|m| text(m).starts_with("Subtask "))?;
    parse_call(text(own).lines().next()?)
}

/// An answer cut off by the output limit: `finish_reason: "length"`, the last tool call's
/// arguments cut mid-JSON, or else the text halved.
fn truncate_answer(mut answer: Value) -> Value {
    let half = |s: &str| s.chars().take(s.chars().count() / 2).collect::<String>();
    if let Some(choice) = answer.pointer_mut("/choices/0") {
        choice["finish_reason"] = json!("length");
        let message = &mut choice["message"];
        let last_call = message.get_mut("tool_calls").and_then(Value::as_array_mut).and_then(|c| c.last_mut());
        if let Some(call) = last_call {
            let cut = half(call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or(""));
            call["function"]["arguments"] = Value::String(cut);
        } else {
            let cut = half(message.get("content").and_then(Value::as_str).unwrap_or(""));
            message["content"] = Value::String(cut);
        }
    }
    answer
}

/// The answers of a reply request's results, one per line.
fn reply_from_results(json_text: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(json_text) else { return "No results could be read.".into() };
    let lines: Vec<String> = v["results"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| match r["answer"].as_str() {
                    Some(a) => a.to_owned(),
                    None => format!("{}: could not be done", r["id"].as_str().unwrap_or("?")),
                })
                .collect()
        })
        .unwrap_or_default();
    lines.join("\n")
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

    fn agent_with(quirks: Quirks) -> MockConfig {
        MockConfig { mode: Mode::Agent(AgentConfig { quirks, ..AgentConfig::default() }), ..MockConfig::default() }
    }

    fn error_message(body: &str) -> String {
        let v: Value = serde_json::from_str(body).unwrap();
        v.pointer("/error/message").and_then(Value::as_str).unwrap_or("").to_owned()
    }

    #[tokio::test]
    async fn a_kimi_thinking_agent_reasons_every_turn_and_refuses_a_tool_call_without_its_reasoning() {
        let (_, h) = MockLlm::start(agent_with(Quirks::named("kimi-thinking").unwrap())).await.unwrap();
        let url = format!("{}/chat/completions", h.base_url());
        let (status, _, body) = post(&url, &work_request(false)).await;
        assert_eq!(status, 200);
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v.pointer("/choices/0/message/reasoning_content"),
            Some(&json!("I need facts: I will call the tools."))
        );
        let (status, _, body) = post(&url, &work_request(true)).await;
        assert_eq!(status, 400);
        assert_eq!(
            error_message(&body),
            "thinking is enabled but reasoning_content is missing in assistant tool call message at index 2"
        );
        let mut with = work_request(true);
        with["messages"][2]["reasoning_content"] = json!("");
        let (status, _, _) = post(&url, &with).await;
        assert_eq!(status, 200, "present, even empty, is enough");
        // A limit that leaves no room after 3,000 tokens of reasoning: cut, reasoning only.
        with["max_tokens"] = json!(2048);
        let (_, _, body) = post(&url, &with).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v.pointer("/choices/0/finish_reason"), Some(&json!("length")));
        assert_eq!(v.pointer("/choices/0/message/content"), Some(&json!("")));
        assert_eq!(h.stats().arrivals.iter().filter(|a| a.kind == "quirk").count(), 1);
    }

    #[tokio::test]
    async fn a_bedrock_style_gateway_refuses_tool_history_without_tools_and_drops_them_for_choice_none() {
        let (_, h) = MockLlm::start(agent_with(Quirks::named("bedrock").unwrap())).await.unwrap();
        let url = format!("{}/chat/completions", h.base_url());
        let mut last = work_request(true);
        assert_eq!(post(&url, &last).await.0, 200);
        last["tool_choice"] = json!("none");
        let (status, _, body) = post(&url, &last).await;
        assert_eq!(status, 400);
        assert!(error_message(&body).contains("The toolConfig field must be defined"), "{body}");
    }

    #[tokio::test]
    async fn context_window_max_tokens_and_schema_quirks_answer_like_their_providers() {
        let q =
            Quirks { context_tokens: Some(100), reject_max_tokens: true, strict_schemas: true, ..Quirks::default() };
        let (_, h) = MockLlm::start(agent_with(q)).await.unwrap();
        let url = format!("{}/chat/completions", h.base_url());
        let mut r = work_request(false);
        r["max_tokens"] = json!(10);
        assert!(error_message(&post(&url, &r).await.2).starts_with("Unsupported parameter: 'max_tokens'"));
        let mut r = work_request(false);
        r["tools"][0]["function"]["parameters"] =
            json!({"type": "object", "properties": {"f": {"type": "object", "additionalProperties": {}}}});
        let m = error_message(&post(&url, &r).await.2);
        assert!(m.contains("In context=('properties', 'f', 'additionalProperties')"), "{m}");
        let mut r = work_request(false);
        r["tools"] = json!([]);
        r["messages"][1]["content"] = json!("订".repeat(200));
        let (status, _, body) = post(&url, &r).await;
        assert_eq!(status, 400);
        assert!(body.contains("context_length_exceeded"), "{body}");
    }

    #[tokio::test]
    async fn configured_subtasks_are_planned_called_in_parallel_and_echoed_in_the_reply() {
        let agent = AgentConfig {
            subtasks: vec![
                AgentSubtask::new("Check A1029", &[("shop__get_order", json!({"order_id": "A1029"}))]),
                AgentSubtask::new(
                    "Check two coupons",
                    &[
                        ("shop__check_coupon", json!({"code": "SAVE20"})),
                        ("shop__check_coupon", json!({"code": "TECH100"})),
                    ],
                ),
            ],
            reply_from_results: true,
            ..AgentConfig::default()
        };
        let (_, h) = MockLlm::start(MockConfig { mode: Mode::Agent(agent), ..MockConfig::default() }).await.unwrap();
        let url = format!("{}/chat/completions", h.base_url());
        let plan = json!({"model": "m", "messages": [{"role": "system", "content": "Answer {\"subtasks\": [...]}"}, {"role": "user", "content": "hi"}]});
        let v: Value = serde_json::from_str(&post(&url, &plan).await.2).unwrap();
        let plan: Value =
            serde_json::from_str(v.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap()).unwrap();
        assert_eq!(
            plan["subtasks"][1],
            json!({"id": "w02", "instruction": "Check two coupons", "tools": ["shop__check_coupon"]})
        );
        let mut work = work_request(false);
        work["messages"][1]["content"] = json!("Subtask w02: Check two coupons");
        let v: Value = serde_json::from_str(&post(&url, &work).await.2).unwrap();
        let calls = v.pointer("/choices/0/message/tool_calls").and_then(Value::as_array).unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].pointer("/function/arguments"), Some(&json!("{\"code\":\"TECH100\"}")));
        let reply = json!({"model": "m", "messages": [{"role": "system", "content": "You write the reply"},
            {"role": "user", "content": "Customer message:\nhi\n\nSubtask results (JSON):\n{\"results\": [{\"id\": \"w01\", \"answer\": \"A1029 is paid\"}, {\"id\": \"w02\", \"problem\": \"x\"}]}"}]});
        let v: Value = serde_json::from_str(&post(&url, &reply).await.2).unwrap();
        assert_eq!(v.pointer("/choices/0/message/content"), Some(&json!("A1029 is paid\nw02: could not be done")));
    }

    #[tokio::test]
    async fn a_scripted_customer_message_is_planned_with_its_dependencies_and_its_calls_are_made() {
        let steps = [
            ScriptStep::new("w01", &[], "Look up A1007", Some(("shop__get_order", json!({"order_id": "A1007"})))),
            ScriptStep::new("w02", &[], "Say thanks", None),
            ScriptStep::new(
                "w03",
                &["w01", "w02"],
                "Refund 1 CNY on A1007",
                Some(("shop__refund", json!({"order_id": "A1007", "amount": 1.0, "reason": "chaos c7/w03"}))),
            ),
        ];
        let message: String = std::iter::once("Please handle each part:".to_owned())
            .chain(steps.iter().map(ScriptStep::line))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(script_steps(&message), steps, "a step survives its line");
        let agent = AgentConfig { plan_from_message: true, vary_reasons: true, ..AgentConfig::default() };
        let (_, h) = MockLlm::start(MockConfig { mode: Mode::Agent(agent), ..MockConfig::default() }).await.unwrap();
        let url = format!("{}/chat/completions", h.base_url());
        let plan = json!({"model": "m", "messages": [{"role": "system", "content": "Answer {\"subtasks\": [...]}"},
            {"role": "user", "content": format!("Customer message:\n{message}")}]});
        let v: Value = serde_json::from_str(&post(&url, &plan).await.2).unwrap();
        let plan: Value =
            serde_json::from_str(v.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap()).unwrap();
        assert_eq!(
            plan["subtasks"][2],
            json!({"id": "w03", "instruction": steps[2].instruction, "tools": ["shop__refund"], "depends_on": ["w01", "w02"]})
        );
        assert_eq!(plan["subtasks"][1]["tools"], json!([]));
        // The worker of w03 sends its instruction back, dependency results below it.
        let mut work = work_request(false);
        work["messages"][1]["content"] = json!(format!(
            "Subtask w03: {}\n\nResults of the subtasks this one depends on:\n- w01 (x): [y]",
            steps[2].instruction
        ));
        let mut reasons = Vec::new();
        for _ in 0..2 {
            let v: Value = serde_json::from_str(&post(&url, &work).await.2).unwrap();
            assert_eq!(v.pointer("/choices/0/message/tool_calls/0/function/name"), Some(&json!("shop__refund")));
            let args: Value = serde_json::from_str(
                v.pointer("/choices/0/message/tool_calls/0/function/arguments").and_then(Value::as_str).unwrap(),
            )
            .unwrap();
            assert_eq!((args["order_id"].as_str(), args["amount"].as_f64()), (Some("A1007"), Some(1.0)));
            reasons.push(args["reason"].as_str().unwrap().to_owned());
        }
        assert!(reasons.iter().all(|r| r.starts_with("chaos c7/w03 (draft ")), "{reasons:?}");
        assert_ne!(reasons[0], reasons[1], "two answers to the same request word the reason differently");
    }

    #[tokio::test]
    async fn a_truncated_answer_is_cut_with_finish_reason_length_and_counted_by_kind() {
        let config = MockConfig { faults: Faults { truncated: 1.0, ..Faults::default() }, ..MockConfig::default() };
        let (_, h) = MockLlm::start(config).await.unwrap();
        let url = format!("{}/chat/completions", h.base_url());
        let v: Value = serde_json::from_str(&post(&url, &work_request(false)).await.2).unwrap();
        assert_eq!(v.pointer("/choices/0/finish_reason"), Some(&json!("length")));
        let args = v.pointer("/choices/0/message/tool_calls/0/function/arguments").and_then(Value::as_str).unwrap();
        assert_eq!(args, "{\"order_id", "the call's arguments are cut mid-JSON");
        let v: Value = serde_json::from_str(&post(&url, &work_request(true)).await.2).unwrap();
        assert_eq!(v.pointer("/choices/0/finish_reason"), Some(&json!("length")));
        assert_eq!(v.pointer("/choices/0/message/content"), Some(&json!("Done: {\"statu")));
        assert_eq!(h.stats().by_kind, BTreeMap::from([("truncated", 2)]));
    }

    #[tokio::test]
    async fn spaced_faults_come_at_their_rate_and_each_kind_within_its_first_gap() {
        let faults = Faults {
            rate_limit: 0.1,
            retry_after: None,
            server_error: 0.05,
            hang: 0.05,
            hang_for: Duration::ZERO,
            malformed: 0.05,
            truncated: 0.1,
            spaced: true,
        };
        let (_, h) = MockLlm::start(MockConfig { seed: 3, faults, ..MockConfig::default() }).await.unwrap();
        let url = format!("{}/chat/completions", h.base_url());
        for _ in 0..20 {
            post(&url, &work_request(false)).await;
        }
        let after_20 = h.stats().by_kind;
        for kind in ["rate_limit", "server_error", "hang", "malformed", "truncated"] {
            assert!(after_20.get(kind).copied().unwrap_or(0) >= 1, "{kind} within 1/rate requests: {after_20:?}");
        }
        for _ in 0..180 {
            post(&url, &work_request(false)).await;
        }
        let by_kind = h.stats().by_kind;
        for (kind, expected) in
            [("rate_limit", 20), ("server_error", 10), ("hang", 10), ("malformed", 10), ("truncated", 20)]
        {
            let n = by_kind.get(kind).copied().unwrap_or(0);
            assert!(n.abs_diff(expected) <= expected / 4 + 2, "{kind}: {n} of 200, about {expected} expected");
        }
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
