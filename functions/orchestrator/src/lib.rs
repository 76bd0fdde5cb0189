//! The orchestrator function: `POST /conversations` plans and queues, `GET /conversations/{id}` reports.

pub mod core;
pub mod handler;

pub use core::{Orchestrator, OrchestratorSettings};
pub use handler::AuthMode;
