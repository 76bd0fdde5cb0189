//! The OpenAI-compatible routes, thin: `GET /v1/models` and `POST /v1/chat/completions` read the caller and the request, send the message as a new conversation or the next turn of one (`X-Swarm-Conversation-Id`), then follow the turn through a [`ProgressSource`] to answer in OpenAI's shape — whole, or as a `text/event-stream` of chunks.
//!
//! Every error of these routes is in OpenAI's shape (`{"error": {"message", "type", "param",
//! "code"}}`), 401 included; docs/api.md, "The swarm as an OpenAI model".

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{ApiState, Caller, HttpError, idempotency_key};
use crate::core::{ApiError, validate_request};
use crate::openai::progress::PollPlan;
use crate::openai::{
    self, CONVERSATION_HEADER, ChatAsk, ChatRequest, LogProgress, OpenAiError, ProgressSource, SwarmTurn, TurnEvent,
    WatchError,
};

/// A comment line sent on a stream quiet for this long, so proxies keep it open.
const HEARTBEAT: Duration = Duration::from_secs(15);

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, error = %self.message, "chat completion failed");
        }
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after_secs {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The API's errors (who is calling, the core's) keep their status and code in OpenAI's shape.
impl From<HttpError> for OpenAiError {
    fn from(e: HttpError) -> Self {
        Self { retry_after_secs: e.retry_after_secs, ..OpenAiError::of_status(e.status, e.code, e.message) }
    }
}

/// The core's errors: a message out of limits names `messages`, a bad customer id `user`.
impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        let param = match e.code() {
            "empty_message" | "message_too_long" => Some("messages"),
            "bad_customer_id" | "missing_customer_id" => Some("user"),
            _ => None,
        };
        Self { param, ..OpenAiError::from(HttpError::from(e)) }
    }
}

/// `GET /v1/models` → 200 OpenAI's list with the one model (`lambda-swarm`); a credential as for every customer route.
pub(super) async fn models(caller: Result<Caller, HttpError>) -> Response {
    match caller {
        Ok(_) => axum::Json(openai::models()).into_response(),
        Err(e) => OpenAiError::from(e).into_response(),
    }
}

/// `POST /v1/chat/completions`: the last user message as a new conversation, or — with
/// `X-Swarm-Conversation-Id` — as the next turn of that one; answered once the turn is
/// terminal (`chat.completion`) or streamed (`stream: true`). The answer's
/// `X-Swarm-Conversation-Id` header and `swarm` member name the conversation and turn.
pub(super) async fn chat_completions(
    State(state): State<ApiState>,
    caller: Result<Caller, HttpError>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let caller = caller?;
    let body = body.map_err(HttpError::from)?;
    let request: ChatRequest = serde_json::from_slice(&body).map_err(|e| {
        OpenAiError::invalid(None, "bad_json", format!("the body must be an OpenAI chat request (JSON object): {e}"))
    })?;
    let ask = openai::check_request(&request)?;
    let ChatAsk { message, stream, include_usage, user } = ask;
    let customer = match caller {
        Caller::Customer(own) => own,
        Caller::Anonymous => Caller::Anonymous
            .acting_for(user)
            .map_err(|e| OpenAiError { param: Some("user"), ..OpenAiError::from(e) })?,
    };
    let key = idempotency_key(&headers)?;
    let validated = validate_request(&message, &customer, key, state.core.settings().max_message_chars)?;
    let created = match conversation_header(&headers)? {
        Some(id) => state.core.follow_up(id, validated).await?,
        None => state.core.create(validated).await?,
    };
    let turn = SwarmTurn { conversation_id: created.conversation_id.to_string(), turn: created.turn, status: None };
    tracing::info!(conversation_id = %turn.conversation_id, turn = turn.turn, stream, "chat completion accepted");
    let plan = PollPlan::for_deadline(Duration::from_secs(state.core.settings().deadline_secs));
    let source = LogProgress::open(state.core.clone(), &turn.conversation_id, customer, turn.turn, plan).await?;
    let named = HeaderValue::from_str(&turn.conversation_id)
        .map_err(|e| OpenAiError::of_status(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    let mut response =
        if stream { streamed(source, turn, include_usage) } else { whole(source, &turn).await.into_response() };
    response.headers_mut().insert(CONVERSATION_HEADER, named);
    Ok(response)
}

/// The conversation the request names (`X-Swarm-Conversation-Id`), if any: one visible-ASCII value, else 400.
fn conversation_header(headers: &HeaderMap) -> Result<Option<&str>, OpenAiError> {
    let bad = || {
        OpenAiError::invalid(
            None,
            "bad_conversation_id",
            "give one X-Swarm-Conversation-Id header with a conversation id",
        )
    };
    let mut values = headers.get_all(CONVERSATION_HEADER).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(bad());
    }
    let id = value.to_str().map_err(|_| bad())?.trim();
    if id.is_empty() { Err(bad()) } else { Ok(Some(id)) }
}

/// The turn followed to its end and answered whole; 504 `timeout_error` past the source's patience.
async fn whole(mut source: impl ProgressSource, turn: &SwarmTurn) -> Result<Response, OpenAiError> {
    loop {
        match source.next().await.map_err(watch_error)? {
            TurnEvent::Progress(_) => {}
            TurnEvent::Ended(end) => {
                tracing::info!(conversation_id = %turn.conversation_id, turn = turn.turn, status = end.status.as_str(), "chat completion answered");
                return Ok(axum::Json(openai::completion(turn, &end, now_secs())).into_response());
            }
        }
    }
}

/// What a turn that could not be followed answers.
fn watch_error(e: WatchError) -> OpenAiError {
    match e {
        WatchError::TimedOut(_) => {
            OpenAiError::of_status(StatusCode::GATEWAY_TIMEOUT, "turn_not_answered", e.to_string())
        }
        WatchError::Read(e) => e.into(),
    }
}

/// The turn as a `text/event-stream` of `chat.completion.chunk` events (docs/api.md): the role,
/// progress in `delta.reasoning_content`, the reply in `delta.content`, a chunk with the
/// `finish_reason`, the usage when asked, then `data: [DONE]`; a comment every [`HEARTBEAT`] of quiet.
fn streamed(source: impl ProgressSource + 'static, turn: SwarmTurn, include_usage: bool) -> Response {
    let state = Streaming {
        source,
        turn,
        include_usage,
        created: now_secs(),
        started: false,
        over: false,
        ready: VecDeque::new(),
    };
    let frames = futures::stream::unfold(state, |mut state| async move {
        let frame = state.next_frame().await?;
        Some((Ok::<Bytes, Infallible>(frame), state))
    });
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (header::HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no")),
        ],
        Body::from_stream(frames),
    )
        .into_response()
}

