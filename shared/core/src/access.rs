//! Who may do what, as values: the one canonical form of a customer id, the principals credentials name, the per-customer limits and the `AccessStore` port that keeps mappings and counters.
//!
//! A customer id is canonicalised **once**, where an identity enters the system (the API's
//! `Caller`, the admin command), by [`canonical_customer_id`]; everything downstream — the
//! conversation item, the orchestrator's owner check, the gateway's `x-swarm-customer-id`
//! header, the shop — compares canonical ids byte for byte, so `c104` and `C104` can never be
//! two customers in one place and one customer in another.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::ports::StoreError;
use crate::time;
use crate::timings::seconds_rounded_up;

/// Longest customer id, in characters.
pub const MAX_CUSTOMER_ID_CHARS: usize = 64;
/// Longest principal value (a JWT `sub`, an IAM unique id with its session name), in characters.
pub const MAX_PRINCIPAL_CHARS: usize = 256;

/// Why a customer id or a principal was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Empty, too long, or a character outside `[A-Za-z0-9_-]`. Permanent.
    #[error("a customer id must be 1-64 characters of letters, digits, '-' or '_'")]
    BadCustomerId,
    /// Not `sub:<value>` or `iam:<value>`, or a value with blanks or control characters. Permanent.
    #[error("a principal must be sub:<value> or iam:<value>, 1-256 printable characters without blanks")]
    BadPrincipal,
}

/// The one canonical form of a customer id: trimmed, ASCII upper case, 1–64 of `[A-Z0-9_-]`
/// (so it can never carry a key separator such as `#` into a DynamoDB key).
///
/// Errors: [`IdentityError::BadCustomerId`] for anything else.
pub fn canonical_customer_id(raw: &str) -> Result<String, IdentityError> {
    let id = raw.trim();
    let ok = (1..=MAX_CUSTOMER_ID_CHARS).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok { Ok(id.to_ascii_uppercase()) } else { Err(IdentityError::BadCustomerId) }
}

/// Whether `id` is already in canonical form (what the gateway and the shop accept as-is).
pub fn is_canonical_customer_id(id: &str) -> bool {
    canonical_customer_id(id).is_ok_and(|c| c == id)
}

/// Where a principal comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalKind {
    /// A JWT's `sub` (or the configured claim): unique per issuer, never writable by the user.
    Sub,
    /// An IAM caller's unique id: `AIDA…` for a user, `AROA…:<session>` for an assumed role.
    Iam,
}

impl PrincipalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sub => "sub",
            Self::Iam => "iam",
        }
    }
}

/// An authenticated identity that is not yet a customer: mapped to one by an item of the
/// table (`swarm-local admin map-customer`, or the AWS CLI call in docs/deploy.md).
/// Printed as `<kind>:<value>`, e.g. `sub:0f1e…` or `iam:AROAEXAMPLE:alice`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Principal {
    kind: PrincipalKind,
    value: String,
}

impl Principal {
    /// Errors: [`IdentityError::BadPrincipal`] for an empty or over-long value, or one with
    /// whitespace or control characters.
    pub fn new(kind: PrincipalKind, value: &str) -> Result<Self, IdentityError> {
        let ok = (1..=MAX_PRINCIPAL_CHARS).contains(&value.chars().count())
            && value.chars().all(|c| !c.is_whitespace() && !c.is_control());
        if ok { Ok(Self { kind, value: value.to_owned() }) } else { Err(IdentityError::BadPrincipal) }
    }

    /// Parses `sub:<value>` or `iam:<value>` (the admin command's argument).
    /// Errors: [`IdentityError::BadPrincipal`].
    pub fn parse(text: &str) -> Result<Self, IdentityError> {
        let (kind, value) = text.trim().split_once(':').ok_or(IdentityError::BadPrincipal)?;
        let kind = match kind {
            "sub" => PrincipalKind::Sub,
            "iam" => PrincipalKind::Iam,
            _ => return Err(IdentityError::BadPrincipal),
        };
        Self::new(kind, value)
    }

    pub fn kind(&self) -> PrincipalKind {
        self.kind
    }

    pub fn value(&self) -> &str {
        &self.value
    }

    /// The principals an IAM caller is looked up as, most specific first: its unique id
    /// (`AROAEXAMPLE:alice` — one session of a role), then for an assumed role the role's
    /// unique id alone (`AROAEXAMPLE` — every session of that role). An IAM user has one.
    ///
    /// Errors: [`IdentityError::BadPrincipal`] for a user id that is not a principal value.
    pub fn iam_candidates(user_id: &str) -> Result<Vec<Self>, IdentityError> {
        let full = Self::new(PrincipalKind::Iam, user_id.trim())?;
        let mut out = vec![full.clone()];
        if let Some((role, _session)) = full.value.split_once(':')
            && role.starts_with("AROA")
        {
            out.push(Self::new(PrincipalKind::Iam, role)?);
        }
        Ok(out)
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.value)
    }
}

/// Per-customer limits, read once from configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CustomerLimits {
    /// Conversations one customer may start per calendar minute (UTC); past it `POST` answers
    /// 429 with `Retry-After` until the next minute.
    pub conversations_per_minute: u32,
    /// Most subtasks one conversation of a customer may fan out to (≤ [`crate::domain::MAX_SUBTASKS`]).
    pub subtasks_per_conversation: usize,
}

impl CustomerLimits {
    /// 20 conversations a minute, 100 subtasks each.
    pub const DEFAULT: Self =
        Self { conversations_per_minute: 20, subtasks_per_conversation: crate::domain::MAX_SUBTASKS };
}

