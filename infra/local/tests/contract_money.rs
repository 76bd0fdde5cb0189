//! Contract tests of the store's side-effect journal, attempt lease, approvals and hand-off: each test is written once and runs against the embedded store and DynamoDB on a local emulator.
//!
//! The DynamoDB instantiations need `SWARM_AWS_ENDPOINT` (e.g. `http://127.0.0.1:5000` after
//! `infra/aws/moto.sh start`); without it they fail, unless `SWARM_SKIP_AWS=1`. Each test
//! creates its own table, so tests run in parallel.

#[macro_use]
mod common;

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use swarm_core::approval::{Approval, ApprovalDecision, ApprovalStatus, DecideOutcome, ProposedAction, approval_id};
use swarm_core::domain::{
    Conversation, ConversationStatus, FailureKind, Handoff, HandoffReason, Subtask, SubtaskRecord, SubtaskResult,
    SubtaskStatus, Usage, now_ms,
};
use swarm_core::effects::{AttemptLease, Effect, EffectChange, EffectOutcome, EffectState};
use swarm_core::ports::{
    AttemptStart, CloseOutcome, ConversationStore, CreateOutcome, IntentOutcome, RecordOutcome, StoreOp,
};

type Store = Arc<dyn ConversationStore>;

use common::lossy::{answer_lost, losing};

contract_tests!(
    a_live_lease_keeps_a_second_attempt_out_until_it_expires_or_is_released,
    the_journal_takes_intents_in_order_only_from_the_lease_holder_of_an_open_subtask,
    racing_intents_for_one_position_record_exactly_one,
    an_intent_out_of_order_is_refused_permanently_and_changes_nothing,
    an_outcome_lands_once_and_also_after_the_subtask_closed,
    a_submitted_subtask_is_settled_once_and_a_settle_whose_answer_was_lost_finds_its_own_write,
    closing_a_subtask_loses_to_an_intent_recorded_since_it_was_read,
    an_approval_is_created_once_decided_once_and_then_finished,
    a_pending_approval_past_its_expiry_cannot_be_decided,
    an_approved_call_not_run_takes_a_fresh_token_only_while_approved,
    approvals_list_newest_conversation_first,
    approvals_list_in_pages_after_an_id,
    a_pending_approval_older_than_a_hundred_decided_ones_is_listed_and_paged,
    indexing_an_indexed_decided_or_missing_approval_changes_nothing,
    a_handoff_requested_while_running_ends_the_conversation_in_handoff,
    a_decision_and_a_finish_whose_answers_were_lost_are_retried_to_the_same_approval,
);

// ------------------------------------------------------------------ fixtures

async fn running(store: &Store, ids: &[&str]) -> Result<Conversation> {
    let conv = Conversation::new("C104", "please refund order A1033", now_ms(), 120);
    ensure!(store.create_conversation(&conv).await? == CreateOutcome::Created);
    let records: Vec<SubtaskRecord> = ids
        .iter()
        .map(|id| {
            let subtask = Subtask {
                id: (*id).into(),
                instruction: format!("refund part {id}"),
                tools: vec!["shop__refund".into()],
                depends_on: vec![],
            };
            SubtaskRecord::new(&conv, subtask, "refund".into())
        })
        .collect();
    ensure!(store.start_run(&conv.id, None, &records, &[], &Usage::default()).await?, "start_run refused");
    Ok(conv)
}

fn intent(conv: &Conversation, subtask: &str, ordinal: u32, amount: f64) -> Effect {
    let mut args = serde_json::Map::new();
    args.insert("order_id".into(), "A1033".into());
    args.insert("amount".into(), amount.into());
    Effect::intent(&conv.id, &subtask.into(), ordinal, "shop__refund", args, now_ms())
}

async fn started(store: &Store, conv: &Conversation, subtask: &str, until_ms: i64) -> Result<AttemptLease> {
    let lease = AttemptLease::new(until_ms);
    match store.begin_attempt(&conv.id, &subtask.into(), &lease, now_ms()).await? {
        AttemptStart::Started(rec) => {
            ensure!(rec.lease.as_ref() == Some(&lease), "the record carries the lease: {rec:?}");
            Ok(lease)
        }
        other => anyhow::bail!("attempt did not start: {other:?}"),
    }
}

