//! The worker function: one LLM ↔ MCP-tool loop per subtask, fed by the SQS event source mapping; its DLQ consumer and sweeper are its closer alone.
//!
//! Rooms, from the base up: `outcome` (what became of a message, what a queue's function
//! answers), `settings`, `dependencies` (pure), `confirmations`; `bookkeeping` (record, count,
//! release), `effects` (journal, approvals, confirmation); `agent` (the loop: rounds, tool calls,
//! shrinking, compression); `closer` (deadline path, sweep, dead letters: no model, no tools);
//! `tasks` (the tasks worker, holding an agent and a closer); `handler` (SQS and scheduler events);
//! `wiring` (each mode built from its config and ports: the tasks worker, or the closer alone).

mod agent;
mod bookkeeping;
mod clock;
mod closer;
pub mod config;
mod confirmations;
mod dependencies;
mod effects;
pub mod handler;
mod heartbeat;
mod outcome;
mod settings;
mod tasks;
pub mod wiring;

pub use agent::WORK_ANSWER_TOKENS;
pub use closer::{Closer, SweepReport};
pub use config::WorkerConfig;
pub use dependencies::{DependencyState, Release, dependency_results, release_decisions};
pub use handler::WorkerMode;
pub use outcome::{MessageHandler, Outcome};
pub use settings::{Heartbeat, SweepSettings, WorkerSettings};
pub use tasks::Worker;
