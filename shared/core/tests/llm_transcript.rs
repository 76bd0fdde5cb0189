//! The strict tool-call pairing checker, context compression (pairs kept together, result accepted by the checker), the per-round budget of tool results and flattened tool history.

use std::time::Duration;

use anyhow::{Context, Result};
use swarm_core::llm::retry::CallError;
use swarm_core::llm::transcript::{
    FLATTENED_RESULTS_MARKER, PairingError, SUMMARY_MARKER, check_pairing, compress, estimate_text_tokens,
    estimate_tokens, fit_round, flatten_tool_history, has_tool_history, latest_round, shrink_latest_round,
};
use swarm_core::ports::{ChatMessage, ChatResponse, LlmError, Purpose, ToolCall};
use swarm_testing::{ScriptedModel, text_response};
use tokio::time::Instant;

fn system() -> ChatMessage {
    ChatMessage::System { content: "You are a worker of an online shop.".into() }
}

fn user(text: &str) -> ChatMessage {
    ChatMessage::User { content: text.into() }
}

fn calls(ids: &[&str]) -> ChatMessage {
    ChatMessage::Assistant {
        content: None,
        tool_calls: ids
            .iter()
            .map(|id| ToolCall {
                id: (*id).into(),
                name: "get_order".into(),
                arguments: format!("{{\"order_id\":\"{id}\"}}"),
            })
            .collect(),
        reasoning_content: None,
    }
}

fn result(id: &str, text: &str) -> ChatMessage {
    ChatMessage::Tool { tool_call_id: id.into(), content: text.into() }
}

fn answer(text: &str) -> ChatMessage {
    ChatMessage::Assistant { content: Some(text.into()), tool_calls: vec![], reasoning_content: None }
}

#[test]
fn a_well_formed_transcript_passes() {
    let t = vec![
        system(),
        user("Subtask w01"),
        calls(&["functions.get_order:0", "functions.track_shipment:1"]),
        result("functions.get_order:0", "{}"),
        result("functions.track_shipment:1", "{}"),
        calls(&["c3"]),
        result("c3", "{}"),
        answer("done"),
    ];
    assert_eq!(check_pairing(&t), Ok(()));
}

#[test]
fn a_tool_result_without_its_call_is_an_orphan() {
    let t = vec![system(), user("x"), result("c1", "{}")];
    assert_eq!(check_pairing(&t), Err(PairingError::OrphanResult { index: 2, id: "c1".into() }));
    let t = vec![system(), calls(&["c1"]), result("c1", "{}"), result("c9", "{}")];
    assert_eq!(check_pairing(&t), Err(PairingError::OrphanResult { index: 3, id: "c9".into() }));
    // A result after a user message no longer belongs to the earlier call.
    let t = vec![calls(&["c1"]), result("c1", "{}"), user("more"), result("c1", "{}")];
    assert_eq!(check_pairing(&t), Err(PairingError::OrphanResult { index: 3, id: "c1".into() }));
}

#[test]
fn a_call_without_its_result_is_missing() {
    let t = vec![system(), calls(&["c1", "c2"]), result("c1", "{}"), user("next")];
    assert_eq!(check_pairing(&t), Err(PairingError::MissingResult { index: 1, id: "c2".into() }));
    let t = vec![system(), calls(&["c1"])];
    assert_eq!(check_pairing(&t), Err(PairingError::MissingResult { index: 1, id: "c1".into() }));
    let t = vec![calls(&["c1"]), calls(&["c2"]), result("c2", "{}")];
    assert_eq!(check_pairing(&t), Err(PairingError::MissingResult { index: 0, id: "c1".into() }));
}

#[test]
fn duplicate_out_of_order_and_repeated_ids_are_rejected() {
    let t = vec![calls(&["c1"]), result("c1", "{}"), result("c1", "{}")];
    assert_eq!(check_pairing(&t), Err(PairingError::DuplicateResult { index: 2, id: "c1".into() }));
    let t = vec![calls(&["c1", "c2"]), result("c2", "{}"), result("c1", "{}")];
    assert_eq!(
        check_pairing(&t),
        Err(PairingError::OutOfOrder { index: 1, expected: "c1".into(), found: "c2".into() })
    );
    let t = vec![calls(&["c1", "c1"]), result("c1", "{}"), result("c1", "{}")];
    assert_eq!(check_pairing(&t), Err(PairingError::BadCallId { index: 0, id: "c1".into() }));
}

/// A sub model that returns a fixed summary and records what it was asked.
/// The sub model: answers every compression request with `text`.
fn summariser(text: &str) -> ScriptedModel {
    ScriptedModel::always(Ok(text_response(text)))
}

