//! Tool gateway binary: telemetry, its config (secrets fetched), then on Lambda (`AWS_LAMBDA_RUNTIME_API` set) the router under `lambda_http` (telemetry flushed after every response), else an HTTP server on `GATEWAY_ADDR`.

use anyhow::Context as _;
use tool_gateway::{Gateway, GatewayFunctionConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // rmcp logs every stateless request at INFO; the default keeps the gateway's own per-call lines only.
    let telemetry = swarm_adapters::telemetry::function("tool-gateway")?;
    let config = GatewayFunctionConfig::from_env()?;
    let gateway = Gateway::start(config.resolve().await?).await?;
    if config.on_lambda {
        let router = gateway.router();
        swarm_adapters::telemetry::lambda::run(&telemetry, |flush| lambda_http::run(flush.wrap(router)))
            .await
            .map_err(|e| anyhow::anyhow!(e))
    } else {
        let _flushing = telemetry.spawn_periodic_flush(std::time::Duration::from_secs(1));
        let (_, server) = tool_gateway::serve_gateway(config.addr, &gateway).await?;
        server.await.context("gateway server task failed")
    }
}
