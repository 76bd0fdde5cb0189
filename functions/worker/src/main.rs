//! Worker Lambda (tasks, refund-tasks, DLQ or sweep mode): telemetry, its config, the store, the queues it may send to, the models and gateway client (none in DLQ and sweep mode: they hold neither secret), the function built by [`worker::wiring`] (the tasks worker, or the closer alone), then the SQS handler or the sweep's (telemetry flushed after every response).

use lambda_runtime::{LambdaEvent, service_fn};
use swarm_adapters::config::{AwsClients, ExposeSecret};
use swarm_core::approval::ApprovalKey;
use swarm_core::timings::Timings;
use worker::wiring::{self, WorkerPorts};
use worker::{WorkerConfig, WorkerMode, handler};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let telemetry = swarm_adapters::telemetry::function("worker")?;
    let config = WorkerConfig::from_env()?;
    let aws = AwsClients::from_env().await;
    let ports = WorkerPorts {
        store: aws.store(&config.table),
        queues: aws.queues(&config.queues),
        agent: wiring::connect_agent(&config).await?,
        approval_key: match &config.approval_key {
            Some(source) => Some(ApprovalKey::new(source.resolve(&config.secrets).await?.expose_secret())?),
            None => None,
        },
    };
    let function = wiring::worker(&config, ports, Timings::standard())?;
    let sweeper = function.closer().filter(|_| config.mode == WorkerMode::Sweep);
    let messages = function.messages();
    swarm_adapters::telemetry::lambda::run(&telemetry, |flush| async move {
        if let Some(closer) = sweeper {
            let sweep = service_fn(move |event: LambdaEvent<serde_json::Value>| {
                let closer = closer.clone();
                async move { handler::sweep(&closer, event).await }
            });
            return lambda_runtime::run(flush.wrap(sweep)).await;
        }
        let tasks = service_fn(move |event: LambdaEvent<_>| {
            let messages = messages.clone();
            async move { handler::handle(messages.as_ref(), event).await }
        });
        lambda_runtime::run(flush.wrap(tasks)).await
    })
    .await
}
