//! Chat-model adapters: the tolerant OpenAI-compatible HTTP client, retries, pricing, transcript care, and the deterministic offline model.

pub mod config;
pub mod http;
pub mod offline;
pub mod pricing;
pub mod retry;
pub mod transcript;
