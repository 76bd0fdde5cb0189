//! Shared crate of lambda-swarm: domain, ports (traits) and their adapters, config and telemetry.

pub mod adapters;
pub mod domain;
pub mod jsonfix;
pub mod llm;
pub mod plan;
pub mod ports;
pub mod prompts;
pub mod reply;
pub mod roles;
pub mod secrets;
pub mod telemetry;
pub mod view;
#[cfg(feature = "aws")]
pub mod wiring;
