//! DynamoDB adapter of the conversation store: one table keyed by conversation, conditional writes, exactly-once counting, throttling retried in place.
//!
//! Layout (DESIGN.md "Data"):
//!
//! | PK | SK | attributes |
//! | --- | --- | --- |
//! | `CONV#<id>` | `META` | `status` S, `remaining` N, `total` N, `customer_id`, `query`, `created_at_ms`, `deadline_ms`, `finished` SS (absent while empty), `reply`, `notes` L, `error`, `idempotency_key`, `usage_prompt_tokens` / `usage_completion_tokens` / `usage_cached_tokens` / `usage_cost_usd` N (only when known), `handoff_reason` S, `handoff_at_ms` N and `conversation_id` S (with a hand-off), `ttl` |
//! | `CONV#<id>` | `TASK#<subtask id>` | `status` S, `subtask` S (JSON), `role`, `attempts` N, `result` S (JSON), `usage` S (JSON), `tools_used` L, `checkpoint` S, `started_at_ms`, `finished_at_ms`, `effects` L of S (the side-effect journal, one JSON entry per call, in call order), `lease_holder` S, `lease_until_ms` N, `ttl` |
//! | `IDEM#<customer>#<key>` | `IDEM` | `conversation_id`, `customer_id`, `ttl` |
//! | `PRINCIPAL#<kind>:<value>` | `CUSTOMER` | `customer_id`, `principal`, `updated_at_ms` (identity mapping, [`access`]) |
//! | `LIMIT#<customer>` | `WINDOW#<start ms>` | `count` N, `ttl` (conversations started in one minute, [`access`]) |
//! | `APPROVALS` | `<approval id>` | `approval` S (JSON), `status` S, `expires_at_ms` N, `conversation_id`, `ttl` (one partition: an operator's queue, a few writes per approval) |
//!
//! Indexes: `sweep` (`sweep_shard` N, `deadline_ms` N; keys only, sparse: non-terminal conversations)
//! and `customer` (`customer_id` S, `created_at_ms` N; all attributes, sparse: conversation items).
//!
//! The aggregator's stream filter matches `Keys.SK.S = META`, `NewImage.remaining.N = 0`
//! and `NewImage.status.S = RUNNING`; keep those names.
//!
//! [`codec`] turns items into domain values and back, `update` builds the
//! update expressions, [`store`] is the [`DynamoConversationStore`] (its conversation, answer
//! and accounting roles; the subtask and journal roles in `subtasks`, approvals in `approvals`); the retry
//! policy is [`crate::aws::retry`]. The table itself is provisioned by
//! `template.yaml` on AWS (and by the local platform in `infra/local` on an emulator).

pub mod access;
mod approvals;
pub mod codec;
mod customers;
pub mod store;
mod subtasks;
mod update;

pub use store::DynamoConversationStore;
