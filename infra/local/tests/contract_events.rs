//! Contract tests of the event log (`EventLog`, DESIGN.md "Events"), written once and run against the embedded store and DynamoDB on a local emulator: each change logs its events in its own write (a refused write logs none), per source in commit order, and a reader resuming with its cursor gets an event committed late and none twice.
//!
//! The DynamoDB instantiations need `SWARM_AWS_ENDPOINT` (see `contract_store.rs`); without it
//! they fail, unless `SWARM_SKIP_AWS=1`.

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use swarm_core::action::EffectOutcome;
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, Subtask, SubtaskId, SubtaskRecord, SubtaskResult, SubtaskStatus,
    Usage, now_ms,
};
use swarm_core::effects::{AttemptLease, Effect, EffectChange};
use swarm_core::events::{Event, EventCursor, LoggedEvent};
use swarm_core::ports::{AttemptStart, ConversationStore, LeaseOutcome, LeasePhase, RecordOutcome};

type Store = Arc<dyn ConversationStore>;

contract_tests!(
    a_turn_s_changes_are_logged_once_each_in_per_source_order_and_refused_writes_log_none,
    a_resumed_reader_gets_an_event_committed_late_and_none_twice,
    concurrent_writers_and_a_polling_reader_lose_and_repeat_no_event,
    an_approval_asked_and_decided_is_logged_with_the_subtask_writes_that_make_it,
);

// ------------------------------------------------------------------ fixtures

fn record(conv: &Conversation, id: &str, depends_on: &[&str]) -> SubtaskRecord {
    let subtask = Subtask {
        id: SubtaskId::from(id),
        instruction: format!("find out part {id}"),
        tools: vec!["shop__refund".into()],
        depends_on: depends_on.iter().map(|d| SubtaskId::from(*d)).collect(),
    };
    SubtaskRecord::new(conv, subtask, "reader".into())
}

fn succeeded() -> SubtaskResult {
    SubtaskResult::Succeeded { text: "ok".into(), tool_calls: vec![] }
}

fn usage(tokens: u64) -> Usage {
    Usage { prompt_tokens: Some(tokens), completion_tokens: Some(1), ..Usage::default() }
}

/// A planned conversation (its first turn, 0) with subtasks `ids`, started at `now`.
async fn planned(store: &Store, ids: &[&str], now: i64) -> Result<(Conversation, Vec<SubtaskId>)> {
    let conv = Conversation::new("C-events", "where is my order", now, 120);
    store.create_conversation(&conv).await?;
    let records: Vec<SubtaskRecord> = ids.iter().map(|id| record(&conv, id, &[])).collect();
    ensure!(store.start_run(&conv.id, None, &records, &[], &Usage::default()).await?, "start_run flipped");
    Ok((conv, records.into_iter().map(|r| r.subtask.id).collect()))
}

/// Every event after `cursor`, and the cursor after them — through the SSE id's text, as a reconnecting client sends it.
async fn read(store: &Store, id: &ConversationId, cursor: &EventCursor) -> Result<(Vec<LoggedEvent>, EventCursor)> {
    let page = store.events_after(id, cursor).await?.context("conversation exists")?;
    let mut after = cursor.clone();
    if after.turn != page.turn {
        after = EventCursor::start(page.turn);
    }
    for e in &page.events {
        after.advance(e);
    }
    Ok((page.events, EventCursor::decode(&after.encode())?))
}

/// `source kind` of each event, e.g. `w01 subtask_started`.
fn kinds(events: &[LoggedEvent]) -> Vec<String> {
    events.iter().map(|e| format!("{} {}", e.source, e.event.kind())).collect()
}

/// Each source's positions, which must run 0, 1, 2… in the order received.
fn assert_dense_per_source(events: &[LoggedEvent]) -> Result<()> {
    let mut next: std::collections::BTreeMap<&str, u32> = Default::default();
    for e in events {
        let want = next.entry(&e.source).or_insert(0);
        ensure!(e.position == *want, "{} at {} where {} was next: {:?}", e.source, e.position, want, kinds(events));
        *want += 1;
    }
    Ok(())
}

// ------------------------------------------------------------------ tests

