//! Orchestrator Lambda: telemetry, its config, the store, queues, model and gateway client, the orchestrator built by [`orchestrator::wiring`], then the HTTP API router under `lambda_http` (telemetry flushed after every response).

use std::sync::Arc;

use orchestrator::api::IamOperators;
use orchestrator::wiring;
use orchestrator::{ApiState, Auth, OperatorAuth, OrchestratorConfig};
use swarm_adapters::config::{AwsClients, ExposeSecret};
use swarm_core::approval::ApprovalKey;
use swarm_core::timings::Timings;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let telemetry = swarm_adapters::telemetry::function("orchestrator")?;
    let config = OrchestratorConfig::from_env()?;
    let aws = AwsClients::from_env().await;
    let (core, access) = wiring::on_aws(&config, &aws).await?;
    let auth = Auth::from_config(&config.auth, access.clone());
    let mut state = ApiState::new(Arc::new(core), auth).with_cors(config.cors.clone());
    if let Some(source) = &config.approval_key {
        let key = ApprovalKey::new(source.resolve(&config.secrets).await?.expose_secret())?;
        let approvals =
            wiring::approvals(aws.store(&config.table), aws.queues(&config.queues), key, Timings::standard());
        // The approvals routes use AWS_IAM authorization in the template, whatever customers use;
        // the operators are the configured principals, never a customer's.
        let operators = OperatorAuth::Iam(IamOperators::new(&config.operators, access));
        state = state.with_approvals(Arc::new(approvals), operators);
    }
    let router = orchestrator::router(state);
    swarm_adapters::telemetry::lambda::run(&telemetry, |flush| lambda_http::run(flush.wrap(router))).await
}
