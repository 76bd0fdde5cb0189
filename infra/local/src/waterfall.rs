//! A conversation's trace as a terminal waterfall: its span tree in time order, one bar per span on a common time axis, the critical path marked (`★`), and where the critical path's time went — what `swarm-local ask --trace` prints when no collector is at hand.
//!
//! The critical path follows the work the end waited for: from the span that
//! finished last back through the child each span waited for (the latest-ending
//! one that started before the point reached so far), so a conversation's path
//! runs plan → the slowest subtask (its LLM rounds and tool calls) → the reply,
//! even though the subtasks and the reply outlive the request that started them.
//!
//! [`collect`] gathers a trace's spans as they end: it waits, within its patience,
//! until the span that ends the conversation has arrived and every span's parent
//! has too, so a worker's enclosing spans that close just after the reply are never
//! missing (their children would otherwise be drawn at the root).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use swarm_adapters::telemetry::FinishedSpan;

/// Width of the time axis, in characters.
pub const BAR_WIDTH: usize = 48;

/// The span ids of the critical path of `spans` (one trace), root first.
pub fn critical_path(spans: &[FinishedSpan]) -> Vec<String> {
    let tree = Tree::new(spans);
    let mut path = Vec::new();
    for root in &tree.roots {
        let cursor = tree.effective_end(*root);
        tree.walk(*root, cursor, &mut path);
    }
    path.into_iter().map(|i| spans[i].span_id.clone()).collect()
}

/// Span indices by parent, roots, and the end of each span's whole subtree.
struct Tree<'a> {
    spans: &'a [FinishedSpan],
    children: HashMap<usize, Vec<usize>>,
    roots: Vec<usize>,
    ends: Vec<SystemTime>,
}

impl<'a> Tree<'a> {
    fn new(spans: &'a [FinishedSpan]) -> Self {
        let index: HashMap<&str, usize> = spans.iter().enumerate().map(|(i, s)| (s.span_id.as_str(), i)).collect();
        let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut roots = Vec::new();
        for (i, s) in spans.iter().enumerate() {
            match s.parent_id.as_deref().and_then(|p| index.get(p)) {
                Some(&parent) => children.entry(parent).or_default().push(i),
                None => roots.push(i),
            }
        }
        for list in children.values_mut() {
            list.sort_by_key(|&i| (spans[i].start, spans[i].end));
        }
        roots.sort_by_key(|&i| spans[i].start);
        let mut tree = Self { spans, children, roots, ends: vec![SystemTime::UNIX_EPOCH; spans.len()] };
        for root in tree.roots.clone() {
            tree.fill_ends(root);
        }
        tree
    }

    /// A span's end, or its latest descendant's (messages and triggers outlive their senders).
    fn fill_ends(&mut self, i: usize) -> SystemTime {
        let mut end = self.spans[i].end;
        for c in self.children.get(&i).cloned().unwrap_or_default() {
            end = end.max(self.fill_ends(c));
        }
        self.ends[i] = end;
        end
    }

    fn effective_end(&self, i: usize) -> SystemTime {
        self.ends[i]
    }

    fn walk(&self, i: usize, limit: SystemTime, path: &mut Vec<usize>) {
        path.push(i);
        let mut cursor = self.ends[i].min(limit);
        let kids = self.children.get(&i).map(Vec::as_slice).unwrap_or_default();
        let mut taken: HashSet<usize> = HashSet::new();
        loop {
            // A child the point waited for ended by then — or a little after (the worker that
            // triggered the reply is still returning when the reply starts): by at most 5 % of
            // its own time. A child that ran on well past the point ran alongside, not before.
            let waited_for = |c: usize| {
                let reach = self.ends[c].duration_since(self.spans[c].start).unwrap_or_default();
                self.ends[c] <= cursor + (reach / 20).max(Duration::from_millis(1))
            };
            let next = kids
                .iter()
                .filter(|&&c| !taken.contains(&c) && self.spans[c].start < cursor && waited_for(c))
                .max_by_key(|&&c| (self.ends[c].min(cursor), self.spans[c].start));
            let Some(&c) = next else { break };
            taken.insert(c);
            self.walk(c, cursor, path);
            cursor = self.spans[c].start;
        }
    }
}

