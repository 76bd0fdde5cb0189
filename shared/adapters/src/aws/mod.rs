//! AWS adapters (feature `aws`): the DynamoDB conversation store, the SQS task queue, and the retry policy and error classes they share.

pub mod dynamo;
pub mod retry;
pub mod sqs;
