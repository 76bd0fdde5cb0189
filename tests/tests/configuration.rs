//! `docs/configuration.md` against the configs: every variable a function's config reads is in the table with that function under `read by`, the table claims no read the config does not make, and a config asks for nothing beyond the list it exposes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use aggregator::AggregatorConfig;
use orchestrator::OrchestratorConfig;
use tool_gateway::GatewayFunctionConfig;
use worker::WorkerConfig;

/// `variable → functions that read it`, from the table under "## Variables"; `<NAME>` rows are patterns.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
    let text = std::fs::read_to_string(path).expect("docs/configuration.md");
    let section = text.split("## Variables").nth(1).expect("a Variables section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut table = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "four cells: {line}");
        let readers: BTreeSet<String> = cells[3].split(',').map(|f| f.trim().to_owned()).collect();
        for var in cells[0].split(',').map(|v| v.trim().trim_matches('`').to_owned()) {
            assert!(table.insert(var.clone(), readers.clone()).is_none(), "{var} is listed twice");
        }
    }
    assert!(table.len() > 30, "the table was read: {table:?}");
    table
}

/// Each binary and the variables its config (and tracing set-up) says it reads.
fn declared() -> Vec<(&'static str, Vec<&'static str>)> {
    let tracing = swarm_adapters::telemetry::VARS;
    let with_tracing = |mut vars: Vec<&'static str>| {
        vars.extend(tracing);
        vars
    };
    let mut shop: Vec<&'static str> = shop_tools::Config::VARS.to_vec();
    shop.extend(shop_tools::config::TRACING_VARS);
    vec![
        ("orchestrator", with_tracing(OrchestratorConfig::vars())),
        ("worker", with_tracing(WorkerConfig::vars())),
        ("aggregator", with_tracing(AggregatorConfig::vars())),
        ("tool-gateway", with_tracing(GatewayFunctionConfig::vars())),
        ("shop-tools", shop),
    ]
}

