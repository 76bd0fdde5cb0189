//! The aggregator function built from its ports — the one place the Lambda's `main` and the local stack both build it.

use std::sync::Arc;

use swarm_core::ports::{ChatModel, ConversationStore};
use swarm_core::timings::Timings;

use crate::{Aggregator, AggregatorSettings};

/// What the aggregator function is built over (its config names nothing else: the table and the model).
pub struct AggregatorPorts {
    /// The conversation store, as this function's role reaches it.
    pub store: Arc<dyn ConversationStore>,
    /// The reply model.
    pub model: Arc<dyn ChatModel>,
}

/// The aggregator over `ports`, its settings from `timings` (the standard table on Lambda, the scaled one locally).
pub fn aggregator(ports: AggregatorPorts, timings: &Timings) -> Aggregator {
    Aggregator::new(ports.store, ports.model, AggregatorSettings::from_timings(timings))
}
