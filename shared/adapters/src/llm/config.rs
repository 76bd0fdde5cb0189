//! LLM settings from the environment (`LLM_BASE_URL`, `LLM_API_KEY`, `LLM_MODEL`, `LLM_SUB_MODEL`…) and the cold-start preflight.
//!
//! Variables (all optional unless said; see `docs/llm-providers.md`):
//!
//! | variable | meaning |
//! | --- | --- |
//! | `LLM_BASE_URL` | OpenAI-compatible base URL, e.g. `https://api.moonshot.cn/v1`; **required** (a Lambda refuses to start without it; only `swarm-local` and tests choose the offline model when it is unset) |
//! | `LLM_API_KEY` | bearer key; required unless the provider looks local (localhost, 127.0.0.1, ollama, vllm) |
//! | `LLM_API_KEY_REQUIRED` | `true`/`false`: override the "needs a key" guess |
//! | `LLM_AUTH` | `bearer` (default: `LLM_API_KEY` as a bearer token) or `sigv4`: sign every request with the function's AWS credentials (Amazon Bedrock's own endpoint, `https://bedrock-runtime.<region>.amazonaws.com/openai/v1`; no key, none stored); the region is the endpoint's, else `AWS_REGION` |
//! | `LLM_MODEL` | model name; required |
//! | `LLM_PRESET` | `openai`, `kimi`, `deepseek`, `vllm`, `ollama`, `bedrock`, `generic`; default guessed from the base URL ([`Preset::guess`]) |
//! | `LLM_OUTPUT_LIMIT_FIELD` | `max_tokens`, `max_completion_tokens` or `none`; default per preset |
//! | `LLM_MAX_OUTPUT_TOKENS` | `auto` (default: what the purpose needs plus the reasoning budget), `unset`, or a number of tokens |
//! | `LLM_REASONING_BUDGET` | tokens added for a thinking model's reasoning; default 16384 for thinking models, else 0 |
//! | `LLM_SEND_REASONING` | default `true`: reasoning goes back on the assistant message it came with whenever the provider returned it; `false` sends it only after a 400 that asks for it |
//! | `LLM_TOOL_HISTORY` | `tools` or `flatten`: what the forced last round sends; default per preset |
//! | `LLM_SUB_MODEL`, `LLM_SUB_BASE_URL`, `LLM_SUB_API_KEY` | the compression model; base URL defaults to the main one, the key too when the host is the same |
//! | `LLM_SUB_PRESET`, `LLM_SUB_OUTPUT_LIMIT_FIELD`, `LLM_SUB_MAX_OUTPUT_TOKENS`, `LLM_SUB_REASONING_BUDGET`, `LLM_SUB_SEND_REASONING`, `LLM_SUB_TOOL_HISTORY` | the same for the sub model; default: its own preset and model (the preset: the main one on the same host), `LLM_SUB_SEND_REASONING` defaults to `LLM_SEND_REASONING` |
//! | `LLM_TIMEOUT_SECS` | per-request timeout in seconds (decimals allowed), default 25 (the timing table's) |
//! | `LLM_MAX_IN_FLIGHT` | cap on concurrent calls per model instance, default 16 |
//! | `LLM_PRICES` | JSON price table overlaid on the defaults ([`PriceTable::from_json`]) |
//! | `LLM_API_KEY_SECRET_ARN` | on AWS, instead of `LLM_API_KEY`: the Secrets Manager secret or SSM parameter holding the key |
//!
//! On AWS the key is not put in the environment: parsing records
//! `LLM_API_KEY_SECRET_ARN`, and [`LlmConfig::models`] fetches the key at cold
//! start and checks it like a plain `LLM_API_KEY` ([`LlmConfig::with_key`]).

use std::time::Duration;

use secrecy::ExposeSecret;
pub use secrecy::SecretString;
use swarm_core::llm::pricing::PriceTable;

use super::profile::{OutputLimitField, OutputTokens, Preset, Profile, ToolHistory};

