//! Worker Lambda (tasks, refund-tasks, DLQ or sweep mode): telemetry, its config, the store and queues; in tasks mode the models and gateway client and the tasks worker, in DLQ and sweep mode the closer alone (no model, no tool: they hold neither secret); then the SQS handler or the sweep's (telemetry flushed after every invocation).

use std::sync::Arc;

use lambda_runtime::{LambdaEvent, service_fn};
use swarm_adapters::config::AwsClients;
use worker::{Closer, MessageHandler, Worker, WorkerConfig, WorkerMode, handler};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let telemetry = swarm_adapters::telemetry::function("worker")?;
    let config = WorkerConfig::from_env()?;
    let aws = AwsClients::from_env().await;
    let (store, queues) = (aws.store(&config.table), aws.queues(&config.queues));
    let function: Arc<dyn MessageHandler> = match config.mode {
        WorkerMode::Tasks => {
            // The config requires the gateway in tasks mode.
            let gateway = config.gateway.as_ref().ok_or("WORKER_MODE=tasks runs without a gateway client")?;
            let models = config.llm.models(&config.secrets).await?;
            let tools = gateway.connect(&config.secrets).await?;
            Arc::new(Worker::new(store, queues, models.main, models.sub, tools, config.settings()))
        }
        WorkerMode::Sweep => {
            let closer = Arc::new(Closer::new(store, queues, &config.settings()));
            return lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
                let (closer, telemetry) = (closer.clone(), telemetry.clone());
                async move {
                    let answer = handler::sweep(&closer, event).await;
                    telemetry.flush().await;
                    answer
                }
            }))
            .await;
        }
        WorkerMode::DeadLetters => Arc::new(Closer::new(store, queues, &config.settings())),
    };
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| {
        let (function, telemetry) = (function.clone(), telemetry.clone());
        async move {
            let answer = handler::handle(function.as_ref(), event).await;
            // The sandbox freezes after the response: spans and metrics go out now or never.
            telemetry.flush().await;
            answer
        }
    }))
    .await
}
