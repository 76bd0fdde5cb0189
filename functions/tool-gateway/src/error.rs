//! Errors of the gateway library, each classified transient (retry may help) or permanent.

/// What can stop the gateway from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A setting is missing or invalid; the message names it. Permanent.
    #[error("gateway configuration: {0}")]
    Config(String),
    /// Two upstreams expose the same tool name (prefix off or equal). Permanent.
    #[error("tool name collision: {0}")]
    Collision(String),
    /// The listen address cannot be bound (in use, no permission). Transient.
    #[error("cannot listen on {addr}: {message}")]
    Bind { addr: std::net::SocketAddr, message: String },
    /// Building the HTTP client failed (TLS set-up). Permanent.
    #[error("cannot build the upstream HTTP client: {0}")]
    HttpClient(String),
}

impl GatewayError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Bind { .. })
    }
}
