//! The local HTTP API: axum in front of the orchestrator's Lambda handler, requests turned into HTTP API (payload 2.0) events.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::LocalStack;

/// Largest request body accepted, in bytes.
const MAX_BODY: usize = 256 * 1024;

/// Every path goes to the orchestrator's handler, which routes like API Gateway's `$default` route.
pub fn router(stack: Arc<LocalStack>) -> Router {
    Router::new().fallback(forward).with_state(stack)
}

async fn forward(
    State(stack): State<Arc<LocalStack>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if body.len() > MAX_BODY {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response();
    }
    let text = match std::str::from_utf8(&body) {
        Ok(t) => t,
        Err(_) => {
            return (StatusCode::BAD_REQUEST, r#"{"error":{"code":"bad_body","message":"body must be UTF-8 JSON"}}"#)
                .into_response();
        }
    };
    let pairs: Vec<(String, String)> =
        headers.iter().filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_owned(), v.to_owned()))).collect();
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let body = if text.is_empty() { None } else { Some(text) };
    match stack.api(method.as_str(), uri.path(), body, &refs).await {
        Ok((status, json)) => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (code, [("content-type", "application/json")], json.to_string()).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "local API request failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(r#"{{"error":{{"code":"internal","message":"{}"}}}}"#, e.to_string().replace('"', "'")),
            )
                .into_response()
        }
    }
}
