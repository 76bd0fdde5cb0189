//! DynamoDB adapter of the conversation store: one table keyed by conversation, conditional writes, exactly-once counting, throttling retried in place.
//!
//! The table's layout (DESIGN.md "Data") is the [`codec`]'s: it alone makes and reads keys and
//! turns whole items into domain values and back. `update` builds the update expressions,
//! [`store`] is the [`DynamoConversationStore`] (its conversation, answer and accounting roles;
//! the subtask and journal roles in `subtasks`, approvals in `approvals`, a customer's pages of
//! the `customer` index in `customers`, identity mappings and rate counters in [`access`]); the
//! retry policy is [`crate::aws::retry`]. The table itself is provisioned by `template.yaml` on
//! AWS (and by the local platform in `infra/local` on an emulator).

pub mod access;
mod approvals;
pub mod codec;
mod customers;
mod events;
pub mod store;
mod subtasks;
mod told;
mod turns;
mod update;

pub use store::DynamoConversationStore;