async fn a_turn_s_changes_are_logged_once_each_in_per_source_order_and_refused_writes_log_none(
    store: Store,
) -> Result<()> {
    let now = now_ms();
    let (conv, ids) = planned(&store, &["w01", "w02"], now).await?;
    let (w01, w02) = (&ids[0], &ids[1]);
    let lease = AttemptLease::new(now + 60_000);
    ensure!(matches!(store.begin_attempt(&conv.id, w01, &lease, now + 10).await?, AttemptStart::Started(_)));
    // Its own start again (an answer lost): answered, not logged twice.
    ensure!(matches!(store.begin_attempt(&conv.id, w01, &lease, now + 11).await?, AttemptStart::Started(_)));
    // Another holder while the lease is live: refused, nothing logged.
    let other = AttemptLease::new(now + 60_000);
    ensure!(matches!(store.begin_attempt(&conv.id, w01, &other, now + 12).await?, AttemptStart::Leased(_)));
    let intent = Effect::intent(&conv.id, w01, 1, "shop__refund", serde_json::Map::new(), now + 20);
    store.record_intent(&conv.id, w01, &lease.holder, &intent).await?;
    let done = EffectChange::done(EffectOutcome::new("refunded", false), now + 30);
    store.record_effect_outcome(&conv.id, w01, 1, &done).await?;
    // A final entry changes no more: no second `done`.
    store.record_effect_outcome(&conv.id, w01, 1, &done).await?;
    let tools = vec!["shop__refund".to_owned()];
    let recorded = store.record_result(&conv.id, w01, &succeeded(), &usage(41), &tools, now + 510).await?;
    ensure!(matches!(recorded, RecordOutcome::Recorded(_)));
    let again = store.record_result(&conv.id, w02, &succeeded(), &Usage::default(), &[], now + 600).await?;
    ensure!(matches!(again, RecordOutcome::Recorded(_)));
    // A second finish of w02: refused, logged nothing.
    let late = SubtaskResult::failed(swarm_core::result::FailureKind::Internal, "late");
    ensure!(matches!(
        store.record_result(&conv.id, w02, &late, &Usage::default(), &[], now + 700).await?,
        RecordOutcome::AlreadyFinished(_)
    ));
    for sid in &ids {
        store.count_finished(&conv.id, sid, &Usage::default()).await?;
    }
    let lease_until = now + 30_000;
    let taken =
        store.acquire_lease(&conv.id, LeasePhase::Aggregating { turn: conv.turn }, "agg", now, lease_until).await?;
    ensure!(matches!(taken, LeaseOutcome::Acquired { .. }), "{taken:?}");
    ensure!(store.finish_conversation(&conv.id, conv.turn, "Your order ships today.", &Usage::default()).await?);
    ensure!(!store.finish_conversation(&conv.id, conv.turn, "again", &Usage::default()).await?);

    let (events, cursor) = read(&store, &conv.id, &EventCursor::start(0)).await?;
    let mut per_source = kinds(&events);
    per_source.sort_by_key(|k| k.split(' ').next().map(str::to_owned));
    assert_eq!(
        per_source,
        [
            "c turn_planned",
            "c reply_written",
            "c turn_done",
            "w01 subtask_started",
            "w01 tool_called",
            "w01 tool_called",
            "w01 subtask_finished",
            "w02 subtask_finished",
        ]
    );
    assert_dense_per_source(&events)?;
    let finished = events.iter().find(|e| e.source == "w01" && e.event.kind() == "subtask_finished");
    assert_eq!(
        finished.map(|e| &e.event),
        Some(&Event::SubtaskFinished {
            subtask: w01.clone(),
            status: SubtaskStatus::Succeeded,
            tools,
            tokens: Some(42),
            duration_ms: Some(500),
        })
    );
    let statuses: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCalled { tool, ordinal, status, .. } => Some(format!("{tool}#{ordinal} {status}")),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, ["shop__refund#1 intent", "shop__refund#1 done"]);
    let reply = events.iter().find_map(|e| match &e.event {
        Event::ReplyWritten { reply, turn } => Some((reply.clone(), *turn)),
        _ => None,
    });
    assert_eq!(reply, Some((Some("Your order ships today.".to_owned()), conv.turn)));
    let planned = events.iter().find_map(|e| match &e.event {
        Event::TurnPlanned { subtasks, .. } => {
            Some(subtasks.iter().map(|s| format!("{} {}", s.id, s.instruction)).collect::<Vec<_>>())
        }
        _ => None,
    });
    // Filled in from the plan's subtask items when read.
    assert_eq!(planned, Some(vec!["w01 find out part w01".to_owned(), "w02 find out part w02".to_owned()]));
    let page = store.events_after(&conv.id, &cursor).await?.context("exists")?;
    ensure!(page.events.is_empty(), "read again after the end: {:?}", kinds(&page.events));
    assert_eq!((page.turn, page.status), (conv.turn, ConversationStatus::Done));
    ensure!(store.events_after(&ConversationId::from_trusted("no-such"), &cursor).await?.is_none());
    Ok(())
}

