//! Aggregator Lambda: telemetry, typed settings, the DynamoDB client and the reply model, then the stream handler.

use std::sync::Arc;

use aggregator::{Aggregator, AggregatorSettings, handler};
use lambda_runtime::{LambdaEvent, service_fn};
use swarm_adapters::wiring::{AwsClients, FunctionSettings};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    swarm_adapters::telemetry::init();
    let settings = FunctionSettings::from_env()?;
    let aws = AwsClients::from_env().await;
    let models = swarm_adapters::wiring::models().await?;
    let core = Arc::new(Aggregator::new(aws.store(&settings), models.main, AggregatorSettings::default()));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| {
        let core = core.clone();
        async move { handler::handle(&core, event).await }
    }))
    .await
}
