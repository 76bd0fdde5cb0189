//! `swarm-local chat` and `ask --conversation` through the real binary: each stdin line of `chat` is a turn of one conversation (an empty line ignored, end of input ends it with 0 and its id), on a stack of its own process or a running `serve`, whose `GET` then lists every turn; `ask --conversation` adds a turn to a conversation of a running `serve`; an unknown conversation and a turn still being answered (409) are said in one line and exit non-zero.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

#[path = "common/serve.rs"]
mod serve;

use std::io::Write as _;
use std::process::{Output, Stdio};

use anyhow::{Context, Result, ensure};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use serve::{answered, serve, swarm_local};

/// Runs `swarm-local <args>` with `input` on its stdin (closed after it: Ctrl-D).
async fn run(args: &[&str], input: &str) -> Output {
    let mut command = swarm_local();
    command.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let input = input.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

/// The conversation id `chat` printed last on stdout.
fn chat_id(out: &Output) -> Result<String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().context("no stdout")?;
    Ok(last.strip_prefix("conversation ").context(format!("last line {last:?}"))?.to_owned())
}

async fn get(base: &str, id: &str) -> Result<Value> {
    Ok(reqwest::get(format!("{base}/conversations/{id}")).await?.error_for_status()?.json().await?)
}

const ENGLISH: &str = "Where is order A1029?";
const CHINESE: &str = "我的订单 A1029 现在到哪里了？";
const COUPON: &str = "Is coupon SAVE20 still valid?";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_on_a_running_serve_answers_each_line_as_the_next_turn_of_one_conversation() -> Result<()> {
    let (_server, base) = serve(&[])?;
    let input = format!("{ENGLISH}\n\n   \n{CHINESE}\n{COUPON}\n");
    let out = run(&["chat", "--url", &base, "--customer", "C104"], &input).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(out.status.success(), "chat failed: {stderr}");
    let id = chat_id(&out)?;

    let view = get(&base, &id).await?;
    assert_eq!(view["turn"], 2, "three turns, the empty lines ignored: {view}");
    let turns = view["turns"].as_array().context("turns")?;
    let messages: Vec<&str> = turns.iter().map(|t| t["message"].as_str().unwrap_or_default()).collect();
    assert_eq!(messages, [ENGLISH, CHINESE, COUPON]);
    for (n, t) in turns.iter().enumerate() {
        assert_eq!((t["turn"].as_u64(), t["status"].as_str()), (Some(n as u64), Some("DONE")), "{t}");
        let reply = t["reply"].as_str().context("a reply")?;
        assert!(!reply.trim().is_empty() && stdout.contains(reply), "turn {n}'s reply {reply:?} printed:\n{stdout}");
        assert!(stderr.contains(&format!("── turn {n} · DONE")), "turn {n}'s summary:\n{stderr}");
    }
    // Each turn's subtasks are its own (ids scoped per turn after the first).
    let ids = |t: &Value| -> Vec<String> {
        t["subtasks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert!(ids(&turns[0]).iter().all(|s| !s.contains('~')) && !ids(&turns[0]).is_empty(), "{:?}", ids(&turns[0]));
    assert!(ids(&turns[1]).iter().all(|s| s.starts_with("t1~")) && !ids(&turns[1]).is_empty());
    assert!(turns[0]["reply"].as_str().unwrap().contains("A1029"), "{}", turns[0]["reply"]);
    assert!(turns[2]["reply"].as_str().unwrap().contains("SAVE20"), "{}", turns[2]["reply"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_on_a_stack_of_its_own_prints_each_reply_and_ends_with_the_id_at_end_of_input() -> Result<()> {
    let out = run(&["chat", "--customer", "C104", "--time-scale", "0.1"], &format!("{ENGLISH}\n{CHINESE}\n")).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(out.status.success(), "chat failed: {stderr}");
    let id = chat_id(&out)?;
    assert_eq!(id.len(), 36, "a conversation id: {id}");
    assert!(stderr.contains("── turn 0 · DONE") && stderr.contains("── turn 1 · DONE"), "{stderr}");
    assert!(
        stderr.contains("subtasks planned") && stderr.contains("turn 1: "),
        "live progress of each turn:\n{stderr}"
    );
    assert!(stdout.contains("A1029"), "{stdout}");
    // No input at all: nothing sent, a clean end.
    let none = run(&["chat", "--time-scale", "0.1"], "").await;
    assert!(none.status.success(), "{}", String::from_utf8_lossy(&none.stderr));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no message sent"));
    assert!(none.stdout.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_with_a_conversation_adds_a_turn_to_a_conversation_of_a_running_serve() -> Result<()> {
    let (_server, base) = serve(&[])?;
    let (id, turn0) = answered(&base, ENGLISH, "C104").await?;
    assert_eq!(turn0["status"], "DONE", "{turn0}");

    let out = run(&["ask", "--conversation", &id, "--url", &base, COUPON], "").await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(out.status.success(), "ask failed: {}", String::from_utf8_lossy(&out.stderr));
    let view = get(&base, &id).await?;
    assert_eq!(view["turn"], 1);
    assert_eq!(view["turns"].as_array().map(Vec::len), Some(2));
    assert_eq!((view["turns"][1]["message"].as_str(), view["status"].as_str()), (Some(COUPON), Some("DONE")));
    assert_eq!(stdout.trim(), view["reply"].as_str().unwrap().trim(), "the reply of turn 1 printed");

    // A conversation the serve does not know (or not this customer's): one line, non-zero.
    let unknown = uuid::Uuid::now_v7().to_string();
    let out = run(&["ask", "--conversation", &unknown, "--url", &base, COUPON], "").await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(stderr.contains(&format!("conversation {unknown}")) && stderr.contains("404 not_found"), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_with_a_conversation_whose_turn_is_still_answered_says_so_and_exits_non_zero() -> Result<()> {
    // A stand-in answering as the API does while turn 0 runs: 409 turn_in_progress with Retry-After.
    let id = "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07";
    let detail = format!(
        "conversation {id} is still answering turn 0 (RUNNING); send the next message once it is answered, in 42 s at most"
    );
    let body = json!({"type": "urn:lambda-swarm:problem:turn_in_progress", "title": "Conflict", "status": 409,
        "detail": detail, "error": {"code": "turn_in_progress", "message": detail}});
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { (StatusCode::CONFLICT, [("retry-after", "42")], axum::Json(body)).into_response() }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let out = run(&["ask", "--conversation", id, "--url", &url, COUPON], "").await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!("swarm-local: conversation {id}: the API refused the message (409 turn_in_progress): {detail}")
    );
    assert!(out.stdout.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_and_ask_on_a_serve_with_customer_tokens_act_as_the_token_s_customer() -> Result<()> {
    const TOKEN: &str = "tok-c108-0123456789abcdef";
    let (_server, base) = serve(&["--auth", "tokens", "--token", &format!("{TOKEN}=C108")])?;
    let authed_get = |id: String| {
        let base = base.clone();
        async move {
            let client = reqwest::Client::new();
            let request = client.get(format!("{base}/conversations/{id}")).bearer_auth(TOKEN);
            anyhow::Ok(request.send().await?.error_for_status()?.json::<Value>().await?)
        }
    };
    // The token names the customer (C108), whatever --customer's default (C104) says.
    let out = run(&["chat", "--url", &base, "--token", TOKEN], "Where is my order A1033?\n").await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(out.status.success(), "chat failed: {stderr}");
    assert!(!stderr.contains(TOKEN), "the token is never printed: {stderr}");
    let id = chat_id(&out)?;
    let view = authed_get(id.clone()).await?;
    assert_eq!((view["customer_id"].as_str(), view["status"].as_str()), (Some("C108"), Some("DONE")), "{view}");
    assert!(view["reply"].as_str().unwrap_or_default().contains("A1033"), "{view}");

    // The next turn with `ask --conversation`, the token from the environment.
    let mut command = swarm_local();
    command.args(["ask", "--conversation", &id, "--url", &base, COUPON]).env("SWARM_CUSTOMER_TOKEN", TOKEN);
    let out = tokio::task::spawn_blocking(move || command.output()).await??;
    ensure!(out.status.success(), "ask failed: {}", String::from_utf8_lossy(&out.stderr));
    let view = authed_get(id.clone()).await?;
    assert_eq!((view["turn"].as_u64(), view["turns"][1]["message"].as_str()), (Some(1), Some(COUPON)), "{view}");

    // Without the token the serve refuses: one line, non-zero, nothing written.
    let out = run(&["ask", "--conversation", &id, "--url", &base, ENGLISH], "").await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success() && stderr.contains("401"), "{stderr}");
    assert_eq!(authed_get(id).await?["turn"], 1);
    Ok(())
}
