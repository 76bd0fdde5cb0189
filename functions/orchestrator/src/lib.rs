//! The orchestrator function: `POST /conversations` plans and queues, `GET /conversations/{id}` reports; its long-running routes also on a streaming function URL ([`stream`]).

pub mod api;
pub mod approvals;
pub mod budget;
pub mod config;
pub mod console;
pub mod core;
pub mod cursor;
pub mod openai;
pub mod stream;
pub mod wiring;

pub use api::{ApiState, Auth, Caller, OperatorAuth, router};
pub use approvals::Approvals;
pub use config::OrchestratorConfig;
pub use core::{Orchestrator, OrchestratorSettings};
pub use swarm_adapters::config::AuthMode;
