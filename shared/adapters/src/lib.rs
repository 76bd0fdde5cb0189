//! Production adapters of lambda-swarm behind the core's ports, one feature per technology, plus the tracing set-up every binary shares.
//!
//! | feature | module | what |
//! | --- | --- | --- |
//! | `aws` | [`aws`], `config::AwsClients` | DynamoDB conversation store, SQS task queue, the AWS retry policy; the clients built from the config pieces (implies `secrets`) |
//! | `secrets` | `config::SecretsExtension::fetch` | secrets at cold start through the AWS Parameters and Secrets Lambda Extension (plain HTTP, no SDK) |
//! | `llm` | `llm` | the OpenAI-compatible chat client (`HttpChatModel`) and `LlmConfig` |
//! | `mcp` | `mcp` | the worker's MCP client of the tool gateway (`McpToolGateway`) |
//! | `signing` | `sigv4` | the one SigV4 signer (credentials from `aws-config`'s default provider chain) |
//! | `embedded` | `embedded` | in-memory store and queue with DynamoDB's and SQS's semantics (local stack, tests) |
//!
//! [`config`] (the typed configuration pieces every function composes) and [`telemetry`] are always built.

#[cfg(feature = "aws")]
pub mod aws;
pub mod config;
#[cfg(feature = "embedded")]
pub mod embedded;
#[cfg(feature = "llm")]
pub mod llm;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "signing")]
pub mod sigv4;
pub mod telemetry;
