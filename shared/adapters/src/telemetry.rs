//! One tracing set-up for every binary: honours Lambda's log format and level controls, JSON on Lambda.

use tracing_subscriber::EnvFilter;

/// Every variable the tracing set-up reads (the only environment reads outside the functions' configs).
pub const VARS: &[&str] = &["RUST_LOG", "AWS_LAMBDA_LOG_LEVEL", "AWS_LAMBDA_LOG_FORMAT", "LOG_FORMAT"];

/// Installs the global subscriber once. JSON when `AWS_LAMBDA_LOG_FORMAT=JSON`
/// (set by `LoggingConfig: LogFormat: JSON`) or `LOG_FORMAT=json`; level from
/// `RUST_LOG`, else `AWS_LAMBDA_LOG_LEVEL`, else `info`. Logs go to stderr so a
/// CLI's stdout stays clean. Calling it twice is harmless.
pub fn init() {
    init_with_default("info,rmcp=warn");
}

/// Like [`init`] with another default level (e.g. `warn` for a CLI).
pub fn init_with_default(default_level: &str) {
    let level = std::env::var("RUST_LOG")
        .ok()
        .or_else(|| std::env::var("AWS_LAMBDA_LOG_LEVEL").ok().map(|l| l.to_lowercase()))
        .unwrap_or_else(|| default_level.to_owned());
    let filter = EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new(default_level));
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"))
        || std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json {
        builder.json().with_current_span(false).without_time().try_init()
    } else {
        builder.with_target(false).try_init()
    };
}
