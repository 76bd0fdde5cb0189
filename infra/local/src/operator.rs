//! `swarm-local approvals`: the operator's client of the approvals API — `serve`'s (an operator token) or the deployed one (IAM: every request SigV4-signed, service `execute-api`, with credentials from `aws-config`'s provider chain, so profiles, SSO and container credentials work) — printing a list or a decision for people, or the API's JSON with `--json`; an error prints as its message, never as a raw body.

use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use swarm_adapters::sigv4::SigV4Signer;

/// The signing name of API Gateway.
pub const EXECUTE_API: &str = "execute-api";
/// Longest wait for one answer of the API.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How the operator proves who they are.
#[derive(Clone, Debug)]
pub enum Credential {
    /// `Authorization: Bearer <token>` (`serve --operator-token`).
    Token(String),
    /// SigV4 with the provider chain's credentials (the deployed API's `AWS_IAM` routes).
    Iam(SigV4Signer),
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// List approvals (`pending`, …, `all`), one page of at most `limit`, from `cursor`.
    List {
        status: String,
        limit: Option<u32>,
        cursor: Option<String>,
    },
    Approve(String),
    Reject(String),
    /// Read a conversation as its customer does (`GET /operator/conversations/{id}`).
    View(String),
}

/// The region an API URL is in (`https://<id>.execute-api.<region>.amazonaws.com`), if it says.
pub fn region_of(url: &str) -> Option<String> {
    let host = reqwest::Url::parse(url).ok()?.host_str()?.to_ascii_lowercase();
    let mut parts = host.split('.');
    let (_, service, region) = (parts.next()?, parts.next()?, parts.next()?);
    (service == EXECUTE_API && !region.is_empty()).then(|| region.to_owned())
}

/// The region to sign for: `explicit`, else the URL's, else `aws-config`'s region chain
/// (`AWS_REGION`, the profile's `region`). Errors when none says.
pub async fn signing_region(explicit: Option<&str>, url: &str) -> anyhow::Result<String> {
    if let Some(region) = explicit.or(region_of(url).as_deref()) {
        return Ok(region.to_owned());
    }
    let chain = aws_config::default_provider::region::DefaultRegionChain::builder().build();
    chain.region().await.map(|r| r.to_string()).context(
        "no region to sign for: give --region, an https://<id>.execute-api.<region>.amazonaws.com URL, or AWS_REGION",
    )
}

/// Runs `action` against the API at `base`; answers the API's JSON body.
/// Errors: the API unreachable, an answer that is not JSON, or an error answer (its message,
/// from the problem document's `detail` or `error.message`).
pub async fn call(base: &str, credential: &Credential, action: &Action) -> anyhow::Result<Value> {
    let base = base.trim_end_matches('/');
    let (method, url, body) = match action {
        Action::List { status, limit, cursor } => {
            anyhow::ensure!(status.chars().all(|c| c.is_ascii_lowercase()), "--status is one word, e.g. pending");
            let mut url = reqwest::Url::parse(&format!("{base}/approvals")).context("--url is not a URL")?;
            url.query_pairs_mut().append_pair("status", status);
            if let Some(limit) = limit {
                url.query_pairs_mut().append_pair("limit", &limit.to_string());
            }
            if let Some(cursor) = cursor {
                url.query_pairs_mut().append_pair("cursor", cursor);
            }
            (reqwest::Method::GET, url.to_string(), Vec::new())
        }
        Action::Approve(id) | Action::Reject(id) => {
            let decision = if matches!(action, Action::Approve(_)) { "approve" } else { "reject" };
            let body = serde_json::to_vec(&serde_json::json!({ "decision": decision }))?;
            (reqwest::Method::POST, format!("{base}/approvals/{id}"), body)
        }
        Action::View(id) => (reqwest::Method::GET, format!("{base}/operator/conversations/{id}"), Vec::new()),
    };
    let client = reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build()?;
    let mut request = client.request(method.clone(), &url).header("accept", "application/json");
    if !body.is_empty() {
        request = request.header("content-type", "application/json");
    }
    request = match credential {
        Credential::Token(token) => request.bearer_auth(token),
        Credential::Iam(signer) => {
            let signed: &[(&str, &str)] = if body.is_empty() { &[] } else { &[("content-type", "application/json")] };
            let headers = signer.sign(method.as_str(), &url, signed, &body).await.context("signing the request")?;
            headers.into_iter().fold(request, |r, (name, value)| r.header(name, value))
        }
    };
    let response = request.body(body).send().await.with_context(|| format!("calling {base}"))?;
    let status = response.status();
    let text = response.text().await.context("reading the API's answer")?;
    let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if !status.is_success() {
        let message = json["detail"]
            .as_str()
            .or(json["error"]["message"].as_str())
            .or(json["message"].as_str())
            .or(json["Message"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned());
        anyhow::bail!("the approvals API answered {}: {message}", status.as_u16());
    }
    anyhow::ensure!(!json.is_null(), "the approvals API answered {} with a body that is not JSON", status.as_u16());
    Ok(json)
}

/// The lines a person reads for an answer of [`call`].
pub fn describe(action: &Action, answer: &Value) -> Vec<String> {
    let text = |v: &Value, k: &str| v[k].as_str().unwrap_or("").to_owned();
    match action {
        Action::List { .. } => {
            let listed = answer["approvals"].as_array().cloned().unwrap_or_default();
            let mut lines: Vec<String> = listed
                .iter()
                .map(|a| {
                    format!(
                        "{}  {:<9} {} {} on order {} for customer {}{}",
                        text(a, "approval_id"),
                        text(a, "status"),
                        text(a, "tool"),
                        text(a, "amount"),
                        text(a, "order_id"),
                        text(a, "customer_id"),
                        a["reason"].as_str().map(|r| format!(" — {r}")).unwrap_or_default()
                    )
                })
                .collect();
            if lines.is_empty() {
                lines.push("no approvals".to_owned());
            }
            if let Some(cursor) = answer["next_cursor"].as_str() {
                lines.push(format!("more: --cursor {cursor}"));
            }
            lines
        }
        Action::View(_) => told_lines(&answer["turns"]),
        _ => {
            let a = &answer["approval"];
            let by = a["decided_by"].as_str().unwrap_or("?");
            vec![format!("{} is {} (decided by {by})", text(a, "approval_id"), text(a, "status"))]
        }
    }
}

/// The conversation of approval `id` (its id's first part: `<conversation>.<subtask>.<n>`).
pub fn conversation_of(approval_id: &str) -> Option<&str> {
    approval_id.split_once('.').map(|(c, _)| c).filter(|c| !c.is_empty())
}

/// How often [`await_told_turn`] reads the conversation.
const TOLD_POLL: Duration = Duration::from_millis(250);

/// Waits, at most `within`, for conversation `id` to hold a turn past its first `before` turns
/// written by the swarm (the decision told to the customer: for an approval, once its refund ran
/// or failed); answers that turn (`turns[]`'s entry), or `None` when none came in time.
///
/// Errors: the API's, reading the conversation.
pub async fn await_told_turn(
    base: &str,
    credential: &Credential,
    id: &str,
    before: usize,
    within: Duration,
) -> anyhow::Result<Option<Value>> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let view = call(base, credential, &Action::View(id.to_owned())).await?;
        let turns = view["turns"].as_array().cloned().unwrap_or_default();
        if let Some(told) = turns.iter().skip(before).find(|t| t["author"] == "swarm") {
            return Ok(Some(told.clone()));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(TOLD_POLL).await;
    }
}