/// One OpenAI-compatible endpoint and model.
#[derive(Clone, Debug)]
pub struct LlmEndpoint {
    /// Base URL without a trailing `/` and without `/chat/completions`, e.g. `https://api.deepseek.com/v1`.
    pub base_url: String,
    pub api_key: Option<SecretString>,
    pub model: String,
    /// Output limit, reasoning and tool-history rules of this model.
    pub profile: Profile,
}

impl LlmEndpoint {
    /// An endpoint with the profile of the preset its URL points at; `base_url` is used as given.
    pub fn new(base_url: impl Into<String>, api_key: Option<SecretString>, model: impl Into<String>) -> Self {
        let (base_url, model) = (base_url.into(), model.into());
        let profile = Profile::for_model(Preset::guess(&base_url), &model);
        Self { base_url, api_key, model, profile }
    }
}

/// How requests to the LLM endpoint authenticate (`LLM_AUTH`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LlmAuth {
    /// `Authorization: Bearer <key>` when a key is configured (none for a local keyless server).
    Bearer,
    /// SigV4 with the function's credentials (signing name [`BEDROCK_SIGNING_SERVICE`]) in
    /// `region`: Amazon Bedrock's OpenAI-compatible endpoint, authorised by the role's IAM policy.
    SigV4 { region: String },
}

/// The SigV4 signing name of Amazon Bedrock's runtime endpoints.
pub const BEDROCK_SIGNING_SERVICE: &str = "bedrock";

/// Default per-request timeout (`LLM_TIMEOUT_SECS`), seconds: the timing table's `llm.request_timeout_secs`.
pub const DEFAULT_TIMEOUT_SECS: u64 = swarm_core::timings::Timings::STANDARD.llm.request_timeout.as_secs();
/// Default cap on concurrent calls per model instance (`LLM_MAX_IN_FLIGHT`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 16;

/// The LLM settings of a function, read once at start-up.
#[derive(Clone, Debug)]
pub struct LlmConfig {
    /// Planning, tool loops and the reply.
    pub main: LlmEndpoint,
    /// Compression; `None` → `main`.
    pub sub: Option<LlmEndpoint>,
    /// Per request (`LLM_TIMEOUT_SECS`, seconds), default the timing table's `llm.request_timeout_secs` (25 s).
    pub timeout: Duration,
    /// Cap on in-flight calls per model instance (`LLM_MAX_IN_FLIGHT`), default 16.
    pub max_in_flight: usize,
    /// Defaults overlaid with `LLM_PRICES`.
    pub prices: PriceTable,
    /// `LLM_API_KEY_SECRET_ARN` when `LLM_API_KEY` is unset: the main key is
    /// fetched at cold start; until [`LlmConfig::with_key`], `main.api_key` is `None`.
    pub key_secret: Option<String>,
    /// `LLM_AUTH`: a bearer key, or SigV4 (then no key is read or fetched).
    pub auth: LlmAuth,
    /// The main endpoint needs a key (a hosted provider, or `LLM_API_KEY_REQUIRED=true`).
    key_required: bool,
    /// The sub endpoint takes the main key (same host, no `LLM_SUB_API_KEY`).
    sub_shares_key: bool,
}

/// A configuration error: names the variable and what to do. Permanent — the
/// function must not start with it.
#[derive(Debug, thiserror::Error)]
pub enum LlmConfigError {
    /// A variable is missing or has a bad value.
    #[error("{var}: {message}")]
    Invalid { var: &'static str, message: String },
    /// The HTTP client could not be built (TLS set-up).
    #[error("LLM HTTP client: {0}")]
    Client(String),
}

impl LlmConfigError {
    /// Always `false`: configuration errors need a fix, not a retry.
    pub fn is_transient(&self) -> bool {
        false
    }

