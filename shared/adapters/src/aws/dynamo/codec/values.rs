//! Attribute values of the table: the few the update expressions write one by one (text, numbers, usage, journal entries), a value stored as JSON text, and the size budgets of results and checkpoints.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use swarm_core::domain::{MAX_CHECKPOINT_BYTES, SubtaskResult, Usage, truncate_chars};
use swarm_core::effects::Effect;
use swarm_core::ports::StoreError;

/// One item of the table, attribute name → value.
pub type Item = HashMap<String, AttributeValue>;

/// Largest serialized result kept inline, in bytes (after [`SubtaskResult::bounded`]).
pub const MAX_RESULT_BYTES: usize = 96 * 1024;

/// A text attribute (`S`).
pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A number attribute (`N`), written as Rust prints the number.
pub(crate) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Flat usage attributes, present only for known fields (DynamoDB `N`).
pub(crate) fn usage_attributes(usage: &Usage) -> Vec<(&'static str, AttributeValue)> {
    let mut out = Vec::new();
    if let Some(v) = usage.prompt_tokens {
        out.push(("usage_prompt_tokens", n(v)));
    }
    if let Some(v) = usage.completion_tokens {
        out.push(("usage_completion_tokens", n(v)));
    }
    if let Some(v) = usage.cached_tokens {
        out.push(("usage_cached_tokens", n(v)));
    }
    // NaN and infinities have no DynamoDB number form; an unknowable cost stays unknown.
    if let Some(v) = usage.cost_usd.filter(|v| v.is_finite()) {
        out.push(("usage_cost_usd", n(v)));
    }
    out
}

/// `value` as JSON text. Errors: [`StoreError::Permanent`] when it does not serialise.
pub(crate) fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Permanent(format!("cannot serialize: {e}")))
}

/// A journal entry as stored: one JSON text per entry, in call order (entry `n - 1` is call
/// `n`), so an outcome replaces exactly its entry (`SET effects[i] = :new` on `effects[i] = :old`).
pub(crate) fn effect_value(e: &Effect) -> Result<AttributeValue, StoreError> {
    Ok(s(to_json(e)?))
}

/// A value stored as one JSON text attribute (`S`): a subtask's plan entry, result and usage,
/// a journal entry, an approval.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct JsonText<T>(pub T);

impl<T: Serialize> Serialize for JsonText<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = serde_json::to_string(&self.0).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&text)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for JsonText<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        serde_json::from_str(&text).map(JsonText).map_err(|e| D::Error::custom(format!("not valid JSON: {e}")))
    }
}

/// The result as stored: [`SubtaskResult::bounded`], then, if its JSON is still over
/// [`MAX_RESULT_BYTES`] (many tool-call records with long errors), tool-call errors
/// cut to 200 characters and the record list shortened until it fits.
pub(crate) fn fitted_result(result: &SubtaskResult) -> Result<SubtaskResult, StoreError> {
    let bounded = result.clone().bounded();
    if to_json(&bounded)?.len() <= MAX_RESULT_BYTES {
        return Ok(bounded);
    }
    let SubtaskResult::Succeeded { text, mut tool_calls } = bounded else {
        return Ok(bounded);
    };
    for call in &mut tool_calls {
        call.error = call.error.take().map(|e| truncate_chars(&e, 200));
    }
    loop {
        let candidate = SubtaskResult::Succeeded { text: text.clone(), tool_calls: tool_calls.clone() };
        let bytes = to_json(&candidate)?.len();
        if bytes <= MAX_RESULT_BYTES || tool_calls.is_empty() {
            tracing::warn!(
                bytes,
                kept_tool_calls = tool_calls.len(),
                "subtask result shrunk to fit the item size budget"
            );
            return Ok(candidate);
        }
        let keep = tool_calls.len() / 2;
        tool_calls.truncate(keep);
    }
}

/// [`fitted_result`] as the JSON text an update expression writes.
pub(crate) fn fit_result(result: &SubtaskResult) -> Result<String, StoreError> {
    to_json(&fitted_result(result)?)
}

/// The checkpoint cut to at most [`MAX_CHECKPOINT_BYTES`] at a character boundary.
/// A cut checkpoint is no longer valid JSON: the worker bounds its own checkpoint
/// and treats an unparseable one as absent.
pub(crate) fn fit_checkpoint(checkpoint: &str) -> String {
    if checkpoint.len() <= MAX_CHECKPOINT_BYTES {
        return checkpoint.to_owned();
    }
    let mut end = MAX_CHECKPOINT_BYTES;
    while !checkpoint.is_char_boundary(end) {
        end -= 1;
    }
    tracing::warn!(bytes = checkpoint.len(), kept = end, "checkpoint truncated to the item size budget");
    checkpoint[..end].to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn unknown_usage_writes_no_attribute() {
        let attrs = usage_attributes(&Usage { prompt_tokens: Some(7), cost_usd: Some(f64::NAN), ..Default::default() });
        assert_eq!(attrs.len(), 1);
        assert_eq!(attrs[0].0, "usage_prompt_tokens");
    }

    #[test]
    fn oversized_checkpoint_is_cut_on_a_character_boundary() {
        let big = "订".repeat(MAX_CHECKPOINT_BYTES);
        let cut = fit_checkpoint(&big);
        assert!(cut.len() <= MAX_CHECKPOINT_BYTES);
        assert!(cut.len() > MAX_CHECKPOINT_BYTES - 4);
    }

    #[test]
    fn result_with_thousands_of_long_tool_errors_fits_the_budget() {
        use swarm_core::domain::ToolCallRecord;
        let calls = (0..5_000).map(|i| ToolCallRecord::failed(format!("shop__t{i}"), "x".repeat(1_000))).collect();
        let r = SubtaskResult::Succeeded { text: "y".repeat(100_000), tool_calls: calls };
        let json = fit_result(&r).unwrap();
        assert!(json.len() <= MAX_RESULT_BYTES, "{} bytes", json.len());
        let back: SubtaskResult = serde_json::from_str(&json).unwrap();
        assert!(matches!(back, SubtaskResult::Succeeded { ref tool_calls, .. } if !tool_calls.is_empty()));
    }
}
