//! Contract tests of ownership in the `ConversationStore` port: leases (planning, aggregation, a subtask's attempt) taken once and over only after they expire, and each conditional write whose answer was lost recognised as its own when retried; on the embedded store and DynamoDB on a local emulator.
//!
//! The DynamoDB instantiations need `SWARM_AWS_ENDPOINT` (e.g. `http://127.0.0.1:5000` after
//! `infra/aws/moto.sh start`); without it they fail, unless `SWARM_SKIP_AWS=1`. Each test creates its
//! own table. The rest of the store's contract is in `contract_store.rs`.

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use swarm_core::domain::{
    ConversationId, ConversationStatus, FailureKind, Lease, SubtaskId, SubtaskResult, SubtaskStatus, Usage, now_ms,
    request_hash,
};
use swarm_core::effects::{AttemptLease, Effect};
use swarm_core::ports::{
    AttemptStart, ConversationStore, CountOutcome, CreateOutcome, IntentOutcome, LeaseOutcome, LeasePhase,
    RecordOutcome, StoreError, StoreOp,
};

type Store = Arc<dyn ConversationStore>;

use common::lossy::{answer_lost, losing};
use common::store_fixtures::{conversation, record, recorded, running, succeeded};

contract_tests!(
    an_aggregation_lease_is_taken_once_and_taken_over_only_after_it_expires,
    an_aggregation_lease_needs_nothing_remaining_and_its_turn,
    a_planning_lease_is_taken_over_only_after_it_expires,
    a_lease_holder_takes_its_own_live_lease_again_and_can_end_it,
    start_run_flips_only_for_the_planning_lease_holder_and_finds_its_own_flip_made,
    a_conditional_write_applied_whose_answer_was_lost_is_recognised_as_its_own_when_retried,
    a_count_whose_answer_was_lost_is_retried_as_already_counted_and_counts_once,
    an_attempt_begun_whose_answer_was_lost_is_retried_as_the_same_attempt_counted_once,
    an_attempt_lease_is_renewed_only_by_its_holder_and_a_renewal_whose_answer_was_lost_is_its_own,
    a_result_recorded_whose_answer_was_lost_is_retried_as_the_record_written,
    an_intent_recorded_whose_answer_was_lost_is_retried_as_the_entry_recorded_once,
);

async fn an_aggregation_lease_is_taken_once_and_taken_over_only_after_it_expires(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?;
    let agg = LeasePhase::Aggregating { turn: 0 };
    let t0 = 1_000_000;
    // Two triggers at once: exactly one takes the lease (RUNNING → AGGREGATING).
    let (a, b) = tokio::join!(
        store.acquire_lease(&conv.id, agg, "aggregator:a", t0, t0 + 90_000),
        store.acquire_lease(&conv.id, agg, "aggregator:b", t0, t0 + 90_000),
    );
    let outcomes = [a?, b?];
    let won: Vec<_> = outcomes.iter().filter(|o| matches!(o, LeaseOutcome::Acquired { taken_over: None })).collect();
    assert_eq!(won.len(), 1, "{outcomes:?}");
    let winner = if outcomes[0] == *won[0] { "aggregator:a" } else { "aggregator:b" };
    let live = Lease { holder: winner.to_owned(), until_ms: t0 + 90_000, turn: 0 };
    assert!(outcomes.contains(&LeaseOutcome::Held(live.clone())), "{outcomes:?}");
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.status, after.lease.clone()), (ConversationStatus::Aggregating, Some(live.clone())));

    // While it is live (even at its last millisecond) nobody takes over.
    assert_eq!(
        store.acquire_lease(&conv.id, agg, "deadline:x", t0 + 90_000, t0 + 180_000).await?,
        LeaseOutcome::Held(live.clone())
    );
    // Once expired, one later trigger takes over, and says whose lease it replaced.
    assert_eq!(
        store.acquire_lease(&conv.id, agg, "deadline:x", t0 + 90_001, t0 + 180_001).await?,
        LeaseOutcome::Acquired { taken_over: Some(live) }
    );
    let taken = Lease { holder: "deadline:x".into(), until_ms: t0 + 180_001, turn: 0 };
    assert_eq!(store.get_conversation(&conv.id).await?.and_then(|c| c.lease), Some(taken.clone()));
    assert_eq!(
        store.acquire_lease(&conv.id, agg, "sweep:y", t0 + 100_000, t0 + 190_000).await?,
        LeaseOutcome::Held(taken)
    );
    // One reply: the first finisher flips AGGREGATING → DONE, the other finds it over.
    assert!(store.finish_conversation(&conv.id, 0, "the reply", &Usage::default()).await?);
    assert!(!store.finish_conversation(&conv.id, 0, "a second reply", &Usage::default()).await?);
    assert!(matches!(
        store.acquire_lease(&conv.id, agg, "late", t0 + 900_000, t0 + 990_000).await?,
        LeaseOutcome::NotInPhase { status: ConversationStatus::Done, .. }
    ));
    assert_eq!(store.acquire_lease(&ConversationId::new(), agg, "x", t0, t0 + 1).await?, LeaseOutcome::Missing);
    Ok(())
}

