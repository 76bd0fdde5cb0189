//! Provider presets and the per-model profile: which field carries the output limit and how large it is, how reasoning goes back, and what the forced last round does with tool history.
//!
//! A preset is guessed from the base URL (`LLM_PRESET` names one instead);
//! the model name then decides whether it is a thinking model. Each setting of
//! the profile can be overridden by its own variable (see
//! [`super::config`] and `docs/llm-providers.md`, which lists every preset).

use serde::Serialize;

/// A provider family whose quirks the client knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// `api.openai.com` (and Azure OpenAI).
    OpenAi,
    /// Moonshot (`api.moonshot.ai`, `api.moonshot.cn`).
    Kimi,
    /// `api.deepseek.com`.
    DeepSeek,
    /// A vLLM server (`vllm` in the URL).
    Vllm,
    /// An Ollama server (`ollama` or `:11434` in the URL).
    Ollama,
    /// Amazon Bedrock: its own OpenAI-compatible endpoint (`bedrock-runtime.<region>.amazonaws.com/openai/v1`,
    /// open-weight models, `LLM_AUTH=sigv4` or a Bedrock API key) or a gateway in front of it: `bedrock` in the URL.
    Bedrock,
    /// Anything else speaking the OpenAI chat-completions API.
    Generic,
}

impl Preset {
    pub const ALL: [Preset; 7] =
        [Self::OpenAi, Self::Kimi, Self::DeepSeek, Self::Vllm, Self::Ollama, Self::Bedrock, Self::Generic];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Kimi => "kimi",
            Self::DeepSeek => "deepseek",
            Self::Vllm => "vllm",
            Self::Ollama => "ollama",
            Self::Bedrock => "bedrock",
            Self::Generic => "generic",
        }
    }

    /// Reads a preset name (`openai`, `kimi`, `moonshot`, `deepseek`, `vllm`, `ollama`, `bedrock`, `generic`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" | "azure" => Some(Self::OpenAi),
            "kimi" | "moonshot" => Some(Self::Kimi),
            "deepseek" => Some(Self::DeepSeek),
            "vllm" => Some(Self::Vllm),
            "ollama" => Some(Self::Ollama),
            "bedrock" => Some(Self::Bedrock),
            "generic" => Some(Self::Generic),
            _ => None,
        }
    }

    /// The preset a base URL points at; [`Preset::Generic`] when none matches.
    pub fn guess(base_url: &str) -> Self {
        let u = base_url.to_ascii_lowercase();
        if u.contains("api.openai.com") || u.contains(".openai.azure.com") {
            Self::OpenAi
        } else if u.contains("moonshot") {
            Self::Kimi
        } else if u.contains("deepseek") {
            Self::DeepSeek
        } else if u.contains("bedrock") {
            Self::Bedrock
        } else if u.contains("ollama") || u.contains(":11434") {
            Self::Ollama
        } else if u.contains("vllm") {
            Self::Vllm
        } else {
            Self::Generic
        }
    }
}

/// The request field that carries the output limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputLimitField {
    MaxTokens,
    /// OpenAI's newer field; its reasoning models refuse `max_tokens`.
    MaxCompletionTokens,
    /// No limit field is ever sent (the provider's own limit applies).
    None,
}

impl OutputLimitField {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
            Self::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "max_tokens" => Some(Self::MaxTokens),
            "max_completion_tokens" => Some(Self::MaxCompletionTokens),
            "none" => Some(Self::None),
            _ => None,
        }
    }

    /// The other limit field, for a provider that refused this one.
    pub fn other(self) -> Self {
        match self {
            Self::MaxTokens => Self::MaxCompletionTokens,
            Self::MaxCompletionTokens => Self::MaxTokens,
            Self::None => Self::None,
        }
    }
}

/// How large the output limit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputTokens {
    /// What the request's purpose needs (`ChatRequest::max_tokens`) plus the reasoning budget.
    Auto,
    /// No limit on the first attempt (the provider's default); a retry after `length` sets one.
    Unset,
    /// This many tokens on every request, whatever the purpose.
    Fixed(u32),
}

