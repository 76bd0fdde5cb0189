//! Consent before money moves: what a side effect awaiting a person's approval would do, the approval record and its states, and the approval token the gateway verifies without a table read.
//!
//! The gateway refuses a consent-gated call (a refund above its configured amount) before
//! dispatch unless the call carries a valid token for exactly that approval, conversation,
//! customer, tool, order and amount. Only the approvals API (the orchestrator) signs tokens and
//! only the gateway verifies them: both hold the [`ApprovalKey`]. A token says "a person agreed
//! to this exact call until this instant"; that the call runs at most once comes from its
//! side-effect key and the journal ([`crate::effects`]), not from the token.

use std::fmt;

use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};

use crate::domain::{ConversationId, SubtaskId};
use crate::effects::EffectOutcome;
use crate::untrusted::clean_text;

/// Longest reason kept on an approval, characters (model text: cleaned, bounded, shown to operators only).
pub const MAX_REASON_CHARS: usize = 200;
/// Shortest approval key accepted, bytes.
pub const MIN_KEY_BYTES: usize = 32;

/// Exactly what a side effect awaiting approval would do, as the gateway validated it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposedAction {
    /// The tool as the gateway lists it, e.g. `shop__refund`.
    pub tool: String,
    /// The order it acts on (a safe identifier: letters, digits, `_-.:`).
    pub order_id: String,
    /// The amount, in cents of the order's currency.
    pub amount_cents: i64,
    /// Why, as the model put it: cleaned and cut to [`MAX_REASON_CHARS`]; for operators, never a key or a header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ProposedAction {
    /// The amount as a decimal text with two places, e.g. `1874.00`.
    pub fn amount(&self) -> String {
        let sign = if self.amount_cents < 0 { "-" } else { "" };
        let abs = self.amount_cents.unsigned_abs();
        format!("{sign}{}.{:02}", abs / 100, abs % 100)
    }

    /// A reason from model text, cleaned and bounded (`None` when blank).
    pub fn clean_reason(reason: Option<&str>) -> Option<String> {
        reason.map(|r| clean_text(r.trim(), MAX_REASON_CHARS)).filter(|r| !r.trim().is_empty())
    }
}

/// One side effect of a subtask waiting for a person: its approval and what it would do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    pub approval_id: String,
    pub action: ProposedAction,
}

/// Where an approval stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for an operator, until `expires_at_ms`.
    Pending,
    /// An operator approved it; the refund worker runs it with the token.
    Approved,
    /// An operator rejected it; it never runs.
    Rejected,
    /// Nobody decided in time, or it was approved and not run before its token expired.
    Expired,
    /// It ran: `outcome` says what the tool answered.
    Executed,
}

impl ApprovalStatus {
    pub fn code(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
            Self::Executed => "executed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => Self::Pending,
            "approved" => Self::Approved,
            "rejected" => Self::Rejected,
            "expired" => Self::Expired,
            "executed" => Self::Executed,
            _ => return None,
        })
    }
}

/// The approval of one side effect (`PK = APPROVALS`, `SK = <id>` on DynamoDB).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// [`approval_id`] of the side effect.
    pub id: String,
    pub conversation_id: ConversationId,
    pub subtask_id: SubtaskId,
    /// The side effect's position in the subtask's journal.
    pub ordinal: u32,
    pub customer_id: String,
    /// The worker role that runs it (its queue gets the approved call).
    pub role: String,
    pub action: ProposedAction,
    pub status: ApprovalStatus,
    pub created_at_ms: i64,
    /// A pending approval can be decided until then.
    pub expires_at_ms: i64,
    /// The operator who decided (the IAM caller on AWS, the token's name locally).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at_ms: Option<i64>,
    /// The signed token of an approved side effect (see [`ApprovalKey`]); never shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// What the tool answered when it ran (or why it did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<EffectOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    /// DynamoDB TTL: the conversation's.
    pub ttl: i64,
}

impl Approval {
    /// The status as of `now_ms`: a pending approval past its expiry reads as expired.
    pub fn status_at(&self, now_ms: i64) -> ApprovalStatus {
        if self.status == ApprovalStatus::Pending && now_ms >= self.expires_at_ms {
            ApprovalStatus::Expired
        } else {
            self.status
        }
    }
}

/// The id of the approval of side effect `ordinal` of `subtask_id`: `<conversation>.<subtask>.<ordinal>`.
/// Deterministic, so recording it again after a crash finds the same approval; made of
/// characters safe in a URL path, a DynamoDB key and a header.
pub fn approval_id(conversation_id: &ConversationId, subtask_id: &SubtaskId, ordinal: u32) -> String {
    format!("{conversation_id}.{subtask_id}.{ordinal}")
}

