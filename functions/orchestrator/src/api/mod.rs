//! The orchestrator's HTTP API as an axum `Router`: `POST /conversations`, `GET /conversations` (the caller's own, a page at a time), `GET /conversations/{id}`, `GET /conversations/{id}/events` (its event log as `text/event-stream`, [`events`]), for operators `GET /approvals`, `POST /approvals/{id}`, `GET /operator/conversations/{id}` and `POST /operator/conversations/{id}/messages` (a person's answer to a handed-off conversation), the swarm as an OpenAI model (`GET /v1/models`, `POST /v1/chat/completions`, [`openai`]), and with no credential `GET /health` and `GET /openapi.json` (the API's OpenAPI 3.1 document, [`OPENAPI`]); given to `lambda_http` on Lambda and mounted directly by `swarm-local serve`.
//!
//! Status codes: 202 created (with `Location`), 200 a conversation; 400 a request
//! that cannot be used as sent (not JSON, a body of the wrong shape, a field missing
//! or out of limits, a bad header, path or query), 401 no or unknown credentials,
//! 403 an authenticated caller acting for another customer, 404 an unknown route or
//! conversation, 405 a wrong method (with `Allow`), 408 a body not whole within
//! [`BODY_READ_TIMEOUT`], 413 a body over
//! [`MAX_BODY_BYTES`], 409 an approval decided the other way or expired (or an operator's answer
//! to a conversation not handed off), 422 an
//! `Idempotency-Key` reused with another request, 429 a customer over their
//! conversations per minute (with `Retry-After`), 503 storage or queue unavailable
//! — every error as RFC 9457 `application/problem+json` that keeps
//! `{"error": {"code", "message"}}` ([`HttpError`]). With allowed origins set,
//! browsers' CORS preflights are answered ([`cors`]).

pub mod bodies;
pub mod caller;
pub mod cors;
pub mod edges;
pub mod error;
pub mod events;
pub mod openai;
pub mod operator;
pub mod tokens;
pub mod trace;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRef, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

pub use bodies::{
    ApprovalPage, ConversationPage, CreateBody, Created, DecideBody, Decided, Health, OperatorAnswer,
    OperatorAnswerBody,
};
pub use caller::{Auth, Caller, JwtIdentity};
pub use cors::AllowedOrigins;
pub use edges::{BODY_READ_TIMEOUT, head_refused, read_body_within};
pub use error::{HttpError, PROBLEM_JSON, Problem};
pub use events::EventStreamSettings;
pub use operator::{IamOperators, Operator, OperatorAllowlist, OperatorAuth};
pub use tokens::TokenTable;

use crate::approvals::{Approvals, Decision};
use crate::core::{CreateRequest, Orchestrator, validate_request};

/// Largest request body read, in bytes (a message is at most 8,000 characters); larger → 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The API's OpenAPI 3.1 document, as served at `GET /openapi.json` (`functions/orchestrator/openapi.json`;
/// `tests/openapi.rs` holds it to the handlers and their types).
pub const OPENAPI: &str = include_str!("../../openapi.json");

/// What the handlers share: the core, how callers are identified, and the approvals (off
/// unless configured: an approval key and a way to identify operators).
#[derive(Clone)]
pub struct ApiState {
    pub core: Arc<Orchestrator>,
    pub auth: Auth,
    pub approvals: Option<Arc<Approvals>>,
    pub operators: OperatorAuth,
    /// Browser origins allowed to call the API (CORS); empty: no CORS headers, preflights refused.
    pub cors: AllowedOrigins,
    /// `GET /conversations/{id}/events`' poll interval, heartbeat and maximum duration.
    pub events: EventStreamSettings,
}

impl ApiState {
    pub fn new(core: Arc<Orchestrator>, auth: Auth) -> Self {
        Self {
            core,
            auth,
            approvals: None,
            operators: OperatorAuth::Nobody,
            cors: AllowedOrigins::default(),
            events: EventStreamSettings::default(),
        }
    }

    /// With the event stream's timings `settings`.
    pub fn with_event_stream(mut self, settings: EventStreamSettings) -> Self {
        self.events = settings;
        self
    }

    /// With browsers from `origins` allowed (CORS).
    pub fn with_cors(mut self, origins: AllowedOrigins) -> Self {
        self.cors = origins;
        self
    }

    /// With the approvals API on, operators identified by `operators`.
    pub fn with_approvals(mut self, approvals: Arc<Approvals>, operators: OperatorAuth) -> Self {
        self.approvals = Some(approvals);
        self.operators = operators;
        self
    }
}

impl FromRef<ApiState> for Auth {
    fn from_ref(state: &ApiState) -> Self {
        state.auth.clone()
    }
}

impl FromRef<ApiState> for OperatorAuth {
    fn from_ref(state: &ApiState) -> Self {
        state.operators.clone()
    }
}

