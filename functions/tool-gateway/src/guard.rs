//! The guards of one `tools/call`, in the order they run before dispatch — permission, customer scoping, idempotency key, consent, rate limit, breaker (the catalogue lookup runs in the gateway) — each answering a typed [`Refusal`], and how each refusal is answered: its result text or MCP error code, and how it is counted.

use std::sync::Mutex;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, ErrorCode, JsonObject};
use swarm_adapters::mcp::{
    APPROVAL_REASON_FROM, APPROVAL_REFUSED, APPROVAL_REQUIRED, HEADER_APPROVAL, HEADER_CONVERSATION_ID,
    HEADER_CUSTOMER_ID, HEADER_IDEMPOTENCY_KEY, HEADER_SUBTASK_ID, REFUSED_META, RequestHeaders,
};
use swarm_core::access::is_canonical_customer_id;
use swarm_core::approval::{ApprovalKey, CallFacts, ProposedAction, TokenError};
use tokio::time::Instant;

use crate::catalog::{ExposedTool, RolePolicy};
use crate::config::ConsentConfig;
use crate::metrics::{Metrics, Outcome};
use crate::protect::{Admission, Breaker, BreakerState, LimitHit, RateLimits};

/// The header carrying a consent-gated call's limit to the upstream, in cents: the order's
/// refunds so far plus this one may total at most this much without a person's approval
/// (`side_effects.<tool>.consent.above`). Absent on a call a person approved.
pub const HEADER_CONSENT_LIMIT: &str = "x-swarm-consent-limit-cents";

/// The header carrying, on a call a person approved, the approval's id to the upstream: the
/// upstream pays one approval once, whatever key it is presented with.
pub const HEADER_APPROVAL_ID: &str = "x-swarm-approval-id";

