//! The orchestrator function: `POST /conversations` plans and queues, `GET /conversations/{id}` reports.

pub mod api;
pub mod config;
pub mod core;

pub use api::{ApiState, Auth, Caller, router};
pub use config::OrchestratorConfig;
pub use core::{Orchestrator, OrchestratorSettings};
pub use swarm_adapters::config::AuthMode;