/// The API. Unknown paths answer 404 and known paths with another method 405,
/// both in the error shape; bodies over [`MAX_BODY_BYTES`] answer 413.
pub fn router(state: ApiState) -> Router {
    let cors = (!state.cors.is_empty()).then(|| state.cors.layer());
    let router = Router::new()
        .route("/conversations", post(create).get(list_conversations))
        .route("/conversations/{id}", get(status))
        .route("/conversations/{id}/messages", post(follow_up))
        .route("/conversations/{id}/events", get(events::events))
        .route("/approvals", get(list_approvals))
        .route("/approvals/{id}", post(decide_approval))
        .route("/operator/conversations/{id}", get(operator_view))
        .route("/operator/conversations/{id}/messages", post(operator_answer))
        .route("/v1/models", get(openai::models))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/health", get(health))
        .route("/openapi.json", get(openapi))
        .method_not_allowed_fallback(error::method_not_allowed)
        .fallback(error::not_found)
        .layer(axum::middleware::from_fn(edges::body_deadline))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(trace::request_span))
        .with_state(state);
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// `GET /health` → 200 `{"status": "ok", "version"}`; no credential, no store read.
async fn health() -> axum::Json<Health> {
    axum::Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into() })
}

/// `GET /openapi.json` → the API's OpenAPI 3.1 document; no credential.
async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// `POST /conversations` → 202 `{"conversation_id", "status_url"}` with `Location`; an
/// `Idempotency-Key` header returns the earlier conversation for the same key.
async fn create(
    State(state): State<ApiState>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    let validated = customer_message(&state, &caller, &headers, &body?)?;
    let created = state.core.create(validated).await?;
    accepted(&created)
}

/// The customer's message of a `POST` (`{"message", "customer_id"?}`), for the caller, with its
/// `Idempotency-Key`, validated. Errors (all 400 but one): a body that is not that JSON, no
/// `message`, a bad `Idempotency-Key`, a bad or missing customer id, an empty message or one over
/// the limit; 403 when an authenticated caller names another customer.
fn customer_message(
    state: &ApiState,
    caller: &Caller,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<CreateRequest, HttpError> {
    let body: CreateBody = error::parse_json(body, r#"{"message": "...", "customer_id": "..."}"#)?;
    let message =
        body.message.ok_or_else(|| HttpError::bad_request("missing_message", "field \"message\" is required"))?;
    let customer = caller.acting_for(body.customer_id)?;
    let key = idempotency_key(headers)?;
    Ok(validate_request(&message, &customer, key, state.core.settings().max_message_chars)?)
}

/// `202` with `Location` for a message accepted into `created`'s conversation and turn.
fn accepted(created: &crate::core::Created) -> Result<Response, HttpError> {
    let id = created.conversation_id.to_string();
    let answer = Created { status_url: format!("/conversations/{id}"), conversation_id: id, turn: created.turn };
    let location = HeaderValue::from_str(&answer.status_url)
        .map_err(|e| HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)], axum::Json(answer)).into_response())
}

/// `POST /conversations/{id}/messages` → 202 `{"conversation_id", "status_url", "turn"}`: the
/// customer's next message, answered as a new turn; the body, identity and `Idempotency-Key` as
/// for `POST /conversations`. 404 for an unknown or another customer's conversation, 409 (with
/// `Retry-After`) while its latest turn is answered, 410 once it expired.
async fn follow_up(
    State(state): State<ApiState>,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id?;
    let validated = customer_message(&state, &caller, &headers, &body?)?;
    let created = state.core.follow_up(&id, validated).await?;
    accepted(&created)
}

/// The `Idempotency-Key` header, if given: one field of visible ASCII, else 400 `bad_idempotency_key`
/// (a key that could not be read must not make a second conversation).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, HttpError> {
    let mut keys = headers.get_all("idempotency-key").iter();
    let Some(key) = keys.next() else { return Ok(None) };
    if keys.next().is_some() {
        return Err(HttpError::bad_request("bad_idempotency_key", "give one Idempotency-Key header, not several"));
    }
    key.to_str()
        .map(Some)
        .map_err(|_| HttpError::bad_request("bad_idempotency_key", "Idempotency-Key must be visible ASCII"))
}