/// The spans of trace `trace_id`, taken from `take` (each call answers the spans finished since the
/// last) until the trace is whole: a span named `last` has arrived and every span's parent within
/// the trace has too — or `patience` has passed. Answers the spans and whether the trace is whole.
pub async fn collect(
    mut take: impl FnMut() -> Vec<FinishedSpan>,
    trace_id: &str,
    last: &str,
    patience: Duration,
) -> (Vec<FinishedSpan>, bool) {
    let give_up = tokio::time::Instant::now() + patience;
    let mut spans: Vec<FinishedSpan> = Vec::new();
    loop {
        spans.extend(take().into_iter().filter(|s| s.trace_id == trace_id));
        let whole = spans.iter().any(|s| s.name == last) && orphans(&spans) == 0;
        if whole || tokio::time::Instant::now() >= give_up {
            return (spans, whole);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Spans whose parent is not among `spans` (roots have none, and are not counted).
pub fn orphans(spans: &[FinishedSpan]) -> usize {
    let ids: HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    spans.iter().filter(|s| s.parent_id.as_deref().is_some_and(|p| !ids.contains(p))).count()
}

/// The trace's tree as text, without times or ids: each span's name, its children in name order,
/// indented — equal for two runs that did the same work in the same structure.
pub fn shape(spans: &[FinishedSpan]) -> String {
    fn write(tree: &Tree<'_>, i: usize, depth: usize) -> String {
        let mut kids: Vec<String> =
            tree.children.get(&i).map(|c| c.iter().map(|&k| write(tree, k, depth + 1)).collect()).unwrap_or_default();
        kids.sort();
        format!("{}{}\n{}", "  ".repeat(depth), tree.spans[i].name, kids.concat())
    }
    let tree = Tree::new(spans);
    let mut roots: Vec<String> = tree.roots.iter().map(|&r| write(&tree, r, 0)).collect();
    roots.sort();
    roots.concat()
}

/// A short digest of [`shape`] (FNV-1a, 32 bits in hex): two runs with the same digest drew the
/// same span tree.
pub fn shape_digest(spans: &[FinishedSpan]) -> String {
    let hash = shape(spans).bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    format!("{hash:08x}")
}

/// The function a span ran in: its own target's crate, or its nearest ancestor's that is a function.
fn function_of(spans: &[FinishedSpan], index: &HashMap<&str, usize>, mut i: usize) -> &'static str {
    for _ in 0..64 {
        let target = spans[i].attr("target").unwrap_or_default();
        let krate = target.split("::").next().unwrap_or_default();
        match krate {
            "orchestrator" => return "orchestrator",
            "worker" => return "worker",
            "aggregator" => return "aggregator",
            "tool_gateway" => return "gateway",
            _ => {}
        }
        match spans[i].parent_id.as_deref().and_then(|p| index.get(p)) {
            Some(&p) => i = p,
            None => break,
        }
    }
    ""
}

/// One line's text for a span: its name and the attributes that say what it did.
pub fn label(span: &FinishedSpan) -> String {
    let a = |k: &str| span.attr(k);
    let mut out = span.name.clone();
    match span.name.as_str() {
        n if n.starts_with("chat ") => {
            if let Some(p) = a("swarm.llm.purpose") {
                let _ = write!(out, " · {p}");
            }
            if let (Some(i), Some(o)) = (a("gen_ai.usage.input_tokens"), a("gen_ai.usage.output_tokens")) {
                let _ = write!(out, " · {i} in / {o} out tok");
            }
            if let Some(r) = a("gen_ai.response.finish_reasons") {
                let _ = write!(out, " · {r}");
            }
            if let Some(r) = a("swarm.llm.retries").filter(|r| *r != "0") {
                let _ = write!(out, " · {r} retries ({})", a("swarm.llm.retry_class").unwrap_or("?"));
            }
            if let Some(e) = a("error.type") {
                let _ = write!(out, " · failed: {e}");
            }
        }
        n if n.starts_with("execute_tool ") => {
            if let Some(o) = a("swarm.tool.outcome") {
                let _ = write!(out, " · {o}");
            }
        }
        "process task" | "subtask" => {
            if let Some(s) = a("subtask_id").filter(|s| !s.is_empty()) {
                let _ = write!(out, " {s}");
            }
            if let Some(n) = a("attempt") {
                let _ = write!(out, " (attempt {n})");
            }
        }
        n if n.starts_with("send ") => {
            if let Some(m) = a("messaging.batch.message_count") {
                let _ = write!(out, " · {m} message{}", if m == "1" { "" } else { "s" });
            }
            if let Some(d) = a("swarm.delay_seconds").filter(|d| *d != "0") {
                let _ = write!(out, " · delayed {d} s");
            }
        }
        _ => {}
    }
    if span.error && !out.contains("failed") {
        out.push_str(" · error");
    }
    out
}

fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 10_000.0 { format!("{:.1} s", ms / 1000.0) } else { format!("{ms:.0} ms") }
}

/// Renders one trace as a waterfall (see the module doc). Spans shorter than 0.5 % of the whole
/// (and at least 1 ms) that are off the critical path are left out, and counted at the end.
pub fn render(spans: &[FinishedSpan]) -> String {
    let mut out = String::new();
    if spans.is_empty() {
        out.push_str("(no spans recorded)\n");
        return out;
    }
    let tree = Tree::new(spans);
    let index: HashMap<&str, usize> = spans.iter().enumerate().map(|(i, s)| (s.span_id.as_str(), i)).collect();
    let t0 = spans.iter().map(|s| s.start).min().unwrap_or(SystemTime::UNIX_EPOCH);
    let t1 = spans.iter().map(|s| s.end).max().unwrap_or(t0);
    let total = t1.duration_since(t0).unwrap_or_default().max(Duration::from_micros(1));
    let critical: HashSet<String> = critical_path(spans).into_iter().collect();
    let hide_below = (total / 200).max(Duration::from_millis(1));
    let at = |t: SystemTime| t.duration_since(t0).unwrap_or_default();
    let col = |d: Duration| ((d.as_secs_f64() / total.as_secs_f64()) * BAR_WIDTH as f64) as usize;

    let _ = writeln!(
        out,
        "trace {} · {} end to end · {} spans · ★ critical path · tree {}",
        spans[tree.roots[0]].trace_id,
        millis(total),
        spans.len(),
        shape_digest(spans)
    );
    let _ = writeln!(
        out,
        "{:>8} {:>8}   {:<width$}",
        "start",
        "took",
        format!("0 … {}", millis(total)),
        width = BAR_WIDTH + 2
    );
    let mut hidden = 0usize;
    let mut stack: Vec<(usize, usize)> = tree.roots.iter().rev().map(|&r| (r, 0)).collect();
    while let Some((i, depth)) = stack.pop() {
        if let Some(kids) = tree.children.get(&i) {
            stack.extend(kids.iter().rev().map(|&c| (c, depth + 1)));
        }
        let s = &spans[i];
        let on_path = critical.contains(&s.span_id);
        if !on_path && s.duration() < hide_below {
            hidden += 1;
            continue;
        }
        let (from, to) = (col(at(s.start)), col(at(s.end)).max(col(at(s.start)) + 1).min(BAR_WIDTH));
        let from = from.min(BAR_WIDTH - 1);
        let mut bar = String::with_capacity(BAR_WIDTH * 3);
        for c in 0..BAR_WIDTH {
            bar.push(if c >= from && c < to { if on_path { '█' } else { '▒' } } else { ' ' });
        }
        let function = function_of(spans, &index, i);
        let parent_function = s.parent_id.as_deref().and_then(|p| index.get(p)).map(|&p| function_of(spans, &index, p));
        let tag = if !function.is_empty() && parent_function != Some(function) {
            format!("  [{function}]")
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{:>8} {:>8} {}│{bar}│ {}{}{tag}",
            millis(at(s.start)),
            millis(s.duration()),
            if on_path { '★' } else { ' ' },
            "  ".repeat(depth.min(12)),
            label(s)
        );
    }
    if hidden > 0 {
        let _ = writeln!(out, "({hidden} spans under {} off the critical path not shown)", millis(hide_below));
    }
    let _ = writeln!(out, "{}", summary(spans, &critical, total));
    let missing = orphans(spans);
    if missing > 0 {
        let _ = writeln!(out, "(incomplete: {missing} spans arrived without their parent and are drawn at the root)");
    }
    out
}

/// Where the critical path's time went: model rounds, tool calls, store and queue operations,
/// and the rest (delivery, scheduling, the functions' own work).
fn summary(spans: &[FinishedSpan], critical: &HashSet<String>, total: Duration) -> String {
    let mut llm = (Duration::ZERO, 0);
    let mut tools = (Duration::ZERO, 0);
    let mut store = (Duration::ZERO, 0);
    let mut queue = (Duration::ZERO, 0);
    for s in spans.iter().filter(|s| critical.contains(&s.span_id)) {
        let bucket = if s.name.starts_with("chat ") {
            &mut llm
        } else if s.name.starts_with("execute_tool ") {
            &mut tools
        } else if s.attr("db.operation.name").is_some() {
            &mut store
        } else if s.kind == "producer" {
            &mut queue
        } else {
            continue;
        };
        bucket.0 += s.duration();
        bucket.1 += 1;
    }
    let rest = total.saturating_sub(llm.0 + tools.0 + store.0 + queue.0);
    let pct = |d: Duration| 100.0 * d.as_secs_f64() / total.as_secs_f64();
    format!(
        "critical path {}: {} LLM rounds {} ({:.0} %) · {} tool calls {} ({:.0} %) · {} store operations {} ({:.0} %) · {} sends {} ({:.0} %) · other (delivery, scheduling, function code) {} ({:.0} %)",
        millis(total),
        llm.1,
        millis(llm.0),
        pct(llm.0),
        tools.1,
        millis(tools.0),
        pct(tools.0),
        store.1,
        millis(store.0),
        pct(store.0),
        queue.1,
        millis(queue.0),
        pct(queue.0),
        millis(rest),
        pct(rest)
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn span(id: &str, parent: Option<&str>, name: &str, start_ms: u64, end_ms: u64) -> FinishedSpan {
        let t = |ms| SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000 + ms);
        FinishedSpan {
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            span_id: id.into(),
            parent_id: parent.map(str::to_owned),
            name: name.into(),
            kind: "internal",
            start: t(start_ms),
            end: t(end_ms),
            attributes: BTreeMap::new(),
            error: false,
            links: vec![],
        }
    }

    /// A conversation: the request plans and queues two subtasks (w01 fast, w02 slow) and ends;
    /// the subtasks outlive it; the reply is triggered by the last one.
    fn conversation() -> Vec<FinishedSpan> {
        vec![
            span("root", None, "POST /conversations", 0, 700),
            span("plan", Some("root"), "plan", 10, 600),
            span("chat-plan", Some("plan"), "chat m", 20, 590),
            span("send", Some("root"), "send tasks", 610, 620),
            span("w01", Some("send"), "process task", 630, 1200),
            span("w01-chat", Some("w01"), "chat m", 640, 1190),
            // Still returning (counting, releasing) when the reply it triggered starts.
            span("w02", Some("send"), "process task", 631, 2960),
            span("w02-chat1", Some("w02"), "chat m", 640, 1500),
            span("w02-tool", Some("w02"), "execute_tool shop__get_order", 1500, 1700),
            span("w02-chat2", Some("w02"), "chat m", 1700, 2890),
            span("agg", Some("root"), "aggregate", 2950, 3100),
            span("agg-chat", Some("agg"), "chat m", 2960, 3090),
        ]
    }

    #[test]
    fn the_critical_path_runs_through_the_plan_the_slowest_subtask_and_the_reply() {
        let path = critical_path(&conversation());
        assert_eq!(
            path,
            vec!["root", "agg", "agg-chat", "send", "w02", "w02-chat2", "w02-tool", "w02-chat1", "plan", "chat-plan"]
        );
    }

    #[test]
    fn the_waterfall_marks_the_critical_path_and_says_where_its_time_went() {
        let text = render(&conversation());
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("trace 4bf92f3577b34da6a3ce929d0e0e4736 · 3100 ms end to end · 12 spans"),
            "{text}"
        );
        let line_of = |needle: &str| *lines.iter().find(|l| l.contains(needle)).unwrap();
        assert!(line_of("execute_tool shop__get_order").contains('★'), "{text}");
        let w01 = lines.iter().find(|l| l.contains("process task") && !l.contains('★'));
        assert!(w01.is_some(), "the fast subtask is off the path: {text}");
        // The bars share one axis: the reply's bar ends at the right edge.
        let reply = line_of("aggregate");
        assert!(reply.contains("█│"), "{reply}");
        assert!(
            text.contains("critical path 3100 ms: 4 LLM rounds 2750 ms (89 %) · 1 tool calls 200 ms (6 %)"),
            "{text}"
        );
    }

    #[test]
    fn spans_that_outlive_their_parent_extend_its_reach() {
        let spans = conversation();
        let tree = Tree::new(&spans);
        let root = tree.roots[0];
        assert_eq!(tree.effective_end(root), spans.iter().map(|s| s.end).max().unwrap());
    }

    #[tokio::test]
    async fn the_collector_waits_for_a_parent_that_ends_after_the_reply() {
        let mut trace = vec![
            span("r", None, "POST /conversations", 0, 100),
            span("w", Some("r"), "process task w01", 10, 95),
            span("c", Some("w"), "chat offline", 20, 40),
            span("a", Some("r"), "aggregate", 80, 90),
        ];
        for s in &mut trace {
            s.trace_id = "t1".into();
        }
        // The worker's own span ends after the reply: the first take lacks it.
        let mut batches =
            vec![vec![trace[3].clone(), trace[2].clone(), trace[0].clone()], vec![], vec![trace[1].clone()]];
        batches.reverse();
        let (spans, whole) =
            collect(move || batches.pop().unwrap_or_default(), "t1", "aggregate", Duration::from_secs(5)).await;
        assert!(whole);
        assert_eq!(spans.len(), 4);
        assert_eq!(orphans(&spans), 0);
        assert_eq!(shape(&spans), "POST /conversations\n  aggregate\n  process task w01\n    chat offline\n");
        // Without the parent, the patience ends the wait and the trace says it is incomplete.
        let partial = vec![trace[3].clone(), trace[2].clone(), trace[0].clone()];
        let mut once = Some(partial);
        let (spans, whole) =
            collect(move || once.take().unwrap_or_default(), "t1", "aggregate", Duration::from_millis(100)).await;
        assert!(!whole);
        assert_eq!(orphans(&spans), 1);
        assert!(render(&spans).contains("(incomplete: 1 spans arrived without their parent"));
    }
}
