//! The stack as a client uses it: the HTTP API through the orchestrator's invocations (conversations, approvals as the stack's operator, API Gateway events), and following a conversation to its end.

use std::time::Duration;

use anyhow::Context as _;
use orchestrator::Auth;
use serde_json::Value;
use swarm_adapters::embedded::ChangedItem;
use swarm_core::domain::ConversationId;
use swarm_core::view::ConversationView;

use super::LocalStack;
use crate::http;
use crate::platform::invoke::Ended;

/// How often a client polls `GET /conversations/{id}` on the emulator (which notifies nobody).
const CLIENT_POLL: Duration = Duration::from_millis(100);

impl LocalStack {
    /// `GET /approvals?status=<status>&limit=100` as the stack's operator; answers the listed approvals (newest first, at most 100).
    pub async fn approvals(&self, status: &str) -> anyhow::Result<Vec<Value>> {
        let auth = format!("Bearer {}", self.front.operator_token);
        let (code, body) = self
            .api("GET", &format!("/approvals?status={status}&limit=100"), None, &[("authorization", auth.as_str())])
            .await?;
        anyhow::ensure!(code == 200, "GET /approvals answered {code}: {body}");
        Ok(body["approvals"].as_array().cloned().unwrap_or_default())
    }

    /// `POST /approvals/{id}` with `decision` (`approve` or `reject`) as the stack's operator; answers `(status, body)`.
    pub async fn decide(&self, approval_id: &str, decision: &str) -> anyhow::Result<(u16, Value)> {
        let auth = format!("Bearer {}", self.front.operator_token);
        let body = serde_json::json!({ "decision": decision }).to_string();
        self.api("POST", &format!("/approvals/{approval_id}"), Some(&body), &[("authorization", auth.as_str())]).await
    }

    /// `method path` as the stack's operator (the operator routes: `GET /operator/conversations/{id}`,
    /// `POST /operator/conversations/{id}/messages`), with `idempotency_key` when given; answers `(status, body)`.
    pub async fn as_operator(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<(u16, Value)> {
        let auth = format!("Bearer {}", self.front.operator_token);
        let mut headers = vec![("authorization", auth.as_str())];
        headers.extend(idempotency_key.map(|k| ("idempotency-key", k)));
        self.api(method, path, Some(body.unwrap_or_default()).filter(|b| !b.is_empty()), &headers).await
    }

    /// Sends one HTTP API (payload 2.0) event, e.g. a fixture of `events/`, through
    /// `lambda_http`'s conversion into the orchestrator's router, as on Lambda
    /// (authentication off); answers `(status, JSON body)`. Cut at the orchestrator's timeout.
    pub async fn api_event(&self, event: &Value) -> anyhow::Result<(u16, Value)> {
        let request = lambda_http::request::from_str(&event.to_string()).context("converting the API Gateway event")?;
        self.invoke_api(request).await
    }

    /// `method path` through the orchestrator's router (authentication off: the body names
    /// the customer); answers `(status, JSON body)`. Cut at the orchestrator's timeout.
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(u16, Value)> {
        self.invoke_api(http::request(method, path, body, headers)?).await
    }

    /// One orchestrator invocation: the router answers, unless the invocation passes the
    /// function's timeout or dies at a crash point — an error then (API Gateway would
    /// answer 500 without a body the API chose).
    async fn invoke_api<B>(&self, request: axum::http::Request<B>) -> anyhow::Result<(u16, Value)>
    where
        B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let router = http::api(self.api_state(Auth::None, None));
        match self.front.api.invoke(http::call(router, request)).await {
            Ended::Returned(answer) => answer,
            ended => {
                anyhow::bail!("the orchestrator invocation {} (timeout {:?})", ended.describe(), self.front.api.timeout)
            }
        }
    }

    /// `POST /conversations`; answers `(status, body)`.
    pub async fn post_conversation(
        &self,
        message: &str,
        customer_id: &str,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<(u16, Value)> {
        let body = serde_json::json!({ "message": message, "customer_id": customer_id }).to_string();
        let headers: Vec<(&str, &str)> = idempotency_key.map(|k| vec![("idempotency-key", k)]).unwrap_or_default();
        self.api("POST", "/conversations", Some(&body), &headers).await
    }

    /// `GET /conversations/{id}` as the API answers it.
    pub async fn view(&self, id: &str) -> anyhow::Result<ConversationView> {
        let (status, body) = self.api("GET", &format!("/conversations/{id}"), None, &[]).await?;
        anyhow::ensure!(status == 200, "GET /conversations/{id} answered {status}: {body}");
        Ok(serde_json::from_value(body)?)
    }

    /// Waits until the conversation is `DONE` or `FAILED`, or `timeout` passes; answers its view.
    pub async fn wait_finished(&self, id: &str, timeout: Duration) -> anyhow::Result<ConversationView> {
        self.follow(id, timeout, None).await
    }

    /// As [`Self::wait_finished`], calling `seen` with the conversation's view whenever it
    /// may have changed (progress output).
    pub async fn wait_until(
        &self,
        id: &str,
        timeout: Duration,
        mut seen: impl FnMut(&ConversationView),
    ) -> anyhow::Result<ConversationView> {
        self.follow(id, timeout, Some(&mut seen)).await
    }

    /// Embedded: wakes on the store's stream (no polling). Emulator: polls `GET` every
    /// [`CLIENT_POLL`], as a client on AWS would.
    async fn follow(
        &self,
        id: &str,
        timeout: Duration,
        mut seen: Option<&mut dyn FnMut(&ConversationView)>,
    ) -> anyhow::Result<ConversationView> {
        let conversation_id = ConversationId::parse(id).context("bad conversation id")?;
        let deadline = tokio::time::Instant::now() + timeout;
        let not_finished = |view: &ConversationView| {
            anyhow::anyhow!(
                "conversation {id} did not finish within {timeout:?} (last status {}, {}/{} subtasks finished)",
                view.status,
                view.progress.finished,
                view.progress.total
            )
        };
        let mut changes = self.memory.as_ref().map(|m| m.subscribe());
        loop {
            let view = self.view(id).await?;
            if let Some(seen) = seen.as_mut() {
                seen(&view);
            }
            if view.status.is_terminal() {
                return Ok(view);
            }
            let Some(changes) = changes.as_mut() else {
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Err(not_finished(&view));
                }
                tokio::time::sleep(CLIENT_POLL.min(deadline - now)).await;
                continue;
            };
            // The next change of this conversation worth a new view: any, with a progress
            // callback; the conversation item reaching a terminal status, without.
            loop {
                match tokio::time::timeout_at(deadline, changes.recv()).await {
                    Err(_) => return Err(not_finished(&view)),
                    Ok(None) => anyhow::bail!("the stack stopped"),
                    Ok(Some(change)) if change.conversation_id() != &conversation_id => continue,
                    Ok(Some(change)) => match &change.item {
                        ChangedItem::Conversation(c) if c.status.is_terminal() => break,
                        _ if seen.is_some() => break,
                        _ => continue,
                    },
                }
            }
        }
    }
}
