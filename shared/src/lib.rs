//! Shared crate of lambda-swarm: the adapters, config and telemetry; the core lives in `swarm-core`, the offline model in `swarm-offline` (re-exported here while the split goes on).

pub mod adapters;
pub mod llm;
pub mod secrets;
pub mod telemetry;
#[cfg(feature = "aws")]
pub mod wiring;

pub use swarm_core::{domain, jsonfix, plan, ports, prompts, reply, roles, view};