/// A stream's state between two frames.
struct Streaming<P> {
    source: P,
    turn: SwarmTurn,
    include_usage: bool,
    /// Epoch seconds, the same on every chunk.
    created: i64,
    started: bool,
    /// The turn ended (or could not be followed): what is in `ready` is the rest.
    over: bool,
    ready: VecDeque<Bytes>,
}

impl<P: ProgressSource> Streaming<P> {
    /// The next frame to write; `None` once the stream is over.
    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Some(frame);
            }
            if self.over {
                return None;
            }
            if !self.started {
                self.started = true;
                let delta = serde_json::json!({"role": "assistant", "content": ""});
                self.push(&openai::chunk(&self.turn, self.created, delta, None, true));
                continue;
            }
            match tokio::time::timeout(HEARTBEAT, self.source.next()).await {
                Err(_) => self.ready.push_back(Bytes::from_static(b": keep-alive\n\n")),
                Ok(Ok(TurnEvent::Progress(lines))) => {
                    let text: String = lines.iter().map(|l| l.text() + "\n").collect();
                    let delta = serde_json::json!({"reasoning_content": text});
                    self.push(&openai::chunk(&self.turn, self.created, delta, None, false));
                }
                Ok(Ok(TurnEvent::Ended(end))) => {
                    self.over = true;
                    let (reason, content) = openai::finish(&end);
                    self.push(&openai::chunk(
                        &self.turn,
                        self.created,
                        serde_json::json!({"content": content}),
                        None,
                        false,
                    ));
                    let last = openai::chunk(&self.turn, self.created, serde_json::json!({}), Some(reason), false);
                    self.push(&last);
                    if self.include_usage {
                        self.push(&openai::usage_chunk(&self.turn, self.created, end.usage.as_ref()));
                    }
                    self.ready.push_back(Bytes::from_static(b"data: [DONE]\n\n"));
                    tracing::info!(conversation_id = %self.turn.conversation_id, turn = self.turn.turn, status = end.status.as_str(), "chat completion streamed");
                }
                // OpenAI's clients raise an `error` event as an API error.
                Ok(Err(e)) => {
                    self.over = true;
                    self.push(&watch_error(e).body());
                }
            }
        }
    }

    fn push(&mut self, event: &Value) {
        self.ready.push_back(Bytes::from(format!("data: {event}\n\n")));
    }
}

/// Now in epoch seconds (`created`).
fn now_secs() -> i64 {
    swarm_core::time::now_ms() / 1000
}