    pub(crate) fn invalid(var: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid { var, message: message.into() }
    }
}

impl LlmConfig {
    /// Every variable [`LlmConfig::from_lookup`] reads (with `LLM_AUTH=sigv4` also `AWS_REGION`, which
    /// every function's telemetry lists).
    pub const VARS: &'static [&'static str] = &[
        "LLM_BASE_URL",
        "LLM_API_KEY",
        "LLM_API_KEY_SECRET_ARN",
        "LLM_API_KEY_REQUIRED",
        "LLM_AUTH",
        "LLM_MODEL",
        "LLM_SEND_REASONING",
        "LLM_SUB_MODEL",
        "LLM_SUB_BASE_URL",
        "LLM_SUB_API_KEY",
        "LLM_SUB_SEND_REASONING",
        "LLM_PRESET",
        "LLM_OUTPUT_LIMIT_FIELD",
        "LLM_MAX_OUTPUT_TOKENS",
        "LLM_REASONING_BUDGET",
        "LLM_TOOL_HISTORY",
        "LLM_SUB_PRESET",
        "LLM_SUB_OUTPUT_LIMIT_FIELD",
        "LLM_SUB_MAX_OUTPUT_TOKENS",
        "LLM_SUB_REASONING_BUDGET",
        "LLM_SUB_TOOL_HISTORY",
        "LLM_TIMEOUT_SECS",
        "LLM_MAX_IN_FLIGHT",
        "LLM_PRICES",
    ];

    /// Reads the settings through `lookup` (a variable name → its value).
    ///
    /// Errors with one message naming the variable when: `LLM_BASE_URL` is
    /// unset or empty (a function needs an LLM endpoint; the local stack decides
    /// on the offline model before calling this); a base URL is not an `http(s)` URL; `LLM_API_KEY` is missing or a
    /// placeholder (`YOUR_API_KEY`, `sk-xxx`, `<...>`, `changeme`, empty…) for
    /// a provider that needs a key (anything that does not look local —
    /// localhost, 127.0.0.1, `ollama`, `vllm`; `LLM_API_KEY_REQUIRED`
    /// overrides); `LLM_MODEL` is missing; a number or price table is malformed.
    /// With `LLM_API_KEY` unset and `LLM_API_KEY_SECRET_ARN` set, the key check
    /// waits for the fetched key ([`LlmConfig::with_key`]).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<LlmConfig, LlmConfigError> {
        let get = |k: &str| lookup(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let raw_base = get("LLM_BASE_URL").ok_or_else(|| {
            LlmConfigError::invalid(
                "LLM_BASE_URL",
                "missing; set the OpenAI-compatible endpoint, e.g. LLM_BASE_URL=https://api.deepseek.com/v1 \
                 (a function run locally can use infra/mock-llm: LLM_BASE_URL=http://127.0.0.1:8089/v1)",
            )
        })?;
        let base = parse_base_url("LLM_BASE_URL", &raw_base)?;
        let auth = read_auth(&get, &base)?;
        let signed = auth != LlmAuth::Bearer;
        // A signed request carries no key: none is required, read or fetched.
        let key_required_override = if signed { Some(false) } else { parse_bool(&get, "LLM_API_KEY_REQUIRED")? };
        let key_required = key_required_override.unwrap_or_else(|| !looks_local(&base));
        let plain_key = lookup("LLM_API_KEY");
        let key_secret = get("LLM_API_KEY_SECRET_ARN")
            .filter(|_| !signed && plain_key.as_deref().is_none_or(|k| k.trim().is_empty()));
        let key = match &key_secret {
            Some(_) => None,
            None => check_key("LLM_API_KEY", plain_key, &base, key_required_override)?,
        };
        let model = get("LLM_MODEL").ok_or_else(|| {
            LlmConfigError::invalid("LLM_MODEL", "missing; set the model name, e.g. LLM_MODEL=deepseek-chat")
        })?;
        let main_preset = read_preset(&get, "LLM_PRESET", &base.url)?;
        let profile = read_profile(&get, "LLM_", main_preset, &model, None)?;
        let main = LlmEndpoint { base_url: base.url.clone(), api_key: key, model, profile };

        let no_main_key = key_secret.is_some() || signed;
        let sub = read_sub(&get, &lookup, &base, &main, main_preset, no_main_key, key_required_override)?;
        let (sub, sub_shares_key) = match sub {
            Some((endpoint, shares)) => (Some(endpoint), shares),
            None => (None, false),
        };
        let (timeout, max_in_flight) = read_limits(&get)?;
        let prices = match get("LLM_PRICES") {
            None => PriceTable::with_defaults(),
            Some(v) => PriceTable::with_defaults()
                .merged(PriceTable::from_json(&v).map_err(|e| LlmConfigError::invalid("LLM_PRICES", e.to_string()))?),
        };
        Ok(LlmConfig { main, sub, timeout, max_in_flight, prices, key_secret, auth, key_required, sub_shares_key })
    }

