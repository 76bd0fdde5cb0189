//! `swarm-local serve` as a test runs it: the real binary on a free port (offline model, in memory, timings scaled by 0.1), stopped when the test ends however it ends.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

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
    let mut child = swarm_local()
        .args(["serve", "--port", "0", "--time-scale", "0.1"])
        .args(extra)
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