async fn an_aggregation_lease_needs_nothing_remaining_and_its_turn(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01", "w02"]).await?;
    store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?;
    let now = now_ms();
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Aggregating { turn: 0 }, "a", now, now + 1_000).await?,
        LeaseOutcome::NotInPhase { status: ConversationStatus::Running, remaining: 1 }
    );
    store.count_finished(&conv.id, &"w02".into(), &Usage::default()).await?;
    assert!(
        matches!(
            store.acquire_lease(&conv.id, LeasePhase::Aggregating { turn: 1 }, "a", now, now + 1_000).await?,
            LeaseOutcome::NotInPhase { .. }
        ),
        "a lease for another turn is not this turn's"
    );
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Aggregating { turn: 0 }, "a", now, now + 1_000).await?,
        LeaseOutcome::Acquired { taken_over: None }
    );
    assert_eq!(store.get_conversation(&conv.id).await?.map(|c| c.status), Some(ConversationStatus::Aggregating));
    Ok(())
}

async fn a_planning_lease_is_taken_over_only_after_it_expires(store: Store) -> Result<()> {
    let mut conv = conversation("C104");
    let creator = Lease { holder: "orchestrator:creator".into(), until_ms: 5_000, turn: 0 };
    conv.lease = Some(creator.clone());
    store.create_conversation(&conv).await?;
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Planning, "orchestrator:retry", 4_999, 40_000).await?,
        LeaseOutcome::Held(creator.clone())
    );
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Planning, "orchestrator:retry", 5_001, 40_000).await?,
        LeaseOutcome::Acquired { taken_over: Some(creator) }
    );
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(after.status, ConversationStatus::Planning, "a planning lease changes no status");
    assert_eq!(after.lease, Some(Lease { holder: "orchestrator:retry".into(), until_ms: 40_000, turn: 0 }));
    store.start_run(&conv.id, None, &[record(&conv, "w01", &[])], &[], &Usage::default()).await?;
    assert!(matches!(
        store.acquire_lease(&conv.id, LeasePhase::Planning, "late", 90_000, 99_000).await?,
        LeaseOutcome::NotInPhase { status: ConversationStatus::Running, .. }
    ));
    Ok(())
}

