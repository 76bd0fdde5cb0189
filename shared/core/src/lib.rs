//! The pure core of lambda-swarm: domain values, identity and limits (`access`), the end of a conversation (`answer`), the reply's language (`language`), the memory of earlier turns (`memory`), port traits, named crash points, plan parsing, prompts, reply, view, roles, JSON repair, the LLM rules, the timing table and the observability vocabulary (`obs`: metric catalogue, span helpers).
//!
//! Nothing here talks to AWS, HTTP or MCP: the adapters behind the ports live
//! in `swarm-adapters`, the offline model in `swarm-offline`, the test doubles
//! in `swarm-testing`. Every crate of the workspace links this one.

pub mod access;
pub mod action;
pub mod answer;
pub mod approval;
pub mod decisions;
pub mod domain;
pub mod effects;
pub mod events;
pub mod faults;
pub mod handoff;
pub mod ids;
pub mod jsonfix;
pub mod language;
pub mod lifecycle;
pub mod llm;
pub mod memory;
pub mod obs;
pub mod plan;
pub mod ports;
pub mod prompts;
pub mod reply;
pub mod result;
pub mod roles;
pub mod schema;
pub mod text;
pub mod time;
pub mod timings;
pub mod turns;
pub mod untrusted;
pub mod view;
