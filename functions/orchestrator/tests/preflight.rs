//! Cold-start preflight: the orchestrator binary refuses to start on a placeholder LLM key, naming the variable, before any request.

use std::process::Command;

#[test]
fn placeholder_llm_key_stops_the_function_at_start_naming_the_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .env_clear()
        .env("TABLE_NAME", "swarm")
        .env("TASKS_QUEUE_URL", "http://127.0.0.1:9/queue/tasks")
        .env("GATEWAY_URL", "http://127.0.0.1:9/mcp")
        .env("GATEWAY_TOKEN", "t")
        .env("AWS_REGION", "us-east-1")
        .env("LLM_BASE_URL", "https://api.openai.com/v1")
        .env("LLM_MODEL", "gpt-4o-mini")
        .env("LLM_API_KEY", "YOUR_API_KEY")
        .output()
        .expect("the binary runs");
    assert!(!out.status.success(), "it must not start");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("LLM_API_KEY"), "the message names the variable: {stderr}");
    assert!(!stderr.contains("YOUR_API_KEY\""), "the key itself is not echoed back: {stderr}");
}

#[test]
fn missing_table_name_stops_the_function_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_orchestrator")).env_clear().output().expect("the binary runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TABLE_NAME"));
}