async fn a_lease_holder_takes_its_own_live_lease_again_and_can_end_it(store: Store) -> Result<()> {
    let mut conv = conversation("C104");
    let creator = Lease { holder: "orchestrator:creator".into(), until_ms: 5_000, turn: 0 };
    conv.lease = Some(creator.clone());
    store.create_conversation(&conv).await?;
    // Its holder ends the live planning lease (an instant already past): the next asker takes over at once.
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Planning, "orchestrator:creator", 1_000, 999).await?,
        LeaseOutcome::Acquired { taken_over: None }
    );
    let ended = Lease { until_ms: 999, ..creator };
    assert_eq!(store.get_conversation(&conv.id).await?.and_then(|c| c.lease), Some(ended.clone()));
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Planning, "orchestrator:retry", 1_000, 40_000).await?,
        LeaseOutcome::Acquired { taken_over: Some(ended) }
    );

    // The aggregation flip asked again by its own holder (its answer lost): acquired, nothing taken over.
    let (conv, _) = running(&store, &["w01"]).await?;
    store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?;
    let agg = LeasePhase::Aggregating { turn: 0 };
    for _ in 0..2 {
        assert_eq!(
            store.acquire_lease(&conv.id, agg, "aggregator:a", 10_000, 100_000).await?,
            LeaseOutcome::Acquired { taken_over: None }
        );
    }
    let live = Lease { holder: "aggregator:a".into(), until_ms: 100_000, turn: 0 };
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.status, after.lease.clone()), (ConversationStatus::Aggregating, Some(live.clone())));
    assert_eq!(store.acquire_lease(&conv.id, agg, "aggregator:b", 10_001, 100_001).await?, LeaseOutcome::Held(live));
    Ok(())
}

async fn start_run_flips_only_for_the_planning_lease_holder_and_finds_its_own_flip_made(store: Store) -> Result<()> {
    let mut conv = conversation("C104");
    conv.lease = Some(Lease { holder: "orchestrator:first".into(), until_ms: 5_000, turn: 0 });
    store.create_conversation(&conv).await?;
    let taken = store.acquire_lease(&conv.id, LeasePhase::Planning, "orchestrator:retry", 5_001, 40_000).await?;
    assert!(matches!(taken, LeaseOutcome::Acquired { taken_over: Some(_) }), "{taken:?}");
    // The planner taken over finishes its plan late: refused, nothing of it is the conversation's.
    let late = [record(&conv, "w01", &[]), record(&conv, "w02", &[])];
    assert!(!store.start_run(&conv.id, Some("orchestrator:first"), &late, &[], &Usage::default()).await?);
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.status, after.total), (ConversationStatus::Planning, 0));
    assert!(store.list_subtasks(&conv.id).await?.is_empty());
    // The holder's flip; asked again (its answer lost), it is found made, and nothing changes.
    let plan = [record(&conv, "w01", &[])];
    for _ in 0..2 {
        assert!(store.start_run(&conv.id, Some("orchestrator:retry"), &plan, &[], &Usage::default()).await?);
    }
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.status, after.total, after.remaining), (ConversationStatus::Running, 1, 1));
    assert_eq!(after.plan, BTreeSet::from(["w01".to_owned()]));
    assert!(!store.start_run(&conv.id, Some("orchestrator:first"), &late, &[], &Usage::default()).await?);
    let ids: Vec<SubtaskId> = store.list_subtasks(&conv.id).await?.into_iter().map(|r| r.subtask.id).collect();
    assert_eq!(ids, [SubtaskId::from("w01")]);
    assert_eq!(store.count_finished(&conv.id, &"w02".into(), &Usage::default()).await?, CountOutcome::AlreadyCounted);
    assert_eq!(
        store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?,
        CountOutcome::Counted { remaining: 0 }
    );
    Ok(())
}