/// What the forced last round of a tool loop (`tool_choice: "none"`) sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolHistory {
    /// The tool definitions with `tool_choice: "none"`, the history as tool calls and results.
    Tools,
    /// No tool definitions, the history flattened to text: for providers that cannot take
    /// `tool_choice: "none"` (Bedrock has no such choice; Ollama ignores it).
    Flatten,
}

impl ToolHistory {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Flatten => "flatten",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tools" => Some(Self::Tools),
            "flatten" => Some(Self::Flatten),
            _ => None,
        }
    }
}

/// The response field a provider puts reasoning in, and the one it is sent back in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningField {
    /// DeepSeek, Kimi, vLLM (older parsers).
    ReasoningContent,
    /// OpenRouter, Ollama, newer vLLM.
    Reasoning,
}

impl ReasoningField {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReasoningContent => "reasoning_content",
            Self::Reasoning => "reasoning",
        }
    }
}

/// Tokens a thinking model gets for its reasoning on top of the answer's budget: Moonshot and
/// DeepSeek advise at least 16k for their thinking models, so the answer is not starved.
pub const THINKING_REASONING_BUDGET: u32 = 16_384;
/// The limit of the one retry after `length` when the first attempt sent none.
pub const LENGTH_RETRY_TOKENS_WHEN_UNSET: u32 = 32_768;
/// Largest limit a retry after `length` asks for.
pub const MAX_LENGTH_RETRY_TOKENS: u32 = 131_072;

/// How the client talks to one model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Profile {
    pub preset: Preset,
    pub output_limit_field: OutputLimitField,
    pub max_output_tokens: OutputTokens,
    /// Tokens added to the answer's budget for reasoning ([`OutputTokens::Auto`]); 0 for a model that does not think.
    pub reasoning_budget: u32,
    /// Send reasoning back on the assistant message it came with, whenever the provider returned it.
    pub send_reasoning: bool,
    /// Send the reasoning field on every assistant tool-call message, empty when none was kept
    /// (Kimi's thinking models refuse a tool-call message without it).
    pub require_reasoning: bool,
    /// The reasoning field sent back until the provider shows which one it uses.
    pub reasoning_field: ReasoningField,
    pub tool_history: ToolHistory,
}

/// Whether `model` thinks before it answers (its output limit then covers reasoning too).
pub fn is_thinking_model(preset: Preset, model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    let named = ["thinking", "reasoner", "reasoning", "-r1", "qwq"].iter().any(|k| m.contains(k));
    let name = m.rsplit('/').next().unwrap_or(&m);
    let openai_reasoning = ["o1", "o3", "o4", "gpt-5"].iter().any(|p| name.starts_with(p));
    // Kimi K2.5 thinks by default.
    let kimi_thinking = preset == Preset::Kimi && (m.contains("k2.5") || m.contains("k2-5"));
    named || kimi_thinking || (matches!(preset, Preset::OpenAi | Preset::Generic) && openai_reasoning)
}

impl Profile {
    /// The preset's settings for `model`.
    pub fn for_model(preset: Preset, model: &str) -> Self {
        let thinking = is_thinking_model(preset, model);
        Self {
            preset,
            output_limit_field: match preset {
                Preset::OpenAi => OutputLimitField::MaxCompletionTokens,
                _ => OutputLimitField::MaxTokens,
            },
            max_output_tokens: OutputTokens::Auto,
            reasoning_budget: if thinking { THINKING_REASONING_BUDGET } else { 0 },
            send_reasoning: true,
            require_reasoning: preset == Preset::Kimi && thinking,
            reasoning_field: match preset {
                Preset::Ollama => ReasoningField::Reasoning,
                _ => ReasoningField::ReasoningContent,
            },
            tool_history: match preset {
                Preset::Bedrock | Preset::Ollama => ToolHistory::Flatten,
                _ => ToolHistory::Tools,
            },
        }
    }

