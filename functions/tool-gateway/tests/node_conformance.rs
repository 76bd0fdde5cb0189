//! The official MCP conformance suite (`@modelcontextprotocol/conformance@0.1.10`) against the gateway fronting an upstream that implements the conformance tools, compared with the same upstream called directly and with the baseline file.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on a broken precondition

mod node;

use std::collections::BTreeMap;

use futures::StreamExt;
use secrecy::SecretString;
use tool_gateway::{GatewayConfig, Prefix, RoleConfig, UpstreamConfig};

/// (scenario, run against the upstream, run through the gateway); each run is (passed, why not).
type Run = (String, (bool, String), (bool, String));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_scenarios_pass_through_the_gateway_as_they_pass_directly_except_the_baseline() {
    let Some(dir) = node::node_or_skip("conformance_scenarios_pass_through_the_gateway") else { return };
    let baseline: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("conformance-baseline.json")).unwrap()).unwrap();
    let scenarios: Vec<String> =
        baseline["scenarios"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect();
    let excused = baseline["cannot_pass_through_gateway"].as_object().unwrap().clone();

    let port = node::free_port();
    let _upstream = node::start_node_server(&dir, &["conformance-upstream.mjs"], port).await;
    let mut conf = UpstreamConfig::new("conf", &format!("http://127.0.0.1:{port}/mcp"));
    conf.prefix = Prefix::Off; // the suite calls the tools by their own names
    let config = GatewayConfig {
        upstreams: vec![conf],
        roles: BTreeMap::from([(
            "conformance".to_owned(),
            RoleConfig {
                token: SecretString::from("conformance-token-0123456789"),
                tools: vec!["*".into()],
                deny: vec![],
                call: true,
            },
        )]),
        list_ttl_secs: 60.0,
        discovery_retry_secs: 1.0,
        global_rate_limit_per_sec: None,
        allowed_hosts: vec!["127.0.0.1".into(), "localhost".into()],
        // The suite cannot send a credential.
        anonymous_role: Some("conformance".into()),
        upstream_keep_alive: false,
        side_effects: BTreeMap::new(),
        approval_key: None,
    };
    let (addr, _gateway) = tool_gateway::serve("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
    let direct_url = format!("http://127.0.0.1:{port}/mcp");
    let gateway_url = format!("http://{addr}/mcp");

    let runs: Vec<Run> = futures::stream::iter(scenarios.iter().cloned())
        .map(|s| {
            let (dir, direct_url, gateway_url) = (dir.clone(), direct_url.clone(), gateway_url.clone());
            async move {
                let direct = node::run_conformance(&dir, &direct_url, &s).await;
                let through = node::run_conformance(&dir, &gateway_url, &s).await;
                (s, direct, through)
            }
        })
        .buffer_unordered(3)
        .collect()
        .await;

    let mut problems = Vec::new();
    for (scenario, (direct_ok, direct_why), (gateway_ok, gateway_why)) in &runs {
        println!(
            "{scenario:32} direct: {:4}  gateway: {}",
            if *direct_ok { "pass" } else { "FAIL" },
            if *gateway_ok { "pass" } else { "fail" }
        );
        if !direct_ok {
            problems.push(format!("{scenario} fails against the upstream itself: {direct_why}"));
            continue;
        }
        match (excused.contains_key(scenario), gateway_ok) {
            (false, false) => problems.push(format!("{scenario} fails through the gateway: {gateway_why}")),
            (true, true) => problems
                .push(format!("{scenario} now passes through the gateway: remove it from conformance-baseline.json")),
            _ => {}
        }
    }
    assert!(problems.is_empty(), "conformance problems:\n{}", problems.join("\n"));
    let passed = runs.iter().filter(|(_, _, (ok, _))| *ok).count();
    assert_eq!(passed + excused.len(), scenarios.len());
}
