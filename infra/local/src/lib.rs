//! The local stack: API, orchestrator, queues with event source mappings, workers, aggregator, gateway and demo shop in one process, on the embedded backend or on an AWS emulator.
//!
//! Workers and the aggregator are invoked through the same handler functions
//! Lambda calls, with real-shaped events and AWS's semantics: one
//! [`platform::mapping::EventSourceMapping`] per queue (batch size, maximum
//! concurrency, the function's timeout, partial batch responses, visibility
//! timeout and redrive), one [`platform::stream::StreamTrigger`] on the table's
//! stream (the aggregator's filter, batch size, retries with bisection), both
//! over a [`platform::Backend`]: in memory, or DynamoDB and SQS on an emulator.
//! Every timing comes from the timing table ([`swarm_core::timings`]), scaled
//! only by [`StackOptions::time_scale`].

pub mod events;
pub mod http;
pub mod models;
pub mod platform;
pub mod stack;

pub use models::{models_from_env, models_from_lookup};
pub use platform::counters::{CounterSnapshot, Counters, Received};
pub use platform::emulator::EmulatorOptions;
pub use platform::{Queue, QueueDepth};
pub use stack::{BackendChoice, LocalStack, StackOptions, WrapStore, WrapTools, lambda_timeout};

use anyhow::Context as _;
use orchestrator::{AuthMode, Orchestrator};

/// Invokes the orchestrator's Lambda handler with an HTTP API (payload 2.0)
/// event; answers `(status, JSON body)`.
pub async fn invoke_orchestrator(
    orchestrator: &Orchestrator,
    event: &serde_json::Value,
) -> anyhow::Result<(u16, serde_json::Value)> {
    let request = lambda_http::request::from_str(&event.to_string()).context("building the API Gateway request")?;
    let response = orchestrator::handler::handle(orchestrator, AuthMode::None, request)
        .await
        .map_err(|e| anyhow::anyhow!("orchestrator handler failed: {e}"))?;
    let status = response.status().as_u16();
    let bytes: &[u8] = response.body().as_ref();
    let json = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(bytes).context("response body is not JSON")?
    };
    Ok((status, json))
}