/// A `tools/call` answer with `is_error: true` and text `{"error": message}`.
pub fn error_result(message: &str) -> CallToolResult {
    let text = serde_json::json!({ "error": message }).to_string();
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// [`error_result`] of a call the gateway refused before dispatch, marked so ([`REFUSED_META`]):
/// the caller never reads it as the tool's answer (a replay of a side effect stays unknown).
pub fn refused_result(message: &str) -> CallToolResult {
    let mut result = error_result(message);
    let mut meta = rmcp::model::MetaObject::new();
    meta.0.insert(REFUSED_META.to_owned(), serde_json::Value::Bool(true));
    result.meta = Some(meta);
    result
}

/// Why a `tools/call` was not dispatched.
#[derive(Debug)]
pub enum Refusal {
    /// The role's allowlist does not hold the tool.
    NotPermitted { tool: String, role: String },
    /// The role may list tools but call none (`call: false`).
    ListOnly { tool: String, role: String },
    /// The catalogue holds no such tool, even after a refresh: a protocol error.
    UnknownTool(String),
    /// A customer-scoped tool without the caller's customer header.
    NoCustomer { tool: String },
    /// The customer header does not hold a canonical (upper-case) id.
    NonCanonicalCustomer,
    /// A side-effecting tool without the idempotency key header.
    NoIdempotencyKey { tool: String },
    /// A consent-gated tool without the conversation and customer headers.
    NoConsentHeaders { tool: String },
    /// A consent-gated call without an order id that is an identifier.
    NoOrder { order_arg: String },
    /// A consent-gated call without a positive amount.
    NoAmount { amount_arg: String },
    /// A consent-gated tool on a gateway without an approval key: it moves no money.
    NoApprovalKey { tool: String },
    /// The approval token is not valid for exactly this call.
    ApprovalRefused(TokenError),
    /// A person must approve exactly this action first (the upstream found it could run, past the
    /// order's consent limit). The action carries no reason: that is model text quoting the
    /// customer, and an error's data reaches logs (rmcp logs every error response at WARN); the
    /// caller reads it from its own call's `reason_arg`.
    ApprovalRequired { action: ProposedAction, reason_arg: String },
    /// The tool's or the gateway's call rate is exhausted.
    RateLimited { hit: LimitHit, tool: String },
    /// The upstream's breaker is open (or its half-open probe is out).
    BreakerOpen { upstream: String, tool: String, retry_in: Duration },
}

impl Refusal {
    /// How the refused call is counted; `None`: not at all (an unknown tool is the caller's mistake).
    pub fn outcome(&self) -> Option<Outcome> {
        match self {
            Self::UnknownTool(_) => None,
            Self::RateLimited { .. } => Some(Outcome::RateLimited),
            Self::BreakerOpen { .. } => Some(Outcome::BreakerOpen),
            _ => Some(Outcome::Refused),
        }
    }

    /// The text the model reads in the `{"error": …}` result, for refusals answered as a result.
    fn text(&self) -> String {
        match self {
            Self::NotPermitted { tool, role } => format!("tool {tool} is not permitted for role {role}"),
            Self::ListOnly { tool, role } => format!("role {role} may list tools but not call them (tool {tool})"),
            Self::UnknownTool(tool) => format!("unknown tool {tool}"),
            Self::NoCustomer { tool } => {
                format!("tool {tool} acts on a customer's data and needs the {HEADER_CUSTOMER_ID} header")
            }
            Self::NonCanonicalCustomer => {
                format!("the {HEADER_CUSTOMER_ID} header must hold a canonical customer id (upper case)")
            }
            Self::NoIdempotencyKey { tool } => {
                format!("tool {tool} has side effects and needs the {HEADER_IDEMPOTENCY_KEY} header")
            }
            Self::NoConsentHeaders { tool } => {
                format!("tool {tool} needs consent and the {HEADER_CONVERSATION_ID} and {HEADER_CUSTOMER_ID} headers")
            }
            Self::NoOrder { order_arg } => {
                format!("give {order_arg} as the order id (e.g. A1033); the call was not executed")
            }
            Self::NoAmount { amount_arg } => format!(
                "give {amount_arg} as a number in the order's currency (the order shows what is refundable): a refund is approved for an exact amount; the call was not executed"
            ),
            Self::NoApprovalKey { tool } => format!("tool {tool} needs consent and this gateway has no approval key"),
            Self::ApprovalRefused(e) => e.to_string(),
            Self::ApprovalRequired { action, .. } => format!(
                "approval required: {} of {} on order {} needs a person's approval first; it was not executed",
                action.tool,
                action.amount(),
                action.order_id
            ),
            Self::RateLimited { hit, tool } => {
                let which = match hit {
                    LimitHit::Tool => "the tool's",
                    LimitHit::Global => "the gateway's",
                };
                format!("rate limit: {which} call rate is exhausted; try {tool} again in a moment")
            }
            Self::BreakerOpen { upstream, tool, retry_in } => format!(
                "upstream {upstream} is unavailable (circuit open); try {tool} again in {:.0}s",
                retry_in.as_secs_f64().ceil()
            ),
        }
    }

    /// The answer to the caller: a result the model reads, or a typed MCP error (an unknown tool;
    /// consent, which the worker acts on by code). An approval's `data` is
    /// `{tool, order_id, amount_cents, reason_from}`: the validated facts and the name of the
    /// argument holding the reason, never the reason itself.
    pub fn answer(self) -> Result<CallToolResult, ErrorData> {
        let text = self.text();
        match self {
            Self::UnknownTool(_) => Err(ErrorData::invalid_params(text, None)),
            Self::ApprovalRefused(_) => Err(ErrorData::new(ErrorCode(APPROVAL_REFUSED), text, None)),
            Self::ApprovalRequired { action, reason_arg } => {
                let data = serde_json::json!({
                    "tool": action.tool,
                    "order_id": action.order_id,
                    "amount_cents": action.amount_cents,
                    (APPROVAL_REASON_FROM): reason_arg,
                });
                Err(ErrorData::new(ErrorCode(APPROVAL_REQUIRED), text, Some(data)))
            }
            _ => Ok(refused_result(&text)),
        }
    }

    /// Logs the refusal of `tool` for `role` (rate limits and open breakers are counted, not logged).
    pub fn log(&self, tool: &str, role: &str) {
        match self {
            Self::UnknownTool(_) | Self::RateLimited { .. } | Self::BreakerOpen { .. } => {}
            Self::ApprovalRefused(_) => {
                tracing::info!(tool, role, code = APPROVAL_REFUSED, "side effect refused before dispatch: consent")
            }
            Self::ApprovalRequired { .. } => {
                tracing::info!(tool, role, code = APPROVAL_REQUIRED, "side effect refused before dispatch: consent")
            }
            _ => tracing::warn!(tool, role, reason = self.text().as_str(), "tool call refused"),
        }
    }
}

/// The caller's headers, each trimmed; an empty or non-text value is absent.
#[derive(Clone, Copy)]
pub struct CallerHeaders<'a>(pub Option<&'a HeaderMap>);

