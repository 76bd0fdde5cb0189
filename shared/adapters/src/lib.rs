//! Production adapters of lambda-swarm behind the core's ports, one feature per technology, plus the tracing set-up every binary shares.
//!
//! | feature | module | what |
//! | --- | --- | --- |
//! | `aws` | [`aws`], `wiring` | DynamoDB conversation store, SQS task queue, the AWS retry policy; cold-start wiring of the Lambda binaries (implies `secrets`) |
//! | `secrets` | `secrets` | secrets at cold start through the AWS Parameters and Secrets Lambda Extension (plain HTTP, no SDK) |
//! | `llm` | `llm` | the OpenAI-compatible chat client (`HttpChatModel`) and `LlmConfig` |
//! | `mcp` | `mcp` | the worker's MCP client of the tool gateway (`McpToolGateway`, `GatewayToken`) |
//! | `embedded` | `embedded` | in-memory store and queue with DynamoDB's and SQS's semantics (local stack, tests) |
//!
//! [`telemetry`] is always built.

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "embedded")]
pub mod embedded;
#[cfg(feature = "llm")]
pub mod llm;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "secrets")]
pub mod secrets;
pub mod telemetry;
#[cfg(feature = "aws")]
pub mod wiring;