fn approval(conv: &Conversation, subtask: &str, ordinal: u32, expires_at_ms: i64) -> Approval {
    Approval {
        id: approval_id(&conv.id, &subtask.into(), ordinal),
        conversation_id: conv.id.clone(),
        subtask_id: subtask.into(),
        ordinal,
        customer_id: conv.customer_id.clone(),
        role: "refund".into(),
        action: ProposedAction {
            tool: "shop__refund".into(),
            order_id: "A1033".into(),
            amount_cents: 187_400,
            reason: Some("changed my mind".into()),
        },
        status: ApprovalStatus::Pending,
        created_at_ms: now_ms(),
        expires_at_ms,
        decided_by: None,
        decided_at_ms: None,
        token: None,
        reissued_at_ms: None,
        outcome: None,
        finished_at_ms: None,
        ttl: conv.ttl,
    }
}

// ------------------------------------------------------------------ the contract

async fn a_live_lease_keeps_a_second_attempt_out_until_it_expires_or_is_released(store: Store) -> Result<()> {
    let conv = running(&store, &["w01"]).await?;
    let now = now_ms();
    let first = started(&store, &conv, "w01", now + 60_000).await?;
    let second = AttemptLease::new(now + 60_000);
    match store.begin_attempt(&conv.id, &"w01".into(), &second, now).await? {
        AttemptStart::Leased(rec) => {
            assert_eq!(rec.lease, Some(first.clone()), "the live lease is the first attempt's");
            assert_eq!(rec.attempts, 1, "a delivery kept out is not an attempt");
        }
        other => anyhow::bail!("a second delivery during a live lease started: {other:?}"),
    }
    // The holder itself may go on (a hand-back to the same attempt, a retry after a lost answer): the
    // same attempt, not counted again.
    assert!(matches!(
        store.begin_attempt(&conv.id, &"w01".into(), &first, now).await?,
        AttemptStart::Started(rec) if rec.attempts == 1
    ));
    // Released (a hand-back): the next delivery starts at once.
    store.release_attempt(&conv.id, &"w01".into(), "someone-else").await?;
    assert!(matches!(store.begin_attempt(&conv.id, &"w01".into(), &second, now).await?, AttemptStart::Leased(_)));
    store.release_attempt(&conv.id, &"w01".into(), &first.holder).await?;
    assert!(matches!(store.begin_attempt(&conv.id, &"w01".into(), &second, now).await?, AttemptStart::Started(_)));
    // Expired (its holder died): a later delivery takes over.
    let third = AttemptLease::new(now + 120_000);
    match store.begin_attempt(&conv.id, &"w01".into(), &third, now + 60_000).await? {
        AttemptStart::Started(rec) => assert_eq!((rec.lease, rec.attempts), (Some(third), 3)),
        other => anyhow::bail!("an expired lease did not let the next attempt in: {other:?}"),
    }
    Ok(())
}

async fn the_journal_takes_intents_in_order_only_from_the_lease_holder_of_an_open_subtask(store: Store) -> Result<()> {
    let conv = running(&store, &["w01"]).await?;
    let lease = started(&store, &conv, "w01", now_ms() + 60_000).await?;
    let first = intent(&conv, "w01", 1, 100.0);
    assert_eq!(store.record_intent(&conv.id, &"w01".into(), "not-the-holder", &first).await?, IntentOutcome::LeaseLost);
    assert_eq!(store.record_intent(&conv.id, &"w01".into(), &lease.holder, &first).await?, IntentOutcome::Recorded);
    // The same position again (a re-run): the stored entry, never a second one.
    let again = intent(&conv, "w01", 1, 999.0);
    assert_eq!(
        store.record_intent(&conv.id, &"w01".into(), &lease.holder, &again).await?,
        IntentOutcome::Existing(first.clone())
    );
    let second = intent(&conv, "w01", 2, 5.0);
    assert_eq!(store.record_intent(&conv.id, &"w01".into(), &lease.holder, &second).await?, IntentOutcome::Recorded);
    let rec = store.get_subtask(&conv.id, &"w01".into()).await?.context("subtask missing")?;
    assert_eq!(rec.effects, vec![first.clone(), second.clone()]);
    assert_eq!(rec.effects[0].key, format!("swarm:{}:w01:1", conv.id));
    // Closed (the deadline path, a duplicate): no intent is recorded after that.
    let done = SubtaskResult::Succeeded { text: "refunded".into(), tool_calls: vec![] };
    store.record_result(&conv.id, &"w01".into(), &done, &Usage::default(), &[], now_ms()).await?;
    let third = intent(&conv, "w01", 3, 1.0);
    assert!(matches!(
        store.record_intent(&conv.id, &"w01".into(), &lease.holder, &third).await?,
        IntentOutcome::Closed(_)
    ));
    assert_eq!(store.get_subtask(&conv.id, &"w01".into()).await?.context("subtask missing")?.effects.len(), 2);
    Ok(())
}