    /// The config with the main key fetched from `LLM_API_KEY_SECRET_ARN`,
    /// checked like a plain `LLM_API_KEY` (a placeholder is refused, naming
    /// `LLM_API_KEY_SECRET_ARN`), and shared with the sub model on the same host.
    pub fn with_key(mut self, key: SecretString) -> Result<LlmConfig, LlmConfigError> {
        let var = "LLM_API_KEY_SECRET_ARN";
        let base = parse_base_url(var, &self.main.base_url)?;
        let checked = check_key(var, Some(key.expose_secret().to_owned()), &base, Some(self.key_required))?;
        if self.sub_shares_key
            && let Some(sub) = &mut self.sub
        {
            sub.api_key = checked.clone();
        }
        self.main.api_key = checked;
        self.key_secret = None;
        Ok(self)
    }
}

/// The compression model (`LLM_SUB_*`), if one is named: its endpoint, and whether it shares the
/// main key (same host, no `LLM_SUB_API_KEY`; `no_main_key`: the main key is fetched later, or
/// requests are SigV4-signed and carry none).
fn read_sub(
    get: &impl Fn(&str) -> Option<String>,
    lookup: &impl Fn(&str) -> Option<String>,
    base: &BaseUrl,
    main: &LlmEndpoint,
    main_preset: Preset,
    no_main_key: bool,
    key_required_override: Option<bool>,
) -> Result<Option<(LlmEndpoint, bool)>, LlmConfigError> {
    Ok(match get("LLM_SUB_MODEL") {
        None => {
            if get("LLM_SUB_BASE_URL").is_some() || lookup("LLM_SUB_API_KEY").is_some() {
                return Err(LlmConfigError::invalid(
                    "LLM_SUB_MODEL",
                    "missing while LLM_SUB_BASE_URL or LLM_SUB_API_KEY is set; name the compression model or unset them",
                ));
            }
            None
        }
        Some(sub_model) => {
            let sub_base = match get("LLM_SUB_BASE_URL") {
                Some(raw) => parse_base_url("LLM_SUB_BASE_URL", &raw)?,
                None => base.clone(),
            };
            // The main key is only reused on the same host: it must never
            // be sent to another provider.
            let own_key = lookup("LLM_SUB_API_KEY");
            let shares = own_key.is_none() && sub_base.host == base.host;
            let sub_key = if shares && no_main_key {
                None
            } else {
                let raw = own_key
                    .or_else(|| shares.then(|| main.api_key.as_ref().map(|k| k.expose_secret().to_owned())).flatten());
                check_key("LLM_SUB_API_KEY", raw, &sub_base, key_required_override)?
            };
            let sub_preset = match get("LLM_SUB_PRESET") {
                Some(_) => read_preset(get, "LLM_SUB_PRESET", &sub_base.url)?,
                None if sub_base.host == base.host => main_preset,
                None => Preset::guess(&sub_base.url),
            };
            let sub_profile = read_profile(get, "LLM_SUB_", sub_preset, &sub_model, Some(&main.profile))?;
            Some((
                LlmEndpoint { base_url: sub_base.url, api_key: sub_key, model: sub_model, profile: sub_profile },
                shares,
            ))
        }
    })
}