/// Leading messages (3), then `rounds` rounds of two calls with long results, then nothing.
fn long_transcript(rounds: usize) -> Vec<ChatMessage> {
    let mut t = vec![system(), user("Customer message:\nwhere are my orders?"), user("Subtask w01: check all orders")];
    for r in 0..rounds {
        let (a, b) = (format!("r{r}a"), format!("r{r}b"));
        t.push(calls(&[&a, &b]));
        t.push(result(&a, &format!("order {r}a: {}", "shipped ".repeat(100))));
        t.push(result(&b, &format!("order {r}b: {}", "delivered ".repeat(100))));
    }
    t
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

#[tokio::test]
async fn below_budget_the_transcript_comes_back_unchanged_without_a_model_call() -> Result<()> {
    let t = long_transcript(2);
    let sub = summariser("unused");
    let out = compress(&t, 3, estimate_tokens(&t), &sub, deadline()).await?;
    assert_eq!(out, t);
    assert!(sub.requests().is_empty());
    Ok(())
}

#[tokio::test]
async fn compression_replaces_the_oldest_whole_rounds_and_passes_the_pairing_check() -> Result<()> {
    let t = long_transcript(6);
    check_pairing(&t)?;
    let round = estimate_tokens(&t[3..6]) - 3;
    // Room for the leading messages, about three rounds and a summary.
    let budget = estimate_tokens(&t[..3]) + 3 * round + 600;
    assert!(estimate_tokens(&t) > budget);
    let sub = summariser("- orders 0a..2b: shipped or delivered");
    let out = compress(&t, 3, budget, &sub, deadline()).await?;

    check_pairing(&out)?;
    assert!(estimate_tokens(&out) <= budget, "{} > {budget}", estimate_tokens(&out));
    assert_eq!(&out[..3], &t[..3], "the cached prefix and the subtask are untouched");
    assert_eq!(out[3], user(&format!("{SUMMARY_MARKER}- orders 0a..2b: shipped or delivered")));
    // Whole rounds only: what follows the summary is an untouched suffix of the input, starting at a call.
    let rest = &out[4..];
    assert_eq!(rest, &t[t.len() - rest.len()..]);
    assert!(matches!(&rest[0], ChatMessage::Assistant { tool_calls, .. } if tool_calls.len() == 2));
    assert_eq!(rest.len() % 3, 0);
    assert_eq!(&out[out.len() - 3..], &t[t.len() - 3..], "the latest round stays");
    // As few rounds as needed: three rounds fit the budget, so only the three oldest are replaced.
    assert_eq!(rest.len(), 3 * 3);

    let asked = sub.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].purpose, Purpose::Compress);
    assert!(asked[0].tools.is_empty());
    let shown = match &asked[0].messages[1] {
        ChatMessage::User { content } => content.clone(),
        other => panic!("expected the rounds as a user message, got {other:?}"),
    };
    assert!(shown.contains("Called get_order({\"order_id\":\"r0a\"})"), "{shown}");
    assert!(shown.contains("Result of get_order: order 0a: shipped"), "{shown}");
    assert!(!shown.contains("r5a"), "the latest round is not summarised");
    Ok(())
}

/// Summarising never replaces the latest round (the model is about to read it), even above
/// budget. Before issue 11 that was the whole story, and a round larger than the context was
/// resent unchanged; now the worker cuts the latest round's results instead ([`shrink_latest_round`]).
#[tokio::test]
async fn the_latest_round_is_never_summarised_but_its_results_can_be_cut_to_fit() -> Result<()> {
    let t = long_transcript(1);
    let sub = summariser("unused");
    let out = compress(&t, 3, 50, &sub, deadline()).await?;
    assert_eq!(out, t);
    assert!(sub.requests().is_empty());

    let mut shrunk = out.clone();
    let (before, indices) = latest_round(&shrunk);
    assert_eq!(indices, vec![4, 5]);
    assert_eq!(shrink_latest_round(&mut shrunk, before / 2), 2);
    check_pairing(&shrunk)?;
    let (after, _) = latest_round(&shrunk);
    assert!(after <= before / 2 + 2, "{after} > {}", before / 2);
    assert_eq!(&shrunk[..4], &t[..4], "only the latest round's results change");
    let ChatMessage::Tool { content, .. } = &shrunk[4] else { panic!("tool message expected") };
    assert!(content.starts_with("order 0a: shipped"), "{content}");
    assert!(content.contains("characters shown"), "the cut says so: {content}");
    Ok(())
}