async fn racing_intents_for_one_position_record_exactly_one(store: Store) -> Result<()> {
    let conv = running(&store, &["w01"]).await?;
    let lease = started(&store, &conv, "w01", now_ms() + 60_000).await?;
    let mut tasks = Vec::new();
    for i in 0..10 {
        let (store, conv, holder) = (store.clone(), conv.clone(), lease.holder.clone());
        tasks.push(tokio::spawn(async move {
            store.record_intent(&conv.id, &"w01".into(), &holder, &intent(&conv, "w01", 1, f64::from(i))).await
        }));
    }
    let mut recorded = 0;
    for t in tasks {
        match t.await?? {
            IntentOutcome::Recorded => recorded += 1,
            IntentOutcome::Existing(_) => {}
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    assert_eq!(recorded, 1, "one intent per position, whoever races");
    assert_eq!(store.get_subtask(&conv.id, &"w01".into()).await?.context("subtask missing")?.effects.len(), 1);
    Ok(())
}

async fn an_intent_out_of_order_is_refused_permanently_and_changes_nothing(store: Store) -> Result<()> {
    // A journal position is written only after every position before it (the worker writes a round's
    // intents one after the other, in call order). Out of order — intent 2 on an empty journal (no
    // `effects` attribute yet), intent 3 after one entry — the answer is the same on both adapters: a
    // permanent error, nothing written. (On DynamoDB the condition fails; `size()` of the missing list
    // must not make it an emulator's HTTP 500, read as transient and retried.)
    let conv = running(&store, &["w01"]).await?;
    let lease = started(&store, &conv, "w01", now_ms() + 60_000).await?;
    let second = intent(&conv, "w01", 2, 12.0);
    match store.record_intent(&conv.id, &"w01".into(), &lease.holder, &second).await {
        Err(e) => ensure!(!e.is_transient(), "an out-of-order intent is refused for good, not retried: {e}"),
        Ok(other) => anyhow::bail!("intent 2 on an empty journal was answered {other:?}"),
    }
    let rec = store.get_subtask(&conv.id, &"w01".into()).await?.context("subtask missing")?;
    assert!(rec.effects.is_empty(), "nothing written: {:?}", rec.effects);
    let first = intent(&conv, "w01", 1, 10.0);
    assert_eq!(store.record_intent(&conv.id, &"w01".into(), &lease.holder, &first).await?, IntentOutcome::Recorded);
    let third = intent(&conv, "w01", 3, 5.0);
    match store.record_intent(&conv.id, &"w01".into(), &lease.holder, &third).await {
        Err(e) => ensure!(!e.is_transient(), "an out-of-order intent is refused for good, not retried: {e}"),
        Ok(other) => anyhow::bail!("intent 3 after one entry was answered {other:?}"),
    }
    // In order again, it follows.
    assert_eq!(store.record_intent(&conv.id, &"w01".into(), &lease.holder, &second).await?, IntentOutcome::Recorded);
    let rec = store.get_subtask(&conv.id, &"w01".into()).await?.context("subtask missing")?;
    assert_eq!(rec.effects, vec![first, second]);
    Ok(())
}

async fn an_outcome_lands_once_and_also_after_the_subtask_closed(store: Store) -> Result<()> {
    let conv = running(&store, &["w01"]).await?;
    let lease = started(&store, &conv, "w01", now_ms() + 60_000).await?;
    store.record_intent(&conv.id, &"w01".into(), &lease.holder, &intent(&conv, "w01", 1, 100.0)).await?;
    // The deadline closes the subtask while the call is in flight.
    let submitted = SubtaskResult::Submitted { tools: vec!["shop__refund".into()] };
    assert!(matches!(
        store.close_subtask(&conv.id, &"w01".into(), &submitted, 1, now_ms()).await?,
        CloseOutcome::Recorded(r) if r.status == SubtaskStatus::Submitted && r.effects.len() == 1
    ));
    let receipt = EffectOutcome::new(r#"{"refund_id":"RF-A1033-1","amount":100.0}"#, false);
    let landed = store
        .record_effect_outcome(&conv.id, &"w01".into(), 1, &EffectChange::done(receipt.clone(), now_ms()))
        .await?
        .context("entry missing")?;
    assert_eq!((landed.state, landed.outcome.as_ref()), (EffectState::Done, Some(&receipt)));
    // A second outcome (a replay that learned it again) changes nothing.
    let other = EffectOutcome::new("something else", true);
    let kept = store.record_effect_outcome(&conv.id, &"w01".into(), 1, &EffectChange::done(other, now_ms())).await?;
    assert_eq!(kept.and_then(|e| e.outcome), Some(receipt.clone()));
    let rec = store.get_subtask(&conv.id, &"w01".into()).await?.context("subtask missing")?;
    assert_eq!(rec.status, SubtaskStatus::Submitted, "the result stays; the journal holds the outcome");
    assert_eq!(rec.effects[0].outcome, Some(receipt));
    assert_eq!(
        store
            .record_effect_outcome(&conv.id, &"w01".into(), 2, &EffectChange::done(EffectOutcome::new("x", false), 1))
            .await?,
        None
    );
    Ok(())
}

/// The confirmation of a `SUBMITTED` subtask settles it with the journal's result: one write conditional
/// on `SUBMITTED` (its dependents wait for it); a retry whose answer was lost finds its own write, any
/// other settle finds it settled, and an open subtask is never settled.
async fn a_submitted_subtask_is_settled_once_and_a_settle_whose_answer_was_lost_finds_its_own_write(
    store: Store,
) -> Result<()> {
    let conv = running(&store, &["w01", "w02"]).await?;
    let lease = started(&store, &conv, "w01", now_ms() + 60_000).await?;
    store.record_intent(&conv.id, &"w01".into(), &lease.holder, &intent(&conv, "w01", 1, 100.0)).await?;
    let submitted = SubtaskResult::Submitted { tools: vec!["shop__refund".into()] };
    let before = match store.record_result(&conv.id, &"w01".into(), &submitted, &Usage::default(), &[], 5_000).await? {
        RecordOutcome::Recorded(r) => r,
        other => anyhow::bail!("expected Recorded, got {other:?}"),
    };
    let confirmed = SubtaskResult::Succeeded { text: "shop__refund was done: RF-A1033-1".into(), tool_calls: vec![] };
    // An open subtask is not settled: answered as it stands.
    match store.settle_submitted(&conv.id, &"w02".into(), &confirmed).await? {
        RecordOutcome::AlreadyFinished(r) => assert_eq!((r.status, r.result), (SubtaskStatus::Queued, None)),
        other => anyhow::bail!("expected AlreadyFinished, got {other:?}"),
    }
    let (decorator, lossy) = losing(&store);
    decorator.lose(StoreOp::SettleSubmitted)?;
    answer_lost(lossy.settle_submitted(&conv.id, &"w01".into(), &confirmed).await)?;
    let settled = match lossy.settle_submitted(&conv.id, &"w01".into(), &confirmed).await? {
        RecordOutcome::Recorded(r) => r,
        other => anyhow::bail!("the retry did not find its own write: {other:?}"),
    };
    assert_eq!((settled.status, settled.result.as_ref()), (SubtaskStatus::Succeeded, Some(&confirmed)));
    assert_eq!(settled.finished_at_ms, before.finished_at_ms, "it finished when it was submitted");
    assert_eq!(settled.effects, before.effects, "the journal is untouched");
    let other = SubtaskResult::AwaitingApproval { approvals: vec![] };
    match store.settle_submitted(&conv.id, &"w01".into(), &other).await? {
        RecordOutcome::AlreadyFinished(r) => assert_eq!(r, settled),
        other => anyhow::bail!("expected AlreadyFinished, got {other:?}"),
    }
    ensure!(
        matches!(store.settle_submitted(&conv.id, &"w99".into(), &confirmed).await?, RecordOutcome::Missing),
        "an unknown subtask is missing"
    );
    Ok(())
}

async fn closing_a_subtask_loses_to_an_intent_recorded_since_it_was_read(store: Store) -> Result<()> {
    let conv = running(&store, &["w01"]).await?;
    let lease = started(&store, &conv, "w01", now_ms() + 60_000).await?;
    // The deadline path read an empty journal; the worker records an intent before the close lands.
    store.record_intent(&conv.id, &"w01".into(), &lease.holder, &intent(&conv, "w01", 1, 100.0)).await?;
    let failed = SubtaskResult::failed(FailureKind::DeadlinePassed, "the deadline passed");
    assert_eq!(store.close_subtask(&conv.id, &"w01".into(), &failed, 0, now_ms()).await?, CloseOutcome::JournalChanged);
    let rec = store.get_subtask(&conv.id, &"w01".into()).await?.context("subtask missing")?;
    assert_eq!(rec.status, SubtaskStatus::Running, "nothing written");
    let submitted = SubtaskResult::Submitted { tools: vec!["shop__refund".into()] };
    assert!(matches!(
        store.close_subtask(&conv.id, &"w01".into(), &submitted, 1, now_ms()).await?,
        CloseOutcome::Recorded(r) if r.status == SubtaskStatus::Submitted
    ));
    assert!(matches!(
        store.close_subtask(&conv.id, &"w01".into(), &failed, 1, now_ms()).await?,
        CloseOutcome::AlreadyFinished(r) if r.status == SubtaskStatus::Submitted
    ));
    assert_eq!(
        store.record_result(&conv.id, &"w01".into(), &failed, &Usage::default(), &[], now_ms()).await?,
        RecordOutcome::AlreadyFinished(store.get_subtask(&conv.id, &"w01".into()).await?.context("subtask missing")?)
    );
    Ok(())
}

async fn an_approval_is_created_once_decided_once_and_then_finished(store: Store) -> Result<()> {
    let conv = running(&store, &["w01"]).await?;
    let pending = approval(&conv, "w01", 1, now_ms() + 3_600_000);
    assert_eq!(store.create_approval(&pending).await?, pending);
    // Created again after a crash: the stored one, unchanged.
    let again = Approval { created_at_ms: 1, ..pending.clone() };
    assert_eq!(store.create_approval(&again).await?, pending);
    assert_eq!(store.get_approval(&pending.id).await?, Some(pending.clone()));
    assert_eq!(store.get_approval("nobody.w01.1").await?, None);

    let at = now_ms();
    let approve = ApprovalDecision { approve: true, by: "ops-alice".into(), at_ms: at, token: Some("tok".into()) };
    let DecideOutcome::Decided(approved) = store.decide_approval(&pending.id, &approve).await? else {
        anyhow::bail!("the first decision did not land");
    };
    assert_eq!(approved.status, ApprovalStatus::Approved);
    assert_eq!((approved.decided_by.as_deref(), approved.decided_at_ms), (Some("ops-alice"), Some(at)));
    assert_eq!(approved.token.as_deref(), Some("tok"));
    // Posted again, or rejected late: the first decision stands.
    let reject = ApprovalDecision { approve: false, by: "ops-bob".into(), at_ms: at + 1, token: None };
    assert_eq!(store.decide_approval(&pending.id, &reject).await?, DecideOutcome::Unchanged(approved.clone()));
    assert_eq!(store.decide_approval(&pending.id, &approve).await?, DecideOutcome::Unchanged(approved.clone()));
    assert_eq!(store.decide_approval("nobody.w01.1", &approve).await?, DecideOutcome::Missing);

    let receipt = EffectOutcome::new(r#"{"refund_id":"RF-A1033-1"}"#, false);
    assert!(store.finish_approval(&pending.id, ApprovalStatus::Executed, &receipt, at + 2).await?);
    assert!(!store.finish_approval(&pending.id, ApprovalStatus::Executed, &receipt, at + 3).await?, "once");
    let done = store.get_approval(&pending.id).await?.context("approval missing")?;
    assert_eq!(
        (done.status, done.outcome, done.finished_at_ms),
        (ApprovalStatus::Executed, Some(receipt), Some(at + 2))
    );
    assert_eq!(done.decided_by.as_deref(), Some("ops-alice"), "who decided is kept");
    Ok(())
}

async fn a_pending_approval_past_its_expiry_cannot_be_decided(store: Store) -> Result<()> {
    let conv = running(&store, &["w01", "w02"]).await?;
    let expiring = approval(&conv, "w01", 1, now_ms() + 1_000);
    store.create_approval(&expiring).await?;
    let late =
        ApprovalDecision { approve: true, by: "ops".into(), at_ms: expiring.expires_at_ms, token: Some("t".into()) };
    match store.decide_approval(&expiring.id, &late).await? {
        DecideOutcome::Unchanged(a) => {
            assert_eq!(a.status, ApprovalStatus::Expired);
            assert_eq!((a.decided_by, a.token), (None, None), "nobody decided, no token");
        }
        other => anyhow::bail!("an expired approval was decided: {other:?}"),
    }
    assert_eq!(store.get_approval(&expiring.id).await?.map(|a| a.status), Some(ApprovalStatus::Expired));
    // A rejection is a decision too, and never finishes as executed.
    let rejected = approval(&conv, "w02", 1, now_ms() + 3_600_000);
    store.create_approval(&rejected).await?;
    let no = ApprovalDecision { approve: false, by: "ops".into(), at_ms: now_ms(), token: None };
    assert!(
        matches!(store.decide_approval(&rejected.id, &no).await?, DecideOutcome::Decided(a) if a.status == ApprovalStatus::Rejected)
    );
    let outcome = EffectOutcome::new("x", false);
    assert!(!store.finish_approval(&rejected.id, ApprovalStatus::Executed, &outcome, now_ms()).await?);
    Ok(())
}

async fn an_approved_call_not_run_takes_a_fresh_token_only_while_approved(store: Store) -> Result<()> {
    let conv = running(&store, &["w01", "w02"]).await?;
    let pending = approval(&conv, "w01", 1, now_ms() + 3_600_000);
    store.create_approval(&pending).await?;
    assert_eq!(store.reissue_token(&pending.id, "fresh", now_ms()).await?, None, "not approved yet");
    let at = now_ms();
    let approve = ApprovalDecision { approve: true, by: "ops-alice".into(), at_ms: at, token: Some("old".into()) };
    store.decide_approval(&pending.id, &approve).await?;
    let after = store.reissue_token(&pending.id, "fresh", at + 5).await?.context("an approved call takes a token")?;
    assert_eq!(
        (after.token.as_deref(), after.reissued_at_ms, after.token_issued_at_ms()),
        (Some("fresh"), Some(at + 5), Some(at + 5))
    );
    assert_eq!(
        (after.status, after.decided_by.as_deref(), after.decided_at_ms),
        (ApprovalStatus::Approved, Some("ops-alice"), Some(at)),
        "the decision is kept"
    );
    // A retry after a lost answer writes the same again.
    assert_eq!(store.reissue_token(&pending.id, "fresh", at + 5).await?, Some(after.clone()));
    assert_eq!(store.get_approval(&pending.id).await?, Some(after));
    // Once it ran (or for a rejected or missing one): no token.
    let receipt = EffectOutcome::new("ok", false);
    assert!(store.finish_approval(&pending.id, ApprovalStatus::Executed, &receipt, at + 6).await?);
    assert_eq!(store.reissue_token(&pending.id, "later", at + 7).await?, None);
    assert_eq!(store.get_approval(&pending.id).await?.and_then(|a| a.token).as_deref(), Some("fresh"));
    let rejected = approval(&conv, "w02", 1, now_ms() + 3_600_000);
    store.create_approval(&rejected).await?;
    store
        .decide_approval(&rejected.id, &ApprovalDecision { approve: false, by: "ops".into(), at_ms: at, token: None })
        .await?;
    assert_eq!(store.reissue_token(&rejected.id, "t", at + 1).await?, None);
    assert_eq!(store.reissue_token("nobody.w01.1", "t", at + 1).await?, None);
    Ok(())
}

async fn approvals_list_in_pages_after_an_id(store: Store) -> Result<()> {
    let mut ids = Vec::new();
    for _ in 0..3 {
        let conv = running(&store, &["w01"]).await?;
        for ordinal in 1..=2 {
            let a = approval(&conv, "w01", ordinal, now_ms() + 3_600_000);
            store.create_approval(&a).await?;
            ids.push(a.id);
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    ids.sort();
    ids.reverse();
    // Pages of two walk the whole list, in list_approvals' order, each id once.
    let mut walked = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..4 {
        let page = store.list_approvals_after(after.as_deref(), 2).await?;
        if page.is_empty() {
            break;
        }
        ensure!(page.len() <= 2);
        after = page.last().map(|a| a.id.clone());
        walked.extend(page.into_iter().map(|a| a.id));
    }
    assert_eq!(walked, ids);
    let listed: Vec<String> = store.list_approvals(10).await?.into_iter().map(|a| a.id).collect();
    assert_eq!(listed, ids, "the same order as list_approvals");
    assert!(
        store.list_approvals_after(ids.last().map(String::as_str), 5).await?.is_empty(),
        "nothing after the oldest"
    );
    Ok(())
}

async fn approvals_list_newest_conversation_first(store: Store) -> Result<()> {
    let older = running(&store, &["w01"]).await?;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let newer = running(&store, &["w01"]).await?;
    let far = now_ms() + 3_600_000;
    store.create_approval(&approval(&older, "w01", 1, far)).await?;
    store.create_approval(&approval(&newer, "w01", 1, far)).await?;
    store.create_approval(&approval(&newer, "w01", 2, far)).await?;
    let listed: Vec<String> = store.list_approvals(10).await?.into_iter().map(|a| a.id).collect();
    let expected = [
        approval_id(&newer.id, &"w01".into(), 2),
        approval_id(&newer.id, &"w01".into(), 1),
        approval_id(&older.id, &"w01".into(), 1),
    ];
    assert_eq!(listed, expected);
    assert_eq!(store.list_approvals(1).await?.len(), 1);
    Ok(())
}

async fn a_pending_approval_older_than_a_hundred_decided_ones_is_listed_and_paged(store: Store) -> Result<()> {
    let far = now_ms() + 3_600_000;
    let older = running(&store, &["w01"]).await?;
    let waiting = store.create_approval(&approval(&older, "w01", 1, far)).await?;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let newer = running(&store, &["w01"]).await?;
    let reject = |at_ms| ApprovalDecision { approve: false, by: "ops@example.com".into(), at_ms, token: None };
    for ordinal in 1..=101 {
        let a = store.create_approval(&approval(&newer, "w01", ordinal, far)).await?;
        let decided = store.decide_approval(&a.id, &reject(now_ms())).await?;
        ensure!(matches!(decided, DecideOutcome::Decided(_)), "approval {ordinal} not decided: {decided:?}");
    }
    let also = store.create_approval(&approval(&newer, "w01", 102, far)).await?;
    // Behind 101 decided approvals, both pending ones are listed, newest first, and nothing else.
    let listed: Vec<String> = store.list_pending_approvals_after(None, 100).await?.into_iter().map(|a| a.id).collect();
    assert_eq!(listed, [also.id.clone(), waiting.id.clone()]);
    // Pages of one walk them, each once.
    let first = store.list_pending_approvals_after(None, 1).await?;
    assert_eq!(first.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), [also.id.as_str()]);
    let second = store.list_pending_approvals_after(Some(&also.id), 1).await?;
    assert_eq!(second.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), [waiting.id.as_str()]);
    assert_eq!(second[0].status, ApprovalStatus::Pending);
    assert!(store.list_pending_approvals_after(Some(&waiting.id), 5).await?.is_empty(), "nothing after the oldest");
    // A decision takes an approval off the list; one expiring as it is decided too.
    store.decide_approval(&also.id, &reject(now_ms())).await?;
    let expired = store.decide_approval(&waiting.id, &reject(far + 1)).await?;
    ensure!(
        matches!(&expired, DecideOutcome::Unchanged(a) if a.status == ApprovalStatus::Expired),
        "not expired: {expired:?}"
    );
    assert!(store.list_pending_approvals_after(None, 100).await?.is_empty(), "decided approvals are not pending");
    Ok(())
}

async fn indexing_an_indexed_decided_or_missing_approval_changes_nothing(store: Store) -> Result<()> {
    let far = now_ms() + 3_600_000;
    let conv = running(&store, &["w01"]).await?;
    let pending = store.create_approval(&approval(&conv, "w01", 1, far)).await?;
    let rejected = store.create_approval(&approval(&conv, "w01", 2, far)).await?;
    let decision = ApprovalDecision { approve: false, by: "ops@example.com".into(), at_ms: now_ms(), token: None };
    store.decide_approval(&rejected.id, &decision).await?;
    assert!(!store.index_pending_approval(&pending.id).await?, "written pending: already indexed");
    assert!(!store.index_pending_approval(&rejected.id).await?, "decided: never indexed");
    assert!(!store.index_pending_approval("nobody.w01.1").await?, "missing");
    let listed: Vec<String> = store.list_pending_approvals_after(None, 10).await?.into_iter().map(|a| a.id).collect();
    assert_eq!(listed, [pending.id.as_str()]);
    assert_eq!(store.get_approval(&rejected.id).await?.map(|a| a.status), Some(ApprovalStatus::Rejected));
    Ok(())
}

/// DynamoDB only (the embedded store lists pending approvals by status): a pending approval
/// written before the pending approvals' index existed (no `pending_pk`) is not listed until the
/// sweep's backfill indexes it, once; a decision then takes it out again.
#[tokio::test]
async fn dynamodb_a_pending_approval_written_before_the_index_is_listed_once_backfilled() -> Result<()> {
    use swarm_adapters::aws::dynamo::codec::approval_item;
    use swarm_adapters::aws::dynamo::store::DynamoConversationStore;
    let Some((client, table)) = common::dynamo_table("legacy_pending_backfill").await? else { return Ok(()) };
    let store: Store = Arc::new(DynamoConversationStore::new(client.clone(), table.clone()));
    let conv = running(&store, &["w01"]).await?;
    let legacy = approval(&conv, "w01", 1, now_ms() + 3_600_000);
    let mut item = approval_item(&legacy)?;
    ensure!(item.remove("pending_pk").is_some() && item.remove("pending_sk").is_some());
    client.put_item().table_name(&table).set_item(Some(item)).send().await?;
    assert!(store.list_pending_approvals_after(None, 10).await?.is_empty(), "not in the index yet");
    assert!(store.index_pending_approval(&legacy.id).await?, "the backfill indexes it");
    assert!(!store.index_pending_approval(&legacy.id).await?, "a second backfill finds it indexed");
    let listed: Vec<String> = store.list_pending_approvals_after(None, 10).await?.into_iter().map(|a| a.id).collect();
    assert_eq!(listed, [legacy.id.as_str()]);
    let decision = ApprovalDecision { approve: false, by: "ops@example.com".into(), at_ms: now_ms(), token: None };
    ensure!(matches!(store.decide_approval(&legacy.id, &decision).await?, DecideOutcome::Decided(_)));
    assert!(store.list_pending_approvals_after(None, 10).await?.is_empty(), "decided: out of the index");
    Ok(())
}

async fn a_handoff_requested_while_running_ends_the_conversation_in_handoff(store: Store) -> Result<()> {
    let conv = running(&store, &["w01"]).await?;
    let asked = Handoff { reason: HandoffReason::CustomerAsked, at_ms: now_ms() };
    assert!(store.request_handoff(&conv.id, &asked).await?);
    let back = store.get_conversation(&conv.id).await?.context("conversation missing")?;
    assert_eq!((back.status, back.handoff), (ConversationStatus::Running, Some(asked)));
    assert!(
        !store.hand_off(&conv.id, 0, "a person will take over", &Usage::default(), &asked).await?,
        "only from AGGREGATING"
    );
    assert!(
        store.transition_conversation(&conv.id, ConversationStatus::Running, ConversationStatus::Aggregating).await?
    );
    let usage = Usage { prompt_tokens: Some(7), ..Default::default() };
    assert!(store.hand_off(&conv.id, 0, "a person will take over", &usage, &asked).await?);
    assert!(!store.hand_off(&conv.id, 0, "twice", &usage, &asked).await?, "once");
    let done = store.get_conversation(&conv.id).await?.context("conversation missing")?;
    assert_eq!(done.status, ConversationStatus::Handoff);
    assert_eq!(
        (done.reply.as_deref(), done.handoff, done.usage.prompt_tokens),
        (Some("a person will take over"), Some(asked), Some(7))
    );
    assert!(!store.request_handoff(&conv.id, &asked).await?, "a terminal conversation takes no request");
    Ok(())
}

/// `decide_approval` and `finish_approval` applied, their answers lost, retried by the same caller:
/// the retried decision answers `Unchanged` with the decision as written (the approvals API then
/// enqueues the approved call or closes the rejected effect exactly as after `Decided`; only the
/// decided metric is not counted), the retried finish answers `false` with the outcome as written
/// (its caller ignores the answer), and neither writes again.
async fn a_decision_and_a_finish_whose_answers_were_lost_are_retried_to_the_same_approval(store: Store) -> Result<()> {
    let conv = running(&store, &["w01", "w02"]).await?;
    let (decorator, lossy) = losing(&store);
    let at = now_ms();
    for (subtask, approve) in [("w01", true), ("w02", false)] {
        let pending = approval(&conv, subtask, 1, at + 3_600_000);
        store.create_approval(&pending).await?;
        let token = approve.then(|| "tok".to_owned());
        let decision = ApprovalDecision { approve, by: "ops-alice".into(), at_ms: at, token: token.clone() };
        decorator.lose(StoreOp::DecideApproval)?;
        answer_lost(lossy.decide_approval(&pending.id, &decision).await)?;
        let DecideOutcome::Unchanged(decided) = lossy.decide_approval(&pending.id, &decision).await? else {
            anyhow::bail!("the retried decision of {subtask} did not answer the decision as written");
        };
        let status = if approve { ApprovalStatus::Approved } else { ApprovalStatus::Rejected };
        assert_eq!(
            (decided.status, decided.decided_by.as_deref(), decided.decided_at_ms, decided.token.clone()),
            (status, Some("ops-alice"), Some(at), token)
        );
        assert_eq!(store.get_approval(&pending.id).await?, Some(decided));
    }
    let id = approval_id(&conv.id, &"w01".into(), 1);
    let receipt = EffectOutcome::new("refunded RF-A1033-1", false);
    decorator.lose(StoreOp::FinishApproval)?;
    answer_lost(lossy.finish_approval(&id, ApprovalStatus::Executed, &receipt, at + 5).await)?;
    assert!(!lossy.finish_approval(&id, ApprovalStatus::Executed, &receipt, at + 6).await?);
    let finished = store.get_approval(&id).await?.context("approval missing")?;
    assert_eq!(
        (finished.status, finished.outcome, finished.finished_at_ms),
        (ApprovalStatus::Executed, Some(receipt), Some(at + 5)),
        "the first finish stands"
    );
    Ok(())
}