    /// The output limit of a request whose purpose needs `answer_tokens` (`None` → no limit
    /// sent unless the profile fixes one); `None` when no limit is sent.
    pub fn output_limit(&self, answer_tokens: Option<u32>) -> Option<u32> {
        if self.output_limit_field == OutputLimitField::None {
            return None;
        }
        match self.max_output_tokens {
            OutputTokens::Fixed(n) => Some(n),
            OutputTokens::Unset => None,
            OutputTokens::Auto => answer_tokens.map(|a| a.saturating_add(self.reasoning_budget)),
        }
    }

    /// The limit of the one retry after `length`: twice what was sent, or
    /// [`LENGTH_RETRY_TOKENS_WHEN_UNSET`]; `None` when the provider takes no limit field.
    pub fn length_retry_limit(&self, sent: Option<u32>) -> Option<u32> {
        if self.output_limit_field == OutputLimitField::None {
            return None;
        }
        Some(match sent {
            Some(n) => n.saturating_mul(2).clamp(n.saturating_add(1), MAX_LENGTH_RETRY_TOKENS.max(n.saturating_add(1))),
            None => LENGTH_RETRY_TOKENS_WHEN_UNSET,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_guessed_from_the_base_url() {
        for (url, preset) in [
            ("https://api.openai.com/v1", Preset::OpenAi),
            ("https://api.moonshot.cn/v1", Preset::Kimi),
            ("https://api.deepseek.com", Preset::DeepSeek),
            ("http://localhost:11434/v1", Preset::Ollama),
            ("http://vllm.internal:8000/v1", Preset::Vllm),
            ("https://bedrock-gw.example.com/api/v1", Preset::Bedrock),
            ("http://127.0.0.1:8089/v1", Preset::Generic),
        ] {
            assert_eq!(Preset::guess(url), preset, "{url}");
        }
    }

    #[test]
    fn thinking_models_get_room_for_their_answer() {
        let k = Profile::for_model(Preset::Kimi, "kimi-k2.5");
        assert_eq!(k.output_limit(Some(2048)), Some(2048 + THINKING_REASONING_BUDGET));
        assert!(k.require_reasoning && k.send_reasoning);
        let k = Profile::for_model(Preset::Kimi, "kimi-k2-0905-preview");
        assert_eq!(k.output_limit(Some(2048)), Some(2048));
        assert!(!k.require_reasoning);
        let o = Profile::for_model(Preset::OpenAi, "gpt-5-mini");
        assert_eq!(o.output_limit_field, OutputLimitField::MaxCompletionTokens);
        assert_eq!(o.output_limit(Some(2048)), Some(2048 + THINKING_REASONING_BUDGET));
        assert_eq!(Profile::for_model(Preset::OpenAi, "gpt-4.1-mini").output_limit(Some(2048)), Some(2048));
        assert!(is_thinking_model(Preset::DeepSeek, "deepseek-reasoner"));
        assert!(!is_thinking_model(Preset::DeepSeek, "deepseek-chat"));
        assert!(is_thinking_model(Preset::Ollama, "qwq:32b"));
    }

    #[test]
    fn unset_and_none_send_no_limit_and_only_unset_can_be_raised() {
        let mut p = Profile::for_model(Preset::Generic, "m");
        p.max_output_tokens = OutputTokens::Unset;
        assert_eq!(p.output_limit(Some(2048)), None);
        assert_eq!(p.length_retry_limit(None), Some(LENGTH_RETRY_TOKENS_WHEN_UNSET));
        assert_eq!(p.length_retry_limit(Some(2048)), Some(4096));
        p.output_limit_field = OutputLimitField::None;
        p.max_output_tokens = OutputTokens::Fixed(100);
        assert_eq!(p.output_limit(Some(2048)), None);
        assert_eq!(p.length_retry_limit(None), None);
        assert_eq!(Profile::for_model(Preset::Bedrock, "claude").tool_history, ToolHistory::Flatten);
        assert_eq!(Profile::for_model(Preset::Vllm, "qwen").tool_history, ToolHistory::Tools);
    }
}
