//! The trace-context hooks: the W3C `traceparent` of the current span, as the installed telemetry knows it, for the adapters that carry it (SQS message attributes, MCP request headers, the conversation item); and a link from the current span to a stored one (the sweep's work on a conversation, a retry that takes over its planning).
//!
//! The core does not link OpenTelemetry: `swarm_adapters::telemetry` installs
//! the function that reads the current span's context once, at start-up.
//! Without it (unit tests, a binary without telemetry) nothing is carried.

use std::sync::OnceLock;

/// Name of the W3C trace-context header and SQS message attribute.
pub const TRACEPARENT: &str = "traceparent";

static CURRENT: OnceLock<fn() -> Option<String>> = OnceLock::new();
static LINK: OnceLock<fn(&tracing::Span, &str) -> bool> = OnceLock::new();

/// Installs the reader of the current span's `traceparent` (once; later calls are ignored).
pub fn install(current: fn() -> Option<String>) {
    let _ = CURRENT.set(current);
}

/// Installs the function that adds a link from a span to the remote span a `traceparent`
/// names (once; later calls are ignored).
pub fn install_link(link: fn(&tracing::Span, &str) -> bool) {
    let _ = LINK.set(link);
}

/// Links the current span to the span `traceparent` names (a conversation's stored context), so
/// work done for a conversation outside its trace can be found from it. Answers whether a link
/// was added: `false` without telemetry, without a value, or for a value not of the W3C shape.
pub fn link_current(traceparent: Option<&str>) -> bool {
    match (LINK.get(), traceparent) {
        (Some(link), Some(tp)) if is_traceparent(tp) => link(&tracing::Span::current(), tp),
        _ => false,
    }
}

/// The current span's W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), or `None`
/// when no telemetry is installed or no span is being recorded.
pub fn current_traceparent() -> Option<String> {
    CURRENT.get().and_then(|read| read())
}

/// Whether `value` has the W3C `traceparent` shape of version `00`: lower-case hex
/// ids, neither all zeros. Values from the wire (message attributes, headers, stored
/// items) are checked before they are carried further.
pub fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex =
        |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    matches!(parts.as_slice(), [version, trace, span, flags]
        if *version == "00" && hex(trace, 32) && nonzero(trace) && hex(span, 16) && nonzero(span) && hex(flags, 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_w3c_shape_is_a_traceparent() {
        assert!(is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "Root=1-5759e988-bd862e3fe1be46a994272793",
        ] {
            assert!(!is_traceparent(bad), "{bad:?}");
        }
    }
}