/// Each conditional write the guarantees rely on, applied and its answer lost, then retried by its caller
/// with the same arguments: the retry recognises its own write and answers as the first call would have.
async fn a_conditional_write_applied_whose_answer_was_lost_is_recognised_as_its_own_when_retried(
    store: Store,
) -> Result<()> {
    let (decorator, lossy) = losing(&store);
    let lose = |op: StoreOp| -> Result<()> { Ok(decorator.lose(op)?) };
    let lost = |r: std::result::Result<(), StoreError>| -> Result<()> {
        ensure!(matches!(r, Err(e) if e.is_transient()), "answer not lost");
        Ok(())
    };

    // create_conversation, with an Idempotency-Key (a transaction with its claim) and without (one put).
    for key in [Some("first-and-only"), None] {
        let mut conv = conversation("C104");
        conv.idempotency_key = key.map(str::to_owned);
        conv.request_hash = Some(request_hash("C104", &conv.query));
        conv.lease = Some(Lease { holder: "orchestrator:first".into(), until_ms: now_ms() + 35_000, turn: 0 });
        lose(StoreOp::CreateConversation)?;
        lost(lossy.create_conversation(&conv).await.map(|_| ()))?;
        assert_eq!(lossy.create_conversation(&conv).await?, CreateOutcome::Created, "key {key:?}");
        assert_eq!(store.get_conversation(&conv.id).await?, Some(conv.clone()));

        // The planner's flip PLANNING → RUNNING.
        let plan = [record(&conv, "w01", &[])];
        lose(StoreOp::StartRun)?;
        lost(lossy.start_run(&conv.id, Some("orchestrator:first"), &plan, &[], &Usage::default()).await.map(|_| ()))?;
        assert!(lossy.start_run(&conv.id, Some("orchestrator:first"), &plan, &[], &Usage::default()).await?);
        let after = store.get_conversation(&conv.id).await?.context("item missing")?;
        assert_eq!((after.status, after.total, after.remaining), (ConversationStatus::Running, 1, 1));

        // The aggregation flip RUNNING → AGGREGATING.
        store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?;
        let agg = LeasePhase::Aggregating { turn: 0 };
        let now = now_ms();
        lose(StoreOp::AcquireLease)?;
        lost(lossy.acquire_lease(&conv.id, agg, "aggregator:a", now, now + 90_000).await.map(|_| ()))?;
        assert_eq!(
            lossy.acquire_lease(&conv.id, agg, "aggregator:a", now, now + 90_000).await?,
            LeaseOutcome::Acquired { taken_over: None }
        );
    }
    // A second request with the same key is still told it is not the first.
    let mut again = conversation("C104");
    again.idempotency_key = Some("first-and-only".into());
    again.request_hash = Some(request_hash("C104", &again.query));
    assert!(matches!(store.create_conversation(&again).await?, CreateOutcome::Existing(_)));
    Ok(())
}

/// `count_finished` applied, its answer lost, retried: the retry answers `AlreadyCounted` (no holder tells
/// the retry from a duplicate delivery, and the worker does the same after either: it releases the
/// dependents; the aggregator is started by the item's stream when `remaining` reaches 0, not by the
/// answer), and the subtask is counted once with its usage added once.
async fn a_count_whose_answer_was_lost_is_retried_as_already_counted_and_counts_once(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01", "w02"]).await?;
    let (decorator, lossy) = losing(&store);
    let usage = Usage { prompt_tokens: Some(12), ..Default::default() };
    for sid in ["w01", "w02"] {
        decorator.lose(StoreOp::CountFinished)?;
        answer_lost(lossy.count_finished(&conv.id, &sid.into(), &usage).await)?;
        assert_eq!(lossy.count_finished(&conv.id, &sid.into(), &usage).await?, CountOutcome::AlreadyCounted);
    }
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(after.remaining, 0, "each subtask counted once, the last one to 0");
    assert_eq!(after.finished, BTreeSet::from(["w01".to_owned(), "w02".to_owned()]));
    assert_eq!(after.usage.prompt_tokens, Some(24), "usage added once per subtask");
    Ok(())
}

