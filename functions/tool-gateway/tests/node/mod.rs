//! Node helpers for the federation and conformance tests: find the npm packages in `infra/gateway`, run Node servers and the conformance CLI with deadlines.
#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// `infra/gateway`, where `package.json` and `node_modules` live.
pub fn gateway_infra_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../infra/gateway")
}

/// The Node set-up, or `None` (with a loud message) when `SWARM_SKIP_NODE=1`
/// and Node or the npm packages are missing. Without that variable a missing
/// set-up fails the test with the command that fixes it.
pub fn node_or_skip(test: &str) -> Option<PathBuf> {
    let dir = gateway_infra_dir();
    let node_ok = Command::new("node").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    let packages_ok = dir.join("node_modules/@modelcontextprotocol/server-everything").is_dir()
        && dir.join("node_modules/@modelcontextprotocol/conformance").is_dir();
    if node_ok && packages_ok {
        return Some(dir);
    }
    let what = if node_ok { "the npm packages in infra/gateway are not installed" } else { "node is not on PATH" };
    if std::env::var("SWARM_SKIP_NODE").is_ok_and(|v| v == "1") {
        // Straight to the stderr handle: the test harness captures eprintln! of passing tests.
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "\n!!!!!!!! SKIPPED {test}: {what} (SWARM_SKIP_NODE=1) !!!!!!!!\n");
        return None;
    }
    panic!(
        "{test} needs Node 20 and the npm packages: {what}. Run infra/gateway/run-node-tests.sh (it runs npm ci), or set SWARM_SKIP_NODE=1 to skip."
    );
}

/// A child process killed when dropped.
pub struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Starts `node <args…>` in `dir` with `PORT=port` and waits (at most 20 s)
/// until the port accepts connections.
pub async fn start_node_server(dir: &PathBuf, args: &[&str], port: u16) -> Proc {
    let child = Command::new("node")
        .args(args)
        .current_dir(dir)
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start node {args:?}: {e}"));
    let proc = Proc(child);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "node {args:?} did not listen on {port} within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proc
}

/// Runs one conformance scenario against `url` (at most 90 s) and returns
/// whether every check passed, plus the failing checks' messages.
pub async fn run_conformance(dir: &PathBuf, url: &str, scenario: &str) -> (bool, String) {
    let out_dir = std::env::temp_dir().join(format!(
        "gw-conformance-{}-{}-{}",
        std::process::id(),
        scenario,
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    ));
    let mut child = Command::new("node")
        .args([
            "node_modules/@modelcontextprotocol/conformance/dist/index.js",
            "server",
            "--url",
            url,
            "--scenario",
            scenario,
            "-o",
        ])
        .arg(&out_dir)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the conformance CLI: {e}"));
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return (false, format!("{scenario}: conformance CLI did not finish within 90 s"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let checks_file = std::fs::read_dir(&out_dir)
        .ok()
        .and_then(|mut entries| entries.next())
        .and_then(|e| e.ok())
        .map(|e| e.path().join("checks.json"));
    let Some(text) = checks_file.and_then(|p| std::fs::read_to_string(p).ok()) else {
        return (false, format!("{scenario}: no checks.json written"));
    };
    let _ = std::fs::remove_dir_all(&out_dir);
    let checks: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_default();
    let failures: Vec<String> = checks
        .iter()
        .filter(|c| c["status"] != "SUCCESS")
        .map(|c| format!("{}: {}", c["id"], c["errorMessage"]))
        .collect();
    (!checks.is_empty() && failures.is_empty(), failures.join("; "))
}
