//! `swarm-local ask --trace` on the README's query, 20 times: every run draws the whole span tree — the same tree each time (its digest and span count), no span drawn at the root for want of its parent, the critical path's shares adding up to the whole.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::process::Command;

const RUNS: usize = 20;

/// The README's first command's query and customer.
fn readme_query() -> (String, String) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let line = readme.lines().find(|l| l.starts_with("cargo run -p swarm-local -- ask")).expect("the README's ask");
    let customer = line.split("--customer ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().to_owned();
    let query = line.split('"').nth(1).unwrap().to_owned();
    (customer, query)
}

/// `(tree digest, span count, share sum in %)` of one run's waterfall.
fn traced(customer: &str, query: &str) -> (String, usize, u32) {
    let out = Command::new(env!("CARGO_BIN_EXE_swarm-local"))
        .args(["ask", "--trace", "--customer", customer, query])
        .env_remove("LLM_BASE_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "ask failed:\n{stderr}");
    assert!(!stderr.contains("(incomplete"), "a span was drawn without its parent:\n{stderr}");
    let header = stderr.lines().find(|l| l.starts_with("trace ")).unwrap_or_else(|| panic!("no waterfall:\n{stderr}"));
    let digest = header.rsplit("tree ").next().unwrap().trim().to_owned();
    let spans: usize = header.split(" spans").next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    let summary = stderr.lines().find(|l| l.starts_with("critical path ")).unwrap();
    let shares: u32 = summary
        .split('(')
        .skip(1)
        .filter_map(|p| p.split(" %)").next().and_then(|n| n.trim().parse::<u32>().ok()))
        .sum();
    (digest, spans, shares)
}

#[test]
fn twenty_runs_draw_the_same_whole_span_tree() {
    let (customer, query) = readme_query();
    let first = traced(&customer, &query);
    assert!(first.1 > 20, "the whole conversation: {first:?}");
    for run in 2..=RUNS {
        let again = traced(&customer, &query);
        assert_eq!((&again.0, again.1), (&first.0, first.1), "run {run} drew another tree");
        // Each of the five shares is rounded: together at most 2.5 % off the whole.
        assert!((97..=103).contains(&again.2), "run {run}: the critical path's shares add up to {} %", again.2);
    }
}
