//! The test doubles of lambda-swarm, in one place, for dev-dependencies only: a scripted chat model, a static tool gateway, a store wrapper that fails on demand, and the fixture cases.
//!
//! - [`ScriptedModel`]: answers from a queue of responses/errors, per-purpose
//!   answers, work-request markers that fail or stall, then repeats, delegates
//!   or reports the script exhausted; records every request and counts per purpose.
//! - [`StaticTools`]: a tool catalogue with canned outputs per tool, delays, and the calls it ran.
//! - [`HangingTools`]: a gateway whose first calls of one tool never answer (stuck invocations).
//! - [`FlakyStore`]: any [`swarm_core::ports::ConversationStore`] with transient failures injected per operation (and subtask), always or the first n times; optionally recording the leases taken and replies written.
//! - [`fixtures`]: the cases of `tests/fixtures/queries.jsonl` (and the Traditional Chinese ones), the language each is answered in, and the fixture files.
//! - [`preflight`]: a Lambda binary's cold start with chosen variables, and the refusals every function shares.

pub mod fixtures;
mod model;
pub mod preflight;
mod store;
mod tools;

pub use fixtures::{
    Case, case, case_language, cases, mcp_case, script_problems, simplified_cases, tools_of_kind, traditional_cases,
};
pub use model::{Reply, ScriptedModel, text_response};
pub use store::{FlakyStore, RecordLog, Recorded, StoreOp};
pub use tools::{HangingTools, HungCall, StaticTools};
