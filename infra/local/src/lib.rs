//! The local stack: API, orchestrator, queues with event source mappings, workers, aggregator, gateway and demo shop in one process, on the embedded backend or on an AWS emulator.
//!
//! Workers and the aggregator are invoked through the same handler functions
//! Lambda calls, with real-shaped events and AWS's semantics: one
//! [`platform::mapping::EventSourceMapping`] per queue (batch size, maximum
//! concurrency, the function's timeout, partial batch responses, visibility
//! timeout and redrive), one [`platform::stream::StreamTrigger`] on the table's
//! stream (the aggregator's filter, batch size, retries with bisection), both
//! over a [`platform::Backend`]: in memory, or DynamoDB and SQS on an emulator.
//! Every timing comes from the timing table ([`swarm_core::timings`]), scaled
//! only by [`StackOptions::time_scale`]. [`waterfall`] prints a conversation's
//! trace in the terminal (`swarm-local ask --trace`).

pub mod admin;
pub mod chaos;
pub mod chat;
pub mod console;
pub mod events;
pub mod http;
pub mod models;
pub mod operator;
pub mod platform;
pub mod progress;
pub mod serve_edges;
pub mod stack;
pub mod waterfall;
pub mod wiring;

pub use models::{models_from_env, models_from_lookup};
pub use platform::counters::{CounterSnapshot, Counters, Received};
pub use platform::emulator::EmulatorOptions;
pub use platform::{Queue, QueueDepth};
pub use stack::{
    ApiInvoker, BackendChoice, Carried, LocalStack, StackOptions, WrapStore, WrapTools, Wraps, lambda_timeout,
};
pub use wiring::Function;