#[test]
fn a_round_over_budget_is_cut_fairly_small_results_whole_large_ones_to_one_share() {
    let mut round =
        vec!["A1029 paid".to_owned(), "订".repeat(8_000), "单".repeat(8_000), "x".repeat(400), "包".repeat(8_000)];
    let cut = fit_round(&mut round, 6_000);
    assert_eq!(cut, 3);
    assert_eq!(round[0], "A1029 paid", "a result within its share stays whole");
    assert_eq!(round[3], "x".repeat(400));
    let sizes: Vec<u64> = round.iter().map(|r| estimate_text_tokens(r)).collect();
    assert!(sizes.iter().sum::<u64>() <= 6_000, "{sizes:?}");
    // The three large ones got the same share: (6000 - 3 - 100) / 3 each.
    assert!(sizes[1] == sizes[2] && sizes[2] == sizes[4], "{sizes:?}");
    assert!(sizes[1] > 1_900, "{sizes:?}");
    assert!(round[1].starts_with("订订订"));
    assert!(round[1].contains("of 8000 characters shown"), "{}", &round[1][round[1].len() - 120..]);
    // A round within budget is left alone.
    let mut small = vec!["a".to_owned(), "b".to_owned()];
    assert_eq!(fit_round(&mut small, 10), 0);
}

#[test]
fn a_result_cut_twice_counts_from_its_original_length() {
    let mut round = vec!["订".repeat(5_000)];
    fit_round(&mut round, 2_000);
    let once = round[0].clone();
    fit_round(&mut round, 1_000);
    assert!(round[0].len() < once.len());
    assert_eq!(round[0].matches("characters shown").count(), 1, "one note, not two");
    assert!(round[0].contains("of 5000 characters shown"), "{}", round[0]);
}

#[test]
fn flattened_history_holds_no_tool_call_and_keeps_every_result_with_its_tool() {
    let mut t = long_transcript(2);
    t.push(answer("All shipped."));
    assert!(has_tool_history(&t));
    let flat = flatten_tool_history(&t);
    assert!(!has_tool_history(&flat));
    check_pairing(&flat).unwrap();
    assert_eq!(&flat[..3], &t[..3]);
    assert_eq!(flat.len(), 3 + 2 * 2 + 1, "each round: one assistant and one user message");
    let ChatMessage::Assistant { content: Some(called), .. } = &flat[3] else { panic!("assistant expected") };
    assert_eq!(
        called,
        "[called get_order with {\"order_id\":\"r0a\"}]\n[called get_order with {\"order_id\":\"r0b\"}]"
    );
    let ChatMessage::User { content: results } = &flat[4] else { panic!("user expected") };
    assert!(results.starts_with(FLATTENED_RESULTS_MARKER), "{results}");
    assert!(results.contains("\n- get_order (r0a): order 0a: shipped"), "{results}");
    assert!(results.contains("\n- get_order (r0b): order 0b: delivered"), "{results}");
    assert_eq!(flat.last(), t.last());
}

#[tokio::test]
async fn an_earlier_summary_is_folded_into_the_new_one() -> Result<()> {
    let mut t = long_transcript(4);
    t.insert(3, user(&format!("{SUMMARY_MARKER}order 9 was refunded")));
    let sub = summariser("order 9 refunded; orders 0-2 shipped");
    let out = compress(&t, 3, estimate_tokens(&t[..3]) + 400, &sub, deadline()).await?;
    check_pairing(&out)?;
    let summaries = out
        .iter()
        .filter(|m| matches!(m, ChatMessage::User { content } if content.starts_with(SUMMARY_MARKER)))
        .count();
    assert_eq!(summaries, 1);
    let shown = match &sub.requests()[0].messages[1] {
        ChatMessage::User { content } => content.clone(),
        _ => String::new(),
    };
    assert!(shown.contains("order 9 was refunded"));
    Ok(())
}

#[tokio::test]
async fn an_empty_summary_falls_back_to_a_digest_of_the_calls() -> Result<()> {
    let t = long_transcript(3);
    let sub = ScriptedModel::always(Ok(ChatResponse { content: None, ..text_response("") }));
    let out = compress(&t, 3, estimate_tokens(&t[..3]) + 300, &sub, deadline()).await?;
    check_pairing(&out)?;
    let summary = match &out[3] {
        ChatMessage::User { content } => content.clone(),
        other => panic!("expected a summary, got {other:?}"),
    };
    assert!(summary.starts_with(&format!("{SUMMARY_MARKER}called get_order({{\"order_id\":\"r0a\"}})")), "{summary}");
    Ok(())
}

#[tokio::test]
async fn a_failing_sub_model_fails_the_compression_and_changes_nothing() -> Result<()> {
    let t = long_transcript(3);
    let sub = ScriptedModel::always(Err(LlmError::Permanent { status: 401, message: "Invalid Authentication".into() }));
    let e = compress(&t, 3, 100, &sub, deadline()).await.err().context("must fail")?;
    assert!(matches!(e, CallError::Failed(LlmError::Permanent { status: 401, .. })), "{e:?}");
    Ok(())
}
