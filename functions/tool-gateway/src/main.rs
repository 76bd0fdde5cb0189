//! Tool gateway binary: on Lambda (`AWS_LAMBDA_RUNTIME_API` set) behind a function URL or the HTTP API, else an HTTP server on `GATEWAY_ADDR`.

use std::collections::HashMap;

use anyhow::Context as _;
use tool_gateway::{Gateway, GatewayConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // rmcp logs every stateless request at INFO; keep the gateway's own per-call lines only.
    swarm_adapters::telemetry::init_with_default("info,rmcp=warn");
    // `${env:X}` in GATEWAY_CONFIG reads X, or on Lambda the secret named by X_SECRET_ARN.
    let mut secrets = HashMap::new();
    for (name, _) in std::env::vars().filter(|(k, _)| k.ends_with("_SECRET_ARN")) {
        let plain = name.trim_end_matches("_SECRET_ARN").to_owned();
        if let Some(value) = swarm_adapters::secrets::secret(&plain, &name).await? {
            secrets.insert(plain, value);
        }
    }
    let config = GatewayConfig::from_lookup(|k| std::env::var(k).ok().or_else(|| secrets.get(k).cloned()))?;
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
