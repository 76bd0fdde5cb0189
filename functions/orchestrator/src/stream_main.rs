//! Streaming orchestrator Lambda (`orchestrator-stream`): the orchestrator built as for the HTTP API ([`orchestrator::wiring::on_aws`]), its long-running routes ([`orchestrator::stream::router`]) served on a function URL in `RESPONSE_STREAM` mode, so an SSE body reaches the client as it is written; customers' JWTs verified here (the URL has no authorizer).

use std::sync::Arc;

use orchestrator::api::EventStreamSettings;
use orchestrator::stream::{self, StreamConfig};
use orchestrator::{ApiState, OrchestratorConfig, wiring};
use swarm_adapters::config::AwsClients;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let telemetry = swarm_adapters::telemetry::function("orchestrator-stream")?;
    let config = OrchestratorConfig::from_env()?;
    let stream_config = StreamConfig::from_env(&config.auth)?;
    let aws = AwsClients::from_env().await;
    let (core, access) = wiring::on_aws(&config, &aws).await?;
    let auth = stream::auth(&config.auth, &stream_config, access)?;
    // No approvals here: the operators' routes stay on the HTTP API, AWS_IAM-authorised.
    // The event stream ends before the function's timeout (deadline + 80 s at least, by the lint).
    let deadline = std::time::Duration::from_secs(core.settings().deadline_secs);
    let events = EventStreamSettings::from_env().capped(orchestrator::openai::max_duration(deadline));
    let state = ApiState::new(Arc::new(core), auth).with_cors(config.cors.clone()).with_event_stream(events);
    let router = stream::router(state);
    // The telemetry is flushed once the handler has answered (the response's head); spans that end
    // while the body streams are flushed after the next invocation's answer.
    swarm_adapters::telemetry::lambda::run(&telemetry, |flush| {
        lambda_http::run_with_streaming_response(flush.wrap(router))
    })
    .await
}
