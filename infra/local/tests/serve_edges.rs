//! `swarm-local serve` at the edges of HTTP/1.1, over a raw socket: a request line over the URI limit (414), a head with too many header fields (431), a request line that does not parse (400) and a body shorter than its `Content-Length` (408 at the read deadline) each answer in the API's one error shape, and nothing is stored.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The server, stopped when the test ends however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `swarm-local serve --port 0` and answers its `host:port`.
fn serve() -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_swarm-local"))
        .args(["serve", "--port", "0", "--time-scale", "0.1"])
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
            if let Some(url) = line.trim().strip_prefix("API").map(str::trim) {
                let url = url.split_whitespace().next().unwrap_or_default();
                let host = url.trim_start_matches("http://").trim_end_matches("/conversations");
                let _ = tx.send(host.to_owned());
            }
        }
    });
    let host = rx.recv_timeout(Duration::from_secs(120)).expect("serve printed its API URL");
    (server, host)
}

/// Writes `raw` (then keeps the socket open) and reads the answer until the server closes or
/// `wait` passes: `(status, content-type, JSON body, time taken)`.
fn exchange(host: &str, raw: &[u8], wait: Duration) -> (u16, String, Value, Duration) {
    let mut socket = TcpStream::connect(host).unwrap();
    socket.set_read_timeout(Some(wait)).unwrap();
    let started = Instant::now();
    // The server may answer and close before it has read everything we send.
    let _ = socket.write_all(raw);
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    let taken = started.elapsed();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no answer in {taken:?}: {text:?}"));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case("content-type")).map(|(_, v)| v.trim()))
        .unwrap_or_default()
        .to_owned();
    let body =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("{status} answered a body that is not JSON: {body:?}"));
    (status, content_type, body, taken)
}

/// The one error shape (as `tests/router.rs` of the orchestrator holds the router to it).
fn assert_problem(answer: &(u16, String, Value, Duration), status: u16, code: &str) {
    let (got, content_type, body, _) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(content_type, "application/problem+json", "{code}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["type"], format!("urn:lambda-swarm:problem:{code}"), "{body}");
    assert_eq!(body["status"].as_u64(), Some(u64::from(status)), "{body}");
    assert!(!body["error"]["message"].as_str().unwrap_or("").is_empty(), "{body}");
    assert_eq!(body["detail"], body["error"]["message"], "{body}");
}

/// `GET /conversations?customer_id=C104`: how many conversations C104 has.
fn conversations_of_c104(host: &str) -> usize {
    let raw = format!("GET /conversations?customer_id=C104 HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    let (status, _, body, _) = exchange(host, raw.as_bytes(), Duration::from_secs(30));
    assert_eq!(status, 200, "{body}");
    body["conversations"].as_array().unwrap().len()
}

#[test]
fn a_long_uri_a_large_head_and_a_malformed_request_line_answer_in_the_error_shape() {
    let (_server, host) = serve();
    let wait = Duration::from_secs(30);
    let long = format!("GET /conversations/{} HTTP/1.1\r\nhost: {host}\r\n\r\n", "a".repeat(70_000));
    assert_problem(&exchange(&host, long.as_bytes(), wait), 414, "uri_too_long");

    let fields: String = (0..150).map(|n| format!("x-field-{n}: {n}\r\n")).collect();
    let large = format!("POST /conversations HTTP/1.1\r\nhost: {host}\r\n{fields}content-length: 2\r\n\r\n{{}}");
    assert_problem(&exchange(&host, large.as_bytes(), wait), 431, "headers_too_large");

    for line in ["GARBAGE\r\n\r\n", "POST /conversations HTTP/9.9\r\n\r\n", "P\x01ST / HTTP/1.1\r\n\r\n"] {
        assert_problem(&exchange(&host, line.as_bytes(), wait), 400, "bad_request_head");
    }
    assert_eq!(conversations_of_c104(&host), 0, "nothing stored");
}

#[test]
fn a_body_shorter_than_its_content_length_is_408_at_the_read_deadline() {
    let (_server, host) = serve();
    let body = r#"{"message": "where is A1029", "customer_id": "C104"}"#;
    let short = format!(
        "POST /conversations HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
        body.len() + 20,
        body
    );
    let answer = exchange(&host, short.as_bytes(), Duration::from_secs(60));
    assert_problem(&answer, 408, "body_timeout");
    // The bound docs/api.md gives (10 s), with room for a busy machine.
    assert!(answer.3 >= Duration::from_secs(9) && answer.3 < Duration::from_secs(40), "{:?}", answer.3);
    assert_eq!(conversations_of_c104(&host), 0, "nothing stored");
}