#[test]
fn every_variable_a_config_reads_is_documented_for_its_function() {
    let table = documented();
    let mut problems = Vec::new();
    for (function, vars) in declared() {
        for var in &vars {
            match table.get(*var) {
                None => problems.push(format!("{var} (read by {function}) is not in docs/configuration.md")),
                Some(readers) if !readers.contains(function) => {
                    problems.push(format!("{var} is read by {function}, but the table lists only {readers:?}"))
                }
                Some(_) => {}
            }
        }
        for (var, readers) in &table {
            if readers.contains(function) && !var.contains('<') && !vars.contains(&var.as_str()) {
                problems.push(format!("the table says {function} reads {var}; its config does not"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Every variable set, with values that take each config down its longest path.
fn full_environment() -> HashMap<&'static str, String> {
    let gateway_config = r#"{"upstreams": [{"name": "shop", "url": "http://127.0.0.1:9/mcp", "headers": {"x-key": "${env:SHOP_KEY}"}}],
        "roles": {"support": {"token": "${env:SUPPORT_TOKEN}", "tools": ["shop__*"]}}}"#;
    [
        ("TABLE_NAME", "swarm"),
        ("TASKS_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/123456789012/tasks"),
        ("REFUND_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/123456789012/refund-tasks"),
        ("GATEWAY_URL", "https://gw.example.com/mcp"),
        ("WORKER_ROLE", "support"),
        ("GATEWAY_TOKEN", "tok-0123456789abcdef"),
        ("GATEWAY_TOKEN_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:t"),
        ("GATEWAY_URL_AUTH", "AWS_IAM"),
        ("AWS_REGION", "us-east-1"),
        ("AUTH_MODE", "jwt"),
        ("JWT_CUSTOMER_CLAIM", "custom:customer_id"),
        ("JWT_CUSTOMER_MAPPING", "direct"),
        ("CUSTOMER_CONVERSATIONS_PER_MINUTE", "30"),
        ("CUSTOMER_MAX_SUBTASKS", "50"),
        ("ROLE_TABLE", "refund=refund"),
        ("DEADLINE_SECS", "300"),
        ("WORKER_MODE", "tasks"),
        ("LLM_TOKEN_BUDGET", "50000"),
        ("LLM_BASE_URL", "https://api.deepseek.com/v1"),
        ("LLM_MODEL", "deepseek-chat"),
        ("LLM_API_KEY", "sk-0123456789abcdef0123"),
        ("LLM_API_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:k"),
        ("LLM_API_KEY_REQUIRED", "true"),
        ("LLM_SEND_REASONING", "false"),
        ("LLM_SUB_MODEL", "deepseek-chat"),
        ("LLM_SUB_BASE_URL", "https://api.deepseek.com/v1"),
        ("LLM_SUB_API_KEY", "sk-abcdef0123456789abcd"),
        ("LLM_SUB_SEND_REASONING", "false"),
        ("LLM_TIMEOUT_SECS", "30"),
        ("LLM_MAX_IN_FLIGHT", "8"),
        ("LLM_PRICES", r#"{"deepseek-chat": {"input": 1, "output": 2}}"#),
        ("PARAMETERS_SECRETS_EXTENSION_HTTP_PORT", "2773"),
        ("AWS_SESSION_TOKEN", "session"),
        ("GATEWAY_CONFIG", gateway_config),
        ("SHOP_KEY", "k-0123456789"),
        ("SHOP_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:k"),
        ("SUPPORT_TOKEN_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:s"),
        ("GATEWAY_ADDR", "127.0.0.1:8790"),
        ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
        ("AWS_LAMBDA_FUNCTION_NAME", "gateway"),
        ("SHOP_TOOLS_ADDR", "127.0.0.1:8931"),
        ("SHOP_TOOLS_ALLOWED_HOSTS", "*"),
        ("SHOP_LEDGER_TABLE", "shop-ledger"),
        ("APPROVAL_KEY", "approval-key-0123456789abcdef0123456789"),
        ("APPROVAL_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:a"),
        ("SHOP_TOOLS_TOKEN", "shop-0123456789abcdef"),
        ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_owned()))
    .collect()
}

/// Runs `parse` over the full environment, without the plain secrets (so the
/// `*_SECRET_ARN` variables are read), and without the Lambda runtime's
/// variables (a local run); answers every variable asked for.
fn asked_for(parse: impl Fn(&dyn Fn(&str) -> Option<String>) -> bool) -> BTreeSet<String> {
    let plain_secrets = ["GATEWAY_TOKEN", "LLM_API_KEY", "LLM_SUB_API_KEY", "SHOP_KEY", "APPROVAL_KEY"];
    let lambda = ["AWS_LAMBDA_RUNTIME_API", "AWS_LAMBDA_FUNCTION_NAME"];
    let asked = RefCell::new(BTreeSet::new());
    for without in [&[][..], &plain_secrets[..], &lambda[..]] {
        let mut env = full_environment();
        env.retain(|k, _| !without.contains(k));
        let lookup = |k: &str| {
            asked.borrow_mut().insert(k.to_owned());
            env.get(k).cloned()
        };
        assert!(parse(&lookup), "the full environment without {without:?} parses");
    }
    asked.into_inner()
}

#[test]
fn a_config_asks_for_nothing_beyond_the_variables_it_lists() {
    let reads: Vec<(&str, BTreeSet<String>, Vec<&str>)> = vec![
        ("orchestrator", asked_for(|l| OrchestratorConfig::from_lookup(l).is_ok()), OrchestratorConfig::vars()),
        ("worker", asked_for(|l| WorkerConfig::from_lookup(l).is_ok()), WorkerConfig::vars()),
        ("aggregator", asked_for(|l| AggregatorConfig::from_lookup(l).is_ok()), AggregatorConfig::vars()),
        ("shop-tools", asked_for(|l| shop_tools::Config::from_lookup(l).is_ok()), shop_tools::Config::VARS.to_vec()),
    ];
    for (function, asked, listed) in reads {
        let unlisted: Vec<&String> = asked.iter().filter(|v| !listed.contains(&v.as_str())).collect();
        assert!(unlisted.is_empty(), "{function} reads {unlisted:?} without listing them");
        let never: Vec<&&str> = listed.iter().filter(|v| !asked.contains(**v)).collect();
        assert!(never.is_empty(), "{function} lists {never:?} but never reads them");
    }
    // The gateway also reads NAME or NAME_SECRET_ARN for each ${env:NAME} reference (the table's `<NAME>` row).
    let asked = asked_for(|l| GatewayFunctionConfig::from_lookup(l).is_ok());
    let listed = GatewayFunctionConfig::vars();
    let references = ["SHOP_KEY", "SHOP_KEY_SECRET_ARN", "SUPPORT_TOKEN", "SUPPORT_TOKEN_SECRET_ARN"];
    let unlisted: Vec<&String> =
        asked.iter().filter(|v| !listed.contains(&v.as_str()) && !references.contains(&v.as_str())).collect();
    assert!(unlisted.is_empty(), "tool-gateway reads {unlisted:?} without listing them");
    assert!(asked.contains("SUPPORT_TOKEN_SECRET_ARN"), "{asked:?}");
}
