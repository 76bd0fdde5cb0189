//! `swarm-local chat` and `ask --conversation`: a conversation turn by turn in the terminal — each message posted (the first creates the conversation, the next are its follow-ups), its progress followed live, its reply printed — on the in-process stack or a running `serve`.
//!
//! Customer text (messages, replies) goes to the terminal only: it is the product here, and it is
//! never logged nor put in a span.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};
use swarm_core::domain::SubtaskStatus;
use swarm_core::view::ConversationView;
use tokio::sync::mpsc;

use crate::LocalStack;
use crate::operator::REQUEST_TIMEOUT;
use crate::progress::{Progress, verdict};

/// How often a turn's view is read while it runs.
const POLL: Duration = Duration::from_millis(100);
/// How long after a turn's deadline its reply is still waited for: the deadline path answers it
/// with what it has within a sweep and an aggregation.
const REPLY_GRACE: Duration = Duration::from_secs(60);
/// The longest wait for one turn whatever its deadline says (a clock far off, a bad `deadline_at`).
const MAX_TURN_WAIT: Duration = Duration::from_secs(30 * 60);

/// Where the conversation's API is.
pub enum Front<'a> {
    /// The in-process stack: every call is one orchestrator invocation.
    Stack(&'a LocalStack),
    /// A running `swarm-local serve`: with a customer token (`serve --auth tokens`) the token
    /// names the customer; without one (authentication off) the body does.
    Serve { base: String, http: reqwest::Client, token: Option<String> },
}

/// A message the API accepted: the conversation and the turn it started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posted {
    pub conversation_id: String,
    pub turn: u32,
}

/// Why a message was not taken: the API's refusal, which a person can act on.
#[derive(Debug, thiserror::Error)]
#[error("the API refused the message ({status} {code}): {detail}")]
pub struct Refused {
    pub status: u16,
    /// The problem's code, e.g. `turn_in_progress`, `conversation_expired`, `not_found`.
    pub code: String,
    pub detail: String,
}

impl<'a> Front<'a> {
    /// A running `serve` at `url` (e.g. `http://127.0.0.1:8080`), called with `token` as
    /// `Authorization: Bearer` when given (a customer token of `serve --token`). Errors: not an
    /// http(s) URL; an empty token.
    pub fn serve(url: &str, token: Option<String>) -> anyhow::Result<Self> {
        anyhow::ensure!(token.as_deref().is_none_or(|t| !t.trim().is_empty()), "--token is empty");
        let base = url.trim_end_matches('/').to_owned();
        let parsed = reqwest::Url::parse(&base).with_context(|| format!("--url {url:?} is not a URL"))?;
        anyhow::ensure!(matches!(parsed.scheme(), "http" | "https"), "--url {url:?} is not an http(s) URL");
        let http = reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build()?;
        Ok(Self::Serve { base, http, token })
    }

    /// `method path` with a JSON body; answers `(status, JSON body)` (`null` for a body that is not JSON).
    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<(u16, Value)> {
        match self {
            Front::Stack(stack) => {
                let text = body.map(Value::to_string);
                stack.api(method, path, text.as_deref(), &[]).await
            }
            Front::Serve { base, http, token } => {
                let method = reqwest::Method::from_bytes(method.as_bytes())?;
                let mut request = http.request(method, format!("{base}{path}")).header("accept", "application/json");
                if let Some(token) = token {
                    request = request.bearer_auth(token);
                }
                if let Some(body) = body {
                    request = request.json(body);
                }
                let response = request
                    .send()
                    .await
                    .with_context(|| format!("calling {base} (is `swarm-local serve` running?)"))?;
                let status = response.status().as_u16();
                let text = response.text().await.context("reading the API's answer")?;
                Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
            }
        }
    }

    /// Posts `message` of `customer`: a new conversation (`conversation` `None`) or the next turn
    /// of `conversation`. Errors: [`Refused`] for the API's refusal (404 unknown conversation, 409
    /// a turn still being answered, 410 expired, 429…); the API unreachable; a 202 without its ids.
    pub async fn post(&self, conversation: Option<&str>, message: &str, customer: &str) -> anyhow::Result<Posted> {
        let path = match conversation {
            None => "/conversations".to_owned(),
            Some(id) => format!("/conversations/{id}/messages"),
        };
        // A token names its customer: the body names none (the API answers 403 for another's).
        let body = match self {
            Front::Serve { token: Some(_), .. } => json!({ "message": message }),
            _ => json!({ "message": message, "customer_id": customer }),
        };
        let (status, answer) = self.call("POST", &path, Some(&body)).await?;
        if status != 202 {
            let text = |k: &str| answer["error"][k].as_str().map(str::to_owned);
            let detail = answer["detail"].as_str().map(str::to_owned).or(text("message"));
            return Err(Refused {
                status,
                code: text("code").unwrap_or_else(|| "error".to_owned()),
                detail: detail.unwrap_or_else(|| "no reason given".to_owned()),
            }
            .into());
        }
        let conversation_id =
            answer["conversation_id"].as_str().context("no conversation_id in the answer")?.to_owned();
        let turn = answer["turn"].as_u64().map_or(Ok(0), u32::try_from)?;
        Ok(Posted { conversation_id, turn })
    }

