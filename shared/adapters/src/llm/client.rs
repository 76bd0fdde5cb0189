//! `HttpChatModel`: the tolerant OpenAI-compatible chat-completions client over reqwest.
//!
//! `POST {base_url}/chat/completions` with `stream: false`. Responses are read
//! into lenient serde types straight from the body bytes: missing, null and
//! extra fields are tolerated, ids are kept verbatim, usage fields of every
//! known provider are read (`cached_tokens`, `prompt_tokens_details.cached_tokens`,
//! `prompt_cache_hit_tokens`), and error bodies of any shape are classified
//! with the HTTP status kept (see [`classify_error`], in [`super::wire`]). An
//! AIMD cap ([`super::limiter`]) bounds the calls in flight per instance, so a
//! fan-out of 100 workers does not turn one 429 into a storm.
//!
//! The request follows the endpoint's [`Profile`]: the output limit in the
//! field its preset names, reasoning back on the assistant message it came
//! with, tool definitions on every request whose transcript holds tool calls
//! (`tool_choice: "none"` on a forced last round, or that history flattened
//! to text where the provider cannot take it). A 400 naming a fixable shape
//! ([`Rejection`]) is answered by sending the request once more, fixed, and the
//! fix is kept for later requests; an answer cut off by `length` is asked for
//! once more with a larger limit. No request is ever resent unchanged.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::HeaderValue;
use secrecy::ExposeSecret;
use swarm_core::llm::pricing::PriceTable;
use swarm_core::llm::transcript::{flatten_tool_history, has_tool_history};
use swarm_core::ports::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Purpose, Rejection, ToolChoice,
};

use super::config::{LlmConfigError, LlmEndpoint};
use super::limiter::{AimdLimiter, Outcome};
use super::profile::{OutputLimitField, Profile, ReasoningField, ToolHistory};
use super::wire::{ReasoningOut, WireMessage, WireRequest, WireTool, classify_error, parse_with_reasoning_field};

/// Connection set-up bound, within the per-request timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An OpenAI-compatible chat model at one endpoint: one reqwest client (one
/// connection pool), built once, and an in-flight cap shared by all callers.
pub struct HttpChatModel {
    client: reqwest::Client,
    url: String,
    auth: Option<HeaderValue>,
    model: String,
    label: String,
    profile: Profile,
    learned: Learned,
    timeout: Duration,
    prices: PriceTable,
    limiter: Arc<AimdLimiter>,
    /// `LLM_AUTH=sigv4`: every request SigV4-signed instead of carrying a key.
    signer: Option<crate::sigv4::SigV4Signer>,
}

/// What this instance learned from the provider's answers, on top of the profile (per Lambda
/// instance: a cold start learns again, at the cost of one refused request).
#[derive(Debug, Default)]
struct Learned {
    /// The field reasoning last came in: 0 none seen yet, 1 `reasoning_content`, 2 `reasoning`.
    reasoning_field: AtomicU8,
    /// A 400 asked for reasoning on assistant tool-call messages.
    require_reasoning: AtomicBool,
    /// A 400 refused the profile's output-limit field: the other one is sent.
    other_limit_field: AtomicBool,
    /// A 400 asked for tool definitions on a `tool_choice: "none"` request: such requests are flattened.
    flatten_final: AtomicBool,
}

/// The shape of one attempt: the profile with what was learned and what this call fixed.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Shape {
    field: OutputLimitField,
    reasoning: ReasoningOut,
    /// Flatten the tool history of a `tool_choice: "none"` request.
    flatten_final: bool,
    /// Flatten the tool history whatever the tool choice (this call drew `ToolsMissing` with tools sent).
    flatten_always: bool,
    /// The limit of the retry after `length`, instead of the profile's.
    limit: Option<u32>,
}

impl std::fmt::Debug for HttpChatModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpChatModel")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("profile", &self.profile)
            .field("api_key", &self.auth.as_ref().map(|_| "***"))
            .field("signer", &self.signer)
            .field("timeout", &self.timeout)
            .field("in_flight_limit", &self.limiter.limit())
            .finish()
    }
}