/// Whether `id` looks like an [`approval_id`] (checked before it becomes a key).
pub fn is_approval_id(id: &str) -> bool {
    (3..=120).contains(&id.len()) && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// An operator's decision, as the approvals API records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalDecision {
    pub approve: bool,
    /// Who decided (never a credential).
    pub by: String,
    pub at_ms: i64,
    /// The signed token of an approval ([`ApprovalKey::sign`]); `None` for a rejection.
    pub token: Option<String>,
}

/// What [`crate::ports::ApprovalStore::decide_approval`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum DecideOutcome {
    /// This call recorded the decision; the approval after it.
    Decided(Approval),
    /// Already decided, executed or expired (an expired pending approval is marked so): unchanged.
    Unchanged(Approval),
    Missing,
}

/// The key that signs and verifies approval tokens (HMAC-SHA256). `Debug` prints `***`.
#[derive(Clone)]
pub struct ApprovalKey(Vec<u8>);

impl fmt::Debug for ApprovalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApprovalKey(***)")
    }
}

/// What a token binds: one approval of one exact call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenClaim<'a> {
    pub approval_id: &'a str,
    pub conversation_id: &'a str,
    pub customer_id: &'a str,
    pub tool: &'a str,
    pub order_id: &'a str,
    pub amount_cents: i64,
    /// The token is refused from this instant (Unix epoch milliseconds).
    pub expires_at_ms: i64,
}

/// The call a token arrives with, as the gateway sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallFacts<'a> {
    pub conversation_id: &'a str,
    pub customer_id: &'a str,
    pub tool: &'a str,
    pub order_id: &'a str,
    pub amount_cents: i64,
}

/// Why a token was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the approval token is malformed")]
    Malformed,
    #[error("the approval token has expired")]
    Expired,
    #[error("the approval token is not for this call (approval, conversation, customer, tool, order or amount differ)")]
    Mismatch,
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

impl ApprovalKey {
    /// A key from secret text of at least [`MIN_KEY_BYTES`] bytes.
    /// Errors: a shorter text (the message never shows it).
    pub fn new(secret: &str) -> Result<Self, String> {
        let secret = secret.trim();
        if secret.len() < MIN_KEY_BYTES {
            return Err(format!("the approval key must be at least {MIN_KEY_BYTES} bytes (use a random value)"));
        }
        Ok(Self(secret.as_bytes().to_vec()))
    }

    /// A random key (64 hex characters), for the local stack.
    pub fn generate() -> (Self, String) {
        use rand::RngCore;
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        (Self(hex.as_bytes().to_vec()), hex)
    }

    fn mac(&self, claim: &TokenClaim<'_>) -> HmacSha256 {
        // `new_from_slice` accepts any key length for HMAC.
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable_hmac());
        let amount = claim.amount_cents.to_string();
        let expires = claim.expires_at_ms.to_string();
        // Length-prefixed fields: no two claims share an encoding, whatever the ids contain.
        for field in [
            "swarm-approval-v1",
            claim.approval_id,
            claim.conversation_id,
            claim.customer_id,
            claim.tool,
            claim.order_id,
            &amount,
            &expires,
        ] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field.as_bytes());
        }
        mac
    }

    /// The token of `claim`: `<expires_at_ms>~<approval_id>~<hex HMAC>`.
    pub fn sign(&self, claim: &TokenClaim<'_>) -> String {
        let tag = self.mac(claim).finalize().into_bytes();
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        format!("{}~{}~{hex}", claim.expires_at_ms, claim.approval_id)
    }

    /// Checks `token` against the call it arrived with at `now_ms` (the approval id and the
    /// expiry are the token's); answers the approval id it names.
    /// Errors: [`TokenError`] — never which field differed (nothing to probe with).
    pub fn verify(&self, token: &str, call: &CallFacts<'_>, now_ms: i64) -> Result<String, TokenError> {
        let mut parts = token.trim().splitn(3, '~');
        let (Some(expires), Some(approval_id), Some(hex)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(TokenError::Malformed);
        };
        let expires_at_ms: i64 = expires.parse().map_err(|_| TokenError::Malformed)?;
        if !is_approval_id(approval_id) || hex.len() != 64 {
            return Err(TokenError::Malformed);
        }
        let tag: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("zz"), 16))
            .collect::<Result<_, _>>()
            .map_err(|_| TokenError::Malformed)?;
        let claim = TokenClaim {
            approval_id,
            conversation_id: call.conversation_id,
            customer_id: call.customer_id,
            tool: call.tool,
            order_id: call.order_id,
            amount_cents: call.amount_cents,
            expires_at_ms,
        };
        self.mac(&claim).verify_slice(&tag).map_err(|_| TokenError::Mismatch)?;
        if now_ms >= expires_at_ms {
            return Err(TokenError::Expired);
        }
        Ok(approval_id.to_owned())
    }
}

