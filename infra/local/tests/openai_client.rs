//! The swarm as an OpenAI model, as a user of the official `openai` Python package meets it: `swarm-local serve` with a customer token and the offline model, and `tests/openai_client/test_openai.py` run against it (a chat completion, a streamed follow-up in the same conversation, OpenAI's 400s and 401).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "tok-c106-0123456789abcdef";

/// The server, stopped when the test ends however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Starts `swarm-local serve --port 0` with one customer token; answers its base URL.
fn serve() -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_swarm-local"))
        .args(["serve", "--port", "0", "--time-scale", "0.25", "--auth", "tokens", "--token"])
        .arg(format!("{TOKEN}=C106"))
        .env_remove("LLM_BASE_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.trim().strip_prefix("openai").map(str::trim) {
                let _ = tx.send(url.split_whitespace().next().unwrap_or_default().to_owned());
            }
        }
    });
    let base = rx.recv_timeout(Duration::from_secs(120)).expect("serve printed its OpenAI URL");
    (server, base)
}

#[test]
#[ignore = "needs a python with the `openai` package (the venv's: infra/aws/venv.sh); infra/test.sh runs it as its own step"]
fn the_official_openai_client_talks_to_the_swarm() {
    let python =
        std::env::var_os("SWARM_OPENAI_PYTHON").map(PathBuf::from).unwrap_or_else(|| root().join(".venv/bin/python"));
    let (_server, base) = serve();
    let started = Instant::now();
    let out = Command::new(&python)
        .arg(root().join("tests/openai_client/test_openai.py"))
        .env("SWARM_OPENAI_BASE_URL", &base)
        .env("SWARM_OPENAI_TOKEN", TOKEN)
        .env("SWARM_OPENAI_TIMEOUT_S", "90")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", python.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "the openai client checks failed after {:?}:\n{stdout}\n{stderr}", started.elapsed());
    assert!(stdout.contains("all openai client checks passed"), "{stdout}");
}
