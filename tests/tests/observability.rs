//! Issue 12's picture, checked on a whole conversation through the local stack (the mock LLM on the wire, the gateway and the demo shop over MCP): one trace across orchestrator, workers, gateway and aggregator with the expected parentage, one span per LLM round and per tool call with the GenAI attributes; the conversation's metrics in the EMF output with the catalogue's names, units and dimensions; nothing secret or customer-written in any span or metric. And a conversation only the sweep moves on: the sweep's own span, linked to the conversation's trace, and its counts.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use mock_llm::{AgentConfig, AgentSubtask, MockConfig, MockHandle, MockLlm, Mode};
use serde_json::{Value, json};
use swarm_adapters::llm::{LlmConfig, build_models};
use swarm_adapters::telemetry::{self, FinishedSpan, MetricsSink, Options, Telemetry, TelemetryConfig, TraceExport};
use swarm_core::domain::{ConversationId, ConversationStatus};
use swarm_core::faults::{CrashPoint, FaultPlan};
use swarm_core::obs::metrics::{CATALOG, Kind, NAMESPACE, find};
use swarm_core::timings::Timings;
use swarm_core::view::ConversationView;
use swarm_local::{LocalStack, StackOptions};

/// The customer's message: a phrase of its own, an order, a coupon.
const MESSAGE: &str = "My name is Quill Marlowe-Zephyr. Where is order A1029, and can I still use coupon SAVE20?";
/// The LLM key the models are built with: it must never be seen again.
const API_KEY: &str = "sk-obs-test-3f9c1d5e7a";
const MODEL: &str = "mock-gpt-obs";

/// Telemetry as a Lambda installs it, with spans kept for the test and EMF metrics; once per process.
fn telemetry() -> Telemetry {
    telemetry::install(Options {
        default_level: "warn".into(),
        config: TelemetryConfig { service: "observability-test".into(), traces: TraceExport::Off, on_lambda: false },
        keep_spans: true,
        metrics: MetricsSink::Emf,
    })
    .expect("telemetry installs")
}

/// The two tests share the process's recorder and span buffer: one conversation at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn subtasks() -> Vec<AgentSubtask> {
    vec![
        AgentSubtask::new("Get the status of order A1029", &[("shop__get_order", json!({"order_id": "A1029"}))]),
        AgentSubtask::new(
            "Check coupon SAVE20 and the refund policy",
            &[("shop__check_coupon", json!({"code": "SAVE20"})), ("shop__get_refund_policy", json!({}))],
        ),
    ]
}

/// What one conversation left behind.
struct Run {
    view: ConversationView,
    trace_id: String,
    spans: Vec<FinishedSpan>,
    /// Chat requests the mock LLM answered.
    llm_requests: u64,
    mock: MockHandle,
}