/// HMAC takes keys of any length, so `new_from_slice` cannot fail; a panic-free fallback for the type checker.
#[cold]
fn unreachable_hmac() -> HmacSha256 {
    <HmacSha256 as KeyInit>::new(&Default::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(expires_at_ms: i64) -> TokenClaim<'static> {
        TokenClaim {
            approval_id: "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07.w02.1",
            conversation_id: "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07",
            customer_id: "C104",
            tool: "shop__refund",
            order_id: "A1033",
            amount_cents: 187_400,
            expires_at_ms,
        }
    }

    fn key() -> ApprovalKey {
        ApprovalKey::new("0123456789abcdef0123456789abcdef-test-key").unwrap()
    }

    fn facts<'a>(c: &TokenClaim<'a>) -> CallFacts<'a> {
        CallFacts {
            conversation_id: c.conversation_id,
            customer_id: c.customer_id,
            tool: c.tool,
            order_id: c.order_id,
            amount_cents: c.amount_cents,
        }
    }

    fn verify(token: &str, c: &TokenClaim<'_>, now: i64) -> Result<String, TokenError> {
        key().verify(token, &facts(c), now)
    }

    #[test]
    fn a_token_verifies_for_exactly_its_call_until_it_expires() {
        let c = claim(1_000);
        let token = key().sign(&c);
        assert_eq!(verify(&token, &c, 999).unwrap(), c.approval_id);
        assert_eq!(verify(&token, &c, 1_000), Err(TokenError::Expired));
        for changed in [
            TokenClaim { amount_cents: 187_401, ..c.clone() },
            TokenClaim { order_id: "A1034", ..c.clone() },
            TokenClaim { customer_id: "C105", ..c.clone() },
            TokenClaim { conversation_id: "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d08", ..c.clone() },
            TokenClaim { tool: "shop__redeem_coupon", ..c.clone() },
        ] {
            assert_eq!(verify(&token, &changed, 1), Err(TokenError::Mismatch), "{changed:?}");
        }
        // A later expiry written into the token breaks the signature.
        let stretched = token.replacen("1000~", "9999~", 1);
        assert_eq!(verify(&stretched, &c, 1), Err(TokenError::Mismatch));
        let other_key = ApprovalKey::new("another-key-another-key-another-key!").unwrap();
        assert_eq!(other_key.verify(&token, &facts(&c), 1), Err(TokenError::Mismatch));
        assert_eq!(verify("garbage", &c, 1), Err(TokenError::Malformed));
        assert_eq!(verify("1~bad id~00", &c, 1), Err(TokenError::Malformed));
    }

    #[test]
    fn keys_are_long_enough_and_never_printed() {
        assert!(ApprovalKey::new("short").is_err());
        assert_eq!(format!("{:?}", key()), "ApprovalKey(***)");
        let (generated, text) = ApprovalKey::generate();
        assert_eq!(text.len(), 64);
        assert!(!format!("{generated:?}").contains(&text));
    }

    #[test]
    fn amounts_read_in_currency_units_and_reasons_are_bounded() {
        let mut a = ProposedAction { tool: "t".into(), order_id: "A1".into(), amount_cents: 187_400, reason: None };
        assert_eq!(a.amount(), "1874.00");
        a.amount_cents = 5;
        assert_eq!(a.amount(), "0.05");
        let long = "x".repeat(1_000);
        assert!(ProposedAction::clean_reason(Some(&long)).unwrap().chars().count() <= MAX_REASON_CHARS);
        assert_eq!(ProposedAction::clean_reason(Some("  \u{1b} \u{202e} ")), None);
    }

    #[test]
    fn approval_ids_are_deterministic_and_safe() {
        let id = approval_id(
            &ConversationId::from_trusted("0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07"),
            &SubtaskId::from("w02"),
            1,
        );
        assert_eq!(id, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07.w02.1");
        assert!(is_approval_id(&id));
        assert!(!is_approval_id("APPROVALS#x"));
        assert!(!is_approval_id("a/b"));
    }

    #[test]
    fn a_pending_approval_past_its_expiry_reads_as_expired() {
        let a = Approval {
            id: "x.w01.1".into(),
            conversation_id: ConversationId::from_trusted("x"),
            subtask_id: "w01".into(),
            ordinal: 1,
            customer_id: "C1".into(),
            role: "refund".into(),
            action: ProposedAction { tool: "t".into(), order_id: "A1".into(), amount_cents: 1, reason: None },
            status: ApprovalStatus::Pending,
            created_at_ms: 0,
            expires_at_ms: 10,
            decided_by: None,
            decided_at_ms: None,
            token: None,
            outcome: None,
            finished_at_ms: None,
            ttl: 0,
        };
        assert_eq!(a.status_at(9), ApprovalStatus::Pending);
        assert_eq!(a.status_at(10), ApprovalStatus::Expired);
        let done = Approval { status: ApprovalStatus::Executed, ..a };
        assert_eq!(done.status_at(99), ApprovalStatus::Executed);
    }
}