    /// `GET /conversations/{id}`.
    pub async fn view(&self, id: &str) -> anyhow::Result<ConversationView> {
        let (status, body) = self.call("GET", &format!("/conversations/{id}"), None).await?;
        anyhow::ensure!(status == 200, "GET /conversations/{id} answered {status}: {}", body["detail"]);
        Ok(serde_json::from_value(body)?)
    }

    /// Reads the conversation until `posted`'s turn ends (`DONE`, `HANDOFF`, `FAILED`), calling
    /// `seen` with each view of it; answers the last. Waits until the turn's deadline and
    /// [`REPLY_GRACE`] after (at most [`MAX_TURN_WAIT`]). Errors: the wait passed, a read failed.
    pub async fn follow(
        &self,
        posted: &Posted,
        mut seen: impl FnMut(&ConversationView),
    ) -> anyhow::Result<ConversationView> {
        let started = Instant::now();
        let mut until = started + MAX_TURN_WAIT;
        loop {
            let view = self.view(&posted.conversation_id).await?;
            if view.turn == posted.turn {
                if let Ok(deadline) = chrono::DateTime::parse_from_rfc3339(&view.deadline_at) {
                    let left = (deadline.timestamp_millis() - swarm_core::domain::now_ms()).max(0) as u64;
                    until = until.min(Instant::now() + Duration::from_millis(left) + REPLY_GRACE);
                }
                seen(&view);
                if view.status.is_terminal() {
                    return Ok(view);
                }
            }
            let now = Instant::now();
            anyhow::ensure!(
                now < until,
                "turn {} of conversation {} was not answered within {:.0?} (last status {})",
                posted.turn,
                posted.conversation_id,
                now - started,
                view.status
            );
            tokio::time::sleep(POLL.min(until - now)).await;
        }
    }

    /// Posts one message and follows its turn to its end, the progress on stderr; answers the
    /// turn's view. Errors: as [`Self::post`] and [`Self::follow`].
    pub async fn turn(
        &self,
        conversation: Option<&str>,
        message: &str,
        customer: &str,
    ) -> anyhow::Result<(Posted, ConversationView)> {
        let posted = self.post(conversation, message, customer).await?;
        let mut progress = Progress::default();
        let view = self.follow(&posted, |v| progress.lines(v).iter().for_each(|l| eprintln!("{l}"))).await?;
        Ok((posted, view))
    }
}

/// The prompt before each message (stderr, so stdout holds the replies only).
const PROMPT: &str = "you › ";

/// The lines of stdin, read on a thread of their own (a blocking read), until its end (Ctrl-D):
/// the channel closes then.
pub fn stdin_lines() -> mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = mpsc::channel(1);
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::stdin().lock().lines() {
            let failed = line.is_err();
            // The chat ended (its receiver dropped): nobody reads on.
            if tx.blocking_send(line).is_err() || failed {
                break;
            }
        }
    });
    rx
}

