//! Worker roles: decided by code from the tool → role table, never by the model; and the queue each role's subtasks go to.

use std::collections::HashMap;
use std::sync::Arc;

use crate::domain::TaskMessage;
use crate::ports::{QueueError, TaskQueue};

/// The role of ordinary workers.
pub const DEFAULT_ROLE: &str = "support";
/// The role of side effects (refunds, support tickets); on AWS its own function, queue and secret.
pub const REFUND_ROLE: &str = "refund";
/// The orchestrator's role: lists every tool, may call none.
pub const PLANNER_ROLE: &str = "planner";

/// Maps tool names to the role that must run a subtask using them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleTable {
    default_role: String,
    /// `(tool name or unprefixed suffix, role)`, first match wins.
    rules: Vec<(String, String)>,
}

impl RoleTable {
    pub fn new(default_role: impl Into<String>, rules: Vec<(String, String)>) -> Self {
        Self { default_role: default_role.into(), rules }
    }

    /// The demo table: any tool named `refund` or `open_ticket` (under any prefix) needs the refund
    /// role, the one whose worker journals and confirms side effects.
    pub fn demo() -> Self {
        Self::new(DEFAULT_ROLE, vec![("refund".into(), REFUND_ROLE.into()), ("open_ticket".into(), REFUND_ROLE.into())])
    }

    /// Parses `tool=role,tool=role` (env `ROLE_TABLE`); empty → [`RoleTable::demo`].
    pub fn parse(spec: &str) -> Result<Self, String> {
        if spec.trim().is_empty() {
            return Ok(Self::demo());
        }
        let mut rules = Vec::new();
        for pair in spec.split(',') {
            let (tool, role) =
                pair.split_once('=').ok_or_else(|| format!("ROLE_TABLE entry {pair:?} is not tool=role"))?;
            let (tool, role) = (tool.trim(), role.trim());
            if tool.is_empty() || role.is_empty() {
                return Err(format!("ROLE_TABLE entry {pair:?} has an empty side"));
            }
            rules.push((tool.to_owned(), role.to_owned()));
        }
        Ok(Self::new(DEFAULT_ROLE, rules))
    }

    /// The role for a subtask using `tools`: the first rule any tool matches
    /// (by full name, or by the part after an upstream prefix `…__`), else the default.
    pub fn role_for<S: AsRef<str>>(&self, tools: &[S]) -> String {
        for (pattern, role) in &self.rules {
            for t in tools {
                let t = t.as_ref();
                let base = t.rsplit_once("__").map_or(t, |(_, b)| b);
                if t == pattern || base == pattern {
                    return role.clone();
                }
            }
        }
        self.default_role.clone()
    }

    /// The tools of `tools` that no rule gives another role than the default, in their order:
    /// what a subtask of the default role may be planned with (the orchestrator's fallback plan).
    pub fn default_role_tools<S: AsRef<str>>(&self, tools: &[S]) -> Vec<String> {
        tools
            .iter()
            .map(AsRef::as_ref)
            .filter(|t| self.role_for(&[*t]) == self.default_role)
            .map(str::to_owned)
            .collect()
    }

    pub fn default_role(&self) -> &str {
        &self.default_role
    }
}

/// Where each role's subtasks go, and which of those queues this function holds a sender for.
///
/// A route is either held (this function may send there: on AWS its role allows `sqs:SendMessage`
/// on the queue) or not held (the queue exists as deployed, but this function may not send to it:
/// the refund role's queue in every function but the orchestrator and the refund worker, and every
/// queue in the sweeper). A role without a route of its own goes by the default route.
///
/// For a role whose route is not held, [`TaskQueues::queue_for`] answers [`NoQueueForRole`], and
/// [`TaskQueues::for_role`] a stand-in queue whose every call fails with a permanent
/// [`QueueError`] naming the role and the queue — never another queue: a message of the refund
/// role sent to the tasks queue would be run by a worker that holds no refund credential (defect M3
/// of the guarantees issue was that silent fallback). Built with [`TaskQueues::new`] and no
/// other route, every role goes to the one default queue (tests, single-queue set-ups).
#[derive(Clone)]
pub struct TaskQueues {
    default: Route,
    by_role: HashMap<String, Route>,
}

/// One route of [`TaskQueues`].
#[derive(Clone)]
enum Route {
    /// This function's sender for the queue.
    Held(Arc<dyn TaskQueue>),
    /// The queue (named for messages) this function may not send to, and its refusing stand-in.
    NotHeld(Arc<dyn TaskQueue>),
}

impl Route {
    fn not_held(role: &str, queue: &str) -> Self {
        Self::NotHeld(Arc::new(NotHeldQueue { role: role.to_owned(), queue: queue.to_owned() }))
    }

    fn queue(&self) -> &Arc<dyn TaskQueue> {
        match self {
            Route::Held(q) | Route::NotHeld(q) => q,
        }
    }
}