impl<'a> CallerHeaders<'a> {
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.0.and_then(|m| m.get(name)).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
    }
}

/// What the upstream learns of the caller: headers the model cannot write, sent on this one call.
pub struct Forward(Vec<(HeaderName, HeaderValue)>);

impl Forward {
    /// The caller's conversation and subtask, when it sent them.
    pub fn identity(headers: &CallerHeaders<'_>) -> Self {
        let mut forward = Self(Vec::with_capacity(4));
        for name in [HEADER_CONVERSATION_ID, HEADER_SUBTASK_ID] {
            if let Some(value) = headers.get(name) {
                forward.push(name, value);
            }
        }
        forward
    }

    fn push(&mut self, name: &'static str, value: &str) {
        if let Ok(value) = HeaderValue::from_str(value) {
            self.0.push((HeaderName::from_static(name), value));
        }
    }

    pub fn into_headers(self) -> RequestHeaders {
        RequestHeaders(std::sync::Arc::new(self.0))
    }
}

/// The role may call `tool`.
pub fn permission(policy: &RolePolicy, tool: &str) -> Result<(), Refusal> {
    if policy.may_call(tool) {
        return Ok(());
    }
    let (tool, role) = (tool.to_owned(), policy.name.clone());
    Err(if policy.call { Refusal::NotPermitted { tool, role } } else { Refusal::ListOnly { tool, role } })
}

/// A customer-scoped tool acts for the caller's customer only: its canonical id from the header
/// replaces whatever the model put in `arg`, and goes upstream as the same header.
pub fn customer_scope(
    tool: &ExposedTool,
    arg: &str,
    headers: &CallerHeaders<'_>,
    arguments: &mut JsonObject,
    forward: &mut Forward,
    role: &str,
) -> Result<(), Refusal> {
    if !tool.customer_scoped {
        return Ok(());
    }
    let customer =
        headers.get(HEADER_CUSTOMER_ID).ok_or_else(|| Refusal::NoCustomer { tool: tool.name.to_string() })?;
    // Canonical ids only: `c104` must never reach an upstream that matches ids loosely.
    if !is_canonical_customer_id(customer) {
        return Err(Refusal::NonCanonicalCustomer);
    }
    forward.push(HEADER_CUSTOMER_ID, customer);
    let previous = arguments.insert(arg.to_owned(), customer.into());
    if previous.is_some_and(|p| p.as_str() != Some(customer)) {
        tracing::info!(tool = &*tool.name, role, "customer id in the arguments replaced by the caller's header");
    }
    Ok(())
}

/// A side-effecting tool carries the caller's idempotency key, in `arg` and as the same header.
pub fn idempotency(
    tool: &ExposedTool,
    arg: &str,
    headers: &CallerHeaders<'_>,
    arguments: &mut JsonObject,
    forward: &mut Forward,
) -> Result<(), Refusal> {
    if !tool.side_effecting {
        return Ok(());
    }
    let key =
        headers.get(HEADER_IDEMPOTENCY_KEY).ok_or_else(|| Refusal::NoIdempotencyKey { tool: tool.name.to_string() })?;
    forward.push(HEADER_IDEMPOTENCY_KEY, key);
    arguments.insert(arg.to_owned(), key.into());
    Ok(())
}

