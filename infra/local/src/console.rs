//! The live console as `swarm-local serve` serves it at `/console`: the page of `orchestrator::console` merged with the local stack's API, the reads it makes (docs/console.md).

use axum::Router;
use orchestrator::api::AllowedOrigins;
use orchestrator::{Auth, OperatorAuth};

use crate::LocalStack;

/// What `swarm-local serve` serves but `/metrics` (which it adds from its telemetry): the API of
/// `stack` with `auth` for customers and `operators` for the approvals and operator routes, the
/// console, and browsers' preflights from `origins` answered as API Gateway answers them. Every
/// request is one orchestrator invocation, cut at its timeout, as API Gateway invokes it.
pub fn app(stack: &LocalStack, auth: Auth, operators: OperatorAuth, origins: &AllowedOrigins) -> Router {
    stack.api_router(auth, Some(operators)).merge(orchestrator::console::router()).layer(origins.layer())
}
