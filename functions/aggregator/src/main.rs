//! Aggregator Lambda: telemetry, its config, the store and the reply model, then the stream handler (telemetry flushed after every response).

use std::sync::Arc;

use aggregator::{Aggregator, AggregatorConfig, AggregatorSettings, handler};
use lambda_runtime::{LambdaEvent, service_fn};
use swarm_adapters::config::AwsClients;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let telemetry = swarm_adapters::telemetry::function("aggregator")?;
    let config = AggregatorConfig::from_env()?;
    let aws = AwsClients::from_env().await;
    let models = config.llm.models(&config.secrets).await?;
    let core = Arc::new(Aggregator::new(aws.store(&config.table), models.main, AggregatorSettings::default()));
    swarm_adapters::telemetry::lambda::run(&telemetry, |flush| {
        lambda_runtime::run(flush.wrap(service_fn(move |event: LambdaEvent<_>| {
            let core = core.clone();
            async move { handler::handle(&core, event).await }
        })))
    })
    .await
}