/// `begin_attempt` applied, its answer lost, retried by the same attempt: it is started (its own live
/// lease, never another holder's), counted once, and a second attempt still waits for that lease.
async fn an_attempt_begun_whose_answer_was_lost_is_retried_as_the_same_attempt_counted_once(
    store: Store,
) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    let (decorator, lossy) = losing(&store);
    let lease = AttemptLease::new(60_000);
    decorator.lose(StoreOp::BeginAttempt)?;
    answer_lost(lossy.begin_attempt(&conv.id, &"w01".into(), &lease, 1_000).await)?;
    let AttemptStart::Started(rec) = lossy.begin_attempt(&conv.id, &"w01".into(), &lease, 1_000).await? else {
        anyhow::bail!("the attempt whose answer was lost did not start on its retry");
    };
    assert_eq!((rec.status, rec.attempts, rec.started_at_ms), (SubtaskStatus::Running, 1, Some(1_000)));
    assert_eq!(rec.lease, Some(lease.clone()));
    assert_eq!(store.get_subtask(&conv.id, &"w01".into()).await?, Some(rec), "the record answered is the one stored");
    let other = AttemptLease::new(70_000);
    assert!(matches!(
        store.begin_attempt(&conv.id, &"w01".into(), &other, 2_000).await?,
        AttemptStart::Leased(r) if r.lease == Some(lease.clone()) && r.attempts == 1
    ));
    // The lease expired: the next attempt is the second.
    let AttemptStart::Started(next) = store.begin_attempt(&conv.id, &"w01".into(), &other, 60_000).await? else {
        anyhow::bail!("the next attempt did not start after the lease expired");
    };
    assert_eq!((next.attempts, next.lease), (2, Some(other)));
    Ok(())
}

/// `renew_attempt` (the live attempt's heartbeat): the holder extends its lease, so a second
/// attempt waits past the first expiry; a renewal applied whose answer was lost is recognised as its
/// own on the retry; once the lease expired and another attempt took it, the old holder's renewal is
/// refused and changes nothing; a terminal subtask's lease is not renewed, nor an unknown subtask's.
async fn an_attempt_lease_is_renewed_only_by_its_holder_and_a_renewal_whose_answer_was_lost_is_its_own(
    store: Store,
) -> Result<()> {
    let (conv, _) = running(&store, &["w01", "w02"]).await?;
    let w01: SubtaskId = "w01".into();
    let mut lease = AttemptLease::new(31_000);
    ensure!(matches!(store.begin_attempt(&conv.id, &w01, &lease, 1_000).await?, AttemptStart::Started(_)));
    lease.until_ms = 41_000;
    assert!(store.renew_attempt(&conv.id, &w01, &lease).await?, "the holder renews its live lease");
    let other = AttemptLease::new(70_000);
    assert!(
        matches!(store.begin_attempt(&conv.id, &w01, &other, 35_000).await?, AttemptStart::Leased(r) if r.lease == Some(lease.clone())),
        "past the first expiry, the renewed lease still holds"
    );
    let (decorator, lossy) = losing(&store);
    lease.until_ms = 51_000;
    decorator.lose(StoreOp::RenewAttempt)?;
    answer_lost(lossy.renew_attempt(&conv.id, &w01, &lease).await)?;
    assert!(lossy.renew_attempt(&conv.id, &w01, &lease).await?, "the retry meets its own renewal");
    let stored = store.get_subtask(&conv.id, &w01).await?.context("w01 missing")?;
    assert_eq!((stored.lease, stored.attempts), (Some(lease.clone()), 1), "renewed, never counted as an attempt");
    // Expired and taken over: the old holder's renewal is refused and writes nothing.
    let AttemptStart::Started(taken) = store.begin_attempt(&conv.id, &w01, &other, 51_000).await? else {
        anyhow::bail!("the next attempt did not start after the renewed lease expired");
    };
    lease.until_ms = 90_000;
    assert!(!store.renew_attempt(&conv.id, &w01, &lease).await?, "another attempt holds it now");
    assert_eq!(store.get_subtask(&conv.id, &w01).await?, Some(taken.clone()), "nothing written");
    // An expired lease nobody took is still its holder's to renew.
    let w02: SubtaskId = "w02".into();
    let mut late = AttemptLease::new(2_000);
    ensure!(matches!(store.begin_attempt(&conv.id, &w02, &late, 1_000).await?, AttemptStart::Started(_)));
    late.until_ms = 95_000;
    assert!(store.renew_attempt(&conv.id, &w02, &late).await?, "expired, but nobody took it");
    // A terminal subtask keeps its lease as it was; an unknown one is refused.
    recorded(store.record_result(&conv.id, &w01, &succeeded("done"), &Usage::default(), &[], 60_000).await?)?;
    let mut own = other.clone();
    own.until_ms = 99_000;
    assert!(!store.renew_attempt(&conv.id, &w01, &own).await?, "a finished subtask's lease is not renewed");
    assert_eq!(store.get_subtask(&conv.id, &w01).await?.and_then(|r| r.lease), Some(other));
    assert!(!store.renew_attempt(&conv.id, &"w99".into(), &own).await?, "no such subtask");
    Ok(())
}