/// `GET /conversations` query: `customer_id` (with authentication off: whose; on: the caller's own
/// or left out), `limit` (1..=100, default 20), `cursor` (a page's `next_cursor`).
#[derive(Deserialize)]
struct ListConversationsQuery {
    customer_id: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

/// `GET /conversations` → 200 `{"conversations": [...], "next_cursor"?}`, newest first: the
/// caller's own (with authentication off, those of the query's `customer_id`).
async fn list_conversations(
    State(state): State<ApiState>,
    caller: Caller,
    query: Result<Query<ListConversationsQuery>, QueryRejection>,
) -> Result<Response, HttpError> {
    let Query(query) = query.map_err(|e| HttpError::bad_request("bad_query", e.body_text()))?;
    let customer = caller.acting_for(query.customer_id)?;
    let (conversations, next_cursor) =
        state.core.list(&customer, query.cursor.as_deref(), query.limit.unwrap_or(20)).await?;
    Ok((StatusCode::OK, axum::Json(ConversationPage { conversations, next_cursor })).into_response())
}

/// `GET /conversations/{id}` → 200 with the conversation view; 404 when it
/// does not exist or belongs to another customer than the authenticated caller.
async fn status(
    State(state): State<ApiState>,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id?;
    let view = state.core.status(&id, caller.customer()).await?;
    let body = serde_json::to_value(&view)
        .map_err(|e| HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}

/// `GET /approvals` query: `status` (`pending`, `approved`, `rejected`, `expired`, `executed`,
/// `all`), `limit` (1..=100, default 50), `cursor` (a page's `next_cursor`).
#[derive(Deserialize)]
struct ListQuery {
    status: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

fn approvals_of(state: &ApiState) -> Result<&Arc<Approvals>, HttpError> {
    state.approvals.as_ref().ok_or_else(|| {
        HttpError::new(StatusCode::NOT_FOUND, "approvals_disabled", "approvals are not configured on this deployment")
    })
}

/// `GET /approvals` → 200 `{"approvals": [...], "next_cursor"?}`, newest first; operators only.
async fn list_approvals(
    State(state): State<ApiState>,
    operator: Operator,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, HttpError> {
    let approvals = approvals_of(&state)?;
    let Query(query) = query.map_err(|e| HttpError::bad_request("bad_query", e.body_text()))?;
    let status = match query.status.as_deref() {
        None | Some("") | Some("all") => None,
        Some(s) => Some(swarm_core::approval::ApprovalStatus::parse(s).ok_or_else(|| {
            HttpError::bad_request("bad_status", "status must be pending, approved, rejected, expired, executed or all")
        })?),
    };
    let page = approvals.list(status, query.limit.unwrap_or(50), query.cursor.as_deref()).await?;
    tracing::info!(operator = %operator.0, listed = page.approvals.len(), "approvals listed");
    let page = ApprovalPage { approvals: page.approvals, next_cursor: page.next_cursor };
    Ok((StatusCode::OK, axum::Json(page)).into_response())
}

/// `POST /approvals/{id}` with `{"decision": "approve" | "reject"}` → 200 `{"approval": ...}`;
/// operators only. Approving twice answers 200 again and runs the refund once.
async fn decide_approval(
    State(state): State<ApiState>,
    operator: Operator,
    id: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    let approvals = approvals_of(&state)?;
    let Path(id) = id?;
    let body: DecideBody = error::parse_json(&body?, r#"{"decision": "approve" | "reject"}"#)?;
    let decision = match body.decision.as_deref() {
        Some("approve") => Decision::Approve,
        Some("reject") => Decision::Reject,
        _ => return Err(HttpError::bad_request("bad_decision", r#"field "decision" must be "approve" or "reject""#)),
    };
    let approval = approvals.decide(&id, decision, &operator.0).await?;
    Ok((StatusCode::OK, axum::Json(Decided { approval })).into_response())
}

/// `GET /operator/conversations/{id}` → 200: the conversation as its customer reads it (any
/// customer's); operators only — what a person reads before answering a hand-off, and after a decision.
async fn operator_view(
    State(state): State<ApiState>,
    _operator: Operator,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id?;
    let view = state.core.status(&id, None).await?;
    Ok((StatusCode::OK, axum::Json(view)).into_response())
}

/// `POST /operator/conversations/{id}/messages` with `{"text": ...}` (and optionally an
/// `Idempotency-Key`) → 201 `{"conversation_id", "turn", "author": "operator", "status_url"}`:
/// a person's answer to a conversation handed to a person, told to the customer as a turn;
/// operators only. The same key again → 200 with the same turn; 409 `not_handed_off` when the
/// conversation's latest turn is not `HANDOFF`.
async fn operator_answer(
    State(state): State<ApiState>,
    operator: Operator,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id?;
    let key = idempotency_key(&headers)?;
    let body: OperatorAnswerBody = error::parse_json(&body?, r#"{"text": "..."}"#)?;
    let text = body.text.unwrap_or_default();
    let answered = state.core.operator_answer(&id, &text, key, &operator.0).await?;
    let id = answered.conversation_id.to_string();
    let status = if answered.new { StatusCode::CREATED } else { StatusCode::OK };
    let answer = OperatorAnswer {
        status_url: format!("/conversations/{id}"),
        conversation_id: id,
        turn: answered.turn,
        author: swarm_core::turns::TurnAuthor::Operator,
    };
    Ok((status, axum::Json(answer)).into_response())
}
