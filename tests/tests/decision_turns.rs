//! A person's decision told to the customer as a turn, through the whole local stack on both backends with the offline model: each session of `tests/fixtures/multi-turn-decisions.jsonl` (a refund rejected in English, approved in Simplified and in Traditional Chinese) is played turn by turn — a customer's message answered as a turn, an operator's decision told as one turn written by the swarm in the customer's script (its receipt when the refund ran), its subtask moved on from `AWAITING_APPROVAL`, told once however often the decision is posted — and a handed-off conversation answered by a person through the operator route.
//!
//! The emulator instantiations need `SWARM_AWS_ENDPOINT`; without it they fail, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::time::Duration;

use swarm_core::domain::{ConversationStatus, SubtaskStatus, TurnAuthor};
use swarm_core::view::ConversationView;
use swarm_local::{BackendChoice, LocalStack, StackOptions};
use swarm_tests::normalise;

const PATIENCE: Duration = Duration::from_secs(60);
const FIXTURE: &str = include_str!("../fixtures/multi-turn-decisions.jsonl");

swarm_tests::on_both_backends!(
    every_decision_of_the_sessions_is_told_once_as_a_swarm_turn_in_the_customer_s_script,
    a_handed_off_conversation_is_answered_by_a_person_as_an_operator_turn,
);

/// One line of the fixture: a customer's session, turn by turn.
struct Session {
    session: String,
    customer: String,
    turns: Vec<Step>,
}

/// A customer's message, or an operator's decision on the session's pending approval, and what
/// the turn it makes must say: `mentions`, its `author`, the decided subtask's status (`subtask`).
struct Step {
    message: Option<String>,
    decide: Option<String>,
    mentions: Vec<String>,
    author: Option<TurnAuthor>,
    subtask: Option<SubtaskStatus>,
}

fn sessions() -> Vec<Session> {
    let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    FIXTURE
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let line: serde_json::Value = serde_json::from_str(l).unwrap();
            let turns = line["turns"].as_array().unwrap().iter().map(|t| {
                let expect = &t["expect"];
                Step {
                    message: text(&t["message"]),
                    decide: text(&t["decide"]),
                    mentions: expect["mentions"]
                        .as_array()
                        .map(|m| m.iter().filter_map(text).collect())
                        .unwrap_or_default(),
                    author: serde_json::from_value(expect["author"].clone()).ok(),
                    subtask: serde_json::from_value(expect["subtask"].clone()).ok(),
                }
            });
            Session {
                session: text(&line["session"]).unwrap(),
                customer: text(&line["customer"]).unwrap(),
                turns: turns.collect(),
            }
        })
        .collect()
}

/// Polls `GET /conversations/{id}` until `done` holds for it (at most [`PATIENCE`]).
async fn until(stack: &LocalStack, id: &str, what: &str, done: impl Fn(&ConversationView) -> bool) -> ConversationView {
    swarm_tests::until_view(stack, id, what, PATIENCE, done).await
}

/// Posts `message` as the session's next customer turn (`turn`: 0 creates the conversation);
/// answers the conversation's id once that turn is over.
async fn say(stack: &LocalStack, id: Option<&str>, customer: &str, message: &str) -> String {
    let (status, body) = match id {
        None => stack.post_conversation(message, customer, None).await.unwrap(),
        Some(id) => {
            let body = serde_json::json!({"message": message, "customer_id": customer}).to_string();
            stack.api("POST", &format!("/conversations/{id}/messages"), Some(&body), &[]).await.unwrap()
        }
    };
    assert_eq!(status, 202, "{body}");
    let id = body["conversation_id"].as_str().unwrap().to_owned();
    let turn = body["turn"].as_u64().unwrap() as u32;
    until(stack, &id, "the customer's turn is answered", |v| v.turn >= turn && v.status.is_terminal()).await;
    id
}

fn assert_mentions(session: &str, reply: &str, mentions: &[String]) {
    let said = normalise(reply);
    for m in mentions {
        assert!(said.contains(&normalise(m)), "{session}: the reply does not mention {m:?}: {reply}");
    }
}