/// `record_result` applied, its answer lost, retried with the same result: the retry answers the record
/// as written (`Recorded`, so the worker's finish is reported and counted as its own), and a different
/// result after it is still told the subtask had finished.
async fn a_result_recorded_whose_answer_was_lost_is_retried_as_the_record_written(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    let (decorator, lossy) = losing(&store);
    let result = succeeded("A1029 shipped on Monday");
    let usage = Usage { prompt_tokens: Some(7), completion_tokens: Some(3), ..Default::default() };
    let tools = vec!["shop__track_shipment".to_owned()];
    decorator.lose(StoreOp::RecordResult)?;
    answer_lost(lossy.record_result(&conv.id, &"w01".into(), &result, &usage, &tools, 3_000).await)?;
    let written = recorded(lossy.record_result(&conv.id, &"w01".into(), &result, &usage, &tools, 3_000).await?)?;
    assert_eq!((written.status, written.finished_at_ms), (SubtaskStatus::Succeeded, Some(3_000)));
    assert_eq!((written.result.as_ref(), written.usage, &written.tools_used), (Some(&result), usage, &tools));
    assert_eq!(store.get_subtask(&conv.id, &"w01".into()).await?.as_ref(), Some(&written));
    let late = SubtaskResult::failed(FailureKind::DeadlinePassed, "late");
    match store.record_result(&conv.id, &"w01".into(), &late, &Usage::default(), &[], 3_000).await? {
        RecordOutcome::AlreadyFinished(rec) => assert_eq!(rec, written),
        other => anyhow::bail!("expected AlreadyFinished, got {other:?}"),
    }
    Ok(())
}

/// `record_intent` applied, its answer lost, retried: the retry answers the entry as stored
/// (`Existing`, equal to the intent sent), and the journal holds it once. `Existing` is the safe answer:
/// nothing on the entry tells this attempt's write from an earlier attempt's, so the worker dispatches it
/// as possibly sent, with the entry's key (the shop answers a repeated key with its first outcome).
async fn an_intent_recorded_whose_answer_was_lost_is_retried_as_the_entry_recorded_once(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    let lease = AttemptLease::new(now_ms() + 60_000);
    let AttemptStart::Started(_) = store.begin_attempt(&conv.id, &"w01".into(), &lease, now_ms()).await? else {
        anyhow::bail!("the attempt did not start");
    };
    let (decorator, lossy) = losing(&store);
    let mut arguments = serde_json::Map::new();
    arguments.insert("order_id".into(), "A1029".into());
    let intent = Effect::intent(&conv.id, &"w01".into(), 1, "shop__refund", arguments, 4_000);
    decorator.lose(StoreOp::RecordIntent)?;
    answer_lost(lossy.record_intent(&conv.id, &"w01".into(), &lease.holder, &intent).await)?;
    assert_eq!(
        lossy.record_intent(&conv.id, &"w01".into(), &lease.holder, &intent).await?,
        IntentOutcome::Existing(intent.clone())
    );
    let rec = store.get_subtask(&conv.id, &"w01".into()).await?.context("subtask missing")?;
    assert_eq!(rec.effects, vec![intent]);
    Ok(())
}