impl Default for CustomerLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The length of one rate window.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);

/// A fixed rate window: the calendar minute holding `now_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateWindow {
    /// Milliseconds since the Unix epoch at the start of the window.
    pub start_ms: i64,
}

impl RateWindow {
    pub fn containing(now_ms: i64) -> Self {
        let len = time::millis(RATE_WINDOW);
        Self { start_ms: now_ms.div_euclid(len) * len }
    }

    /// Milliseconds since the Unix epoch when the window ends.
    pub fn end_ms(self) -> i64 {
        time::after_ms(self.start_ms, RATE_WINDOW)
    }

    /// Whole seconds from `now_ms` until the window ends, at least 1 (a `Retry-After` value).
    pub fn retry_after_secs(self, now_ms: i64) -> u64 {
        seconds_rounded_up(time::between(now_ms, self.end_ms())).max(1)
    }

    /// Unix seconds when a counter of this window may be deleted (TTL): an hour after it ends,
    /// far past any clock skew between instances.
    pub fn expires_at_secs(self) -> i64 {
        self.end_ms() / 1000 + 3600
    }
}

/// Outcome of [`AccessStore::take_conversation_slot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotOutcome {
    /// Counted: the customer's conversations in this window, this one included.
    Taken { used: u32 },
    /// The window's limit is reached; nothing was written.
    Exhausted,
}

/// Identity mappings and per-customer counters, kept in the conversations table so every
/// instance (every Lambda, every `serve`) sees the same values.
///
/// One item per mapping (its principal's customer) and one per customer and rate window (its
/// count); their keys are the DynamoDB store codec's.
#[async_trait]
pub trait AccessStore: Send + Sync {
    /// The canonical customer `principal` is mapped to, if any (a consistent read).
    async fn customer_for(&self, principal: &Principal) -> Result<Option<String>, StoreError>;

    /// Maps `principal` to `customer_id` (already canonical), replacing any earlier mapping.
    async fn map_customer(&self, principal: &Principal, customer_id: &str) -> Result<(), StoreError>;

    /// Removes `principal`'s mapping; returns whether there was one.
    async fn unmap_customer(&self, principal: &Principal) -> Result<bool, StoreError>;

    /// Counts one conversation of `customer_id` in `window`, with one conditional write
    /// ("count below `limit`"), so the limit holds across instances. The counter expires
    /// ([`RateWindow::expires_at_secs`]). Returns [`SlotOutcome::Exhausted`] and writes nothing
    /// once `limit` conversations were counted in the window.
    async fn take_conversation_slot(
        &self,
        customer_id: &str,
        window: RateWindow,
        limit: u32,
    ) -> Result<SlotOutcome, StoreError>;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn customer_ids_have_one_canonical_form() {
        for raw in ["C104", "c104", " c104\n", "C104 "] {
            assert_eq!(canonical_customer_id(raw).unwrap(), "C104", "{raw:?}");
        }
        assert_eq!(canonical_customer_id("acme_eu-7").unwrap(), "ACME_EU-7");
        for bad in ["", "  ", "C1#META", "C 104", "c104ä", &"C".repeat(65), "AROA:x"] {
            assert_eq!(canonical_customer_id(bad), Err(IdentityError::BadCustomerId), "{bad:?}");
        }
        assert!(is_canonical_customer_id("C104"));
        assert!(!is_canonical_customer_id("c104"));
        assert!(!is_canonical_customer_id(" C104"));
    }

    #[test]
    fn principals_parse_print_and_refuse_blanks() {
        let p = Principal::parse("sub:0f1e2d3c-aaaa").unwrap();
        assert_eq!((p.kind(), p.value()), (PrincipalKind::Sub, "0f1e2d3c-aaaa"));
        assert_eq!(p.to_string(), "sub:0f1e2d3c-aaaa");
        assert_eq!(Principal::parse("iam:AROAEXAMPLE:alice").unwrap().value(), "AROAEXAMPLE:alice");
        for bad in ["sub:", "jwt:x", "sub", "sub:a b", "iam:\u{7}", ""] {
            assert_eq!(Principal::parse(bad), Err(IdentityError::BadPrincipal), "{bad:?}");
        }
    }

    #[test]
    fn an_assumed_role_is_looked_up_by_session_then_by_role() {
        let names =
            |id: &str| Principal::iam_candidates(id).unwrap().iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(names("AROAEXAMPLEID:support-bot"), ["iam:AROAEXAMPLEID:support-bot", "iam:AROAEXAMPLEID"]);
        assert_eq!(names("AIDAEXAMPLEUSER"), ["iam:AIDAEXAMPLEUSER"]);
        assert!(Principal::iam_candidates("").is_err());
    }

    #[test]
    fn a_rate_window_is_the_calendar_minute() {
        let w = RateWindow::containing(1_767_225_659_500); // 23:00:59.5 UTC
        assert_eq!(w.start_ms, 1_767_225_600_000);
        assert_eq!(w.end_ms(), 1_767_225_660_000);
        assert_eq!(w.retry_after_secs(1_767_225_659_500), 1);
        assert_eq!(w.retry_after_secs(1_767_225_600_000), 60);
        assert_eq!(w.retry_after_secs(1_767_225_600_001), 60);
        assert_eq!(w.expires_at_secs(), 1_767_225_660 + 3600);
        assert_eq!(RateWindow::containing(1_767_225_660_000).start_ms, 1_767_225_660_000);
    }
}