/// The facts an approval is for, read from the call; the order must be an identifier and the
/// amount positive (an approval is for an exact amount).
fn call_facts<'a>(
    tool: &'a str,
    consent: &ConsentConfig,
    arguments: &'a JsonObject,
    headers: &CallerHeaders<'a>,
) -> Result<CallFacts<'a>, Refusal> {
    let (Some(conversation_id), Some(customer_id)) =
        (headers.get(HEADER_CONVERSATION_ID), headers.get(HEADER_CUSTOMER_ID))
    else {
        return Err(Refusal::NoConsentHeaders { tool: tool.to_owned() });
    };
    // The idempotency guard ran first: a side-effecting call without its key never gets here.
    let idempotency_key =
        headers.get(HEADER_IDEMPOTENCY_KEY).ok_or_else(|| Refusal::NoIdempotencyKey { tool: tool.to_owned() })?;
    let order_id = arguments
        .get(&consent.order_arg)
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|o| swarm_core::untrusted::is_safe_id(o))
        .ok_or_else(|| Refusal::NoOrder { order_arg: consent.order_arg.clone() })?;
    let amount = arguments
        .get(&consent.amount_arg)
        .and_then(serde_json::Value::as_f64)
        .filter(|a| a.is_finite() && *a > 0.0)
        .ok_or_else(|| Refusal::NoAmount { amount_arg: consent.amount_arg.clone() })?;
    // The MCP edge speaks decimals; an approval is for whole cents.
    let amount_cents = (amount * 100.0).round() as i64;
    Ok(CallFacts { conversation_id, customer_id, tool, order_id, amount_cents, idempotency_key })
}

/// What consent lets through, and on which terms.
#[derive(Debug)]
pub enum Consent {
    /// A person approved exactly this call (its token named this approval).
    Approved(String),
    /// No approval: the call goes upstream with `limit_cents` as its consent limit; when the
    /// upstream answers that the order's refunds would pass it, `action` is what a person must
    /// approve (its reason in the call's `reason_arg`).
    Limited { limit_cents: i64, action: ProposedAction, reason_arg: String },
}

/// Consent before money moves: a call carrying an approval token must carry a valid one for
/// exactly this approval, conversation, customer, tool, order, amount and idempotency key (the
/// upstream learns the approval id and pays it once); a call without one goes
/// upstream limited by the threshold ([`Consent::Limited`]). The upstream makes its own checks
/// first (the order is the customer's, the amount is refundable, the window is open) and then
/// holds the limit against the order's refunds so far: a person is asked only about a call that
/// could run, and splitting a refund gains nothing.
pub fn consent(
    tool: &str,
    consent: &ConsentConfig,
    key: Option<&ApprovalKey>,
    arguments: &JsonObject,
    headers: &CallerHeaders<'_>,
) -> Result<Consent, Refusal> {
    let call = call_facts(tool, consent, arguments, headers)?;
    // validate() requires a key with consent; a gateway without one moves no money.
    let key = key.ok_or_else(|| Refusal::NoApprovalKey { tool: tool.to_owned() })?;
    let (order_id, amount_cents) = (call.order_id, call.amount_cents);
    if let Some(token) = headers.get(HEADER_APPROVAL) {
        return match key.verify(token, &call, swarm_core::domain::now_ms()) {
            Ok(approval_id) => {
                tracing::info!(approval_id, order_id, amount_cents, "approved side effect dispatched");
                Ok(Consent::Approved(approval_id))
            }
            Err(e) => {
                tracing::warn!(tool, order_id, error = %e, "approval token refused");
                Err(Refusal::ApprovalRefused(e))
            }
        };
    }
    let action = ProposedAction { tool: tool.to_owned(), order_id: order_id.to_owned(), amount_cents, reason: None };
    Ok(Consent::Limited { limit_cents: consent.above_cents, action, reason_arg: consent.reason_arg.clone() })
}

