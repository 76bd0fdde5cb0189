//! The mock's HTTP server: the routes (`/v1/chat/completions`, `/v1/models`, `/_stats`, `/_reset`), its shared state and statistics, and each chat request's way from arrival — every random draw under one lock, in arrival order — to its answer.

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
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;
use serde_json::{Value, json};

use crate::agent::{agent_answer, truncate_answer};
use crate::config::{Faults, MockConfig, Mode, ScriptedResponse};
use crate::fate::{self, Fate};
use crate::quirks::quirk_refusal;
use crate::request::last_user_text;

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
                spacing: fate::spacing(&config.faults, config.seed),
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

/// What was drawn for one request: its number, fate, delay and (scripted mode) its answer.
struct Draw {
    seq: u64,
    fate: Fate,
    delay: Duration,
    /// Scripted mode, no fault: the next answer of the script (`None` once it is exhausted).
    scripted: Option<Option<ScriptedResponse>>,
}

/// An answer and how the arrival records it.
struct Answered {
    status: u16,
    retry_after_ms: Option<u64>,
    kind: &'static str,
    response: Response,
}

impl Answered {
    fn new(status: u16, kind: &'static str, response: Response) -> Self {
        Self { status, retry_after_ms: None, kind, response }
    }
}

impl Shared {
    /// Every random draw of one request happens here, under one lock, in arrival order.
    fn draw(&self, parsed: Option<&Value>, in_flight: usize) -> Draw {
        let mut inner = self.lock();
        let seq = inner.stats.requests;
        inner.stats.requests += 1;
        inner.stats.max_concurrent = inner.stats.max_concurrent.max(in_flight);
        let agent = matches!(self.config.mode, Mode::Agent(_));
        let Inner { rng, spacing, .. } = &mut *inner;
        let fate = match parsed {
            None => Fate::Normal,
            Some(_) => fate::draw(rng, spacing, &self.config.faults, seq, agent),
        };
        let delay = fate::delay(&mut inner.rng, self.config.latency);
        let scripted = match (&fate, &self.config.mode, parsed) {
            (Fate::Normal, Mode::Scripted(_), Some(_)) => Some(inner.script.pop_front()),
            _ => None,
        };
        if self.config.record_bodies
            && inner.bodies.len() < MAX_BODIES
            && let Some(v) = parsed
        {
            inner.bodies.push(v.clone());
        }
        Draw { seq, fate, delay, scripted }
    }
}

async fn chat(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let _guard = InFlight(&s.in_flight);
    let arrived_ms = s.now_ms();
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let key = parsed.as_ref().map(last_user_text).unwrap_or_default();
    let Draw { seq, fate, delay, scripted } = s.draw(parsed.as_ref(), now);
    let answered = match &parsed {
        None => Answered::new(
            400,
            "bad_request",
            error_response(StatusCode::BAD_REQUEST, "mock-llm: request body is not JSON"),
        ),
        Some(req) => answer(&s.config, req, fate, scripted, seq, body.len()),
    };
    if answered.kind == "hang" {
        // Seen at once, answered only when the hang ends.
        record_arrival(&s, seq, arrived_ms, answered.status, None, key, answered.kind);
        tokio::time::sleep(s.config.faults.hang_for).await;
        return answered.response;
    }
    let Answered { status, retry_after_ms, kind, response } = answered;
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

/// The answer to a request that parsed, by its fate (a hang's is sent when the hang ends).
fn answer(
    config: &MockConfig,
    req: &Value,
    fate: Fate,
    scripted: Option<Option<ScriptedResponse>>,
    seq: u64,
    body_len: usize,
) -> Answered {
    let exhausted = || {
        Answered::new(500, "script", error_response(StatusCode::INTERNAL_SERVER_ERROR, "mock-llm: script exhausted"))
    };
    match (fate, &config.mode) {
        (Fate::RateLimit, _) => rate_limited(&config.faults),
        (Fate::ServerError { html: false }, _) => Answered::new(
            500,
            "server_error",
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "mock-llm: injected server error"),
        ),
        (Fate::ServerError { html: true }, _) => {
            let r = (
                StatusCode::BAD_GATEWAY,
                [(header::CONTENT_TYPE, "text/html")],
                "<html><body>mock-llm: upstream connect error</body></html>",
            )
                .into_response();
            Answered::new(502, "server_error", r)
        }
        (Fate::Malformed, _) => {
            let r = (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"id":"chatcmpl-mock","choices":[{"index":0,"message":{"role":"assistant","content":"Your order"#,
            )
                .into_response();
            Answered::new(200, "malformed", r)
        }
        (Fate::Truncated, Mode::Agent(agent)) => {
            let answer = truncate_answer(agent_answer(agent, req, seq, body_len));
            Answered::new(200, "truncated", axum::Json(answer).into_response())
        }
        (Fate::Hang, _) => {
            Answered::new(504, "hang", error_response(StatusCode::GATEWAY_TIMEOUT, "mock-llm: injected hang ended"))
        }
        (Fate::Truncated, Mode::Scripted(_)) => exhausted(),
        (Fate::Normal, Mode::Scripted(_)) => match scripted {
            Some(Some(sr)) => Answered::new(sr.status, "script", scripted_response(&sr)),
            _ => exhausted(),
        },
        (Fate::Normal, Mode::Agent(agent)) => match quirk_refusal(&agent.quirks, req) {
            Some(refusal) => {
                Answered::new(400, "quirk", (StatusCode::BAD_REQUEST, axum::Json(refusal)).into_response())
            }
            None => Answered::new(200, "agent", axum::Json(agent_answer(agent, req, seq, body_len)).into_response()),
        },
    }
}

/// 429 with the configured `retry-after` (whole seconds) or `retry-after-ms`.
fn rate_limited(faults: &Faults) -> Answered {
    let mut r = error_response(StatusCode::TOO_MANY_REQUESTS, "mock-llm: injected rate limit, please retry later");
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
    Answered {
        status: 429,
        retry_after_ms: faults.retry_after.map(|d| d.as_millis() as u64),
        kind: "rate_limit",
        response: r,
    }
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
