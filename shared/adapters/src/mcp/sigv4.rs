//! SigV4 for MCP calls to an `AWS_IAM` Lambda function URL (signing service `lambda`): the swarm's one signer ([`crate::sigv4`]), so an unsigned call is refused by AWS before any code runs.

pub use crate::sigv4::{SigV4Signer, SignError};

/// The signing service of Lambda function URLs.
pub const LAMBDA_SERVICE: &str = "lambda";
