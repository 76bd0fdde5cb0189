//! Orchestrator Lambda: telemetry, typed settings, AWS clients, models and the gateway client, then the HTTP API handler.

use std::sync::Arc;

use orchestrator::{AuthMode, Orchestrator, OrchestratorSettings, handler};
use swarm_adapters::wiring::{AwsClients, FunctionSettings};
use swarm_core::roles::RoleTable;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    swarm_adapters::telemetry::init();
    let settings = FunctionSettings::from_env()?;
    let auth = AuthMode::parse(&std::env::var("AUTH_MODE").unwrap_or_default())?;
    let roles = RoleTable::parse(&std::env::var("ROLE_TABLE").unwrap_or_default())?;
    let aws = AwsClients::from_env().await;
    let models = swarm_adapters::wiring::models().await?;
    let tools = swarm_adapters::wiring::tool_gateway(&settings).await?;
    let core = Arc::new(Orchestrator::new(
        aws.store(&settings),
        aws.queues(&settings)?,
        models.main,
        tools,
        roles,
        OrchestratorSettings { deadline_secs: settings.deadline_secs, ..OrchestratorSettings::default() },
    ));
    lambda_http::run(lambda_http::service_fn(move |request| {
        let core = core.clone();
        async move { handler::handle(&core, auth, request).await }
    }))
    .await
}
