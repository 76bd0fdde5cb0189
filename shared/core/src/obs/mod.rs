//! The swarm's observability vocabulary, shared by every function: the metric catalogue and its one-line calls, the span helpers (OpenTelemetry's GenAI conventions for model calls), the trace-context hook the telemetry set-up fills in, and the decorators that give every store and queue operation its span.
//!
//! Only `tracing` and the `metrics` facade are used here: which recorder
//! (CloudWatch EMF on Lambda, Prometheus in `swarm-local serve`) and which span
//! exporter (OTLP, X-Ray, an in-memory buffer) is the binary's choice, made in
//! `swarm_adapters::telemetry`. Nothing recorded here carries a prompt, a tool
//! argument, a reply, customer-written text or a secret, and no metric carries
//! a conversation id (docs/observability.md).

pub mod context;
pub mod metrics;
pub mod spans;
pub mod traced;

pub use traced::{TracedQueue, TracedStore};
