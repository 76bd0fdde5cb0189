//! Cold-start preflight of the worker binary: it refuses to start on a bad config, naming the variable, before any request (rules in `swarm_testing::preflight`).

swarm_testing::preflight_tests!(env!("CARGO_BIN_EXE_worker"));

#[test]
fn a_bad_token_budget_stops_it_naming_the_variable() {
    swarm_testing::preflight::refuses_a_bad_token_budget(env!("CARGO_BIN_EXE_worker"));
}
