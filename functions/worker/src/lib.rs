//! The worker function: one LLM ↔ MCP-tool loop per subtask, fed by the SQS event source mapping.

pub mod config;
pub mod core;
pub mod handler;
pub mod unused;
pub mod wiring;

pub use config::WorkerConfig;
pub use core::{Outcome, SweepReport, SweepSettings, WORK_ANSWER_TOKENS, Worker, WorkerSettings};
pub use handler::WorkerMode;