/// The lines of the turns `turns` (a `turns[]` array, or one turn) a person reads: who wrote
/// each, and what the customer was answered.
pub fn told_lines(turns: &Value) -> Vec<String> {
    let one = [turns.clone()];
    let turns = turns.as_array().map_or(&one[..], Vec::as_slice);
    turns
        .iter()
        .map(|t| {
            let author = t["author"].as_str().unwrap_or("customer");
            let message =
                t["message"].as_str().filter(|m| !m.is_empty()).map(|m| format!(" «{m}»")).unwrap_or_default();
            let reply = t["reply"].as_str().unwrap_or("(no reply yet)");
            format!("turn {} by {author}{message} [{}]: {reply}", t["turn"], t["status"].as_str().unwrap_or("?"))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn the_region_comes_from_an_execute_api_host() {
        assert_eq!(region_of("https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com").as_deref(), Some("eu-west-1"));
        assert_eq!(region_of("http://127.0.0.1:8080"), None);
        assert_eq!(region_of("https://api.example.com"), None);
    }

    #[test]
    fn a_list_reads_as_lines_with_the_next_page() {
        let answer = serde_json::json!({"approvals": [{"approval_id": "c.w01.1", "status": "pending", "tool": "shop__refund",
            "amount": "1874.00", "order_id": "A1033", "customer_id": "C108", "reason": "damaged"}], "next_cursor": "abc"});
        let action = Action::List { status: "pending".into(), limit: None, cursor: None };
        assert_eq!(
            describe(&action, &answer),
            [
                "c.w01.1  pending   shop__refund 1874.00 on order A1033 for customer C108 — damaged",
                "more: --cursor abc"
            ]
        );
        let empty = serde_json::json!({"approvals": []});
        assert_eq!(describe(&action, &empty), ["no approvals"]);
    }
}

#[cfg(test)]
mod told_tests {
    use super::*;

    #[test]
    fn a_told_turn_reads_as_its_author_and_reply() {
        let turn =
            serde_json::json!({"turn": 1, "author": "swarm", "message": "", "status": "DONE", "reply": "refund made"});
        assert_eq!(told_lines(&turn), ["turn 1 by swarm [DONE]: refund made"]);
        let turns =
            serde_json::json!([{"turn": 0, "message": "refund A1033", "status": "DONE", "reply": "waits"}, turn]);
        assert_eq!(told_lines(&turns)[0], "turn 0 by customer «refund A1033» [DONE]: waits");
        assert_eq!(conversation_of("0190abc.w01.1"), Some("0190abc"));
        assert_eq!(conversation_of("nodot"), None);
    }
}