async fn every_decision_of_the_sessions_is_told_once_as_a_swarm_turn_in_the_customer_s_script(backend: BackendChoice) {
    let stack = LocalStack::start(StackOptions { backend, ..StackOptions::default() }).await.unwrap();
    let all = sessions();
    assert!(all.len() >= 3, "at least three sessions");
    for s in &all {
        let mut id: Option<String> = None;
        for step in &s.turns {
            if let Some(message) = &step.message {
                let conversation = say(&stack, id.as_deref(), &s.customer, message).await;
                let view = stack.view(&conversation).await.unwrap();
                let latest = view.turns.last().unwrap();
                assert_eq!((latest.author, latest.message.as_str()), (TurnAuthor::Customer, message.as_str()));
                assert_mentions(&s.session, latest.reply.as_deref().unwrap_or(""), &step.mentions);
                id = Some(conversation);
                continue;
            }
            let decision = step.decide.as_deref().unwrap();
            let conversation = id.clone().unwrap();
            let before = stack.view(&conversation).await.unwrap();
            let approval = before.approvals.iter().find(|a| a.status == swarm_core::approval::ApprovalStatus::Pending);
            let approval = approval.unwrap_or_else(|| panic!("{}: nothing waits for a person: {before:?}", s.session));
            let (status, body) = stack.decide(&approval.approval_id, decision).await.unwrap();
            assert_eq!(status, 200, "{}: {body}", s.session);
            let told = until(&stack, &conversation, "the decision is told as a turn", |v| {
                v.turns.len() > before.turns.len()
                    && v.turns.iter().skip(before.turns.len()).any(|t| t.author == TurnAuthor::Swarm)
            })
            .await;
            let turn = told.turns.iter().skip(before.turns.len()).find(|t| t.author == TurnAuthor::Swarm).unwrap();
            assert_eq!(Some(turn.author), step.author, "{}", s.session);
            assert_eq!((turn.status, turn.message.as_str()), (ConversationStatus::Done, ""), "{}", s.session);
            assert!(turn.subtasks.is_empty(), "a told turn plans nothing: {turn:?}");
            assert_mentions(&s.session, turn.reply.as_deref().unwrap_or(""), &step.mentions);
            // The subtask that waited moved on, and its approval still shows at the top level.
            let decided = told.turns.iter().flat_map(|t| &t.subtasks).find(|st| st.id == approval.subtask_id);
            let decided = decided.unwrap_or_else(|| panic!("{}: the decided subtask: {told:?}", s.session));
            assert_eq!(Some(decided.status), step.subtask, "{}: {decided:?}", s.session);
            assert!(told.approvals.iter().any(|a| a.approval_id == approval.approval_id), "{told:?}");
            // Posting the same decision again tells nothing more.
            let (again, body) = stack.decide(&approval.approval_id, decision).await.unwrap();
            assert_eq!(again, 200, "{body}");
            tokio::time::sleep(Duration::from_millis(500)).await;
            let after = stack.view(&conversation).await.unwrap();
            let swarm_turns = after.turns.iter().filter(|t| t.author == TurnAuthor::Swarm).count();
            assert_eq!(swarm_turns, 1, "{}: told once: {after:?}", s.session);
        }
    }
    // An approved refund ran once per approval: one for each approved session.
    let refunds = stack.shop.refunds().await.unwrap();
    let approved = all.iter().filter(|s| s.turns.iter().any(|t| t.decide.as_deref() == Some("approve"))).count();
    assert_eq!(refunds.len(), approved, "{refunds:?}");
    stack.shutdown().await;
}

async fn a_handed_off_conversation_is_answered_by_a_person_as_an_operator_turn(backend: BackendChoice) {
    let stack = LocalStack::start(StackOptions { backend, ..StackOptions::default() }).await.unwrap();
    let id = say(&stack, None, "C104", "Where is order A1029? And I want to talk to a human.").await;
    let view = stack.view(&id).await.unwrap();
    assert_eq!(view.status, ConversationStatus::Handoff, "{view:?}");
    let path = format!("/operator/conversations/{id}/messages");
    let body =
        serde_json::json!({"text": "Hello, this is Mei from the shop: A1029 leaves our warehouse today."}).to_string();
    let (status, answer) = stack.as_operator("POST", &path, Some(&body), Some("answer-1")).await.unwrap();
    assert_eq!(
        (status, answer["turn"].as_u64(), answer["author"].as_str()),
        (201, Some(1), Some("operator")),
        "{answer}"
    );
    // The same key again: the same turn, nothing new; the customer's route refuses without the operator token.
    let (status, again) = stack.as_operator("POST", &path, Some(&body), Some("answer-1")).await.unwrap();
    assert_eq!((status, again["turn"].as_u64()), (200, Some(1)), "{again}");
    let (status, _) = stack.api("POST", &path, Some(&body), &[]).await.unwrap();
    assert_eq!(status, 401);
    let view = stack.view(&id).await.unwrap();
    let t1 = &view.turns[1];
    assert_eq!((t1.author, t1.status, t1.message.as_str()), (TurnAuthor::Operator, ConversationStatus::Done, ""));
    assert!(t1.reply.as_deref().unwrap().contains("leaves our warehouse today"), "{t1:?}");
    // No longer handed off: another answer with another key is 409.
    let (status, refused) = stack.as_operator("POST", &path, Some(&body), Some("answer-2")).await.unwrap();
    assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("not_handed_off")), "{refused}");
    let (status, read) = stack.as_operator("GET", &format!("/operator/conversations/{id}"), None, None).await.unwrap();
    assert_eq!((status, read["turns"][0]["author"].as_str()), (200, Some("customer")), "{read}");
    stack.shutdown().await;
}