/// `LLM_TIMEOUT_SECS` (seconds, decimals allowed) and `LLM_MAX_IN_FLIGHT`, or their defaults.
fn read_limits(get: &impl Fn(&str) -> Option<String>) -> Result<(Duration, usize), LlmConfigError> {
    let timeout = match get("LLM_TIMEOUT_SECS") {
        None => Duration::from_secs(DEFAULT_TIMEOUT_SECS),
        Some(v) => match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s <= 3600.0 => Duration::from_secs_f64(s),
            _ => {
                return Err(LlmConfigError::invalid(
                    "LLM_TIMEOUT_SECS",
                    format!("{v:?} is not a number of seconds in (0, 3600]"),
                ));
            }
        },
    };
    let max_in_flight = match get("LLM_MAX_IN_FLIGHT") {
        None => DEFAULT_MAX_IN_FLIGHT,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=10_000).contains(&n) => n,
            _ => {
                return Err(LlmConfigError::invalid(
                    "LLM_MAX_IN_FLIGHT",
                    format!("{v:?} is not a whole number in 1..=10000"),
                ));
            }
        },
    };
    Ok((timeout, max_in_flight))
}

#[derive(Clone, Debug)]
struct BaseUrl {
    /// Normalised: no trailing `/`, no `/chat/completions`.
    url: String,
    host: String,
}

/// The host of a base URL, lower case (empty when it does not parse).
pub(crate) fn host_of(url: &str) -> String {
    reqwest::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_ascii_lowercase)).unwrap_or_default()
}

/// `LLM_AUTH`: `bearer` (default) or `sigv4`. With `sigv4` the region is the one in Bedrock's
/// host (`bedrock-runtime.<region>.amazonaws.com`, `bedrock-runtime-fips.<region>…`,
/// `bedrock-mantle.<region>.api.aws`), else `AWS_REGION`; a key set beside it is refused (the
/// request would carry two credentials).
fn read_auth(get: &impl Fn(&str) -> Option<String>, base: &BaseUrl) -> Result<LlmAuth, LlmConfigError> {
    match get("LLM_AUTH").map(|v| v.to_ascii_lowercase()).as_deref() {
        None | Some("bearer") => Ok(LlmAuth::Bearer),
        Some("sigv4") => {
            for var in ["LLM_API_KEY", "LLM_API_KEY_SECRET_ARN"] {
                if get(var).is_some() {
                    return Err(LlmConfigError::invalid(
                        var,
                        "set together with LLM_AUTH=sigv4; SigV4 signs with the function's AWS credentials, unset the key",
                    ));
                }
            }
            let from_host = base
                .host
                .split('.')
                .collect::<Vec<_>>()
                .windows(2)
                .find(|w| w[0].starts_with("bedrock-runtime") || w[0] == "bedrock-mantle")
                .map(|w| w[1].to_owned());
            let region = from_host.or_else(|| get("AWS_REGION")).ok_or_else(|| {
                LlmConfigError::invalid(
                    "LLM_AUTH",
                    "sigv4 needs a region: a https://bedrock-runtime.<region>.amazonaws.com/openai/v1 base URL, or AWS_REGION",
                )
            })?;
            Ok(LlmAuth::SigV4 { region })
        }
        Some(other) => Err(LlmConfigError::invalid("LLM_AUTH", format!("{other:?} is not bearer or sigv4"))),
    }
}

fn parse_base_url(var: &'static str, raw: &str) -> Result<BaseUrl, LlmConfigError> {
    let mut s = raw.trim_end_matches('/');
    if let Some(stripped) = s.strip_suffix("/chat/completions") {
        s = stripped;
    }
    let url = reqwest::Url::parse(s).map_err(|e| {
        LlmConfigError::invalid(var, format!("{raw:?} is not a URL ({e}); expected e.g. https://api.deepseek.com/v1"))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(LlmConfigError::invalid(var, format!("{raw:?} must start with http:// or https://")));
    }
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return Err(LlmConfigError::invalid(var, format!("{raw:?} has no host")));
    };
    if url.query().is_some() || url.fragment().is_some() {
        return Err(LlmConfigError::invalid(var, format!("{raw:?} must not carry a query or fragment")));
    }
    Ok(BaseUrl { url: s.to_owned(), host: host.to_ascii_lowercase() })
}

