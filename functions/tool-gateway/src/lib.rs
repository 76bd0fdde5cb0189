//! The MCP tool gateway: federates upstream MCP servers behind one Streamable HTTP endpoint with per-role permissions, customer scoping, cached discovery, rate limits and circuit breakers.

pub mod catalog;
pub mod config;
pub mod demo;
pub mod error;
pub mod gateway;
pub mod guard;
pub mod metrics;
pub mod protect;
pub mod upstream;

use std::net::SocketAddr;

pub use config::function::GatewayFunctionConfig;
pub use config::{GatewayConfig, Prefix, RoleConfig, UpstreamConfig};
pub use demo::{DEMO_ROLE_TOOLS, DemoTokens, demo_config};
pub use error::GatewayError;
pub use gateway::{Gateway, UpstreamStatus};
pub use guard::{Refusal, error_result};
pub use metrics::{MetricsSnapshot, Outcome, ToolStats};
use tokio::task::JoinHandle;

/// Starts a [`Gateway`] and serves its router on `addr` (port 0 picks a free
/// port). Returns the bound address and the server task.
/// Errors: those of [`Gateway::start`], and [`GatewayError::Bind`].
pub async fn serve(addr: SocketAddr, config: GatewayConfig) -> Result<(SocketAddr, JoinHandle<()>), GatewayError> {
    let gateway = Gateway::start(config).await?;
    serve_gateway(addr, &gateway).await
}

/// Serves an already started gateway on `addr` (tests keep the handle to read metrics).
pub async fn serve_gateway(addr: SocketAddr, gateway: &Gateway) -> Result<(SocketAddr, JoinHandle<()>), GatewayError> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| GatewayError::Bind { addr, message: e.to_string() })?;
    let local = listener.local_addr().map_err(|e| GatewayError::Bind { addr, message: e.to_string() })?;
    let router = gateway.router();
    let handle = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, "tool gateway server stopped");
        }
    });
    tracing::info!(%local, "tool gateway listening on /mcp");
    Ok((local, handle))
}