/// `swarm-local chat`: each non-empty line of `input` is a turn of one conversation (the first
/// creates it), followed live and answered before the next line is read; at the end of `input`
/// (Ctrl-D) the conversation's id is printed and the chat ends with 0. A message the API refuses
/// (429, 410…) is said on stderr and the chat goes on. Errors: a turn not answered within its
/// deadline's wait, the API unreachable, `input` unreadable.
pub async fn chat(
    front: &Front<'_>,
    customer: &str,
    mut input: mpsc::Receiver<std::io::Result<String>>,
) -> anyhow::Result<ExitCode> {
    let mut conversation: Option<String> = None;
    let mut turns = 0u32;
    loop {
        prompt();
        let Some(line) = input.recv().await.transpose().context("reading stdin")? else { break };
        let message = line.trim();
        if message.is_empty() {
            continue;
        }
        let started = Instant::now();
        let (posted, view) = match front.turn(conversation.as_deref(), message, customer).await {
            Ok(answered) => answered,
            Err(e) if e.is::<Refused>() => {
                eprintln!("swarm-local: {e:#}");
                continue;
            }
            Err(e) => return Err(e),
        };
        conversation = Some(posted.conversation_id);
        turns += 1;
        let reply = view.reply.clone().unwrap_or_else(|| format!("(no reply: the turn ended {})", view.status));
        println!("\n{reply}\n");
        eprintln!("{}", summary(&view, started));
        if let Err(why) = verdict(&view) {
            eprintln!("swarm-local: {why}");
        }
    }
    eprintln!();
    match conversation {
        Some(id) => {
            eprintln!("── {turns} turns");
            println!("conversation {id}");
        }
        None => eprintln!("── no message sent"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The prompt, for a person at a terminal (piped input gets none).
fn prompt() {
    use std::io::{IsTerminal as _, Write as _};
    if !std::io::stdin().is_terminal() {
        return;
    }
    let mut err = std::io::stderr().lock();
    // A prompt that cannot be written (stderr closed) changes nothing of the chat.
    let _ = err.write_all(PROMPT.as_bytes()).and_then(|()| err.flush());
}

/// The turn's tool calls and its subtasks that succeeded.
fn counts(view: &ConversationView) -> (usize, usize) {
    let tool_calls = view.subtasks.iter().map(|s| s.tools_used.len()).sum();
    let succeeded = view.subtasks.iter().filter(|s| s.status == SubtaskStatus::Succeeded).count();
    (tool_calls, succeeded)
}

/// `── turn 1 · DONE · 2 subtasks (2 succeeded) · 3 tool calls · 0.84 s`.
fn summary(view: &ConversationView, started: Instant) -> String {
    let (tool_calls, succeeded) = counts(view);
    format!(
        "── turn {} · {} · {} subtasks ({} succeeded) · {} tool calls · {:.2} s",
        view.turn,
        view.status,
        view.subtasks.len(),
        succeeded,
        tool_calls,
        started.elapsed().as_secs_f64()
    )
}

/// The reply (stdout, or stderr with `json`), the summary line, and with `json` the conversation
/// object as the last stdout line — what `ask` prints at the end.
pub fn print_outcome(view: &ConversationView, json: bool, started: Instant) -> anyhow::Result<()> {
    let (tool_calls, succeeded) = counts(view);
    let tokens = match &view.usage {
        None => "tokens: not reported".to_owned(),
        Some(u) => {
            let mut t = format!(
                "tokens: {} in / {} out",
                u.prompt_tokens.map_or("?".into(), |n| n.to_string()),
                u.completion_tokens.map_or("?".into(), |n| n.to_string())
            );
            if let (Some(c), Some(p)) = (u.cached_tokens, u.prompt_tokens) {
                t.push_str(&format!(" ({c} cached, {:.0}%)", if p > 0 { c as f64 * 100.0 / p as f64 } else { 0.0 }));
            }
            if let Some(cost) = u.cost_usd {
                t.push_str(&format!(" · ${cost:.4}"));
            }
            t
        }
    };
    let reply = view.reply.clone().unwrap_or_else(|| format!("(no reply: conversation {})", view.status));
    if json {
        eprintln!("\n{reply}\n");
    } else {
        println!("\n{reply}\n");
    }
    eprintln!(
        "── {} · {} subtasks ({} succeeded) · {} tool calls · {} · {:.2} s wall",
        view.status,
        view.subtasks.len(),
        succeeded,
        tool_calls,
        tokens,
        started.elapsed().as_secs_f64()
    );
    if json {
        println!("{}", serde_json::to_string(view)?);
    }
    Ok(())
}

/// `swarm-local ask --conversation ID`: `message` as the next turn of conversation `id` of the
/// `serve` at `url`, followed live; exit status as `ask`'s ([`verdict`]). Errors: [`Refused`] (404
/// no such conversation, 409 its latest turn still being answered — said, not waited for — 410
/// expired), the server unreachable, the turn not answered in time.
pub async fn ask_follow_up(
    url: &str,
    token: Option<String>,
    id: &str,
    message: &str,
    customer: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let front = Front::serve(url, token)?;
    let (_, view) = front.turn(Some(id), message, customer).await.with_context(|| format!("conversation {id}"))?;
    print_outcome(&view, json, started)?;
    match verdict(&view) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(why) => {
            eprintln!("swarm-local: {why}");
            Ok(ExitCode::FAILURE)
        }
    }
}
