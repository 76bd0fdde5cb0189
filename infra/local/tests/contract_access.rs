//! Contract tests of the `AccessStore` port (identity mappings, per-customer rate counters): each test is written once and runs against the embedded store and DynamoDB on a local emulator.
//!
//! The DynamoDB instantiations need `SWARM_AWS_ENDPOINT` (e.g. `http://127.0.0.1:5000` after
//! `infra/aws/moto.sh start`); without it they fail, unless `SWARM_SKIP_AWS=1`. Each test
//! creates its own table.

#[macro_use]
mod common;

use std::sync::Arc;

use anyhow::{Result, ensure};
use swarm_core::access::{AccessStore, Principal, RateWindow, SlotOutcome};
use swarm_core::domain::now_ms;

type Store = Arc<dyn AccessStore>;

contract_tests!(
    a_principal_maps_to_one_customer_until_unmapped,
    principals_of_different_kinds_never_share_a_mapping,
    a_window_counts_up_to_its_limit_and_then_writes_nothing,
    customers_and_windows_are_counted_apart,
    concurrent_posts_never_take_more_slots_than_the_limit,
);

fn principal(text: &str) -> Principal {
    Principal::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

async fn a_principal_maps_to_one_customer_until_unmapped(store: Store) -> Result<()> {
    let sub = principal("sub:0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
    ensure!(store.customer_for(&sub).await?.is_none(), "unmapped at first");
    store.map_customer(&sub, "C104").await?;
    ensure!(store.customer_for(&sub).await?.as_deref() == Some("C104"));
    store.map_customer(&sub, "C106").await?;
    ensure!(store.customer_for(&sub).await?.as_deref() == Some("C106"), "a new mapping replaces the old");
    ensure!(store.unmap_customer(&sub).await?, "there was a mapping");
    ensure!(!store.unmap_customer(&sub).await?, "nothing left to remove");
    ensure!(store.customer_for(&sub).await?.is_none());
    Ok(())
}

async fn principals_of_different_kinds_never_share_a_mapping(store: Store) -> Result<()> {
    store.map_customer(&principal("iam:AROAEXAMPLEROLE:alice"), "C101").await?;
    store.map_customer(&principal("iam:AROAEXAMPLEROLE"), "C102").await?;
    ensure!(store.customer_for(&principal("sub:AROAEXAMPLEROLE:alice")).await?.is_none(), "sub: is not iam:");
    ensure!(store.customer_for(&principal("iam:AROAEXAMPLEROLE:alice")).await?.as_deref() == Some("C101"));
    ensure!(store.customer_for(&principal("iam:AROAEXAMPLEROLE")).await?.as_deref() == Some("C102"));
    ensure!(store.customer_for(&principal("iam:AROAEXAMPLEROLE:bob")).await?.is_none());
    Ok(())
}

async fn a_window_counts_up_to_its_limit_and_then_writes_nothing(store: Store) -> Result<()> {
    let window = RateWindow::containing(now_ms());
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(store.take_conversation_slot("C104", window, 3).await?);
    }
    use SlotOutcome::*;
    ensure!(seen == [Taken { used: 1 }, Taken { used: 2 }, Taken { used: 3 }, Exhausted, Exhausted], "{seen:?}");
    // A raised limit continues from the stored count: the refusals wrote nothing.
    ensure!(store.take_conversation_slot("C104", window, 4).await? == Taken { used: 4 });
    Ok(())
}

async fn customers_and_windows_are_counted_apart(store: Store) -> Result<()> {
    let now = RateWindow::containing(now_ms());
    let next = RateWindow::containing(now.end_ms());
    ensure!(store.take_conversation_slot("C104", now, 1).await? == SlotOutcome::Taken { used: 1 });
    ensure!(store.take_conversation_slot("C104", now, 1).await? == SlotOutcome::Exhausted);
    ensure!(store.take_conversation_slot("C105", now, 1).await? == SlotOutcome::Taken { used: 1 }, "another customer");
    ensure!(store.take_conversation_slot("C104", next, 1).await? == SlotOutcome::Taken { used: 1 }, "the next minute");
    Ok(())
}

async fn concurrent_posts_never_take_more_slots_than_the_limit(store: Store) -> Result<()> {
    let window = RateWindow::containing(now_ms());
    let takes = (0..12).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.take_conversation_slot("C109", window, 5).await })
    });
    let mut taken = Vec::new();
    for t in futures::future::join_all(takes).await {
        if let SlotOutcome::Taken { used } = t?? {
            taken.push(used);
        }
    }
    taken.sort_unstable();
    ensure!(taken == [1, 2, 3, 4, 5], "exactly the limit, each count once: {taken:?}");
    Ok(())
}
