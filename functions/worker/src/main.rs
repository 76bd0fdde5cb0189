//! Worker Lambda (tasks, refund-tasks or DLQ mode): telemetry, typed settings, AWS clients, models and the gateway client, then the SQS handler.

use std::sync::Arc;

use lambda_runtime::{LambdaEvent, service_fn};
use swarm_adapters::wiring::{AwsClients, FunctionSettings};
use worker::{Worker, WorkerMode, WorkerSettings, handler};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    swarm_adapters::telemetry::init();
    let settings = FunctionSettings::from_env()?;
    let mode = WorkerMode::parse(&std::env::var("WORKER_MODE").unwrap_or_default())?;
    let aws = AwsClients::from_env().await;
    let models = swarm_adapters::wiring::models().await?;
    let tools = swarm_adapters::wiring::tool_gateway(&settings).await?;
    let budget = std::env::var("LLM_TOKEN_BUDGET").ok().and_then(|v| v.parse().ok());
    let core = Arc::new(Worker::new(
        aws.store(&settings),
        aws.queues(&settings)?,
        models.main,
        models.sub,
        tools,
        WorkerSettings { token_budget: budget, ..WorkerSettings::default() },
    ));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| {
        let core = core.clone();
        async move { handler::handle(&core, mode, event).await }
    }))
    .await
}
