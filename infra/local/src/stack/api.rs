//! The HTTP API as API Gateway serves it: every request one orchestrator invocation, cut at the function's timeout (a long-running route at its own longer one), under the fault plan.

use std::sync::Arc;
use std::time::Duration;

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
}

impl ApiInvoker {
    /// Where a request for `path` is cut: the orchestrator's timeout, or for a long-running route
    /// (`orchestrator::stream::LONG_RUNNING_ROUTES`, on AWS the streaming function URL's, whose
    /// timeout is above the conversation's deadline) its own maximum ([`orchestrator::openai::max_duration`]).
    pub fn timeout_for(&self, path: &str) -> Duration {
        if orchestrator::stream::is_long_running(path) {
            let deadline = Duration::from_secs(self.orchestrator.settings().deadline_secs);
            orchestrator::openai::max_duration(deadline)
        } else {
            self.timeout
        }
    }

    /// Runs `handler` as one orchestrator invocation; a timed-out or killed one is counted.
    pub(super) async fn invoke<F: Future>(&self, handler: F) -> Ended<F::Output> {
        self.invoke_within(self.timeout, handler).await
    }

    /// [`Self::invoke`], cut at `timeout`.
    async fn invoke_within<F: Future>(&self, timeout: Duration, handler: F) -> Ended<F::Output> {
        let ended = invoke(timeout, self.faults.as_ref(), handler).await;
        match ended {
            Ended::Killed => add(&self.counters.killed_invocations, 1),
            Ended::TimedOut => add(&self.counters.timed_out_invocations, 1),
            Ended::Returned(_) => {}
        }
        ended
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
                // API Gateway reads the whole body before it invokes: a body that stops short is
                // 408 at the read deadline, and the function never runs.
                let request = match orchestrator::api::read_body_within(request).await {
                    Ok(request) => request,
                    Err(error) => return error.into_response(),
                };
                let timeout = invoker.timeout_for(request.uri().path());
                let call = async move {
                    match inner.oneshot(request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    }
                };
                match invoker.invoke_within(timeout, call).await {
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
