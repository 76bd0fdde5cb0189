//! The OpenAI-compatible chat model (feature `llm`): client, wire format, lenient deserializers, in-flight limiter, provider presets and profiles, and its configuration from the environment.

pub mod client;
pub mod config;
mod lenient;
mod limiter;
pub mod models;
pub mod profile;
pub mod wire;

pub use client::HttpChatModel;
pub use config::{BEDROCK_SIGNING_SERVICE, LlmAuth, LlmConfig, LlmConfigError, LlmEndpoint};
pub use limiter::AIMD_GROWTH_SUCCESSES;
pub use models::{Models, build_models};
pub use profile::{OutputLimitField, OutputTokens, Preset, Profile, ReasoningField, ToolHistory};
