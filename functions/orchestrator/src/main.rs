//! Orchestrator Lambda: telemetry, its config, the store, queues, model and gateway client, then the HTTP API router under `lambda_http` (telemetry flushed after every request).

use std::sync::Arc;

use orchestrator::{ApiState, Auth, Orchestrator, OrchestratorConfig};
use swarm_adapters::config::AwsClients;
use swarm_adapters::telemetry::Telemetry;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let telemetry = swarm_adapters::telemetry::function("orchestrator")?;
    let config = OrchestratorConfig::from_env()?;
    let aws = AwsClients::from_env().await;
    let models = config.llm.models(&config.secrets).await?;
    let tools = config.gateway.connect(&config.secrets).await?;
    let access = aws.access(&config.table);
    let core = Orchestrator::new(
        aws.store(&config.table),
        aws.queues(&config.queues),
        models.main,
        tools,
        config.roles.clone(),
        config.settings(),
    )
    .with_limits(access.clone(), config.limits);
    let auth = Auth::from_config(&config.auth, access);
    let router = orchestrator::router(ApiState::new(Arc::new(core), auth))
        .layer(axum::middleware::from_fn_with_state(telemetry, flush_after));
    lambda_http::run(router).await
}

/// Flushes spans and metrics once the answer is ready: the sandbox freezes after the response.
async fn flush_after(
    axum::extract::State(telemetry): axum::extract::State<Telemetry>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let response = next.run(request).await;
    telemetry.flush().await;
    response
}
