//! Orchestrator Lambda: telemetry, its config, the store, queues, model and gateway client, then the HTTP API router under `lambda_http`.

use std::sync::Arc;

use orchestrator::{ApiState, Auth, Orchestrator, OrchestratorConfig};
use swarm_adapters::config::AwsClients;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    swarm_adapters::telemetry::init();
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
    lambda_http::run(orchestrator::router(ApiState::new(Arc::new(core), auth))).await
}
