//! The API's one error shape — RFC 9457 `application/problem+json` (`type`, `title`, `status`, `detail`) that keeps today's `error: {code, message}` beside it, so clients written for either read it — with its HTTP status, and the single place where the core's errors and axum's own rejections are mapped into it.
//!
//! One status per kind of mistake: 400 for a request that cannot be used as sent
//! (not JSON, a JSON body of the wrong shape or type, a field missing or out of
//! limits, a bad header, path or query), 401/403 for who is calling, 404 for what
//! does not exist, 405, 408 for a body that did not arrive in time, 409 for a conflict with
//! what was recorded, 413, 414, 422 for an `Idempotency-Key` reused with another request, 429,
//! 431, 503 ([`super::edges`] has 408, 414 and 431).

use axum::Json;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::{ApiError, Started};

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The `type` of a problem: a URN naming its code (`urn:lambda-swarm:problem:not_found`).
pub fn problem_type(code: &str) -> String {
    format!("urn:lambda-swarm:problem:{code}")
}

/// An error answer's body (RFC 9457, with today's `error` member).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Problem {
    /// `urn:lambda-swarm:problem:<code>`: the kind of mistake.
    #[serde(rename = "type")]
    pub kind: String,
    /// The status's reason phrase, e.g. `Not Found`.
    pub title: String,
    /// The HTTP status, repeated.
    pub status: u16,
    /// What went wrong, for people (never a secret, never a provider's text).
    pub detail: String,
    /// Today's shape: the same code and message.
    pub error: ErrorBody,
    /// A 503 of `POST /conversations` once its conversation was recorded: which one, and whether it
    /// runs without the client (docs/api.md, "503"). Absent from every other error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Recorded>,
}

/// The conversation a 503 of `POST /conversations` recorded before it failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Recorded {
    pub conversation_id: String,
    /// `no`: nothing of it runs unless a retry with the same `Idempotency-Key` resumes it (else it
    /// ends `FAILED` at its deadline); `yes`: its plan is stored and it runs and is answered without
    /// a retry; `unknown`: one of the two (its `GET` shows which). A retry with the same key resumes it.
    pub started: Started,
}

/// `{"code", "message"}`: what clients read before problem documents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// Stable, machine-readable: `bad_json`, `unauthenticated`, `not_found`…
    pub code: String,
    pub message: String,
}

/// An error response. Every answer that is not a success goes out as one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    pub status: StatusCode,
    /// Stable, machine-readable: `bad_json`, `unauthenticated`, `not_found`…
    pub code: &'static str,
    /// For people; never a secret, never a provider's text.
    pub message: String,
    /// `WWW-Authenticate` challenge of a 401 (`Bearer` for token credentials).
    pub challenge: Option<&'static str>,
    /// `Retry-After` of a 429 (or a 409 `request_in_progress`), in whole seconds.
    pub retry_after_secs: Option<u64>,
    /// The conversation a 503 recorded ([`Problem::conversation`]).
    pub conversation: Option<Recorded>,
}

impl HttpError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), challenge: None, retry_after_secs: None, conversation: None }
    }

    /// 401: no credentials, or credentials that identify nobody.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }

    /// 403: the caller is known but may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 400 with the core's validation codes (`missing_message`, `missing_customer_id`…).
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn with_challenge(mut self, challenge: &'static str) -> Self {
        self.challenge = Some(challenge);
        self
    }

    /// The body this error answers with.
    pub fn problem(&self) -> Problem {
        Problem {
            kind: problem_type(self.code),
            title: self.status.canonical_reason().unwrap_or("Error").to_owned(),
            status: self.status.as_u16(),
            detail: self.message.clone(),
            error: ErrorBody { code: self.code.to_owned(), message: self.message.clone() },
            conversation: self.conversation.clone(),
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, error = %self.message, "request failed");
        }
        let mut response = (self.status, Json(self.problem())).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(challenge) = self.challenge {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
        }
        if let Some(secs) = self.retry_after_secs {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The core's errors keep their status and code (400 validation, 404, 409, 422, 429 and 409 in progress with `Retry-After`, 503).
impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry_after_secs = e.retry_after_secs();
        let conversation = e.recorded().map(|(id, started)| Recorded { conversation_id: id.to_string(), started });
        Self { retry_after_secs, conversation, ..Self::new(status, e.code(), e.to_string()) }
    }
}

/// Reading the body failed: 413 past the body limit, else 400.
impl From<BytesRejection> for HttpError {
    fn from(r: BytesRejection) -> Self {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("request body is over {} bytes", super::MAX_BODY_BYTES),
            )
        } else {
            Self::bad_request("bad_body", format!("the request body could not be read: {}", r.body_text()))
        }
    }
}

/// A path segment that does not decode (e.g. invalid percent-encoding): 400.
impl From<PathRejection> for HttpError {
    fn from(r: PathRejection) -> Self {
        Self::bad_request("bad_path", r.body_text())
    }
}

/// Parses a JSON body: 400 `bad_json` when it is not JSON at all (or empty), 400 `bad_fields`
/// when it is JSON of the wrong shape (not an object, a field of the wrong type).
/// A JSON array is not the object even when its elements are the fields in order.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8], expected: &str) -> Result<T, HttpError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        HttpError::bad_request("bad_json", format!("request body must be a JSON object {expected}: {e}"))
    })?;
    if !value.is_object() {
        return Err(HttpError::bad_request("bad_fields", format!("request body must be a JSON object {expected}")));
    }
    serde_json::from_value(value).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            HttpError::bad_request("bad_fields", format!("request body must be a JSON object {expected}: {e}"))
        }
        _ => HttpError::bad_request("bad_json", format!("request body must be a JSON object {expected}: {e}")),
    })
}

/// The router's fallback: 404 for a path no route serves.
pub async fn not_found(method: Method, uri: Uri) -> HttpError {
    HttpError::new(StatusCode::NOT_FOUND, "not_found", format!("no route for {method} {}", uri.path()))
}

/// A route exists but not for this method: 405 (axum adds `Allow` with the methods it serves).
pub async fn method_not_allowed(method: Method, uri: Uri) -> HttpError {
    HttpError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not supported on {}", uri.path()),
    )
}