async fn a_resumed_reader_gets_an_event_committed_late_and_none_twice(store: Store) -> Result<()> {
    let now = now_ms();
    let (conv, ids) = planned(&store, &["w01", "w02"], now).await?;
    let (w01, w02) = (&ids[0], &ids[1]);
    let slow = AttemptLease::new(now + 60_000);
    // w02 starts and finishes at later instants than w01's start, which commits after the read:
    // a reader keeping only the latest time (or a global sequence) would skip it.
    let fast = AttemptLease::new(now + 60_000);
    store.begin_attempt(&conv.id, w02, &fast, now + 200).await?;
    store.record_result(&conv.id, w02, &succeeded(), &Usage::default(), &[], now + 300).await?;
    let (first, cursor) = read(&store, &conv.id, &EventCursor::start(0)).await?;
    assert_eq!(kinds(&first), ["c turn_planned", "w02 subtask_started", "w02 subtask_finished"]);
    // Committed late, stamped earlier.
    store.begin_attempt(&conv.id, w01, &slow, now + 100).await?;
    let (second, cursor) = read(&store, &conv.id, &cursor).await?;
    assert_eq!(kinds(&second), ["w01 subtask_started"]);
    store.record_result(&conv.id, w01, &succeeded(), &Usage::default(), &[], now + 400).await?;
    let (third, cursor) = read(&store, &conv.id, &cursor).await?;
    assert_eq!(kinds(&third), ["w01 subtask_finished"]);
    // A reader starting afresh gets the same events, once each.
    let (all, _) = read(&store, &conv.id, &EventCursor::start(conv.turn)).await?;
    let mut resumed: Vec<(String, u32)> =
        first.iter().chain(&second).chain(&third).map(|e| (e.source.clone(), e.position)).collect();
    let mut whole: Vec<(String, u32)> = all.iter().map(|e| (e.source.clone(), e.position)).collect();
    resumed.sort();
    whole.sort();
    assert_eq!(resumed, whole);
    let (none, _) = read(&store, &conv.id, &cursor).await?;
    ensure!(none.is_empty(), "{:?}", kinds(&none));
    Ok(())
}

async fn concurrent_writers_and_a_polling_reader_lose_and_repeat_no_event(store: Store) -> Result<()> {
    const SUBTASKS: usize = 24;
    let now = now_ms();
    let names: Vec<String> = (1..=SUBTASKS).map(|i| format!("w{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (conv, ids) = planned(&store, &refs, now).await?;
    let writers: Vec<_> = ids
        .iter()
        .map(|sid| {
            let (store, id, sid) = (store.clone(), conv.id.clone(), sid.clone());
            tokio::spawn(async move {
                let lease = AttemptLease::new(now + 60_000);
                store.begin_attempt(&id, &sid, &lease, now_ms()).await?;
                store.record_result(&id, &sid, &succeeded(), &usage(5), &[], now_ms()).await?;
                anyhow::Ok(())
            })
        })
        .collect();
    let mut received: Vec<LoggedEvent> = Vec::new();
    let mut cursor = EventCursor::start(0);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while received.len() < 1 + 2 * SUBTASKS {
        ensure!(tokio::time::Instant::now() < deadline, "{} events after 60 s", received.len());
        let (events, next) = read(&store, &conv.id, &cursor).await?;
        received.extend(events);
        cursor = next;
    }
    for w in writers {
        w.await??;
    }
    let (rest, _) = read(&store, &conv.id, &cursor).await?;
    ensure!(rest.is_empty(), "after every event: {:?}", kinds(&rest));
    let unique: BTreeSet<(String, u32)> = received.iter().map(|e| (e.source.clone(), e.position)).collect();
    assert_eq!(unique.len(), received.len(), "an event received twice");
    assert_eq!(received.len(), 1 + 2 * SUBTASKS);
    assert_dense_per_source(&received)?;
    Ok(())
}

async fn an_approval_asked_and_decided_is_logged_with_the_subtask_writes_that_make_it(store: Store) -> Result<()> {
    let now = now_ms();
    let (conv, ids) = planned(&store, &["w01"], now).await?;
    let w01 = &ids[0];
    let lease = AttemptLease::new(now + 60_000);
    store.begin_attempt(&conv.id, w01, &lease, now).await?;
    let action = swarm_core::action::ProposedAction {
        tool: "shop__refund".into(),
        order_id: "A1033".into(),
        amount_cents: 1_874,
        reason: None,
    };
    let asked = SubtaskResult::AwaitingApproval {
        approvals: vec![swarm_core::approval::PendingApproval { approval_id: "ap-1".into(), action }],
    };
    store.record_result(&conv.id, w01, &asked, &Usage::default(), &[], now + 10).await?;
    let (events, cursor) = read(&store, &conv.id, &EventCursor::start(0)).await?;
    let logged: Vec<&Event> = events.iter().filter(|e| e.source == "w01").map(|e| &e.event).collect();
    assert_eq!(
        logged.last(),
        Some(&&Event::ApprovalAsked { subtask: w01.clone(), approvals: vec!["ap-1".to_owned()] }),
        "{:?}",
        kinds(&events)
    );
    ensure!(matches!(store.settle_decided(&conv.id, w01, &succeeded()).await?, RecordOutcome::Recorded(_)));
    // Settled again (an answer lost): recognised, logged once.
    ensure!(matches!(store.settle_decided(&conv.id, w01, &succeeded()).await?, RecordOutcome::Recorded(_)));
    let (decided, _) = read(&store, &conv.id, &cursor).await?;
    assert_eq!(kinds(&decided), ["w01 approval_decided", "w01 subtask_finished"]);
    assert_eq!(decided[0].event, Event::ApprovalDecided { subtask: w01.clone(), status: SubtaskStatus::Succeeded });
    Ok(())
}
