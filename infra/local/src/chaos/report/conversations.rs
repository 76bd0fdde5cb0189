//! The conversations' rules: every request answered once, every accepted conversation in the store at the end, and terminal.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use swarm_core::domain::{ConversationStatus, SubtaskRecord};

use super::facts::{RunFacts, answered, failed_or_skipped, scenario_of};
use super::sheet::{Sheet, shorten};

/// Scenario index → the conversations in the store whose message names it.
pub(super) fn per_scenario(f: &RunFacts) -> BTreeMap<usize, BTreeSet<String>> {
    let mut per: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (id, entry) in &f.store {
        if let Some(i) = entry.as_ref().and_then(|(c, _)| scenario_of(c)) {
            per.entry(i).or_default().insert(id.clone());
        }
    }
    per
}

/// What the clients saw of their requests (shown).
pub(super) fn requests(f: &RunFacts, t: &mut Sheet) {
    let given_up = f.clients.values().filter(|c| c.gave_up).count();
    let refused = f.clients.values().filter(|c| c.refused.is_some()).count();
    let reposted = f.clients.values().filter(|c| c.posts > 1).count();
    t.row(
        "requests: accepted (202) / gave up after failures / refused",
        format!(
            "{} / {given_up} / {refused} ({reposted} re-posted with the same key)",
            f.clients.values().filter(|c| c.conversation_id.is_some()).count()
        ),
    );
}

/// Every conversation in the store is terminal at the end; one that is not hung.
pub(super) fn terminal(f: &RunFacts, t: &mut Sheet) {
    let mut by_status: HashMap<ConversationStatus, usize> = HashMap::new();
    let mut open: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut hung = Vec::new();
    for (id, (c, _)) in f.store.iter().filter_map(|(id, e)| e.as_ref().map(|e| (id, e))) {
        *by_status.entry(c.status).or_default() += 1;
        if !c.status.is_terminal() {
            let scenario = scenario_of(c).map_or(String::new(), |i| format!("c{i}, "));
            hung.push(format!("{id} ({scenario}{})", c.status));
            *open.entry(c.status.as_str()).or_default() += 1;
        }
    }
    let count = |s: ConversationStatus| by_status.get(&s).copied().unwrap_or(0);
    t.row(
        "conversations: done / handoff / failed / hung at the end",
        format!(
            "{} / {} / {} / {} (of {} in the store)",
            count(ConversationStatus::Done),
            count(ConversationStatus::Handoff),
            count(ConversationStatus::Failed),
            hung.len(),
            f.store.values().flatten().count()
        ),
    );
    if !hung.is_empty() {
        let by = open.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ");
        t.broken(format!("{} conversations hung ({by}): {}", hung.len(), shorten(&hung)));
    }
}

/// A conversation a client was given (202) is in the store at the end; one only the stream knows
/// of was never written (shown).
pub(super) fn lost(f: &RunFacts, t: &mut Sheet) {
    let answered: BTreeSet<&str> = f.clients.values().filter_map(|c| c.conversation_id.as_deref()).collect();
    let mut lost = Vec::new();
    let mut phantoms = 0usize;
    for id in f.store.iter().filter(|(_, e)| e.is_none()).map(|(id, _)| id) {
        if !answered.contains(id.as_str()) {
            phantoms += 1;
            continue;
        }
        lost.push(match f.audit.conversations.get(id) {
            Some(a) => format!(
                "{id} (the stream saw it {} after {} writes)",
                a.status.map_or("-", ConversationStatus::as_str),
                a.writes
            ),
            None => format!("{id} (never in the stream)"),
        });
    }
    t.row("conversations lost (answered 202, absent at the end)", lost.len());
    t.row("conversations in the stream, never in the table", phantoms);
    if !lost.is_empty() {
        t.broken(format!("{} conversations lost: {}", lost.len(), shorten(&lost)));
    }
}

/// One request, one conversation: a re-post with the same key never starts a second.
pub(super) fn doubled(f: &RunFacts, t: &mut Sheet) {
    let doubled: Vec<String> = per_scenario(f)
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|(i, ids)| format!("c{i}: {}", ids.iter().cloned().collect::<Vec<_>>().join(" + ")))
        .collect();
    t.row("requests answered by two or more conversations", doubled.len());
    if !doubled.is_empty() {
        t.broken(format!("{} requests became two conversations: {}", doubled.len(), shorten(&doubled)));
    }
}

/// A 202 whose conversation ended FAILED: the customer was told it was accepted and got no
/// reply (a re-post during a dead creator's planning lease is answered with the conversation
/// nobody plans; the deadline path fails it). Not one of the run's guarantees: shown, not failed on.
pub(super) fn accepted_failed(f: &RunFacts, t: &mut Sheet) {
    let accepted_failed: Vec<String> = f
        .clients
        .iter()
        .filter_map(|(i, c)| c.conversation_id.as_ref().map(|id| (i, id)))
        .filter(|(_, id)| {
            f.store
                .get(id.as_str())
                .and_then(Option::as_ref)
                .is_some_and(|(c, _)| c.status == ConversationStatus::Failed)
        })
        .map(|(i, id)| format!("c{i} {id}"))
        .collect();
    t.row(
        "accepted (202) but ended FAILED",
        if accepted_failed.is_empty() {
            "0".into()
        } else {
            format!("{} ({})", accepted_failed.len(), shorten(&accepted_failed))
        },
    );
}

/// Answered replies name every subtask that failed or was skipped (shown, not failed on).
pub(super) fn replies(f: &RunFacts, t: &mut Sheet) {
    let mut with_failures = 0usize;
    let mut naming_all = 0usize;
    for (c, subtasks) in f.store.values().flatten() {
        let failed: Vec<&SubtaskRecord> = subtasks.iter().filter(|s| failed_or_skipped(s)).collect();
        if failed.is_empty() || !answered(c) {
            continue;
        }
        with_failures += 1;
        let reply = c.reply.as_deref().unwrap_or("");
        if failed.iter().all(|s| names_subtask(reply, s)) {
            naming_all += 1;
        }
    }
    t.row("replies naming every failed or skipped subtask", format!("{naming_all} of {with_failures}"));
}

/// Whether `text` holds `word` with no letter, digit or `_` on either side.
pub(super) fn names(text: &str, word: &str) -> bool {
    let inner = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(inner) && !after.is_some_and(inner)
    })
}

/// Whether a reply names a subtask: by its id, or by its instruction (the part before a
/// scripted `[call …]`, as the model-free reply quotes it).
pub(super) fn names_subtask(reply: &str, s: &SubtaskRecord) -> bool {
    let instruction = s.subtask.instruction.split(" [call ").next().unwrap_or("").trim();
    names(reply, s.subtask.id.as_str()) || (!instruction.is_empty() && reply.contains(instruction))
}
