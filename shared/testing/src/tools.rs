//! `StaticTools`: a tool gateway with a fixed catalogue and canned outputs, recording the calls it ran; `HangingTools`: a gateway whose calls of one tool never answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use swarm_core::ports::{ToolContext, ToolError, ToolGateway, ToolOutput, ToolSpec};
use tokio::time::Instant;

/// What a call of one tool answers, from its arguments.
type Answer = Arc<dyn Fn(&str, &Value) -> Result<ToolOutput, ToolError> + Send + Sync>;

/// A [`ToolGateway`] for tests: `tools/list` answers the catalogue it was made
/// with; `tools/call` waits the tool's delay, records `(name, arguments)` and
/// answers the tool's canned output — by default `{"tool": <name>, "arguments": <arguments>}`.
pub struct StaticTools {
    specs: Vec<ToolSpec>,
    answers: HashMap<String, Answer>,
    default_answer: Answer,
    delays: HashMap<String, Duration>,
    default_delay: Duration,
    role: Option<String>,
    ran: Mutex<Vec<(String, Value)>>,
}

impl StaticTools {
    /// A gateway listing `specs`, in this order.
    pub fn new(specs: Vec<ToolSpec>) -> Self {
        Self {
            specs,
            answers: HashMap::new(),
            default_answer: Arc::new(|name, args| {
                Ok(ToolOutput {
                    text: json!({ "tool": name, "arguments": args }).to_string(),
                    is_error: false,
                    refused: false,
                })
            }),
            delays: HashMap::new(),
            default_delay: Duration::ZERO,
            role: None,
            ran: Mutex::new(Vec::new()),
        }
    }

    /// A catalogue of `names`, each with `description` (`{name}` replaced by the name) and `input_schema`.
    pub fn named(names: &[&str], description: &str, input_schema: Value) -> Self {
        Self::new(
            names
                .iter()
                .map(|n| ToolSpec {
                    name: (*n).to_owned(),
                    description: description.replace("{name}", n),
                    input_schema: input_schema.clone(),
                    side_effecting: false,
                })
                .collect(),
        )
    }

    /// Marks `names` as side-effecting, as the gateway's configuration lists them.
    pub fn side_effecting(mut self, names: &[&str]) -> Self {
        for spec in &mut self.specs {
            if names.contains(&spec.name.as_str()) {
                spec.side_effecting = true;
            }
        }
        self
    }

    /// Calls of `name` answer `answer(arguments)`.
    pub fn on_call(
        mut self,
        name: &str,
        answer: impl Fn(&Value) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
    ) -> Self {
        self.answers.insert(name.to_owned(), Arc::new(move |_, args| answer(args)));
        self
    }

    /// Calls of tools without their own answer answer `answer(name, arguments)`.
    pub fn on_any_call(
        mut self,
        answer: impl Fn(&str, &Value) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
    ) -> Self {
        self.default_answer = Arc::new(answer);
        self
    }

    /// Calls of `name` wait `delay` first (parallel calls then finish out of order).
    pub fn delay(mut self, name: &str, delay: Duration) -> Self {
        self.delays.insert(name.to_owned(), delay);
        self
    }

    /// Calls of tools without their own delay wait `delay` first.
    pub fn default_delay(mut self, delay: Duration) -> Self {
        self.default_delay = delay;
        self
    }

    /// Listing the tools with another role's credential panics: the caller must use `role`'s.
    pub fn only_for_role(mut self, role: &str) -> Self {
        self.role = Some(role.to_owned());
        self
    }

    /// The calls that ran (answered or failed), in the order they finished waiting.
    pub fn ran(&self) -> Vec<(String, Value)> {
        self.ran.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[async_trait]
impl ToolGateway for StaticTools {
    async fn list_tools(&self, ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        if let Some(role) = &self.role {
            assert_eq!(&ctx.role, role, "tools are listed with the {role} credential");
        }
        Ok(self.specs.clone())
    }

    async fn call_tool(
        &self,
        _ctx: &ToolContext,
        name: &str,
        arguments: Value,
        _timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        let delay = self.delays.get(name).copied().unwrap_or(self.default_delay);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.ran.lock().unwrap_or_else(PoisonError::into_inner).push((name.to_owned(), arguments.clone()));
        let answer = self.answers.get(name).unwrap_or(&self.default_answer);
        answer(name, &arguments)
    }
}

/// Wraps a gateway; the first `times` calls of one tool never answer — the call's timeout
/// ignored, as a client without one would — so only the platform's invocation timeout ends
/// them. When each hung call started and when its future was dropped are recorded (tokio's clock).
pub struct HangingTools {
    inner: Arc<dyn ToolGateway>,
    tool: String,
    left: AtomicU32,
    hung: Arc<Mutex<Vec<HungCall>>>,
}

/// One call that never answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HungCall {
    pub started: Instant,
    /// When its future was dropped (the invocation cut); `None` while it still hangs.
    pub dropped: Option<Instant>,
}

impl HangingTools {
    pub fn new(inner: Arc<dyn ToolGateway>, tool: &str, times: u32) -> Self {
        Self { inner, tool: tool.to_owned(), left: AtomicU32::new(times), hung: Arc::new(Mutex::new(Vec::new())) }
    }

    /// The calls that hung, in the order they started.
    pub fn hung(&self) -> Vec<HungCall> {
        self.hung.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Records the drop of a hung call's future.
struct DropMark {
    hung: Arc<Mutex<Vec<HungCall>>>,
    index: usize,
}

impl Drop for DropMark {
    fn drop(&mut self) {
        if let Some(call) = self.hung.lock().unwrap_or_else(PoisonError::into_inner).get_mut(self.index) {
            call.dropped = Some(Instant::now());
        }
    }
}

#[async_trait]
impl ToolGateway for HangingTools {
    async fn list_tools(&self, ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        self.inner.list_tools(ctx).await
    }

    async fn call_tool(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        let hang = name == self.tool
            && self.left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        if !hang {
            return self.inner.call_tool(ctx, name, arguments, timeout).await;
        }
        let index = {
            let mut hung = self.hung.lock().unwrap_or_else(PoisonError::into_inner);
            hung.push(HungCall { started: Instant::now(), dropped: None });
            hung.len() - 1
        };
        let _mark = DropMark { hung: self.hung.clone(), index };
        std::future::pending().await
    }
}