impl HttpChatModel {
    /// A client for `endpoint`: `timeout` bounds each request (connect,
    /// send, body); at most `max_in_flight` (≥ 1) calls run at once, fewer
    /// after 429s. The wait for a place has no bound of its own: callers
    /// bound it with their deadline (`complete_with_retry` does). Errors when
    /// the key is not a valid header value or the TLS client cannot be built.
    pub fn new(
        endpoint: &LlmEndpoint,
        timeout: Duration,
        max_in_flight: usize,
        prices: PriceTable,
    ) -> Result<Self, LlmConfigError> {
        let auth = match &endpoint.api_key {
            Some(k) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {}", k.expose_secret())).map_err(|_| {
                    LlmConfigError::Invalid {
                        var: "LLM_API_KEY",
                        message: "contains characters not allowed in an HTTP header".into(),
                    }
                })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT.min(timeout))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| LlmConfigError::Client(e.to_string()))?;
        let base = endpoint.base_url.trim_end_matches('/');
        let host = reqwest::Url::parse(base)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| base.to_owned());
        Ok(Self {
            client,
            url: format!("{base}/chat/completions"),
            auth,
            model: endpoint.model.clone(),
            label: format!("{} @ {host}", endpoint.model),
            profile: endpoint.profile,
            learned: Learned::default(),
            timeout,
            prices,
            limiter: Arc::new(AimdLimiter::new(max_in_flight)),
            signer: None,
        })
    }

    /// The current in-flight cap (1..=max_in_flight).
    pub fn in_flight_limit(&self) -> usize {
        self.limiter.limit()
    }

    /// The profile this client follows.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The JSON body sent for `request` now (OpenAI chat-completions shape), with what this
    /// instance has learned so far.
    pub fn request_body(&self, request: &ChatRequest) -> Result<Vec<u8>, LlmError> {
        self.build(request, &self.shape()).map(|(body, _)| body)
    }

    fn shape(&self) -> Shape {
        let field = if self.learned.other_limit_field.load(Ordering::Relaxed) {
            self.profile.output_limit_field.other()
        } else {
            self.profile.output_limit_field
        };
        let reasoning_field = match self.learned.reasoning_field.load(Ordering::Relaxed) {
            1 => ReasoningField::ReasoningContent,
            2 => ReasoningField::Reasoning,
            _ => self.profile.reasoning_field,
        };
        Shape {
            field,
            reasoning: ReasoningOut {
                send: self.profile.send_reasoning,
                require: self.profile.require_reasoning || self.learned.require_reasoning.load(Ordering::Relaxed),
                field: reasoning_field,
            },
            flatten_final: self.profile.tool_history == ToolHistory::Flatten
                || self.learned.flatten_final.load(Ordering::Relaxed),
            flatten_always: false,
            limit: None,
        }
    }

    /// The body of `request` in `shape`, and the output limit it carries.
    ///
    /// Tools are offered on work requests. A transcript holding tool calls is flattened to text
    /// when the request offers no tools (providers refuse tool history without definitions), and
    /// on a `tool_choice: "none"` request when the shape says so; otherwise a `none` choice goes
    /// out as `tool_choice: "none"` next to the tools.
    fn build(&self, request: &ChatRequest, shape: &Shape) -> Result<(Vec<u8>, Option<u32>), LlmError> {
        let offer = request.purpose == Purpose::Work && !request.tools.is_empty();
        let last_round = request.tool_choice == ToolChoice::None;
        let flatten = has_tool_history(&request.messages)
            && (!offer || shape.flatten_always || (last_round && shape.flatten_final));
        let flat: Vec<ChatMessage>;
        let messages = if flatten {
            flat = flatten_tool_history(&request.messages);
            &flat
        } else {
            &request.messages
        };
        let send_tools = offer && !(flatten && last_round);
        let limit = match shape.field {
            OutputLimitField::None => None,
            _ => shape.limit.or_else(|| self.profile.output_limit(request.max_tokens)),
        };
        let body = WireRequest {
            model: &self.model,
            messages: messages.iter().map(|m| WireMessage::from_message(m, shape.reasoning)).collect(),
            tools: send_tools.then(|| request.tools.iter().map(WireTool::from).collect()),
            tool_choice: (send_tools && last_round).then_some("none"),
            max_tokens: limit.filter(|_| shape.field == OutputLimitField::MaxTokens),
            max_completion_tokens: limit.filter(|_| shape.field == OutputLimitField::MaxCompletionTokens),
            stream: false,
        };
        let bytes = serde_json::to_vec(&body)
            .map_err(|e| LlmError::Permanent { status: 0, message: format!("request not serialisable: {e}") })?;
        Ok((bytes, limit))
    }

    /// `shape` with the fix for `kind`.
    fn fixed(&self, shape: Shape, kind: Rejection) -> Shape {
        match kind {
            Rejection::ReasoningMissing => {
                Shape { reasoning: ReasoningOut { require: true, ..shape.reasoning }, ..shape }
            }
            Rejection::ToolsMissing => Shape { flatten_always: true, ..shape },
            Rejection::OutputLimitField => Shape { field: shape.field.other(), ..shape },
        }
    }

    /// Keeps the fix for `kind` for this instance's later requests.
    fn learn(&self, kind: Rejection, request: &ChatRequest, shape: &Shape) {
        let changed = match kind {
            Rejection::ReasoningMissing => !self.learned.require_reasoning.swap(true, Ordering::Relaxed),
            // Tools were refused next to `tool_choice: "none"`: the provider drops them for that choice.
            Rejection::ToolsMissing if request.tool_choice == ToolChoice::None => {
                !self.learned.flatten_final.swap(true, Ordering::Relaxed)
            }
            Rejection::ToolsMissing => false,
            Rejection::OutputLimitField => {
                let other = shape.field != self.profile.output_limit_field;
                self.learned.other_limit_field.swap(other, Ordering::Relaxed) != other
            }
        };
        if changed {
            tracing::warn!(model = %self.model, fix = kind.as_str(), "the provider refused a request shape; later requests are sent fixed");
        }
    }

    /// Sends `request`; a refused shape is fixed and sent once more (once per kind), an answer cut
    /// off by `length` is asked for once more with a larger limit.
    async fn send_fixing(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let mut shape = self.shape();
        let mut fixed: Vec<Rejection> = Vec::new();
        loop {
            let (body, sent_limit) = self.build(request, &shape)?;
            match self.send(request.purpose, body.clone()).await {
                Err(LlmError::Rejected { status, kind, message }) if !fixed.contains(&kind) => {
                    fixed.push(kind);
                    let next = self.fixed(shape, kind);
                    if self.build(request, &next)?.0 == body {
                        // Nothing the fix could change: never resend the same request.
                        return Err(LlmError::Rejected { status, kind, message });
                    }
                    tracing::info!(model = %self.model, fix = kind.as_str(), %message, "request refused: sending it once more, fixed");
                    shape = next;
                    self.learn(kind, request, &shape);
                }
                Ok(r) if r.finish_reason == FinishReason::Length => {
                    return self.retry_larger(request, shape, sent_limit, r).await;
                }
                other => return other,
            }
        }
    }

    /// The one retry after an answer cut off by `length`, with a larger limit. The cut answer
    /// stands (its usage counted) when no larger limit can be sent or the provider refuses it
    /// permanently; a transient failure is returned for the caller's retry rules.
    async fn retry_larger(
        &self,
        request: &ChatRequest,
        shape: Shape,
        sent_limit: Option<u32>,
        cut: ChatResponse,
    ) -> Result<ChatResponse, LlmError> {
        let Some(larger) =
            self.profile.length_retry_limit(sent_limit).filter(|_| shape.field != OutputLimitField::None)
        else {
            return Ok(cut);
        };
        let (body, _) = self.build(request, &Shape { limit: Some(larger), ..shape })?;
        tracing::info!(
            model = %self.model,
            purpose = ?request.purpose,
            sent_limit,
            larger,
            answered = cut.content.is_some() || !cut.tool_calls.is_empty(),
            "answer cut off by the output limit (finish_reason length): asking once more with a larger limit"
        );
        match self.send(request.purpose, body).await {
            Ok(mut r) => {
                r.usage = cut.usage.add(&r.usage);
                Ok(r)
            }
            Err(e) if e.is_transient() => Err(e),
            Err(e) => {
                tracing::warn!(model = %self.model, error = %e.log_safe(), "the larger output limit was refused; keeping the cut answer");
                Ok(cut)
            }
        }
    }

    /// One exchange under the in-flight cap, logged.
    async fn send(&self, purpose: Purpose, body: Vec<u8>) -> Result<ChatResponse, LlmError> {
        let slot = self.limiter.acquire().await;
        let started = Instant::now();
        let result = self.exchange(body).await;
        let latency_ms = started.elapsed().as_millis() as u64;
        slot.finish(match &result {
            Ok(_) => Outcome::Success,
            Err(LlmError::RateLimited { .. }) => Outcome::RateLimited,
            Err(_) => Outcome::Neutral,
        });
        match &result {
            Ok(r) => tracing::debug!(
                model = %self.model,
                purpose = ?purpose,
                status = 200u16,
                latency_ms,
                prompt_tokens = r.usage.prompt_tokens,
                completion_tokens = r.usage.completion_tokens,
                cached_tokens = r.usage.cached_tokens,
                tool_calls = r.tool_calls.len(),
                finish_reason = ?r.finish_reason,
                "llm call"
            ),
            Err(e) => tracing::warn!(
                model = %self.model,
                purpose = ?purpose,
                latency_ms,
                in_flight_limit = self.limiter.limit(),
                error = %e,
                "llm call failed"
            ),
        }
        result
    }

    /// Signs every request with `signer` (SigV4, e.g. Amazon Bedrock's endpoint with the
    /// function's role) instead of sending a key.
    pub fn signed(mut self, signer: crate::sigv4::SigV4Signer) -> Self {
        self.auth = None;
        self.signer = Some(signer);
        self
    }

    /// One HTTP exchange: send, read the body, parse or classify.
    async fn exchange(&self, body: Vec<u8>) -> Result<ChatResponse, LlmError> {
        let signature = match &self.signer {
            None => Vec::new(),
            Some(signer) => {
                let signed = [("content-type", "application/json"), ("accept", "application/json")];
                signer.sign("POST", &self.url, &signed, &body).await.map_err(|e| {
                    let message = e.to_string();
                    if e.is_transient() {
                        LlmError::Transient { status: None, message }
                    } else {
                        LlmError::Permanent { status: 0, message }
                    }
                })?
            }
        };
        let mut req = self
            .client
            .post(&self.url)
            .timeout(self.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body);
        if let Some(auth) = &self.auth {
            req = req.header(reqwest::header::AUTHORIZATION, auth.clone());
        }
        for (name, value) in signature {
            req = req.header(name, value);
        }
        let resp = req.send().await.map_err(|e| self.transport_error(&e, None))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let headers = resp.headers().clone();
            let bytes = resp.bytes().await.unwrap_or_default();
            return Err(classify_error(status, &headers, &bytes));
        }
        let bytes = resp.bytes().await.map_err(|e| self.transport_error(&e, Some(status)))?;
        let (mut r, reasoning_field) = parse_with_reasoning_field(status, &bytes, &self.model)?;
        if let Some(field) = reasoning_field {
            let code = match field {
                ReasoningField::ReasoningContent => 1,
                ReasoningField::Reasoning => 2,
            };
            self.learned.reasoning_field.store(code, Ordering::Relaxed);
        }
        let priced = if self.prices.price(&self.model).is_some() { self.model.as_str() } else { r.model.as_str() };
        r.usage.cost_usd = self.prices.cost(priced, &r.usage);
        Ok(r)
    }

    fn transport_error(&self, e: &reqwest::Error, status: Option<u16>) -> LlmError {
        let message = if e.is_timeout() {
            format!("no answer within {:?}", self.timeout)
        } else if e.is_connect() {
            "connection failed".to_owned()
        } else {
            "request failed".to_owned()
        };
        // The error's source chain names the cause (DNS, refused, reset…) without the URL's secrets.
        let cause = std::error::Error::source(e).map(|s| format!(": {s}")).unwrap_or_default();
        LlmError::Transient { status, message: format!("{message}{cause}") }
    }
}

#[async_trait]
impl ChatModel for HttpChatModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.send_fixing(request).await
    }

    fn label(&self) -> String {
        self.label.clone()
    }

    fn model_name(&self) -> String {
        self.model.clone()
    }
}
