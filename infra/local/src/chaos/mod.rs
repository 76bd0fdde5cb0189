//! `swarm-chaos`'s parts that are not the platform's: the scripted conversations and their customers, the audit of the table's stream, the operator deciding approvals, the stack restarted mid-run, and the verdict.
//!
//! The faults themselves are injected by the platform ([`crate::platform::chaos`]: crashes,
//! deliveries, stream records, the client's re-posts; [`crate::platform::tool_faults`]: the tool
//! server) and by the mock LLM (429s, 5xx, hangs, malformed and truncated answers).

pub mod audit;
pub mod client;
pub mod customer_turn;
pub mod operator;
pub mod report;
pub mod restart;
pub mod scenario;
