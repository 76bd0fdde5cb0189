//! Per-model token prices and cost of a call.
