//! Cold-start preflight of the aggregator binary: it refuses to start on a bad config, naming the variable, before any request (rules in `swarm_testing::preflight`).

swarm_testing::preflight_tests!(env!("CARGO_BIN_EXE_aggregator"));
