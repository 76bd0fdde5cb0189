//! A mock OpenAI-compatible chat-completions server for tests and benchmarks: scripted answers, a generic agent with provider quirks, latency, injected faults and request statistics.
//!
//! Routes: `POST /v1/chat/completions` (and `/chat/completions`),
//! `GET /v1/models`, `GET /_stats` (the [`Stats`] as JSON), `POST /_reset`
//! (clears the statistics). Every fate — latency, injected fault — is drawn
//! from one RNG seeded with [`MockConfig::seed`], in arrival order, so a run
//! with the same seed and the same arrival order answers the same way.
//!
//! Rooms: `config` (what the mock is told to be), `server` (routes, state, a request's way to
//! its answer), `fate` (faults and latency), `request` (reading a request), `quirks` (a
//! provider's refusals), `agent` (the generic agent's answers), `script` (customer messages
//! followed as scripts).

mod agent;
mod config;
mod fate;
mod quirks;
mod request;
mod script;
mod server;

pub use config::{
    ANSWER_ROOM_TOKENS, AgentConfig, AgentSubtask, CaseError, Faults, Latency, MockConfig, Mode, Quirks,
    ScriptedResponse, load_cases,
};
pub use script::{ScriptStep, script_steps};
pub use server::{Arrival, MockHandle, MockLlm, Stats};

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests;
