//! The aggregator function: triggered from the DynamoDB stream when a conversation's `remaining` reaches 0.

pub mod config;
pub mod core;
pub mod handler;
pub mod wiring;

pub use config::AggregatorConfig;
pub use core::{AggregateOutcome, Aggregator, AggregatorSettings};