impl Consent {
    /// Puts the limit of a call without approval into `arg` and its header, or the approval's id
    /// into the header of an approved one; answers the refusal to give should the upstream find
    /// the order's limit reached (`None` for an approved call).
    pub fn apply(self, arg: &str, arguments: &mut JsonObject, forward: &mut Forward) -> Option<Refusal> {
        match self {
            Self::Approved(approval_id) => {
                forward.push(HEADER_APPROVAL_ID, &approval_id);
                None
            }
            Self::Limited { limit_cents, action, reason_arg } => {
                arguments.insert(arg.to_owned(), limit_cents.into());
                forward.push(HEADER_CONSENT_LIMIT, &limit_cents.to_string());
                Some(Refusal::ApprovalRequired { action, reason_arg })
            }
        }
    }
}

/// One cell of the tool's and the gateway's rate limits; never waits.
pub fn rate_limit(limits: &RateLimits, tool: &ExposedTool) -> Result<(), Refusal> {
    limits.check(tool.upstream, &tool.name).map_err(|hit| Refusal::RateLimited { hit, tool: tool.name.to_string() })
}

/// The upstream's breaker admits the call (a half-open probe is recorded as such).
pub fn breaker(breaker: &Mutex<Breaker>, upstream: &str, tool: &str, metrics: &Metrics) -> Result<(), Refusal> {
    let admission = breaker.lock().unwrap_or_else(|e| e.into_inner()).admit(Instant::now());
    match admission {
        Admission::Rejected { retry_in } => {
            Err(Refusal::BreakerOpen { upstream: upstream.to_owned(), tool: tool.to_owned(), retry_in })
        }
        Admission::Probe => {
            metrics.record_breaker(upstream, BreakerState::HalfOpen);
            Ok(())
        }
        Admission::Allowed => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_keeps_its_words_and_its_code() {
        let answer = |r: Refusal| r.answer();
        let text = |r: Result<CallToolResult, ErrorData>| {
            let result = r.ok().and_then(|r| r.content.first().and_then(|c| c.as_text().map(|t| t.text.clone())));
            result.unwrap_or_default()
        };
        assert_eq!(
            text(answer(Refusal::NotPermitted { tool: "shop__refund".into(), role: "support".into() })),
            r#"{"error":"tool shop__refund is not permitted for role support"}"#
        );
        let unknown = answer(Refusal::UnknownTool("nope".into())).unwrap_err();
        assert_eq!((unknown.code, unknown.message.as_ref()), (ErrorCode::INVALID_PARAMS, "unknown tool nope"));
        let action =
            ProposedAction { tool: "shop__refund".into(), order_id: "A1".into(), amount_cents: 79_700, reason: None };
        let required = answer(Refusal::ApprovalRequired { action, reason_arg: "reason".into() }).unwrap_err();
        assert_eq!(required.code, ErrorCode(APPROVAL_REQUIRED));
        assert_eq!(
            required.message,
            "approval required: shop__refund of 797.00 on order A1 needs a person's approval first; it was not executed"
        );
        assert_eq!(
            required.data,
            Some(
                serde_json::json!({"tool": "shop__refund", "order_id": "A1", "amount_cents": 79_700, "reason_from": "reason"})
            ),
            "the facts and where the reason is, never model text"
        );
        let refused = answer(Refusal::ApprovalRefused(TokenError::Expired)).unwrap_err();
        assert_eq!(refused.code, ErrorCode(APPROVAL_REFUSED));
        let open =
            Refusal::BreakerOpen { upstream: "shop".into(), tool: "t".into(), retry_in: Duration::from_millis(1_200) };
        assert_eq!(open.outcome(), Some(Outcome::BreakerOpen));
        assert!(text(open.answer()).contains("try t again in 2s"));
        assert_eq!(Refusal::UnknownTool("x".into()).outcome(), None);
    }
}
