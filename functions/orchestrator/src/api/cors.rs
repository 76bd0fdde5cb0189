//! CORS: the browser origins allowed to call the API — one list, whether `swarm-local serve` answers (`--allow-origin`, default [`DEFAULT_ALLOWED_ORIGINS`]) or the deployed API does (the template's `CorsAllowOrigins` parameter, default the same list, feeds both API Gateway's CORS configuration and the orchestrator's `CORS_ALLOWED_ORIGINS`) — answered by `tower-http`'s CORS layer.

use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// The origins allowed by default: a web console on this machine (the template's
/// `CorsAllowOrigins` default is the same list, checked by `tests/openapi.rs`).
pub const DEFAULT_ALLOWED_ORIGINS: &[&str] = &["http://localhost:3000", "http://127.0.0.1:3000"];
/// Methods a browser may use.
pub const ALLOWED_METHODS: &[&str] = &["GET", "POST", "OPTIONS"];
/// Request headers a browser may send.
pub const ALLOWED_HEADERS: &[&str] = &["authorization", "content-type", "idempotency-key", "traceparent", "tracestate"];
/// Response headers a browser's script may read.
pub const EXPOSED_HEADERS: &[&str] = &["location", "retry-after", "www-authenticate"];
/// How long a browser may cache a preflight's answer, in seconds.
pub const MAX_AGE_SECS: u64 = 600;

/// The allowed origins, each an exact `scheme://host[:port]`, or `*` for any.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedOrigins(Vec<String>);

impl AllowedOrigins {
    /// Reads a list of origins (`CORS_ALLOWED_ORIGINS` splits on commas; blanks are skipped).
    /// Errors name the origin that is not `http(s)://host[:port]` without a path, or `*`.
    pub fn parse<S: AsRef<str>>(origins: impl IntoIterator<Item = S>) -> Result<Self, String> {
        let mut list = Vec::new();
        for origin in origins {
            let origin = origin.as_ref().trim();
            if origin.is_empty() {
                continue;
            }
            let rest = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
            let valid = origin == "*"
                || rest.is_some_and(|host| {
                    !host.is_empty() && !host.contains(['/', '?', '#', ' ']) && HeaderValue::from_str(origin).is_ok()
                });
            if !valid {
                return Err(format!("{origin:?} is not an origin: use scheme://host[:port] with no path, or *"));
            }
            list.push(origin.to_owned());
        }
        Ok(Self(list))
    }

    /// [`DEFAULT_ALLOWED_ORIGINS`].
    pub fn defaults() -> Self {
        Self(DEFAULT_ALLOWED_ORIGINS.iter().map(|o| (*o).to_owned()).collect())
    }

    pub fn origins(&self) -> &[String] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The layer answering preflights and adding CORS headers for these origins. Bearer tokens
    /// travel in a header, never a cookie: credentials mode stays off.
    pub fn layer(&self) -> CorsLayer {
        let origin = if self.0.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(self.0.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
        };
        let names =
            |list: &[&str]| list.iter().filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok()).collect::<Vec<_>>();
        CorsLayer::new()
            .allow_origin(origin)
            .allow_methods(
                ALLOWED_METHODS.iter().filter_map(|m| Method::from_bytes(m.as_bytes()).ok()).collect::<Vec<_>>(),
            )
            .allow_headers(names(ALLOWED_HEADERS))
            .expose_headers(names(EXPOSED_HEADERS))
            .max_age(Duration::from_secs(MAX_AGE_SECS))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn origins_are_exact_and_bad_ones_are_named() {
        let ok = AllowedOrigins::parse("https://console.example.com, http://localhost:3000,".split(',')).unwrap();
        assert_eq!(ok.origins(), ["https://console.example.com", "http://localhost:3000"]);
        assert!(AllowedOrigins::parse([""]).unwrap().is_empty());
        for bad in ["console.example.com", "https://a.example.com/app", "ftp://a.example.com", "https://"] {
            let e = AllowedOrigins::parse([bad]).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        assert_eq!(AllowedOrigins::parse(["*"]).unwrap().origins(), ["*"]);
    }
}
