//! The swarm as an OpenAI model, as a user of the official `openai` Python package meets it: `swarm-local serve` with a customer token and the offline model, and `tests/openai_client/test_openai.py` run against it (a chat completion, a streamed follow-up in the same conversation, OpenAI's 400s and 401).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

#[path = "common/serve.rs"]
#[allow(dead_code)] // the serve helper alone
mod serve;

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

const TOKEN: &str = "tok-c106-0123456789abcdef";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
#[ignore = "needs a python with the `openai` package (the venv's: infra/aws/venv.sh); infra/test.sh runs it as its own step"]
fn the_official_openai_client_talks_to_the_swarm() {
    let python =
        std::env::var_os("SWARM_OPENAI_PYTHON").map(PathBuf::from).unwrap_or_else(|| root().join(".venv/bin/python"));
    let (_server, base) = serve::serve(&["--auth", "tokens", "--token", &format!("{TOKEN}=C106")]).unwrap();
    let base = format!("{base}/v1");
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
