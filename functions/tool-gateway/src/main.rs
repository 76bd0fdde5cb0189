//! Tool gateway binary: telemetry, its config (secrets fetched), then on Lambda (`AWS_LAMBDA_RUNTIME_API` set) the router under `lambda_http`, else an HTTP server on `GATEWAY_ADDR`.

use anyhow::Context as _;
use tool_gateway::{Gateway, GatewayFunctionConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // rmcp logs every stateless request at INFO; keep the gateway's own per-call lines only.
    swarm_adapters::telemetry::init_with_default("info,rmcp=warn");
    let config = GatewayFunctionConfig::from_env()?;
    let gateway = Gateway::start_with_metrics(config.resolve().await?, config.emf_metrics).await?;
    if config.on_lambda {
        lambda_http::run(gateway.router()).await.map_err(|e| anyhow::anyhow!(e))
    } else {
        let (_, server) = tool_gateway::serve_gateway(config.addr, &gateway).await?;
        server.await.context("gateway server task failed")
    }
}