/// One conversation through the local stack with the mock LLM as an agent; answers its view,
/// the trace id its item carries and every span of that trace (the aggregator's included).
async fn converse(telemetry: &Telemetry) -> Result<Run> {
    let agent = AgentConfig { subtasks: subtasks(), reply_from_results: true, ..AgentConfig::default() };
    let (_, mock) = MockLlm::start(MockConfig { mode: Mode::Agent(agent), ..MockConfig::default() }).await?;
    let base = mock.base_url();
    let llm = LlmConfig::from_lookup(|k| match k {
        "LLM_BASE_URL" => Some(base.clone()),
        "LLM_API_KEY" => Some(API_KEY.to_owned()),
        "LLM_MODEL" => Some(MODEL.to_owned()),
        _ => None,
    })?;
    let models = build_models(&llm)?;
    let stack = LocalStack::start(StackOptions { models: Some(models), ..StackOptions::default() }).await?;
    let _ = telemetry.take_spans(); // the stack's warm-up is not the conversation
    let (status, body) = stack.post_conversation(MESSAGE, "C104", None).await?;
    anyhow::ensure!(status == 202, "{body}");
    let id = body["conversation_id"].as_str().context("conversation id")?.to_owned();
    let view = stack.wait_finished(&id, Duration::from_secs(60)).await?;
    let conversation =
        stack.store().get_conversation(&ConversationId::parse(&id).context("id")?).await?.context("item")?;
    let trace_id = conversation
        .trace_parent
        .as_deref()
        .and_then(|t| t.split('-').nth(1))
        .context("the conversation item carries its trace")?
        .to_owned();
    // The aggregator's spans end right after the reply is written.
    let mut spans = Vec::new();
    for _ in 0..200 {
        spans.extend(telemetry.take_spans());
        if spans.iter().any(|s| s.trace_id == trace_id && s.name == "aggregate") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stack.shutdown().await;
    let llm_requests = mock.stats().requests;
    Ok(Run { view, trace_id, spans, llm_requests, mock })
}

/// Every text a span carries: its name and each attribute's key and value.
fn span_texts(spans: &[FinishedSpan]) -> Vec<String> {
    spans
        .iter()
        .flat_map(|s| std::iter::once(s.name.clone()).chain(s.attributes.iter().map(|(k, v)| format!("{k}={v}"))))
        .collect()
}

/// Texts that must never reach a span or a metric: the customer's words, the tool arguments, the
/// plan's instructions and the subtasks' answers (model output), the reply, the LLM key.
fn forbidden(run: &Run) -> Vec<String> {
    let mut out: Vec<String> = vec![
        MESSAGE.into(),
        "Quill".into(),
        "Marlowe-Zephyr".into(),
        "A1029".into(),
        "SAVE20".into(),
        API_KEY.into(),
        "Bearer".into(),
    ];
    for s in &run.view.subtasks {
        out.push(s.instruction.clone());
    }
    if let Some(reply) = &run.view.reply {
        out.extend(reply.lines().filter(|l| l.trim().len() > 12).map(str::to_owned));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_conversation_is_one_trace_across_every_function_with_a_span_per_llm_round_and_tool_call() -> Result<()> {
    let telemetry = telemetry();
    let _one = ONE_AT_A_TIME.lock().await;
    let run = converse(&telemetry).await?;
    assert_eq!(run.view.status, ConversationStatus::Done, "{:?}", run.view);
    let trace: Vec<&FinishedSpan> = run.spans.iter().filter(|s| s.trace_id == run.trace_id).collect();
    let by_id: HashMap<&str, &FinishedSpan> = trace.iter().map(|s| (s.span_id.as_str(), *s)).collect();
    let parent = |s: &FinishedSpan| s.parent_id.as_deref().and_then(|p| by_id.get(p).copied());
    let named = |name: &str| trace.iter().copied().filter(|s| s.name == name).collect::<Vec<_>>();
    let target =
        |s: &FinishedSpan| s.attr("target").unwrap_or_default().split("::").next().unwrap_or_default().to_owned();

    // One root: the orchestrator's request span, and every span of the trace descends from it.
    let roots: Vec<&&FinishedSpan> = trace.iter().filter(|s| s.parent_id.is_none()).collect();
    assert_eq!(roots.len(), 1, "{roots:#?}");
    let root = roots[0];
    assert_eq!(
        (root.name.as_str(), root.kind, root.attr("http.response.status_code")),
        ("POST /conversations", "server", Some("202"))
    );
    for s in &trace {
        let mut at = *s;
        for _ in 0..64 {
            match parent(at) {
                Some(p) => at = p,
                None => break,
            }
        }
        assert_eq!(at.span_id, root.span_id, "{} is not under the request", s.name);
    }
    // Every function took part in the one trace.
    let functions: BTreeSet<String> = trace.iter().map(|s| target(s)).collect();
    for f in ["orchestrator", "worker", "aggregator", "tool_gateway", "swarm_core"] {
        assert!(functions.contains(f), "no span of {f} in the trace: {functions:?}");
    }

    // The SQS hop: each subtask's consumer span is the child of the producer span that sent it.
    let records: Vec<&FinishedSpan> =
        named("process task").into_iter().filter(|s| s.attr("subtask_id").is_some_and(|i| !i.is_empty())).collect();
    assert_eq!(records.len(), run.view.subtasks.len());
    for r in &records {
        assert_eq!(r.kind, "consumer");
        let sender = parent(r).context("a record has its sender")?;
        assert_eq!((sender.name.as_str(), sender.kind), ("send tasks", "producer"));
        let subtask = trace.iter().find(|s| s.name == "subtask" && s.parent_id.as_deref() == Some(r.span_id.as_str()));
        assert!(subtask.is_some(), "the attempt runs under its record");
    }
    // The stream hop: the aggregator continues the trace the conversation item carries.
    let aggregate = named("aggregate");
    assert_eq!(aggregate.len(), 1);
    assert_eq!(
        (parent(aggregate[0]).map(|p| p.span_id.as_str()), aggregate[0].kind),
        (Some(root.span_id.as_str()), "consumer")
    );

    // One span per LLM round, the rounds the mock answered; each with the GenAI attributes.
    let chats: Vec<&FinishedSpan> = trace.iter().copied().filter(|s| s.name.starts_with("chat ")).collect();
    assert_eq!(chats.len() as u64, run.llm_requests, "one span per model request (no retries happened)");
    for c in &chats {
        assert_eq!(c.name, format!("chat {MODEL}"));
        assert_eq!(
            (c.kind, c.attr("gen_ai.operation.name"), c.attr("gen_ai.request.model")),
            ("client", Some("chat"), Some(MODEL))
        );
        for attr in [
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.response.finish_reasons",
            "swarm.llm.attempts",
        ] {
            assert!(c.attr(attr).is_some(), "{attr} missing on {c:#?}");
        }
        assert!(c.attr("gen_ai.usage.input_tokens").unwrap().parse::<u64>()? > 0);
    }
    let purposes: BTreeMap<&str, usize> = chats.iter().fold(BTreeMap::new(), |mut m, c| {
        *m.entry(c.attr("swarm.llm.purpose").unwrap_or("?")).or_default() += 1;
        m
    });
    assert_eq!(purposes.get("plan"), Some(&1), "{purposes:?}");
    assert_eq!(purposes.get("reply"), Some(&1), "{purposes:?}");
    assert_eq!(
        purposes.get("work"),
        Some(&(2 * run.view.subtasks.len())),
        "a tool round and an answer round each: {purposes:?}"
    );
    for c in &chats {
        let owner = parent(c).map(|p| p.name.as_str());
        let expected = match c.attr("swarm.llm.purpose") {
            Some("plan") => "plan",
            Some("work") => "subtask",
            _ => "aggregate",
        };
        assert_eq!(owner, Some(expected), "{c:#?}");
    }

    // One span per tool call, the gateway's server span under it, the upstream call under that.
    let tool_calls: usize = run.view.subtasks.iter().map(|s| s.tools_used.len()).sum();
    let executes: Vec<&FinishedSpan> = trace.iter().copied().filter(|s| s.name.starts_with("execute_tool ")).collect();
    assert_eq!((executes.len(), tool_calls), (3, 3));
    for e in &executes {
        let tool = e.name.trim_start_matches("execute_tool ");
        assert_eq!(
            (e.attr("gen_ai.tool.name"), e.attr("swarm.role"), e.attr("swarm.tool.outcome")),
            (Some(tool), Some("support"), Some("ok"))
        );
        assert_eq!(parent(e).map(|p| p.name.as_str()), Some("subtask"));
        let served: Vec<&&FinishedSpan> =
            trace.iter().filter(|s| s.parent_id.as_deref() == Some(e.span_id.as_str())).collect();
        assert_eq!(served.len(), 1, "the gateway's span of {tool}");
        assert_eq!(
            (served[0].name.clone(), served[0].kind, target(served[0])),
            (format!("tools/call {tool}"), "server", "tool_gateway".to_owned())
        );
        let upstream: Vec<&&FinishedSpan> =
            trace.iter().filter(|s| s.parent_id.as_deref() == Some(served[0].span_id.as_str())).collect();
        assert_eq!(upstream.len(), 1);
        assert_eq!(
            (upstream[0].name.clone(), upstream[0].attr("server.address")),
            (format!("tools/call {}", tool.trim_start_matches("shop__")), Some("shop"))
        );
    }
    // Store and queue operations have their own spans.
    for op in [
        "memory create_conversation",
        "memory start_run",
        "memory begin_attempt",
        "memory record_result",
        "memory count_finished",
        "memory finish_conversation",
    ] {
        assert!(!named(op).is_empty(), "no span {op}");
    }

    // Nothing the customer wrote, no argument, no model output, no secret in any span.
    let texts = span_texts(&run.spans);
    for bad in forbidden(&run) {
        let found: Vec<&String> = texts.iter().filter(|t| t.contains(&bad)).collect();
        assert!(found.is_empty(), "{bad:?} reached a span: {found:?}");
    }
    drop(run.mock);
    Ok(())
}

/// The metrics of one EMF document: name → (unit, dimension names, dimension values, value).
type EmfMetrics = BTreeMap<String, Vec<(Option<String>, Vec<String>, BTreeMap<String, String>, Value)>>;

fn parse_emf(text: &str) -> Result<EmfMetrics> {
    let mut out: EmfMetrics = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let doc: Value = serde_json::from_str(line).with_context(|| format!("EMF line is JSON: {line}"))?;
        let cw = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(cw["Namespace"], NAMESPACE, "{line}");
        assert!(doc["_aws"]["Timestamp"].as_u64().is_some(), "{line}");
        let dims: Vec<String> = cw["Dimensions"][0]
            .as_array()
            .context("one dimension set")?
            .iter()
            .map(|d| d.as_str().unwrap_or_default().to_owned())
            .collect();
        let values: BTreeMap<String, String> =
            dims.iter().map(|d| (d.clone(), doc[d].as_str().unwrap_or_default().to_owned())).collect();
        for m in cw["Metrics"].as_array().context("metrics")? {
            let name = m["Name"].as_str().context("name")?.to_owned();
            let unit = m.get("Unit").and_then(Value::as_str).map(str::to_owned);
            out.entry(name.clone()).or_default().push((unit, dims.clone(), values.clone(), doc[&name].clone()));
        }
    }
    Ok(out)
}

fn total(v: &Value) -> f64 {
    match v {
        Value::Array(a) => a.iter().filter_map(Value::as_f64).sum(),
        other => other.as_f64().unwrap_or(0.0),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_metrics_reach_the_emf_output_with_the_catalogues_names_units_and_dimensions() -> Result<()> {
    let telemetry = telemetry();
    let _one = ONE_AT_A_TIME.lock().await;
    telemetry.write_metrics(&mut std::io::sink())?; // what an earlier test recorded is not this conversation's
    let run = converse(&telemetry).await?;
    assert_eq!(run.view.status, ConversationStatus::Done);
    let mut out = Vec::new();
    telemetry.write_metrics(&mut out)?;
    let text = String::from_utf8(out)?;
    let emf = parse_emf(&text)?;

    // Every line is a metric of the catalogue, with its unit and exactly its dimensions.
    for (name, points) in &emf {
        let def = find(name).with_context(|| format!("{name} is not in the catalogue"))?;
        for (unit, dims, values, _) in points {
            assert_eq!(unit.as_deref(), def.unit.cloudwatch(), "{name}'s unit");
            let expected: Vec<String> = def.labels.iter().map(|l| (*l).to_owned()).collect();
            assert_eq!(dims, &expected, "{name}'s dimensions");
            for v in values.values() {
                assert!(!v.is_empty() && v.len() <= 64, "{name}: dimension value {v:?}");
                assert!(ConversationId::parse(v).is_none(), "{name}: a conversation id as a dimension");
            }
        }
    }
    let one = |name: &str, dims: &[(&str, &str)]| -> f64 {
        emf.get(name)
            .into_iter()
            .flatten()
            .filter(|(_, _, values, _)| dims.iter().all(|(k, v)| values.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, _, _, v)| total(v))
            .sum()
    };
    let count = |name: &str, dims: &[(&str, &str)]| -> usize {
        emf.get(name)
            .into_iter()
            .flatten()
            .filter(|(_, _, values, _)| dims.iter().all(|(k, v)| values.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, _, _, v)| v.as_array().map_or(1, Vec::len))
            .sum()
    };
    let subtasks = run.view.subtasks.len() as f64;
    assert_eq!(one("swarm_conversations_started", &[]), 1.0);
    assert_eq!(count("swarm_planning_seconds", &[("outcome", "planned")]), 1);
    assert_eq!(one("swarm_subtasks_per_conversation", &[]), subtasks);
    assert_eq!(count("swarm_conversation_seconds", &[("status", "done")]), 1);
    assert!(one("swarm_conversation_seconds", &[("status", "done")]) > 0.0);
    assert_eq!(one("swarm_subtasks_finished", &[("status", "succeeded")]), subtasks);
    assert_eq!(count("swarm_subtask_attempt_seconds", &[]), run.view.subtasks.len());
    assert_eq!(one("swarm_replies", &[("by", "model")]), 1.0);
    assert_eq!(one("swarm_llm_calls", &[("model", MODEL)]), run.llm_requests as f64);
    assert_eq!(count("swarm_llm_call_seconds", &[("model", MODEL), ("purpose", "work")]), 2 * run.view.subtasks.len());
    assert!(one("swarm_llm_tokens", &[("model", MODEL), ("purpose", "plan"), ("kind", "input")]) > 0.0);
    assert!(one("swarm_llm_tokens", &[("model", MODEL), ("purpose", "reply"), ("kind", "output")]) > 0.0);
    for tool in ["shop__get_order", "shop__check_coupon", "shop__get_refund_policy"] {
        assert_eq!(one("swarm_tool_calls", &[("tool", tool), ("outcome", "ok")]), 1.0, "{tool}");
        assert_eq!(count("swarm_tool_call_seconds", &[("tool", tool)]), 1, "{tool}");
    }
    // The gauge is written at every flush; nothing runs now.
    assert_eq!(one("swarm_active_workers", &[]), 0.0);
    assert!(
        emf.keys().all(|k| CATALOG.iter().any(|d| d.name == k && (d.kind != Kind::Counter || !k.ends_with("_total"))))
    );

    for bad in forbidden(&run) {
        assert!(!text.contains(&bad), "{bad:?} reached a metric");
    }
    drop(run.mock);
    Ok(())
}

/// Kills the first invocation that reaches `point`, and no other.
struct CrashOnce(CrashPoint, AtomicBool);

impl FaultPlan for CrashOnce {
    fn crash(&self, point: CrashPoint) -> bool {
        point == self.0 && !self.1.swap(true, Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_the_sweep_closes_is_counted_and_its_sweep_span_links_to_the_conversations_trace() -> Result<()>
{
    let telemetry = telemetry();
    let _one = ONE_AT_A_TIME.lock().await;
    // The orchestrator dies right after writing the conversation: no deadline message was armed, so
    // only the sweep (every 250 ms at 1/240) finds it once its deadline (1200 s → 5 s) passed.
    let mut timings = Timings::standard().clone();
    timings.conversation.deadline = Duration::from_secs(1200);
    let stack = LocalStack::start(StackOptions {
        faults: Some(Arc::new(CrashOnce(CrashPoint::OrchestratorAfterCreate, AtomicBool::new(false)))),
        timings,
        time_scale: 1.0 / 240.0,
        ..StackOptions::default()
    })
    .await?;
    let _ = telemetry.take_spans();
    telemetry.write_metrics(&mut std::io::sink())?;
    let died = stack.post_conversation(MESSAGE, "C104", None).await;
    anyhow::ensure!(died.is_err(), "the orchestrator was to die: {died:?}");
    let mut overdue = Vec::new();
    for shard in 0..stack.timings().sweep.shards {
        overdue.extend(stack.store().overdue_conversations(shard, i64::MAX, 10).await?);
    }
    anyhow::ensure!(overdue.len() == 1, "{overdue:?}");
    let id = overdue[0].clone();
    let view = stack.wait_finished(id.as_str(), Duration::from_secs(60)).await?;
    let conversation = stack.store().get_conversation(&id).await?.context("item")?;
    stack.shutdown().await;
    assert_eq!(view.status, ConversationStatus::Failed, "{view:?}");
    let trace_id = conversation.trace_parent.as_deref().and_then(|t| t.split('-').nth(1)).context("trace")?;

    // The sweep's run is a root span; the conversation's run under it links to the conversation's trace.
    let spans = telemetry.take_spans();
    let runs: Vec<&FinishedSpan> = spans.iter().filter(|s| s.name == "sweep").collect();
    assert!(!runs.is_empty(), "no sweep span");
    assert!(runs.iter().all(|r| r.parent_id.is_none() && r.trace_id != trace_id), "{runs:#?}");
    let mine: Vec<&FinishedSpan> = spans
        .iter()
        .filter(|s| s.name == "sweep conversation" && s.attr("conversation_id") == Some(id.as_str()))
        .collect();
    assert_eq!(mine.len(), 1, "the sweep failed it once: {mine:#?}");
    assert_eq!(mine[0].attr("status"), Some("PLANNING"));
    assert_eq!(mine[0].links, vec![trace_id.to_owned()]);
    let run = runs.iter().find(|r| Some(r.span_id.as_str()) == mine[0].parent_id.as_deref()).context("its run")?;
    assert_eq!((run.attr("swarm.sweep.found"), run.attr("swarm.sweep.answered")), (Some("1"), Some("1")));
    for text in span_texts(&spans) {
        assert!(!text.contains("A1029") && !text.contains(MESSAGE), "{text:?} reached a span");
    }

    // Its metrics: one sweep action, one conversation past its deadline, one failed conversation.
    let mut out = Vec::new();
    telemetry.write_metrics(&mut out)?;
    let emf = parse_emf(&String::from_utf8(out)?)?;
    let sum = |name: &str, dims: &[(&str, &str)]| -> f64 {
        emf.get(name)
            .into_iter()
            .flatten()
            .filter(|(_, _, values, _)| dims.iter().all(|(k, v)| values.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, _, _, v)| total(v))
            .sum()
    };
    assert!(sum("swarm_sweep_runs", &[]) >= 1.0);
    assert_eq!(sum("swarm_sweep_conversations", &[("action", "failed")]), 1.0);
    assert_eq!(sum("swarm_sweep_conversations", &[]), 1.0, "nothing else was overdue");
    assert_eq!(sum("swarm_deadline_expired", &[]), 1.0);
    let failed = emf
        .get("swarm_conversation_seconds")
        .into_iter()
        .flatten()
        .filter(|(_, _, v, _)| v.get("status").map(String::as_str) == Some("failed"));
    assert_eq!(failed.count(), 1);
    Ok(())
}

/// EMF documents written until `seen` holds for everything written so far (at most 30 s): the
/// writes drain the recorder, so the documents are kept and parsed together.
async fn emf_until(
    telemetry: &Telemetry,
    written: &mut String,
    seen: impl Fn(&EmfMetrics) -> bool,
) -> Result<EmfMetrics> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut out = Vec::new();
        telemetry.write_metrics(&mut out)?;
        written.push_str(&String::from_utf8(out)?);
        let emf = parse_emf(written)?;
        if seen(&emf) {
            return Ok(emf);
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "not seen in the EMF output:\n{written}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The values `name` took under `dims`, in the order they were written.
fn values_of(emf: &EmfMetrics, name: &str, dims: &[(&str, &str)]) -> Vec<f64> {
    emf.get(name)
        .into_iter()
        .flatten()
        .filter(|(_, _, values, _)| dims.iter().all(|(k, v)| values.get(*k).map(String::as_str) == Some(*v)))
        .flat_map(|(_, _, _, v)| match v {
            Value::Array(a) => a.iter().filter_map(Value::as_f64).collect::<Vec<_>>(),
            other => other.as_f64().into_iter().collect(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_refund_its_approval_and_a_hand_off_are_counted_and_the_sweep_sets_the_waiting_gauges() -> Result<()> {
    let telemetry = telemetry();
    let _one = ONE_AT_A_TIME.lock().await;
    // The sweep every 250 ms (1/240 of a minute); a deadline long enough for the offline model's conversation.
    let mut timings = swarm_tests::with_room_for_tool_calls(Timings::standard().clone());
    timings.conversation.deadline = Duration::from_secs(2400);
    let stack = LocalStack::start(StackOptions { timings, time_scale: 1.0 / 240.0, ..StackOptions::default() }).await?;
    telemetry.write_metrics(&mut std::io::sink())?;
    let mut written = String::new();

    // Every refund waits for a person (the local stack's consent): one approval requested.
    let (status, body) = stack.post_conversation("Please refund order A1033.", "C108", None).await?;
    anyhow::ensure!(status == 202, "{body}");
    let id = body["conversation_id"].as_str().context("id")?.to_owned();
    let view = stack.wait_finished(&id, Duration::from_secs(60)).await?;
    let approval_id = view.approvals.first().context("an approval")?.approval_id.clone();
    // A sweep after it counts it as waiting, with its age.
    let emf = emf_until(&telemetry, &mut written, |emf| values_of(emf, "swarm_approvals_pending", &[]).contains(&1.0))
        .await?;
    assert_eq!(values_of(&emf, "swarm_approvals_requested", &[]).iter().sum::<f64>(), 1.0);
    assert!(values_of(&emf, "swarm_approval_oldest_pending_seconds", &[]).iter().any(|s| *s > 0.0), "{written}");

    // Approved twice: decided once, and the gauge falls back to nothing waiting.
    for _ in 0..2 {
        let (code, body) = stack.decide(&approval_id, "approve").await?;
        anyhow::ensure!(code == 200, "{body}");
    }
    let emf =
        emf_until(&telemetry, &mut written, |emf| values_of(emf, "swarm_approvals_pending", &[]).last() == Some(&0.0))
            .await?;
    assert_eq!(values_of(&emf, "swarm_approvals_decided", &[("decision", "approved")]).iter().sum::<f64>(), 1.0);
    assert_eq!(values_of(&emf, "swarm_approval_wait_seconds", &[("decision", "approved")]).len(), 1);
    assert!(values_of(&emf, "swarm_approvals_decided", &[("decision", "rejected")]).is_empty());

    // A customer asking for a person: one hand-off, and the conversation's latency under status handoff.
    let (status, body) =
        stack.post_conversation("Where is order A1029? And I want to talk to a human.", "C104", None).await?;
    anyhow::ensure!(status == 202, "{body}");
    let handed = stack.wait_finished(body["conversation_id"].as_str().context("id")?, Duration::from_secs(60)).await?;
    assert_eq!(handed.status, ConversationStatus::Handoff, "{handed:?}");
    let emf = emf_until(&telemetry, &mut written, |emf| !values_of(emf, "swarm_handoffs", &[]).is_empty()).await?;
    stack.shutdown().await;
    assert_eq!(values_of(&emf, "swarm_handoffs", &[("reason", "customer_asked")]).iter().sum::<f64>(), 1.0);
    assert_eq!(values_of(&emf, "swarm_conversation_seconds", &[("status", "handoff")]).len(), 1);
    Ok(())
}
