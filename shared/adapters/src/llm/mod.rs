//! The OpenAI-compatible chat model (feature `llm`): client, wire format, lenient deserializers, in-flight limiter, provider presets and profiles, its configuration from the environment, and the models built from it.

pub mod client;
pub mod config;
mod lenient;
mod limiter;
mod models;
pub mod profile;
pub mod wire;

pub use client::HttpChatModel;
pub use config::{LlmConfig, LlmConfigError, LlmEndpoint};
pub use limiter::AIMD_GROWTH_SUCCESSES;
pub use models::build_models;
pub use profile::{OutputLimitField, OutputTokens, Preset, Profile, ReasoningField, ToolHistory};