/// A role whose queue this function holds no sender for (its role may not send there).
/// Permanent: no retry makes the send possible; the message belongs to another function.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("this function holds no sender for the {queue} queue of role {role:?} (its role may not send there)")]
pub struct NoQueueForRole {
    /// The role the message was for (empty: the default route).
    pub role: String,
    /// The queue's label (`tasks`, `refund`).
    pub queue: String,
}

impl NoQueueForRole {
    /// Always `false`: the wiring, not time, decides which queues a function holds.
    pub fn is_transient(&self) -> bool {
        false
    }
}

impl From<NoQueueForRole> for QueueError {
    fn from(e: NoQueueForRole) -> Self {
        QueueError::Permanent(e.to_string())
    }
}

/// The stand-in [`TaskQueues::for_role`] answers for a route not held: every call fails with
/// [`QueueError::Permanent`] naming the role and the queue, and nothing is sent anywhere.
struct NotHeldQueue {
    role: String,
    queue: String,
}

impl NotHeldQueue {
    fn refusal(&self) -> QueueError {
        NoQueueForRole { role: self.role.clone(), queue: self.queue.clone() }.into()
    }
}

#[async_trait::async_trait]
impl TaskQueue for NotHeldQueue {
    fn name(&self) -> &str {
        &self.queue
    }

    async fn send(&self, _messages: &[TaskMessage], _delay_seconds: u32) -> Result<(), QueueError> {
        Err(self.refusal())
    }

    async fn change_visibility(&self, _receipt_handle: &str, _seconds: u32) -> Result<(), QueueError> {
        Err(self.refusal())
    }
}

impl TaskQueues {
    /// Every role on `default` (held), until [`TaskQueues::with_role`] gives a role its own queue.
    pub fn new(default: Arc<dyn TaskQueue>) -> Self {
        Self { default: Route::Held(default), by_role: HashMap::new() }
    }

    /// A function that holds no sender for the default route's queue `queue` (the sweeper: its
    /// role may send nothing).
    pub fn not_held(queue: &str) -> Self {
        Self { default: Route::not_held("", queue), by_role: HashMap::new() }
    }

    /// `role`'s subtasks go to `queue`, which this function holds.
    pub fn with_role(mut self, role: impl Into<String>, queue: Arc<dyn TaskQueue>) -> Self {
        self.by_role.insert(role.into(), Route::Held(queue));
        self
    }

    /// `role`'s subtasks go to their own queue `queue` (a label, e.g. `refund`), which this function
    /// does not hold: [`TaskQueues::queue_for`] answers [`NoQueueForRole`] for it.
    pub fn with_role_not_held(mut self, role: impl Into<String>, queue: &str) -> Self {
        let role = role.into();
        let route = Route::not_held(&role, queue);
        self.by_role.insert(role, route);
        self
    }

    /// The queue for `role`, when this function holds it. Error: [`NoQueueForRole`] for a role
    /// routed to a queue this function may not send to.
    pub fn queue_for(&self, role: &str) -> Result<&Arc<dyn TaskQueue>, NoQueueForRole> {
        match self.by_role.get(role).unwrap_or(&self.default) {
            Route::Held(q) => Ok(q),
            Route::NotHeld(q) => Err(NoQueueForRole { role: role.to_owned(), queue: q.name().to_owned() }),
        }
    }

    /// The queue for `role` (its own route, else the default). For a route not held: a stand-in
    /// whose every call fails with a permanent [`QueueError`] naming the role and the queue
    /// (see the type's doc); [`TaskQueues::queue_for`] says so without sending.
    pub fn for_role(&self, role: &str) -> &Arc<dyn TaskQueue> {
        self.by_role.get(role).unwrap_or(&self.default).queue()
    }

    /// The default queue (deadline messages go there); a refusing stand-in when not held.
    pub fn default_queue(&self) -> &Arc<dyn TaskQueue> {
        self.default.queue()
    }

    /// Whether `role` has a queue of its own (the refund role), held or not. Such subtasks are
    /// enqueued by the orchestrator at planning whatever their dependencies, and wait for them on
    /// their own queue: no other function ever sends to that queue (least privilege).
    pub fn has_own_queue(&self, role: &str) -> bool {
        self.by_role.contains_key(role)
    }

    /// The held queue named `name` ([`TaskQueue::name`]), if it is one of these.
    pub fn by_name(&self, name: &str) -> Option<&Arc<dyn TaskQueue>> {
        self.held().find(|q| q.name() == name)
    }

