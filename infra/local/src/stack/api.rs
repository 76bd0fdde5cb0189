//! The HTTP API as API Gateway serves it: every request one orchestrator invocation, cut at the function's timeout, under the fault plan — but for the long-running routes (`orchestrator::stream::LONG_RUNNING_ROUTES`: the event stream, the OpenAI routes), served as the streaming function URL serves them on AWS: the body flows past the API's timeout until the stream function's own.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use orchestrator::api::EventStreamSettings;
use orchestrator::{ApiState, Orchestrator};
use swarm_core::faults::FaultPlan;

use crate::http;
use crate::platform::counters::{Counters, add};
use crate::platform::invoke::{Ended, invoke};

/// The orchestrator as API Gateway invokes it: one invocation per request, cut at the function's
/// timeout, under the fault plan. `swarm-local serve` and [`super::LocalStack::api`] both go through it.
#[derive(Clone)]
pub struct ApiInvoker {
    pub(super) orchestrator: Arc<Orchestrator>,
    /// The orchestrator's timeout (whole seconds, as Lambda holds it).
    pub(super) timeout: Duration,
    pub(super) faults: Option<Arc<dyn FaultPlan>>,
    pub(super) counters: Arc<Counters>,
    /// The event stream's timings; its function's timeout is [`Self::stream_timeout`].
    pub(super) events: EventStreamSettings,
}

/// How far the streaming function's timeout is above the stream's own deadline (as `template.yaml`
/// sets it): the stream ends itself; the platform's cut is the backstop.
const STREAM_TIMEOUT_MARGIN: Duration = Duration::from_secs(30);

impl ApiInvoker {
    /// Where a long-running `path` (`orchestrator::stream::LONG_RUNNING_ROUTES`, on AWS the
    /// streaming function URL's) is cut: the event stream at its maximum duration and a margin, the
    /// OpenAI routes at their own maximum ([`orchestrator::openai::max_duration`], above the
    /// conversation's deadline).
    pub fn stream_timeout(&self, path: &str) -> Duration {
        if path.ends_with("/events") {
            self.events.max_duration + STREAM_TIMEOUT_MARGIN
        } else {
            orchestrator::openai::max_duration(Duration::from_secs(self.orchestrator.settings().deadline_secs))
        }
    }

    /// Runs `handler` as one orchestrator invocation; a timed-out or killed one is counted.
    pub(super) async fn invoke<F: Future>(&self, handler: F) -> Ended<F::Output> {
        let ended = invoke(self.timeout, self.faults.as_ref(), handler).await;
        match ended {
            Ended::Killed => add(&self.counters.killed_invocations, 1),
            Ended::TimedOut => add(&self.counters.timed_out_invocations, 1),
            Ended::Returned(_) => {}
        }
        ended
    }

    /// Serves `request` as a `RESPONSE_STREAM` function URL invokes: the handler runs (under the
    /// fault plan) until its answer's head, then the body streams until it ends or the function's
    /// timeout ([`Self::stream_timeout`]) cuts it, as Lambda ends a streaming invocation.
    async fn stream(&self, inner: axum::Router, request: axum::extract::Request) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        use tower::ServiceExt as _;
        let timeout = self.stream_timeout(request.uri().path());
        let deadline = tokio::time::Instant::now() + timeout;
        let call = async move {
            match inner.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        };
        match invoke(timeout, self.faults.as_ref(), call).await {
            Ended::Returned(response) => {
                let (parts, body) = response.into_parts();
                let cut =
                    futures::stream::unfold((body.into_data_stream(), deadline), |(mut data, deadline)| async move {
                        match tokio::time::timeout_at(deadline, data.next()).await {
                            Ok(Some(chunk)) => Some((chunk, (data, deadline))),
                            // Ended, or cut at the function's timeout: the client sees the stream close.
                            Ok(None) | Err(_) => None,
                        }
                    });
                axum::response::Response::from_parts(parts, axum::body::Body::from_stream(cut))
            }
            Ended::TimedOut => {
                add(&self.counters.timed_out_invocations, 1);
                axum::http::StatusCode::GATEWAY_TIMEOUT.into_response()
            }
            Ended::Killed => {
                add(&self.counters.killed_invocations, 1);
                (
                    axum::http::StatusCode::BAD_GATEWAY,
                    axum::Json(serde_json::json!({"message": "Internal Server Error"})),
                )
                    .into_response()
            }
        }
    }

    /// The API over the orchestrator's router with `state` (callers, approvals), every request one
    /// invocation: past the timeout the client gets API Gateway's 503, after a crash its 500.
    pub fn router(&self, state: ApiState) -> axum::Router {
        let invoker = self.clone();
        let inner = http::api(state);
        axum::Router::new().fallback(move |request: axum::extract::Request| {
            let invoker = invoker.clone();
            let inner = inner.clone();
            async move {
                use axum::response::IntoResponse as _;
                use tower::ServiceExt as _;
                // API Gateway (and a function URL) reads the whole body before it invokes: a body
                // that stops short is 408 at the read deadline, and the function never runs.
                let request = match orchestrator::api::read_body_within(request).await {
                    Ok(request) => request,
                    Err(error) => return error.into_response(),
                };
                if orchestrator::stream::is_long_running(request.uri().path()) {
                    return invoker.stream(inner, request).await;
                }
                let call = async move {
                    match inner.oneshot(request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    }
                };
                match invoker.invoke(call).await {
                    Ended::Returned(response) => response,
                    Ended::TimedOut => (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        axum::Json(serde_json::json!({"message": "Service Unavailable"})),
                    )
                        .into_response(),
                    Ended::Killed => (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        axum::Json(serde_json::json!({"message": "Internal Server Error"})),
                    )
                        .into_response(),
                }
            }
        })
    }
}
