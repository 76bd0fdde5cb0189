//! HTTP API (payload 2.0) events ⇄ orchestrator calls: routing, request bodies, the caller's customer, JSON responses.

use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde::Deserialize;
use serde_json::json;

use crate::core::{ApiError, Orchestrator, validate_request};

/// Where the customer id comes from (SAM parameter `AuthMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// No authentication: the body's `customer_id` (local runs, demos).
    None,
    /// JWT authorizer: the token's `customer_id`, `custom:customer_id` or `sub` claim.
    Jwt,
    /// IAM authorization: the caller's IAM user id.
    Iam,
}

impl AuthMode {
    /// Parses `none | jwt | iam` (env `AUTH_MODE`, default `none`).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "none" => Ok(Self::None),
            "jwt" => Ok(Self::Jwt),
            "iam" => Ok(Self::Iam),
            other => Err(format!("AUTH_MODE must be none, jwt or iam, not {other:?}")),
        }
    }
}

/// Largest request body read, in bytes (a message is at most 8,000 characters).
const MAX_BODY_BYTES: usize = 64 * 1024;

#[derive(Deserialize)]
struct CreateBody {
    message: Option<String>,
    customer_id: Option<String>,
}

/// Handles one HTTP API request: `POST /conversations`, `GET /conversations/{id}`.
/// Never fails the invocation: every problem becomes a 4xx/5xx JSON response.
pub async fn handle(
    core: &Orchestrator,
    auth: AuthMode,
    request: Request,
) -> Result<Response<Body>, lambda_http::Error> {
    let path = request.uri().path().trim_end_matches('/').to_owned();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let pos = segments.iter().position(|s| *s == "conversations");
    let tail: Vec<&str> = pos.map(|p| segments[p + 1..].to_vec()).unwrap_or_default();
    let method = request.method().as_str().to_owned();
    let caller = match caller_customer(&request, auth) {
        Ok(c) => c,
        Err(e) => return Ok(error_response(&e)),
    };
    let result = match (pos.is_some(), method.as_str(), tail.as_slice()) {
        (true, "POST", []) => create(core, caller.as_deref(), &request).await,
        (true, "GET", [id]) => core.status(id, caller.as_deref()).await.and_then(|view| json_response(200, &view)),
        (true, _, [] | [_]) => {
            Err(ApiError::BadRequest { code: "method_not_allowed", message: format!("{method} is not supported here") })
        }
        _ => Err(ApiError::NotFound),
    };
    Ok(match result {
        Ok(r) => r,
        Err(e) => error_response(&e),
    })
}

async fn create(core: &Orchestrator, caller: Option<&str>, request: &Request) -> Result<Response<Body>, ApiError> {
    let bytes: &[u8] = request.body().as_ref();
    if bytes.len() > MAX_BODY_BYTES {
        return Err(ApiError::BadRequest {
            code: "body_too_large",
            message: format!("request body is over {MAX_BODY_BYTES} bytes"),
        });
    }
    let body: CreateBody = serde_json::from_slice(bytes).map_err(|e| ApiError::BadRequest {
        code: "bad_json",
        message: format!("request body must be a JSON object {{\"message\": \"...\", \"customer_id\": \"...\"}}: {e}"),
    })?;
    let message = body
        .message
        .ok_or(ApiError::BadRequest { code: "missing_message", message: "field \"message\" is required".into() })?;
    // With authentication on, the customer is the caller's, never the body's.
    let customer = match caller {
        Some(c) => c.to_owned(),
        None => body.customer_id.ok_or(ApiError::BadRequest {
            code: "missing_customer_id",
            message: "field \"customer_id\" is required".into(),
        })?,
    };
    let key = request.headers().get("idempotency-key").and_then(|v| v.to_str().ok());
    let validated = validate_request(&message, &customer, key, core.settings().max_message_chars)?;
    let created = core.create(validated).await?;
    let id = created.conversation_id.to_string();
    json_response(202, &json!({ "conversation_id": id, "status_url": format!("/conversations/{id}") }))
}

/// The caller's customer id from the authorizer, when authentication is on.
fn caller_customer(request: &Request, auth: AuthMode) -> Result<Option<String>, ApiError> {
    let unauthorized =
        || ApiError::BadRequest { code: "unauthorized", message: "the request carries no customer identity".into() };
    match auth {
        AuthMode::None => Ok(None),
        AuthMode::Jwt | AuthMode::Iam => {
            let RequestContext::ApiGatewayV2(ctx) = request.request_context() else { return Err(unauthorized()) };
            let authorizer = ctx.authorizer.ok_or_else(unauthorized)?;
            let id = if auth == AuthMode::Jwt {
                let claims = authorizer.jwt.map(|j| j.claims).unwrap_or_default();
                ["customer_id", "custom:customer_id", "sub"].iter().find_map(|k| claims.get(*k).cloned())
            } else {
                authorizer.iam.and_then(|i| i.user_id)
            };
            id.filter(|s| !s.is_empty()).map(Some).ok_or_else(unauthorized)
        }
    }
}

fn json_response(status: u16, value: &impl serde::Serialize) -> Result<Response<Body>, ApiError> {
    let body = serde_json::to_string(value).map_err(|e| ApiError::Unavailable(e.to_string()))?;
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::Text(body))
        .map_err(|e| ApiError::Unavailable(e.to_string()))
}

fn error_response(e: &ApiError) -> Response<Body> {
    if e.status() >= 500 {
        tracing::error!(error = %e, "request failed");
    }
    let body = json!({ "error": { "code": e.code(), "message": e.to_string() } }).to_string();
    let mut response = Response::new(Body::Text(body));
    *response.status_mut() = http_status(e.status());
    response.headers_mut().insert("content-type", lambda_http::http::HeaderValue::from_static("application/json"));
    response
}

fn http_status(code: u16) -> lambda_http::http::StatusCode {
    lambda_http::http::StatusCode::from_u16(code).unwrap_or(lambda_http::http::StatusCode::INTERNAL_SERVER_ERROR)
}
