//! Cold-start preflight of the worker binary: it refuses to start on a bad config, naming the variable, before any request (rules in `swarm_testing::preflight`).

use swarm_testing::preflight;

const BIN: &str = env!("CARGO_BIN_EXE_worker");

#[test]
fn the_base_environment_gets_it_past_its_config() {
    preflight::gets_past_its_config(BIN);
}

#[test]
fn no_table_name_stops_it_naming_the_variable() {
    preflight::refuses_without_a_table(BIN);
}

#[test]
fn no_llm_base_url_stops_it_naming_the_variable() {
    preflight::refuses_without_an_llm_endpoint(BIN);
}

#[test]
fn a_placeholder_llm_key_stops_it_naming_the_variable() {
    preflight::refuses_a_placeholder_llm_key(BIN);
}

#[test]
fn a_bad_token_budget_stops_it_naming_the_variable() {
    preflight::refuses_a_bad_token_budget(BIN);
}