/// Local servers (Ollama, vLLM, anything on this machine) usually take no key.
fn looks_local(base: &BaseUrl) -> bool {
    let h = base.host.as_str();
    let lower = base.url.to_ascii_lowercase();
    matches!(h, "localhost" | "127.0.0.1" | "[::1]" | "::1" | "0.0.0.0" | "host.docker.internal")
        || h.ends_with(".localhost")
        || h.ends_with(".local")
        || lower.contains("ollama")
        || lower.contains("vllm")
        || lower.contains(":11434")
}

/// Keys copied from a README instead of a real one.
pub fn is_placeholder_key(key: &str) -> bool {
    let k = key.trim().to_ascii_lowercase();
    if k.is_empty() || k.len() < 8 {
        return true;
    }
    if (k.starts_with('<') && k.ends_with('>')) || (k.starts_with("${") && k.ends_with('}')) || k.starts_with('$') {
        return true;
    }
    const EXACT: &[&str] = &[
        "changeme",
        "change-me",
        "change_me",
        "replace_me",
        "replace-me",
        "placeholder",
        "undefined",
        "api_key",
        "api-key",
        "apikey",
        "secret",
        "password",
        "sk-...",
    ];
    if EXACT.contains(&k.as_str()) {
        return true;
    }
    const CONTAINS: &[&str] = &[
        "your_api_key",
        "your-api-key",
        "yourapikey",
        "your_key",
        "your-key",
        "api_key_here",
        "insert",
        "xxxx",
        "...",
    ];
    if CONTAINS.iter().any(|p| k.contains(p)) {
        return true;
    }
    // sk-xxx, sk-****, sk-0000: one repeated filler character after the prefix.
    let body = k.strip_prefix("sk-").unwrap_or(&k);
    let mut chars = body.chars();
    matches!(chars.next(), Some(c) if matches!(c, 'x' | '*' | '0' | '.' | '-' | '_') && chars.all(|d| d == c))
}

fn check_key(
    var: &'static str,
    raw: Option<String>,
    base: &BaseUrl,
    required_override: Option<bool>,
) -> Result<Option<SecretString>, LlmConfigError> {
    let required = required_override.unwrap_or_else(|| !looks_local(base));
    let key = raw.map(|k| k.trim().to_owned());
    if !required {
        return Ok(key.filter(|k| !k.is_empty()).map(SecretString::from));
    }
    match key {
        None => Err(LlmConfigError::invalid(
            var,
            format!(
                "missing; {} needs an API key (on AWS set LLM_API_KEY_SECRET_ARN; for a keyless server set LLM_API_KEY_REQUIRED=false)",
                base.host
            ),
        )),
        Some(k) if is_placeholder_key(&k) => Err(LlmConfigError::invalid(
            var,
            format!("looks like a placeholder, not a real key for {}; paste the provider's key", base.host),
        )),
        Some(k) => Ok(Some(SecretString::from(k))),
    }
}

/// `var` (`LLM_PRESET` or `LLM_SUB_PRESET`): a preset name or `auto`; unset or `auto` → guessed from `base_url`.
fn read_preset(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    base_url: &str,
) -> Result<Preset, LlmConfigError> {
    match get(var) {
        None => Ok(Preset::guess(base_url)),
        Some(v) if v.eq_ignore_ascii_case("auto") => Ok(Preset::guess(base_url)),
        Some(v) => Preset::parse(&v).ok_or_else(|| {
            let names: Vec<&str> = Preset::ALL.iter().map(|p| p.as_str()).collect();
            LlmConfigError::invalid(var, format!("{v:?} is not a preset; use auto or one of {}", names.join(", ")))
        }),
    }
}

