//! Orchestrator Lambda: telemetry, its config, the store, queues, model and gateway client, then the HTTP API router under `lambda_http` (telemetry flushed after every response).

use std::sync::Arc;

use orchestrator::{ApiState, Approvals, Auth, OperatorAuth, Orchestrator, OrchestratorConfig};
use swarm_adapters::config::AwsClients;
use swarm_core::approval::ApprovalKey;
use swarm_core::timings::Timings;

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
    let mut state = ApiState::new(Arc::new(core), auth).with_cors(config.cors.clone());
    if let Some(source) = &config.approval_key {
        let key = ApprovalKey::new(source.resolve(&config.secrets).await?.expose())?;
        let approvals = Approvals::new(aws.store(&config.table), aws.queues(&config.queues), key, Timings::standard());
        // The approvals routes use AWS_IAM authorization in the template, whatever customers use.
        state = state.with_approvals(Arc::new(approvals), OperatorAuth::Iam);
    }
    let router = orchestrator::router(state);
    swarm_adapters::telemetry::lambda::run(&telemetry, |flush| lambda_http::run(flush.wrap(router))).await
}
