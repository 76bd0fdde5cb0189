//! LLM configuration and the cold-start preflight: placeholder and missing keys, bad URLs, sub model defaults, provider presets and profiles, secrets never printed.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use swarm_adapters::config::{ExposeSecret, SecretString};
use swarm_adapters::llm::build_models;
use swarm_adapters::llm::config::{LlmConfig, LlmConfigError};
use swarm_adapters::llm::{OutputLimitField, OutputTokens, Preset, ToolHistory};

fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    move |k| map.get(k).cloned()
}

fn load(pairs: &[(&str, &str)]) -> Result<LlmConfig, LlmConfigError> {
    LlmConfig::from_lookup(lookup(pairs))
}

fn error_of(pairs: &[(&str, &str)]) -> Result<LlmConfigError> {
    load(pairs).err().context("expected a configuration error")
}

const MOONSHOT: (&str, &str) = ("LLM_BASE_URL", "https://api.moonshot.cn/v1");
const KEY: (&str, &str) = ("LLM_API_KEY", "sk-9f8e7d6c5b4a39281706");
const MODEL: (&str, &str) = ("LLM_MODEL", "kimi-k2-0905-preview");

#[test]
fn a_placeholder_key_is_refused_with_a_message_naming_llm_api_key() -> Result<()> {
    for placeholder in ["YOUR_API_KEY", "sk-xxx", "<your-key>", "changeme", "  "] {
        let e = error_of(&[MOONSHOT, ("LLM_API_KEY", placeholder), MODEL])?;
        let msg = e.to_string();
        assert!(msg.starts_with("LLM_API_KEY: "), "{msg}");
        assert!(matches!(e, LlmConfigError::Invalid { var: "LLM_API_KEY", .. }));
        if !placeholder.trim().is_empty() {
            assert!(!msg.contains(placeholder), "the key itself is not repeated: {msg}");
        }
    }
    Ok(())
}

#[test]
fn a_hosted_provider_without_a_key_is_refused() -> Result<()> {
    let e = error_of(&[MOONSHOT, MODEL])?;
    assert_eq!(
        e.to_string(),
        "LLM_API_KEY: missing; api.moonshot.cn needs an API key (on AWS set LLM_API_KEY_SECRET_ARN; for a keyless server set LLM_API_KEY_REQUIRED=false)"
    );
    Ok(())
}

#[test]
fn local_servers_need_no_key_unless_told_otherwise() -> Result<()> {
    for base in [
        "http://localhost:11434/v1",
        "http://127.0.0.1:8000/v1",
        "http://ollama:11434/v1",
        "http://vllm.internal:8000/v1",
    ] {
        let c = load(&[("LLM_BASE_URL", base), ("LLM_MODEL", "qwen2.5:7b")])?;
        assert!(c.main.api_key.is_none(), "{base}");
    }
    let e = error_of(&[
        ("LLM_BASE_URL", "http://localhost:11434/v1"),
        ("LLM_MODEL", "m"),
        ("LLM_API_KEY_REQUIRED", "true"),
    ])?;
    assert!(e.to_string().starts_with("LLM_API_KEY: missing"));
    let c = load(&[
        ("LLM_BASE_URL", "https://gateway.example.com/v1"),
        ("LLM_MODEL", "m"),
        ("LLM_API_KEY_REQUIRED", "false"),
    ])?;
    assert!(c.main.api_key.is_none());
    Ok(())
}

#[test]
fn no_base_url_is_refused_naming_the_variable() -> Result<()> {
    // A function without an LLM endpoint must not start; only swarm-local and tests choose the offline model.
    for pairs in [&[][..], &[("LLM_BASE_URL", ""), KEY, MODEL][..]] {
        let e = error_of(pairs)?;
        assert!(matches!(e, LlmConfigError::Invalid { var: "LLM_BASE_URL", .. }), "{e:?}");
        assert!(e.to_string().starts_with("LLM_BASE_URL: missing"), "{e}");
    }
    Ok(())
}

#[test]
fn an_unparseable_base_url_is_refused_naming_the_variable() -> Result<()> {
    for bad in ["api.deepseek.com", "ftp://api.deepseek.com/v1", "https://", "not a url"] {
        let e = error_of(&[("LLM_BASE_URL", bad), KEY, MODEL])?;
        assert!(e.to_string().starts_with("LLM_BASE_URL: "), "{bad}: {e}");
    }
    Ok(())
}

#[test]
fn a_missing_model_is_refused_naming_llm_model() -> Result<()> {
    let e = error_of(&[MOONSHOT, KEY])?;
    assert!(e.to_string().starts_with("LLM_MODEL: missing"), "{e}");
    Ok(())
}

