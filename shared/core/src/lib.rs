//! The pure core of lambda-swarm: domain values, identity and limits (`access`), port traits, named crash points, plan parsing, prompts, reply, view, roles, JSON repair, the LLM rules, the timing table and the observability vocabulary (`obs`: metric catalogue, span helpers).
//!
//! Nothing here talks to AWS, HTTP or MCP: the adapters behind the ports live
//! in `swarm-adapters`, the offline model in `swarm-offline`, the test doubles
//! in `swarm-testing`. Every crate of the workspace links this one.

pub mod access;
pub mod approval;
pub mod domain;
pub mod effects;
pub mod faults;
pub mod handoff;
pub mod ids;
pub mod jsonfix;
pub mod llm;
pub mod obs;
pub mod plan;
pub mod ports;
pub mod prompts;
pub mod reply;
pub mod roles;
pub mod schema;
mod secret;
pub mod timings;
pub mod untrusted;
pub mod view;

pub use secret::SecretString;
