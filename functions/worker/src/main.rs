//! Worker Lambda (tasks, refund-tasks, DLQ or sweep mode): telemetry, its config, the store, queues, models and gateway client (none in DLQ and sweep mode: they hold neither secret), then the SQS handler or the sweep's (telemetry flushed after every response).

use std::sync::Arc;

use lambda_runtime::{LambdaEvent, service_fn};
use swarm_adapters::config::AwsClients;
use swarm_core::ports::{ChatModel, ToolGateway};
use worker::unused::{NoModel, NoTools};
use worker::{Worker, WorkerConfig, WorkerMode, handler};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let telemetry = swarm_adapters::telemetry::function("worker")?;
    let config = WorkerConfig::from_env()?;
    let aws = AwsClients::from_env().await;
    let (main_model, sub_model, tools): (Arc<dyn ChatModel>, Arc<dyn ChatModel>, Arc<dyn ToolGateway>) =
        match &config.gateway {
            Some(gateway) => {
                let models = config.llm.models(&config.secrets).await?;
                (models.main, models.sub, gateway.connect(&config.secrets).await?)
            }
            None => (Arc::new(NoModel), Arc::new(NoModel), Arc::new(NoTools)),
        };
    let (store, queues) = (aws.store(&config.table), aws.queues(&config.queues));
    let core = Arc::new(Worker::new(store, queues, main_model, sub_model, tools, config.settings()));
    let mode = config.mode;
    swarm_adapters::telemetry::lambda::run(&telemetry, |flush| async move {
        if mode == WorkerMode::Sweep {
            let sweep = service_fn(move |event: LambdaEvent<serde_json::Value>| {
                let core = core.clone();
                async move { handler::sweep(&core, event).await }
            });
            return lambda_runtime::run(flush.wrap(sweep)).await;
        }
        let tasks = service_fn(move |event: LambdaEvent<_>| {
            let core = core.clone();
            async move { handler::handle(&core, mode, event).await }
        });
        lambda_runtime::run(flush.wrap(tasks)).await
    })
    .await
}
