//! Chat-model adapters: the tolerant OpenAI-compatible HTTP client and its config; the LLM rules live in `swarm-core`, the offline model in `swarm-offline`.

pub mod config;
pub mod http;

pub use swarm_core::llm::{pricing, retry, transcript};
pub use swarm_offline as offline;
