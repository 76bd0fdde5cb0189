//! `swarm-local serve` as a test runs it: the real binary on a free port (offline model, in memory, timings scaled by 0.1), stopped when the test ends however it ends.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// The server, stopped when the test ends however it ends.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `swarm-local` with the environment of the local-stack tests: no LLM (the offline model), no span
/// export, errors only in the log.
pub fn swarm_local() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_swarm-local"));
    command
        .env_remove("LLM_BASE_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("TRACE_EXPORT")
        .env("RUST_LOG", "error");
    command
}

/// Starts `swarm-local serve --port 0 --time-scale 0.1 <extra>` and answers it with its base URL
/// (`http://127.0.0.1:<port>`, as its `API` line prints it). Errors: it did not start, or printed
/// no URL within 120 s (a cold binary on a loaded machine).
pub fn serve(extra: &[&str]) -> Result<(Server, String)> {
    serve_with(extra, &[])
}

/// [`serve`] with `env` (name, value) set in its environment.
pub fn serve_with(extra: &[&str], env: &[(&str, &str)]) -> Result<(Server, String)> {
    let mut child = swarm_local()
        .args(["serve", "--port", "0", "--time-scale", "0.1"])
        .args(extra)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting swarm-local serve")?;
    let stdout = child.stdout.take().context("stdout")?;
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.trim().strip_prefix("API").map(str::trim) {
                let _ = tx.send(
                    url.split_whitespace().next().unwrap_or_default().trim_end_matches("/conversations").to_owned(),
                );
            }
        }
    });
    let base = rx.recv_timeout(Duration::from_secs(120)).context("serve printed its API URL")?;
    Ok((server, base))
}

/// Posts `message` of `customer` to the `serve` at `base` as a new conversation; answers its id.
pub async fn created(base: &str, message: &str, customer: &str) -> Result<String> {
    let created: Value = reqwest::Client::new()
        .post(format!("{base}/conversations"))
        .json(&json!({ "message": message, "customer_id": customer }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(created["conversation_id"].as_str().context("id")?.to_owned())
}

/// Posts `message` of `customer` to the `serve` at `base` as a new conversation and waits (60 s at
/// most) until it ends; answers its id and its last view (`DONE` or `FAILED`, or still running
/// when the wait ran out: the caller's assertion says).
pub async fn answered(base: &str, message: &str, customer: &str) -> Result<(String, Value)> {
    let http = reqwest::Client::new();
    let id = created(base, message, customer).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let view: Value = http.get(format!("{base}/conversations/{id}")).send().await?.json().await?;
        if view["status"] == "DONE" || view["status"] == "FAILED" || std::time::Instant::now() > deadline {
            return Ok((id, view));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
