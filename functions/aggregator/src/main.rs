//! Aggregator Lambda: telemetry, its config, the store and the reply model, the aggregator built by [`aggregator::wiring`], then the stream handler (telemetry flushed after every response).

use std::sync::Arc;

use aggregator::wiring::{self, AggregatorPorts};
use aggregator::{AggregatorConfig, handler};
use lambda_runtime::{LambdaEvent, service_fn};
use swarm_adapters::config::AwsClients;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let telemetry = swarm_adapters::telemetry::function("aggregator")?;
    let config = AggregatorConfig::from_env()?;
    let aws = AwsClients::from_env().await;
    let models = config.llm.models(&config.secrets).await?;
    let ports = AggregatorPorts { store: aws.store(&config.table), model: models.main };
    let core = Arc::new(wiring::aggregator(ports, swarm_core::timings::Timings::standard()));
    swarm_adapters::telemetry::lambda::run(&telemetry, |flush| {
        lambda_runtime::run(flush.wrap(service_fn(move |event: LambdaEvent<_>| {
            let core = core.clone();
            async move { handler::handle(&core, event).await }
        })))
    })
    .await
}