    /// The queues this function holds a sender for (default first, then the roles' in no order).
    pub fn held(&self) -> impl Iterator<Item = &Arc<dyn TaskQueue>> {
        std::iter::once(&self.default).chain(self.by_role.values()).filter_map(|route| match route {
            Route::Held(q) => Some(q),
            Route::NotHeld(_) => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refund_tool_under_any_prefix_needs_the_refund_role() {
        let t = RoleTable::demo();
        assert_eq!(t.role_for(&["shop__get_order", "shop__refund"]), REFUND_ROLE);
        assert_eq!(t.role_for(&["refund"]), REFUND_ROLE);
        assert_eq!(t.role_for(&["shop__get_refund_policy"]), DEFAULT_ROLE);
        assert_eq!(t.role_for(&["shop__open_ticket"]), REFUND_ROLE, "a side effect without money too");
        assert_eq!(t.role_for::<&str>(&[]), DEFAULT_ROLE);
    }

    #[test]
    fn role_table_parses_pairs_and_rejects_garbage() {
        let t = RoleTable::parse("refund=refund, redeem_coupon=refund").unwrap();
        assert_eq!(t.role_for(&["x__redeem_coupon"]), "refund");
        assert!(RoleTable::parse("nonsense").is_err());
    }

    #[test]
    fn default_role_tools_follow_the_table_not_the_names() {
        let catalogue = ["shop__get_order", "shop__refund", "shop__redeem_coupon", "shop__get_refund_policy"];
        assert_eq!(
            RoleTable::demo().default_role_tools(&catalogue),
            ["shop__get_order", "shop__redeem_coupon", "shop__get_refund_policy"]
        );
        let custom = RoleTable::parse("redeem_coupon=refund").unwrap();
        assert_eq!(
            custom.default_role_tools(&catalogue),
            ["shop__get_order", "shop__refund", "shop__get_refund_policy"]
        );
        let everything = RoleTable::parse("get_order=auditor,refund=refund").unwrap();
        assert_eq!(everything.default_role_tools(&catalogue), ["shop__redeem_coupon", "shop__get_refund_policy"]);
    }

    /// A queue that counts what it was given.
    struct Counting {
        name: &'static str,
        sent: std::sync::Mutex<usize>,
    }

    #[async_trait::async_trait]
    impl TaskQueue for Counting {
        fn name(&self) -> &str {
            self.name
        }
        async fn send(&self, messages: &[TaskMessage], _delay_seconds: u32) -> Result<(), QueueError> {
            *self.sent.lock().unwrap_or_else(|e| e.into_inner()) += messages.len();
            Ok(())
        }
        async fn change_visibility(&self, _receipt_handle: &str, _seconds: u32) -> Result<(), QueueError> {
            Ok(())
        }
    }

    fn counting(name: &'static str) -> Arc<Counting> {
        Arc::new(Counting { name, sent: std::sync::Mutex::new(0) })
    }

    fn sent(q: &Counting) -> usize {
        *q.sent.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn one_default_queue_takes_every_role() {
        let tasks = counting("tasks");
        let queues = TaskQueues::new(tasks.clone());
        assert_eq!(queues.queue_for(REFUND_ROLE).map(|q| q.name().to_owned()), Ok("tasks".to_owned()));
        assert!(!queues.has_own_queue(REFUND_ROLE));
        assert_eq!(queues.held().map(|q| q.name()).collect::<Vec<_>>(), ["tasks"]);
    }

    #[tokio::test]
    async fn a_role_routed_to_a_queue_not_held_is_refused_by_name_and_nothing_is_sent_elsewhere() {
        let tasks = counting("tasks");
        let queues = TaskQueues::new(tasks.clone()).with_role_not_held(REFUND_ROLE, "refund");
        let refused = queues.queue_for(REFUND_ROLE).map(|q| q.name().to_owned());
        assert_eq!(refused, Err(NoQueueForRole { role: "refund".into(), queue: "refund".into() }));
        assert!(queues.has_own_queue(REFUND_ROLE), "its subtasks wait on their own queue");
        let message = TaskMessage::run(&crate::domain::ConversationId::new(), &crate::domain::SubtaskId::from("w01"));
        let e = queues.for_role(REFUND_ROLE).send(std::slice::from_ref(&message), 0).await.unwrap_err();
        assert!(!e.is_transient(), "{e}");
        assert_eq!(
            e.to_string(),
            "queue error: this function holds no sender for the refund queue of role \"refund\" (its role may not send there)"
        );
        assert_eq!(sent(&tasks), 0, "never the default queue instead");
        assert!(queues.by_name("refund").is_none());
        queues.for_role(DEFAULT_ROLE).send(&[message], 0).await.unwrap();
        assert_eq!(sent(&tasks), 1);
        assert_eq!(queues.held().map(|q| q.name()).collect::<Vec<_>>(), ["tasks"]);
    }

    #[tokio::test]
    async fn a_function_that_may_send_nowhere_holds_no_queue() {
        let queues = TaskQueues::not_held("tasks").with_role_not_held(REFUND_ROLE, "refund");
        assert_eq!(queues.held().count(), 0);
        assert_eq!(queues.queue_for(DEFAULT_ROLE).map(|q| q.name().to_owned()).unwrap_err().queue, "tasks");
        let message = TaskMessage::run(&crate::domain::ConversationId::new(), &crate::domain::SubtaskId::from("w01"));
        assert!(queues.default_queue().send(&[message], 0).await.is_err());
        assert!(queues.default_queue().change_visibility("r", 1).await.is_err());
    }
}
