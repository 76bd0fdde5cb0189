//! Unit tests of the decisions' pure parts: which decisions are untold, what a subtask settles to, the told turn's item and the texts.

use super::*;
use crate::action::EffectOutcome;
use crate::domain::{Subtask, SubtaskStatus};
use crate::effects::EffectState;

fn refund(order: &str, cents: i64) -> ProposedAction {
    ProposedAction { tool: "shop__refund".into(), order_id: order.into(), amount_cents: cents, reason: None }
}

/// A subtask of `c` whose one refund waited for approval `approval` and ended `state` (`outcome`).
fn decided(c: &Conversation, id: &str, state: EffectState, outcome: Option<EffectOutcome>, at: i64) -> SubtaskRecord {
    let sub = Subtask { id: id.into(), instruction: "refund".into(), tools: vec![], depends_on: vec![] };
    let mut r = SubtaskRecord::new(c, sub, "refunds".into());
    r.status = SubtaskStatus::AwaitingApproval;
    let mut e = Effect::intent(&c.id, &r.subtask.id, 1, "shop__refund", serde_json::Map::new(), 1);
    e.state = state;
    e.outcome = outcome;
    e.approval_id = Some(format!("{}.{id}.1", c.id));
    e.proposed = Some(refund("A1029", 187_400));
    e.changed_at_ms = Some(at);
    r.effects = vec![e];
    r
}

const RECEIPT: &str =
    r#"{"refunded":true,"refund_id":"RF-A1029-1","order_id":"A1029","amount":"1874.00","currency":"CNY"}"#;

#[test]
fn final_entries_with_an_approval_and_no_notice_are_untold_oldest_first() {
    let c = Conversation::new("C104", "退款", 1_000, 120);
    let ran = decided(&c, "w02", EffectState::Done, Some(EffectOutcome::new(RECEIPT, false)), 9);
    let rejected = decided(&c, "w01", EffectState::Rejected, None, 5);
    let waiting = decided(&c, "w03", EffectState::AwaitingApproval, None, 1);
    let mut history =
        ConversationHistory { subtasks: vec![rejected.clone(), ran.clone(), waiting], ..Default::default() };
    let untold = untold_decisions(&history);
    let keys: Vec<&str> = untold.iter().map(Untold::key).collect();
    assert_eq!(keys, [format!("{}.w01.1", c.id), format!("{}.w02.1", c.id)]);
    assert_eq!(untold[0].kind(), DecisionKind::Rejected);
    assert_eq!(
        untold[1].kind(),
        DecisionKind::RefundRan { receipt: Some("RF-A1029-1".into()), amount: Some("1874.00 CNY".into()) }
    );
    history.notices.push(Notice {
        key: format!("{}.w01.1", c.id),
        turn: 1,
        author: TurnAuthor::Swarm,
        at_ms: 6,
        ttl: 0,
    });
    assert_eq!(untold_decisions(&history).len(), 1, "a told decision is never told again");
}

#[test]
fn a_decided_subtask_settles_to_succeeded_or_failed_by_what_came_of_its_approvals() {
    let c = Conversation::new("C104", "refund", 1_000, 120);
    let ran = decided(&c, "w01", EffectState::Done, Some(EffectOutcome::new(RECEIPT, false)), 9);
    assert_eq!(decided_result(&ran).map(|r| r.status()), Some(SubtaskStatus::Succeeded));
    let refused = decided(&c, "w01", EffectState::Done, Some(EffectOutcome::new("window closed", true)), 9);
    assert_eq!(decided_result(&refused).and_then(|r| r.failure_kind()), Some(FailureKind::ActionFailed));
    let rejected = decided(&c, "w01", EffectState::Rejected, None, 9);
    assert_eq!(decided_result(&rejected).and_then(|r| r.failure_kind()), Some(FailureKind::NotApproved));
    let waiting = decided(&c, "w01", EffectState::AwaitingApproval, None, 9);
    assert_eq!(decided_result(&waiting), None, "nothing to settle while an approval waits");
}

#[test]
fn a_told_turn_is_the_next_turn_done_at_once_with_its_author_and_a_refreshed_expiry() {
    let mut c = Conversation::new("C104", "refund A1029", 1_000, 120);
    c.status = ConversationStatus::Done;
    c.reply = Some("waits for review".into());
    c.plan = ["w01".to_owned()].into();
    let told =
        ToldTurn::new("k1", TurnAuthor::Swarm, "done".into(), Language::English, 50_000, Duration::from_secs(60));
    let after = c.told_turn(&told);
    assert_eq!((after.turn, after.status, after.author), (1, ConversationStatus::Done, TurnAuthor::Swarm));
    assert_eq!((after.reply.as_deref(), after.query.as_str()), (Some("done"), ""));
    assert!(after.plan.is_empty() && after.lease.is_none() && after.sweep_shard.is_none());
    assert_eq!((after.turn_started_at(), after.expires_at_ms), (50_000, Some(110_000)));
    assert!(after.ttl >= c.ttl);
    let notice = c.notice_of(&told);
    assert_eq!((notice.key.as_str(), notice.turn, notice.ttl), ("k1", 1, after.ttl));
    let archived = TurnRecord::of(&after);
    assert_eq!(archived.author, TurnAuthor::Swarm);
    let json = serde_json::to_value(TurnRecord::of(&c)).unwrap_or_default();
    assert!(json.get("author").is_none(), "a customer's turn is stored as before: {json}");
}

#[test]
fn each_text_names_the_facts_in_the_customers_language_and_script() {
    let p = refund("A1029", 187_400);
    let ran = DecisionKind::RefundRan { receipt: Some("RF-A1029-1".into()), amount: Some("1874.00 CNY".into()) };
    let kinds = [ran, DecisionKind::RefundFailed, DecisionKind::Rejected, DecisionKind::Expired];
    for language in Language::ALL {
        for kind in &kinds {
            let text = decision_text(kind, Some(&p), language);
            assert!(text.contains("A1029") && text.contains("1874.00"), "{language:?} {kind:?}: {text}");
            assert_eq!(Language::detect(&text, None), language, "{kind:?}: {text}");
        }
    }
    let en = decision_text(&kinds[0], Some(&p), Language::English);
    assert!(en.contains("RF-A1029-1") && en.contains("approved"), "{en}");
    assert!(decision_text(&kinds[2], Some(&p), Language::SimplifiedChinese).contains("未予批准"));
    assert!(decision_text(&kinds[2], Some(&p), Language::TraditionalChinese).contains("沒有退款"));
}

#[test]
fn a_decision_is_told_in_the_language_of_the_turn_that_asked_for_it() {
    let mut c = Conversation::new("C104", "我要退款", 1_000, 120);
    c.language = Some(Language::SimplifiedChinese);
    assert_eq!(decision_language(&c, &[], &"w01".into()), Language::SimplifiedChinese);
    let earlier = TurnRecord::of(&c);
    c.turn = 1;
    c.language = Some(Language::English);
    assert_eq!(decision_language(&c, &[earlier], &"w01".into()), Language::SimplifiedChinese);
    assert_eq!(decision_language(&c, &[], &SubtaskId::in_turn(1, "w01")), Language::English);
}
