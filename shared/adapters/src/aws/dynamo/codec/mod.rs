//! The item codec of the DynamoDB store: the table's key schema, whole items <-> domain values through `serde_dynamo`, and the attribute values the update expressions write, with the size budgets of results and checkpoints.
//!
//! Layout (DESIGN.md "Data"):
//!
//! | PK | SK | attributes |
//! | --- | --- | --- |
//! | `CONV#<id>` | `META` | `status` S, `remaining` N, `total` N, `customer_id`, `query`, `created_at_ms`, `deadline_ms`, `finished` SS (absent while empty), `plan` SS (the plan's subtask ids, written with the flip to `RUNNING`; absent while empty and on items written before it was kept), `reply`, `notes` L, `error`, `idempotency_key`, `trace_parent`, `request_hash`, `turn` N, `lease_holder` S / `lease_until_ms` N / `lease_turn` N (a phase's lease), `sweep_shard` N (while not terminal), `usage_prompt_tokens` / `usage_completion_tokens` / `usage_cached_tokens` / `usage_cost_usd` N (only when known), `handoff_reason` S, `handoff_at_ms` N and `conversation_id` S (with a hand-off), `ttl` |
//! | `CONV#<id>` | `TASK#<subtask id>` | `status` S, `subtask` S (JSON), `role`, `dependents` L, `attempts` N, `result` S (JSON), `usage` S (JSON), `tools_used` L, `checkpoint` S, `started_at_ms`, `finished_at_ms`, `effects` L of S (the side-effect journal, one JSON entry per call, in call order), `lease_holder` S, `lease_until_ms` N, `ttl` |
//! | `IDEM#<customer>#<key>` | `IDEM` | `conversation_id`, `customer_id`, `request_hash`, `ttl` |
//! | `PRINCIPAL#<kind>:<value>` | `CUSTOMER` | `customer_id`, `principal`, `updated_at_ms` (identity mapping) |
//! | `LIMIT#<customer>` | `WINDOW#<start ms>` | `count` N, `ttl` (conversations started in one minute) |
//! | `APPROVALS` | `<approval id>` | `approval` S (JSON), `status` S, `expires_at_ms` N, `conversation_id`, `ttl`, `pending_pk`/`pending_sk` while pending ([`PENDING_INDEX`]) (one partition: an operator's queue, a few writes per approval) |
//!
//! Indexes: `sweep` (`sweep_shard` N, `deadline_ms` N; keys only, sparse: non-terminal conversations)
//! and `customer` (`customer_id` S, `created_at_ms` N; all attributes, sparse: conversation items).
//!
//! Keys are made and read only by [`ItemKey`] (and [`conversation_id_of_keys`] for a stream
//! record's `Keys`); whole items only by the shapes of `items`. The aggregator's stream filter
//! matches `Keys.SK.S = META`, `NewImage.remaining.N = 0` and `NewImage.status.S = RUNNING`
//! (`template.yaml`'s `FilterCriteria`); keep those names.

mod items;
mod keys;
mod values;

pub use items::{
    IdempotencyClaim, approval_from_item, approval_item, conversation_from_item, conversation_item, idempotency_claim,
    idempotency_item, notice_from_item, notice_item, principal_customer, principal_item, subtask_from_item,
    subtask_item, turn_from_item, turn_item,
};
pub(crate) use items::{remaining_of, window_count};
pub use keys::{ItemKey, conversation_id_of_keys, conversation_record_pattern, conversation_sort_key};
pub(crate) use keys::{approvals_partition, conversation_partition, customer_index_start};
pub use values::{Item, MAX_RESULT_BYTES};
pub(crate) use values::{effect_value, fit_checkpoint, fit_result, n, s, to_json, usage_attributes};

/// The sparse, sharded global secondary index the sweep queries: partition key `sweep_shard` (N),
/// sort key `deadline_ms` (N), keys only. Only non-terminal conversations carry `sweep_shard`.
pub const SWEEP_INDEX: &str = "sweep";
/// The customers' index: `customer_id` S (hash) and `created_at_ms` N (range), all attributes,
/// sparse (only conversation items carry both; an idempotency claim has no `created_at_ms`):
/// `GET /conversations`, newest first.
pub const CUSTOMER_INDEX: &str = "customer";
/// The pending approvals' index: `pending_pk` S (hash, always `APPROVALS`) and `pending_sk` S
/// (range, the approval id), all attributes, sparse: only a pending approval carries them (written
/// at creation, removed by the conditional write that decides or expires it). The operator's queue
/// (`GET /approvals?status=pending`) and the approvals-waiting gauges, however many decided
/// approvals are newer.
pub const PENDING_INDEX: &str = "pending";
