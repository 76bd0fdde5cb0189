//! Cold-start preflight of the Lambda binaries: run one with a cleared environment plus chosen variables and read why it refused to start.
//!
//! Each function's `tests/preflight.rs` calls these with its binary
//! (`env!("CARGO_BIN_EXE_<name>")`), one line per rule. The binary is never
//! given `AWS_LAMBDA_RUNTIME_API`, so one that passes its config stops at the
//! Lambda runtime instead — [`gets_past_its_config`] checks that the base
//! environment is complete, so every refusal below is the named variable's doing.

use std::process::Command;

/// What a function needs to get past its config: table, tasks queue, gateway, LLM. No address is ever contacted.
pub const FUNCTION_ENV: &[(&str, &str)] = &[
    ("TABLE_NAME", "swarm"),
    ("TASKS_QUEUE_URL", "http://127.0.0.1:9/000000000000/tasks"),
    ("GATEWAY_URL", "http://127.0.0.1:9/mcp"),
    ("GATEWAY_TOKEN", "tok-preflight-0123456789"),
    ("AWS_REGION", "us-east-1"),
    ("LLM_BASE_URL", "https://api.openai.com/v1"),
    ("LLM_MODEL", "gpt-4o-mini"),
    ("LLM_API_KEY", "sk-preflight-0123456789abcdef"),
];

/// Runs `binary` with only [`FUNCTION_ENV`] changed by `changes` (`None`
/// removes a variable); answers (exited successfully, stderr).
pub fn run(binary: &str, changes: &[(&str, Option<&str>)]) -> (bool, String) {
    let mut command = Command::new(binary);
    command.env_clear();
    for (var, value) in FUNCTION_ENV {
        if !changes.iter().any(|(changed, _)| changed == var) {
            command.env(var, value);
        }
    }
    for (var, value) in changes {
        if let Some(value) = value {
            command.env(var, value);
        }
    }
    match command.output() {
        Ok(out) => (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned()),
        Err(e) => panic!("{binary} did not run: {e}"),
    }
}

/// Asserts that `binary` refuses to start with `changes`, with a message
/// starting `Error: <message>`; answers its stderr.
pub fn refuses_to_start(binary: &str, changes: &[(&str, Option<&str>)], message: &str) -> String {
    let (ok, stderr) = run(binary, changes);
    assert!(!ok, "{binary} must not start with {changes:?}");
    assert!(
        stderr.contains(&format!("Error: {message}")),
        "{binary} with {changes:?} must say {message:?}; it said:\n{stderr}"
    );
    stderr
}

/// The base environment is complete: the binary passes its config and stops
/// only at the missing Lambda runtime.
pub fn gets_past_its_config(binary: &str) {
    let (ok, stderr) = run(binary, &[]);
    assert!(!ok, "{binary} has no Lambda runtime to talk to");
    assert!(!stderr.contains("Error: "), "{binary} refused the base environment:\n{stderr}");
    assert!(stderr.contains("AWS_LAMBDA_"), "{binary} stopped at the Lambda runtime:\n{stderr}");
}

/// No `TABLE_NAME` → refused, naming it.
pub fn refuses_without_a_table(binary: &str) {
    refuses_to_start(binary, &[("TABLE_NAME", None)], "TABLE_NAME is required");
}

/// No `LLM_BASE_URL` → refused, naming it: a Lambda never falls back to the offline model.
pub fn refuses_without_an_llm_endpoint(binary: &str) {
    refuses_to_start(binary, &[("LLM_BASE_URL", None)], "LLM_BASE_URL: missing");
}

/// A placeholder `LLM_API_KEY` → refused, naming the variable and never echoing the key.
pub fn refuses_a_placeholder_llm_key(binary: &str) {
    let stderr =
        refuses_to_start(binary, &[("LLM_API_KEY", Some("YOUR_API_KEY"))], "LLM_API_KEY: looks like a placeholder");
    assert!(!stderr.contains("YOUR_API_KEY"), "the key itself is not echoed back: {stderr}");
}

/// A `LLM_TOKEN_BUDGET` that is not a whole number of tokens → refused, naming it and what it accepts.
pub fn refuses_a_bad_token_budget(binary: &str) {
    refuses_to_start(
        binary,
        &[("LLM_TOKEN_BUDGET", Some("lots"))],
        "LLM_TOKEN_BUDGET must be a whole number of tokens, at least 1000",
    );
}

/// The preflight tests every function binary gets, one `#[test]` per rule above:
/// `swarm_testing::preflight_tests!(env!("CARGO_BIN_EXE_worker"));` in its `tests/preflight.rs`.
#[macro_export]
macro_rules! preflight_tests {
    ($binary:expr) => {
        #[test]
        fn the_base_environment_gets_it_past_its_config() {
            $crate::preflight::gets_past_its_config($binary);
        }

        #[test]
        fn no_table_name_stops_it_naming_the_variable() {
            $crate::preflight::refuses_without_a_table($binary);
        }

        #[test]
        fn no_llm_base_url_stops_it_naming_the_variable() {
            $crate::preflight::refuses_without_an_llm_endpoint($binary);
        }

        #[test]
        fn a_placeholder_llm_key_stops_it_naming_the_variable() {
            $crate::preflight::refuses_a_placeholder_llm_key($binary);
        }
    };
}
