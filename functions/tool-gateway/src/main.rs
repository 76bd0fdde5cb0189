//! Tool gateway binary: telemetry, its config (secrets fetched), then on Lambda (`AWS_LAMBDA_RUNTIME_API` set) the router under `lambda_http` (telemetry flushed after every request), else an HTTP server on `GATEWAY_ADDR`.

use anyhow::Context as _;
use swarm_adapters::telemetry::Telemetry;
use tool_gateway::{Gateway, GatewayFunctionConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // rmcp logs every stateless request at INFO; the default keeps the gateway's own per-call lines only.
    let telemetry = swarm_adapters::telemetry::function("tool-gateway")?;
    let config = GatewayFunctionConfig::from_env()?;
    let gateway = Gateway::start(config.resolve().await?).await?;
    if config.on_lambda {
        let router = gateway.router().layer(axum::middleware::from_fn_with_state(telemetry, flush_after));
        lambda_http::run(router).await.map_err(|e| anyhow::anyhow!(e))
    } else {
        let _flushing = telemetry.spawn_periodic_flush(std::time::Duration::from_secs(1));
        let (_, server) = tool_gateway::serve_gateway(config.addr, &gateway).await?;
        server.await.context("gateway server task failed")
    }
}

/// Flushes spans and metrics once the answer is ready: the sandbox freezes after the response.
async fn flush_after(
    axum::extract::State(telemetry): axum::extract::State<Telemetry>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let response = next.run(request).await;
    telemetry.flush().await;
    response
}
