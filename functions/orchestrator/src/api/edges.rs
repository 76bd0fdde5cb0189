//! The edges of a request before a handler sees it: the body read whole within [`BODY_READ_TIMEOUT`] (408 past it), and the error answers of a request head the HTTP server itself refuses (414, 431, 400), so every answer keeps the one error shape.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest as _, Request};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};

use super::HttpError;

/// How long the whole request body may take to arrive, in seconds' worth: 10 s. A body shorter
/// than its `Content-Length` is answered 408 `body_timeout` then, and nothing is stored.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads `request`'s body whole (up to the router's body limit) within [`BODY_READ_TIMEOUT`] and
/// answers the request with it buffered. Errors: 408 `body_timeout`, 413 `body_too_large`, 400 `bad_body`.
pub async fn read_body_within(request: Request) -> Result<Request, HttpError> {
    let (parts, body) = request.into_parts();
    let read = Bytes::from_request(Request::from_parts(parts.clone(), body), &());
    match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
        Ok(bytes) => Ok(Request::from_parts(parts, Body::from(bytes?))),
        Err(_) => Err(HttpError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the request body did not arrive within {} seconds (shorter than its Content-Length?)",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// Middleware: the body is read by [`read_body_within`] before any handler runs.
pub async fn body_deadline(request: Request, next: Next) -> Response {
    match read_body_within(request).await {
        Ok(request) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// The error for a request head the HTTP server refused with `status` before routing it: 414
/// `uri_too_long`, 431 `headers_too_large`, anything else 400 `bad_request_head` (a request line
/// or header field that does not parse).
pub fn head_refused(status: StatusCode) -> HttpError {
    match status {
        StatusCode::URI_TOO_LONG => {
            HttpError::new(status, "uri_too_long", "the request target is too long (at most 65,534 bytes)")
        }
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => HttpError::new(
            status,
            "headers_too_large",
            "the request's header fields are too large or too many (at most 100 fields)",
        ),
        _ => HttpError::bad_request(
            "bad_request_head",
            "the request line or a header field could not be parsed as HTTP/1.1",
        ),
    }
}
