//! Per-model token prices and cost of a call.
//!
//! Prices are USD per 1 million tokens, split into input (prompt tokens not
//! served from the provider's prefix cache), cached input and output
//! (completion) tokens. A table comes from the built-in defaults
//! ([`PriceTable::with_defaults`]) overlaid with `LLM_PRICES` (JSON, see
//! [`PriceTable::from_json`]); `PriceTable::default()` is empty.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::domain::Usage;

/// Price of one model, USD per 1M tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Prompt tokens not served from cache, USD per 1M.
    pub input: f64,
    /// Prompt tokens served from the provider's prefix cache, USD per 1M;
    /// `None` bills them at `input`.
    #[serde(default)]
    pub cached_input: Option<f64>,
    /// Completion tokens (reasoning included), USD per 1M.
    pub output: f64,
}

impl ModelPrice {
    fn is_valid(&self) -> bool {
        let ok = |p: f64| p.is_finite() && p >= 0.0;
        ok(self.input) && ok(self.output) && self.cached_input.is_none_or(ok)
    }
}

/// Error of [`PriceTable::from_json`]: the text is not a valid price table. Permanent (a configuration error).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PriceTableError(String);

/// Model name → price. Lookup is exact first, then by the longest known name
/// that the model name starts with followed by `-` (dated snapshots such as
/// `gpt-4o-mini-2024-07-18`), then the same on the part after the last `/`
/// (gateway names such as `openai/gpt-4o-mini`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriceTable {
    prices: HashMap<String, ModelPrice>,
}

/// Built-in prices (USD per 1M tokens, list prices of late 2025; providers
/// change them — override with `LLM_PRICES`): `(model, input, cached input, output)`.
const DEFAULT_PRICES: &[(&str, f64, f64, f64)] = &[
    ("gpt-4o", 2.50, 1.25, 10.00),
    ("gpt-4o-mini", 0.15, 0.075, 0.60),
    ("gpt-4.1", 2.00, 0.50, 8.00),
    ("gpt-4.1-mini", 0.40, 0.10, 1.60),
    ("gpt-4.1-nano", 0.10, 0.025, 0.40),
    ("deepseek-chat", 0.28, 0.028, 0.42),
    ("deepseek-reasoner", 0.28, 0.028, 0.42),
    ("kimi-k2-0905-preview", 0.60, 0.15, 2.50),
    ("kimi-k2-0711-preview", 0.60, 0.15, 2.50),
    ("kimi-k2-turbo-preview", 1.15, 0.15, 8.00),
    ("kimi-k2-thinking", 0.60, 0.15, 2.50),
];

impl PriceTable {
    /// The built-in prices for a few known models (see `docs/llm-providers.md`).
    pub fn with_defaults() -> Self {
        let prices = DEFAULT_PRICES
            .iter()
            .map(|&(m, input, cached, output)| (m.to_owned(), ModelPrice { input, cached_input: Some(cached), output }))
            .collect();
        Self { prices }
    }

    /// Parses `{"<model>": {"input": 0.6, "cached_input": 0.15, "output": 2.5}, ...}`
    /// (USD per 1M tokens; `cached_input` optional). Errors on malformed JSON,
    /// unknown fields, and negative or non-finite prices.
    pub fn from_json(text: &str) -> Result<Self, PriceTableError> {
        let prices: HashMap<String, ModelPrice> = serde_json::from_str(text).map_err(|e| {
            PriceTableError(format!(
                "not a price table ({e}); expected {{\"<model>\": {{\"input\": 0.6, \"cached_input\": 0.15, \"output\": 2.5}}}} in USD per 1M tokens"
            ))
        })?;
        if let Some((model, _)) = prices.iter().find(|(_, p)| !p.is_valid()) {
            return Err(PriceTableError(format!("price of {model:?} must be finite and not negative")));
        }
        Ok(Self { prices })
    }

    /// Adds or replaces one model's price.
    pub fn insert(&mut self, model: impl Into<String>, price: ModelPrice) {
        self.prices.insert(model.into(), price);
    }

    /// Entries of `other` replace those of `self`.
    pub fn merged(mut self, other: PriceTable) -> Self {
        self.prices.extend(other.prices);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// The price of `model` (lookup rules on [`PriceTable`]).
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        self.lookup(model).or_else(|| {
            let short = model.rsplit('/').next().filter(|s| s.len() < model.len())?;
            self.lookup(short)
        })
    }

    fn lookup(&self, model: &str) -> Option<&ModelPrice> {
        if let Some(p) = self.prices.get(model) {
            return Some(p);
        }
        self.prices
            .iter()
            .filter(|(k, _)| {
                model.len() > k.len() && model.starts_with(k.as_str()) && model.as_bytes()[k.len()] == b'-'
            })
            .max_by_key(|(k, _)| k.len())
            .map(|(_, p)| p)
    }

    /// Cost of one call in USD: uncached prompt tokens at `input`, cached
    /// tokens at `cached_input`, completion tokens at `output`. `None` when
    /// the model has no price or prompt or completion tokens are unknown; an
    /// unknown cached count bills the whole prompt at `input`.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        let price = self.price(model)?;
        let prompt = usage.prompt_tokens?;
        let completion = usage.completion_tokens?;
        let cached = usage.cached_tokens.unwrap_or(0).min(prompt);
        let uncached = prompt - cached;
        let usd = uncached as f64 * price.input
            + cached as f64 * price.cached_input.unwrap_or(price.input)
            + completion as f64 * price.output;
        Some(usd / 1_000_000.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    fn usage(p: Option<u64>, c: Option<u64>, cached: Option<u64>) -> Usage {
        Usage { prompt_tokens: p, completion_tokens: c, cached_tokens: cached, cost_usd: None }
    }

    #[test]
    fn cached_tokens_are_billed_at_the_cached_rate() {
        let t = PriceTable::with_defaults();
        // deepseek-chat: 44 uncached * 0.28 + 256 cached * 0.028 + 20 * 0.42, per 1M.
        let c = t.cost("deepseek-chat", &usage(Some(300), Some(20), Some(256))).unwrap();
        let want = (44.0 * 0.28 + 256.0 * 0.028 + 20.0 * 0.42) / 1e6;
        assert!((c - want).abs() < 1e-15, "{c} vs {want}");
    }

    #[test]
    fn unknown_tokens_or_model_give_no_cost() {
        let t = PriceTable::with_defaults();
        assert_eq!(t.cost("deepseek-chat", &usage(None, Some(20), None)), None);
        assert_eq!(t.cost("no-such-model", &usage(Some(1), Some(1), None)), None);
        assert_eq!(PriceTable::default().cost("gpt-4o", &usage(Some(1), Some(1), None)), None);
    }

    #[test]
    fn dated_and_gateway_model_names_find_their_base_price() {
        let t = PriceTable::with_defaults();
        assert_eq!(t.price("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(t.price("openai/gpt-4o-mini").unwrap().input, 0.15);
        assert_eq!(t.price("gpt-4o").unwrap().input, 2.50);
        assert!(t.price("gpt-4").is_none());
    }

    #[test]
    fn price_json_rejects_unknown_fields_and_negative_prices() {
        assert!(PriceTable::from_json(r#"{"m": {"input": 1, "outptu": 2}}"#).is_err());
        assert!(PriceTable::from_json(r#"{"m": {"input": -1, "output": 2}}"#).is_err());
        let t = PriceTable::from_json(r#"{"m": {"input": 1, "output": 2}}"#).unwrap();
        assert_eq!(t.cost("m", &usage(Some(1_000_000), Some(1_000_000), Some(500_000))), Some(3.0));
    }
}
