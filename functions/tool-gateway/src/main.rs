//! Tool gateway binary: on Lambda (`AWS_LAMBDA_RUNTIME_API` set) behind a function URL or the HTTP API, else an HTTP server on `GATEWAY_ADDR`.

use anyhow::Context as _;
use tool_gateway::{Gateway, GatewayConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // rmcp logs every stateless request at INFO; keep the gateway's own per-call lines only.
    shared::telemetry::init_with_default("info,rmcp=warn");
    let config = GatewayConfig::from_env()?;
    let gateway = Gateway::start(config).await?;
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        lambda_http::run(gateway.router()).await.map_err(|e| anyhow::anyhow!(e))
    } else {
        let addr = std::env::var("GATEWAY_ADDR").unwrap_or_else(|_| "127.0.0.1:8790".into());
        let addr = addr.parse().with_context(|| format!("GATEWAY_ADDR {addr:?} is not host:port"))?;
        let (_, server) = tool_gateway::serve_gateway(addr, &gateway).await?;
        server.await.context("gateway server task failed")
    }
}