#[test]
fn defaults_and_numbers_are_read_once_with_clear_errors() -> Result<()> {
    let c = load(&[MOONSHOT, KEY, MODEL])?;
    assert_eq!(c.timeout, Duration::from_secs(25));
    assert_eq!(c.max_in_flight, 16);
    assert!(c.sub.is_none());
    assert!(c.main.profile.send_reasoning, "reasoning round-trips by default");
    assert_eq!(c.main.profile.preset, Preset::Kimi);
    assert!(c.prices.price("kimi-k2-0905-preview").is_some());

    let c = load(&[
        ("LLM_BASE_URL", "https://api.deepseek.com/v1/chat/completions/"),
        KEY,
        ("LLM_MODEL", "deepseek-chat"),
        ("LLM_TIMEOUT_SECS", "2.5"),
        ("LLM_MAX_IN_FLIGHT", "4"),
        ("LLM_SEND_REASONING", "false"),
        ("LLM_PRICES", r#"{"deepseek-chat": {"input": 1, "output": 2}}"#),
    ])?;
    assert_eq!(c.main.base_url, "https://api.deepseek.com/v1");
    assert_eq!(c.timeout, Duration::from_millis(2500));
    assert_eq!(c.max_in_flight, 4);
    assert!(!c.main.profile.send_reasoning);
    assert_eq!(c.prices.price("deepseek-chat").map(|p| p.input), Some(1.0));

    for (var, value) in [
        ("LLM_TIMEOUT_SECS", "0"),
        ("LLM_TIMEOUT_SECS", "soon"),
        ("LLM_MAX_IN_FLIGHT", "0"),
        ("LLM_SEND_REASONING", "maybe"),
        ("LLM_PRESET", "anthropic"),
        ("LLM_OUTPUT_LIMIT_FIELD", "max_output_tokens"),
        ("LLM_MAX_OUTPUT_TOKENS", "8"),
        ("LLM_MAX_OUTPUT_TOKENS", "lots"),
        ("LLM_REASONING_BUDGET", "-1"),
        ("LLM_TOOL_HISTORY", "drop"),
        ("LLM_PRICES", r#"{"m": {"input": 1}}"#),
    ] {
        let e = error_of(&[MOONSHOT, KEY, MODEL, (var, value)])?;
        assert!(e.to_string().starts_with(&format!("{var}: ")), "{var}={value}: {e}");
    }
    Ok(())
}

#[test]
fn each_preset_and_model_has_its_output_limit_reasoning_and_tool_history_rule() -> Result<()> {
    let c = load(&[MOONSHOT, KEY, ("LLM_MODEL", "kimi-k2.5")])?;
    let p = c.main.profile;
    assert_eq!((p.output_limit_field, p.max_output_tokens), (OutputLimitField::MaxTokens, OutputTokens::Auto));
    assert_eq!(p.output_limit(Some(2048)), Some(2048 + 16_384), "a thinking model's budget leaves room for the answer");
    assert!(p.send_reasoning && p.require_reasoning);
    assert_eq!(p.tool_history, ToolHistory::Tools);

    let c = load(&[("LLM_BASE_URL", "https://api.openai.com/v1"), KEY, ("LLM_MODEL", "gpt-4.1-mini")])?;
    assert_eq!(c.main.profile.output_limit_field, OutputLimitField::MaxCompletionTokens);
    assert_eq!(c.main.profile.output_limit(Some(2048)), Some(2048));

    let c = load(&[("LLM_BASE_URL", "https://bedrock-gateway.example.com/api/v1"), KEY, MODEL])?;
    assert_eq!(c.main.profile.tool_history, ToolHistory::Flatten);

    let c = load(&[
        MOONSHOT,
        KEY,
        MODEL,
        ("LLM_PRESET", "generic"),
        ("LLM_OUTPUT_LIMIT_FIELD", "none"),
        ("LLM_MAX_OUTPUT_TOKENS", "unset"),
        ("LLM_REASONING_BUDGET", "4096"),
        ("LLM_TOOL_HISTORY", "flatten"),
        ("LLM_SUB_MODEL", "moonshot-v1-8k"),
        ("LLM_SUB_MAX_OUTPUT_TOKENS", "1024"),
    ])?;
    let p = c.main.profile;
    assert_eq!(p.preset, Preset::Generic);
    assert_eq!((p.output_limit_field, p.max_output_tokens), (OutputLimitField::None, OutputTokens::Unset));
    assert_eq!((p.reasoning_budget, p.tool_history), (4096, ToolHistory::Flatten));
    let sub = c.sub.context("sub model")?.profile;
    assert_eq!(sub.preset, Preset::Generic, "the sub model on the same host takes the main preset");
    assert_eq!(sub.max_output_tokens, OutputTokens::Fixed(1024));
    assert_eq!(sub.output_limit_field, OutputLimitField::MaxTokens, "main overrides stay with the main model");
    Ok(())
}

#[test]
fn the_sub_model_shares_the_main_endpoint_and_key_on_the_same_host() -> Result<()> {
    let c = load(&[MOONSHOT, KEY, MODEL, ("LLM_SUB_MODEL", "moonshot-v1-8k")])?;
    let sub = c.sub.clone().context("sub")?;
    assert_eq!(sub.base_url, "https://api.moonshot.cn/v1");
    assert_eq!(sub.model, "moonshot-v1-8k");
    assert_eq!(sub.api_key.as_ref().map(|k| k.expose_secret()), Some(KEY.1));
    let models = build_models(&c)?;
    assert_eq!(models.main.label(), "kimi-k2-0905-preview @ api.moonshot.cn");
    assert_eq!(models.sub.label(), "moonshot-v1-8k @ api.moonshot.cn");
    Ok(())
}

#[test]
fn the_main_key_is_never_sent_to_another_host() -> Result<()> {
    let other =
        [MOONSHOT, KEY, MODEL, ("LLM_SUB_MODEL", "deepseek-chat"), ("LLM_SUB_BASE_URL", "https://api.deepseek.com/v1")];
    let e = error_of(&other)?;
    assert!(e.to_string().starts_with("LLM_SUB_API_KEY: missing; api.deepseek.com needs an API key"), "{e}");
    let mut with_key = other.to_vec();
    with_key.push(("LLM_SUB_API_KEY", "sk-deepseek-0123456789ab"));
    let c = LlmConfig::from_lookup(lookup(&with_key))?;
    assert_eq!(
        c.sub.and_then(|s| s.api_key).map(|k| k.expose_secret().to_owned()).as_deref(),
        Some("sk-deepseek-0123456789ab")
    );
    // A local sub model needs no key at all.
    let c = load(&[
        MOONSHOT,
        KEY,
        MODEL,
        ("LLM_SUB_MODEL", "qwen2.5:7b"),
        ("LLM_SUB_BASE_URL", "http://localhost:11434/v1"),
    ])?;
    assert!(c.sub.context("sub")?.api_key.is_none());
    Ok(())
}

#[test]
fn without_a_sub_model_compression_uses_the_main_instance() -> Result<()> {
    let c = load(&[MOONSHOT, KEY, MODEL])?;
    let models = build_models(&c)?;
    assert!(std::sync::Arc::ptr_eq(&models.main, &models.sub), "one client, one in-flight cap");
    assert!(!models.main.is_offline());
    Ok(())
}

#[test]
fn sub_settings_without_a_sub_model_are_refused() -> Result<()> {
    let e = error_of(&[MOONSHOT, KEY, MODEL, ("LLM_SUB_BASE_URL", "https://api.deepseek.com/v1")])?;
    assert!(e.to_string().starts_with("LLM_SUB_MODEL: missing"), "{e}");
    Ok(())
}

#[test]
fn the_token_budget_is_not_an_llm_setting() -> Result<()> {
    // LLM_TOKEN_BUDGET belongs to the worker's config (a conversation-wide stop); the LLM config ignores it.
    assert!(!LlmConfig::VARS.contains(&"LLM_TOKEN_BUDGET"));
    load(&[MOONSHOT, KEY, MODEL, ("LLM_TOKEN_BUDGET", "lots")])?;
    Ok(())
}

#[test]
fn a_key_from_its_secret_is_checked_when_fetched_and_shared_with_the_sub_model_on_the_same_host() -> Result<()> {
    let arn = ("LLM_API_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:llm");
    let c = load(&[MOONSHOT, arn, MODEL, ("LLM_SUB_MODEL", "moonshot-v1-8k")])?;
    assert_eq!(c.key_secret.as_deref(), Some(arn.1));
    assert!(c.main.api_key.is_none(), "not fetched yet");
    let e = build_models(&c).err().context("models need the fetched key")?;
    assert!(e.to_string().starts_with("LLM_API_KEY_SECRET_ARN: "), "{e}");
    let e = c.clone().with_key(SecretString::from("YOUR_API_KEY")).err().context("a placeholder secret")?;
    assert!(e.to_string().starts_with("LLM_API_KEY_SECRET_ARN: looks like a placeholder"), "{e}");
    assert!(!e.to_string().contains("YOUR_API_KEY"), "{e}");
    let c = c.with_key(SecretString::from(KEY.1))?;
    assert_eq!(c.key_secret, None);
    assert_eq!(c.main.api_key.as_ref().map(|k| k.expose_secret()), Some(KEY.1));
    assert_eq!(c.sub.context("sub")?.api_key.as_ref().map(|k| k.expose_secret()), Some(KEY.1));
    // A plain key wins over the ARN (local runs).
    let c = load(&[MOONSHOT, KEY, arn, MODEL])?;
    assert_eq!((c.key_secret, c.main.api_key.map(|k| k.expose_secret().to_owned())), (None, Some(KEY.1.to_owned())));
    Ok(())
}

#[test]
fn the_key_never_appears_in_debug_output() -> Result<()> {
    let c = load(&[MOONSHOT, KEY, MODEL, ("LLM_SUB_MODEL", "moonshot-v1-8k")])?;
    let printed = format!("{c:?} {:?}", build_models(&c)?);
    assert!(!printed.contains(KEY.1), "{printed}");
    assert!(printed.contains("[REDACTED]"), "{printed}");
    Ok(())
}
