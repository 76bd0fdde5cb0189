//! `swarm-local admin`: the operator's commands on a deployed (or emulated) table — map an authenticated principal to a customer, show or remove the mapping — the same item the orchestrator reads (`PRINCIPAL#<kind>:<value>` / `CUSTOMER`).

use anyhow::Context as _;
use swarm_adapters::aws::dynamo::DynamoConversationStore;
use swarm_core::access::{AccessStore, Principal, canonical_customer_id};

/// Where the table is: an emulator endpoint, or AWS itself (the default credential chain and region).
pub struct TableAt {
    pub table: String,
    pub endpoint: Option<String>,
}

impl TableAt {
    /// The access store on that table. With an endpoint, the emulator's clients (test credentials
    /// unless set); without, the AWS SDK's defaults (profile, environment, SSO…).
    pub async fn store(&self) -> DynamoConversationStore {
        let client = match &self.endpoint {
            Some(endpoint) => {
                let region = std::env::var("AWS_REGION").ok().filter(|r| !r.is_empty()).unwrap_or("us-east-1".into());
                crate::platform::emulator::emulator_clients(endpoint, &region).0
            }
            None => {
                aws_sdk_dynamodb::Client::new(&aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await)
            }
        };
        DynamoConversationStore::new(client, self.table.clone())
    }
}

/// Maps `principal` (`sub:<value>` or `iam:<value>`) to `customer`, stored canonical.
/// Returns the canonical customer id. Errors: a principal or customer id that does not parse
/// (nothing written), or the store's error.
pub async fn map_customer(store: &dyn AccessStore, principal: &str, customer: &str) -> anyhow::Result<String> {
    let principal = Principal::parse(principal).with_context(|| format!("principal {principal:?}"))?;
    let customer = canonical_customer_id(customer).with_context(|| format!("customer {customer:?}"))?;
    store.map_customer(&principal, &customer).await.context("writing the mapping")?;
    Ok(customer)
}

/// The customer `principal` is mapped to, if any.
pub async fn show_customer(store: &dyn AccessStore, principal: &str) -> anyhow::Result<Option<String>> {
    let principal = Principal::parse(principal).with_context(|| format!("principal {principal:?}"))?;
    store.customer_for(&principal).await.context("reading the mapping")
}

/// Removes `principal`'s mapping; whether there was one.
pub async fn unmap_customer(store: &dyn AccessStore, principal: &str) -> anyhow::Result<bool> {
    let principal = Principal::parse(principal).with_context(|| format!("principal {principal:?}"))?;
    store.unmap_customer(&principal).await.context("removing the mapping")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use swarm_adapters::embedded::InMemoryConversationStore;

    use super::*;

    #[tokio::test]
    async fn a_mapping_is_stored_canonical_and_bad_input_writes_nothing() {
        let store = InMemoryConversationStore::new();
        assert_eq!(map_customer(&store, "sub:abc-123", " c104 ").await.unwrap(), "C104");
        assert_eq!(show_customer(&store, "sub:abc-123").await.unwrap().as_deref(), Some("C104"));
        assert!(map_customer(&store, "jwt:abc", "C104").await.is_err());
        assert!(map_customer(&store, "sub:other", "C1#META").await.is_err());
        assert_eq!(show_customer(&store, "sub:other").await.unwrap(), None);
        assert!(unmap_customer(&store, "sub:abc-123").await.unwrap());
        assert!(!unmap_customer(&store, "sub:abc-123").await.unwrap());
    }
}
