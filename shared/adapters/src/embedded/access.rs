//! The embedded store's `AccessStore`: identity mappings and per-customer rate counters in memory, each call one atomic step like DynamoDB's conditional write.
//!
//! These items are not on the store's change feed: the aggregator's stream filter passes only
//! conversation items, so on AWS their stream records are filtered out before any function runs.

use std::collections::HashMap;

use async_trait::async_trait;
use swarm_core::access::{AccessStore, Principal, RateWindow, SlotOutcome};
use swarm_core::ports::StoreError;

use super::InMemoryConversationStore;

/// The identity mappings and the rate counters (a principal's item and a customer's window's item).
#[derive(Default)]
pub(crate) struct AccessTables {
    /// `<kind>:<value>` → canonical customer id.
    customers: HashMap<String, String>,
    /// (customer, window start ms) → conversations counted. Expired windows are dropped as
    /// TTL would drop them (lazily, when the customer takes the next slot).
    slots: HashMap<(String, i64), u32>,
}

impl InMemoryConversationStore {
    fn access_tables(&self) -> Result<std::sync::MutexGuard<'_, AccessTables>, StoreError> {
        self.access.lock().map_err(|_| StoreError::Permanent("store lock poisoned".into()))
    }
}

#[async_trait]
impl AccessStore for InMemoryConversationStore {
    async fn customer_for(&self, principal: &Principal) -> Result<Option<String>, StoreError> {
        Ok(self.access_tables()?.customers.get(&principal.to_string()).cloned())
    }

    async fn map_customer(&self, principal: &Principal, customer_id: &str) -> Result<(), StoreError> {
        self.access_tables()?.customers.insert(principal.to_string(), customer_id.to_owned());
        Ok(())
    }

    async fn unmap_customer(&self, principal: &Principal) -> Result<bool, StoreError> {
        Ok(self.access_tables()?.customers.remove(&principal.to_string()).is_some())
    }

    async fn take_conversation_slot(
        &self,
        customer_id: &str,
        window: RateWindow,
        limit: u32,
    ) -> Result<SlotOutcome, StoreError> {
        let mut t = self.access_tables()?;
        t.slots.retain(|(customer, start), _| customer != customer_id || *start >= window.start_ms);
        let used = t.slots.entry((customer_id.to_owned(), window.start_ms)).or_insert(0);
        if *used >= limit {
            return Ok(SlotOutcome::Exhausted);
        }
        *used += 1;
        Ok(SlotOutcome::Taken { used: *used })
    }
}