/// The profile of `model` under `preset`, each setting overridden by its variable
/// (`{prefix}OUTPUT_LIMIT_FIELD`, `MAX_OUTPUT_TOKENS`, `REASONING_BUDGET`, `SEND_REASONING`,
/// `TOOL_HISTORY`). `main`: for the sub model, the main profile whose `send_reasoning` it inherits.
fn read_profile(
    get: &impl Fn(&str) -> Option<String>,
    prefix: &str,
    preset: Preset,
    model: &str,
    main: Option<&Profile>,
) -> Result<Profile, LlmConfigError> {
    // Variable names are 'static in errors: one table per prefix.
    let names: [&'static str; 5] = if prefix == "LLM_SUB_" {
        [
            "LLM_SUB_OUTPUT_LIMIT_FIELD",
            "LLM_SUB_MAX_OUTPUT_TOKENS",
            "LLM_SUB_REASONING_BUDGET",
            "LLM_SUB_SEND_REASONING",
            "LLM_SUB_TOOL_HISTORY",
        ]
    } else {
        [
            "LLM_OUTPUT_LIMIT_FIELD",
            "LLM_MAX_OUTPUT_TOKENS",
            "LLM_REASONING_BUDGET",
            "LLM_SEND_REASONING",
            "LLM_TOOL_HISTORY",
        ]
    };
    let [field_var, tokens_var, budget_var, send_var, history_var] = names;
    let mut p = Profile::for_model(preset, model);
    if let Some(v) = get(field_var) {
        p.output_limit_field = OutputLimitField::parse(&v).ok_or_else(|| {
            LlmConfigError::invalid(field_var, format!("{v:?} is not max_tokens, max_completion_tokens or none"))
        })?;
    }
    if let Some(v) = get(tokens_var) {
        p.max_output_tokens = match v.to_ascii_lowercase().as_str() {
            "auto" => OutputTokens::Auto,
            "unset" => OutputTokens::Unset,
            n => match n.parse::<u32>() {
                Ok(n) if (16..=1_000_000).contains(&n) => OutputTokens::Fixed(n),
                _ => {
                    return Err(LlmConfigError::invalid(
                        tokens_var,
                        format!("{v:?} is not auto, unset or a number of tokens in 16..=1000000"),
                    ));
                }
            },
        };
    }
    if let Some(v) = get(budget_var) {
        p.reasoning_budget = match v.parse::<u32>() {
            Ok(n) if n <= 1_000_000 => n,
            _ => {
                return Err(LlmConfigError::invalid(
                    budget_var,
                    format!("{v:?} is not a number of tokens in 0..=1000000"),
                ));
            }
        };
    }
    if let Some(send) = parse_bool(get, send_var)?.or_else(|| main.map(|m| m.send_reasoning)) {
        p.send_reasoning = send;
    }
    if let Some(v) = get(history_var) {
        p.tool_history = ToolHistory::parse(&v)
            .ok_or_else(|| LlmConfigError::invalid(history_var, format!("{v:?} is not tools or flatten")))?;
    }
    Ok(p)
}

fn parse_bool(get: &impl Fn(&str) -> Option<String>, var: &'static str) -> Result<Option<bool>, LlmConfigError> {
    match get(var).map(|v| v.to_ascii_lowercase()) {
        None => Ok(None),
        Some(v) => match v.as_str() {
            "true" | "1" | "yes" | "on" => Ok(Some(true)),
            "false" | "0" | "no" | "off" => Ok(Some(false)),
            _ => Err(LlmConfigError::invalid(var, format!("{v:?} is not true or false"))),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn placeholder_keys_are_recognised() {
        for k in ["YOUR_API_KEY", "sk-xxx", "sk-xxxxxxxxxxxx", "<your key>", "changeme", "", "${LLM_API_KEY}", "sk-..."]
        {
            assert!(is_placeholder_key(k), "{k}");
        }
        for k in ["sk-proj-8f3kD0aLq1", "sk-4f1c2e9b7a6d5c3b", "ms-abcdefgh12345678"] {
            assert!(!is_placeholder_key(k), "{k}");
        }
    }
}
