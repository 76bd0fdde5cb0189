//! One side-effecting call as values: exactly what it would do (as the gateway validated it, for a person to approve) and what it answered — the journal's entries and the approvals both hold them.

use serde::{Deserialize, Serialize};

use crate::untrusted::clean_text;

/// Longest reason kept on an approval, characters (model text: cleaned, bounded, shown to operators only).
pub const MAX_REASON_CHARS: usize = 200;
/// Longest outcome text kept in the journal, characters (the tool's answer, cleaned).
pub const MAX_EFFECT_OUTCOME_CHARS: usize = 2_000;

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

/// What a side-effecting call answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectOutcome {
    /// The tool's answer, cleaned and cut to [`MAX_EFFECT_OUTCOME_CHARS`].
    pub text: String,
    /// The tool refused or failed (nothing was done).
    pub is_error: bool,
}

impl EffectOutcome {
    /// An outcome from a tool's answer, bounded for the journal.
    pub fn new(text: &str, is_error: bool) -> Self {
        Self { text: clean_text(text, MAX_EFFECT_OUTCOME_CHARS), is_error }
    }
}
