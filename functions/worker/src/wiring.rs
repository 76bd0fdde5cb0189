//! The worker function built from its config and its ports — the one place the Lambda's `main` and the local stack both build it: the tasks worker (the tasks and the refund worker function), or the closer alone (the DLQ consumer and the sweeper, which get no model and no tools).

use std::sync::Arc;

use swarm_core::approval::ApprovalKey;
use swarm_core::ports::{ChatModel, ConversationStore, ToolGateway};
use swarm_core::roles::TaskQueues;
use swarm_core::timings::Timings;

use crate::{Closer, MessageHandler, Worker, WorkerConfig, WorkerMode};

/// What a worker function is built over.
pub struct WorkerPorts {
    /// The conversation store, as this function's role reaches it.
    pub store: Arc<dyn ConversationStore>,
    /// A sender for each queue this function may send to ([`swarm_adapters::config::QueueUrls::task_queues`]).
    pub queues: TaskQueues,
    /// The models and the gateway client: `WORKER_MODE=tasks` only; `None` in DLQ and sweep mode,
    /// which run no model and call no tool (their functions hold no LLM key and no gateway token).
    pub agent: Option<AgentPorts>,
    /// The approval key, sweep mode only: the sweep then re-issues approved side effects not run
    /// ([`Closer::with_approval_key`]); `None` everywhere else.
    pub approval_key: Option<ApprovalKey>,
}

/// The ports of a function that runs the tool loop.
pub struct AgentPorts {
    pub model: Arc<dyn ChatModel>,
    /// The compression model (the main one when none is configured).
    pub sub_model: Arc<dyn ChatModel>,
    /// The gateway client holding this function's own role token only.
    pub tools: Arc<dyn ToolGateway>,
}

/// Ports that do not fit the function's mode.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WiringError {
    #[error("WORKER_MODE=tasks runs the tool loop: it needs its models and its gateway client")]
    AgentMissing,
    #[error("WORKER_MODE={0} runs no model and calls no tool: it is given neither models nor a gateway client")]
    AgentGiven(&'static str),
    #[error("WORKER_MODE={0} signs no approval token: only the sweeper is given the approval key")]
    ApprovalKeyGiven(&'static str),
}

/// A function of the worker binary, as its mode builds it.
#[derive(Clone)]
pub enum WorkerFunction {
    /// `WORKER_MODE=tasks`: the tasks worker (the agent loop, side effects, and a closer for its
    /// deadline messages).
    Tasks(Arc<Worker>),
    /// `WORKER_MODE=dlq` or `sweep`: the closer alone — dead letters, deadlines and the sweep.
    Closer(Arc<Closer>),
}

impl WorkerFunction {
    /// What handles the function's SQS messages: the tasks worker, or the closer (dead letters).
    pub fn messages(&self) -> Arc<dyn MessageHandler> {
        match self {
            Self::Tasks(worker) => worker.clone(),
            Self::Closer(closer) => closer.clone(),
        }
    }

    /// The closer the sweep's schedule invokes; `None` for the tasks worker.
    pub fn closer(&self) -> Option<Arc<Closer>> {
        match self {
            Self::Tasks(_) => None,
            Self::Closer(closer) => Some(closer.clone()),
        }
    }
}

/// The function of `config`'s mode over `ports`, its settings from `timings` (the standard table
/// on Lambda, the scaled one locally) with the config's token budget: the tasks worker in tasks
/// mode, the closer alone in DLQ and sweep mode.
///
/// Errors: [`WiringError`] when the agent ports do not fit the mode.
pub fn worker(config: &WorkerConfig, ports: WorkerPorts, timings: &Timings) -> Result<WorkerFunction, WiringError> {
    let settings = config.settings_from(timings);
    match (config.mode, &ports.approval_key) {
        (WorkerMode::Tasks, Some(_)) => return Err(WiringError::ApprovalKeyGiven("tasks")),
        (WorkerMode::DeadLetters, Some(_)) => return Err(WiringError::ApprovalKeyGiven("dlq")),
        _ => {}
    }
    match (config.mode, ports.agent) {
        (WorkerMode::Tasks, Some(agent)) => Ok(WorkerFunction::Tasks(Arc::new(Worker::new(
            ports.store,
            ports.queues,
            agent.model,
            agent.sub_model,
            agent.tools,
            settings,
        )))),
        (WorkerMode::Tasks, None) => Err(WiringError::AgentMissing),
        (WorkerMode::DeadLetters, Some(_)) => Err(WiringError::AgentGiven("dlq")),
        (WorkerMode::Sweep, Some(_)) => Err(WiringError::AgentGiven("sweep")),
        (WorkerMode::DeadLetters | WorkerMode::Sweep, None) => {
            let closer = Closer::new(ports.store, ports.queues, &settings);
            let closer = match ports.approval_key {
                Some(key) => closer.with_approval_key(key),
                None => closer,
            };
            Ok(WorkerFunction::Closer(Arc::new(closer)))
        }
    }
}

/// On Lambda: the models (the key fetched through the secrets extension) and the gateway client of
/// `config`, in tasks mode; `None` in DLQ and sweep mode. Errors: a secret fetch or a client set-up.
pub async fn connect_agent(config: &WorkerConfig) -> Result<Option<AgentPorts>, swarm_adapters::config::ConfigError> {
    let (Some(gateway), Some(llm)) = (&config.gateway, &config.llm) else { return Ok(None) };
    let models = llm.models(&config.secrets).await?;
    Ok(Some(AgentPorts { model: models.main, sub_model: models.sub, tools: gateway.connect(&config.secrets).await? }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::HashMap;

    use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
    use swarm_core::ports::TaskQueue;
    use swarm_testing::{ScriptedModel, StaticTools};

    use super::*;

    fn config(mode: &str) -> WorkerConfig {
        let env: HashMap<&str, &str> = [
            ("TABLE_NAME", "swarm"),
            ("TASKS_QUEUE_URL", "http://127.0.0.1:9/000000000000/tasks"),
            ("GATEWAY_URL", "http://127.0.0.1:9/mcp"),
            ("GATEWAY_TOKEN", "tok-wiring-0123456789"),
            ("LLM_BASE_URL", "http://127.0.0.1:9/v1"),
            ("LLM_MODEL", "m"),
            ("WORKER_MODE", mode),
        ]
        .into();
        WorkerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap()
    }

    fn ports(agent: Option<AgentPorts>) -> WorkerPorts {
        let queue: Arc<dyn TaskQueue> = Arc::new(InMemoryQueue::new(QueueSettings::default()));
        WorkerPorts {
            store: Arc::new(InMemoryConversationStore::new()),
            queues: TaskQueues::new(queue),
            agent,
            approval_key: None,
        }
    }

    fn agent() -> AgentPorts {
        let model = Arc::new(ScriptedModel::new([]));
        AgentPorts { model: model.clone(), sub_model: model, tools: Arc::new(StaticTools::new(vec![])) }
    }

    #[test]
    fn each_mode_is_built_with_the_ports_it_uses_and_refuses_others() {
        let timings = Timings::standard();
        assert!(worker(&config("tasks"), ports(Some(agent())), timings).is_ok());
        assert_eq!(worker(&config("tasks"), ports(None), timings).err(), Some(WiringError::AgentMissing));
        assert!(worker(&config("dlq"), ports(None), timings).is_ok());
        assert_eq!(worker(&config("dlq"), ports(Some(agent())), timings).err(), Some(WiringError::AgentGiven("dlq")));
        assert!(worker(&config("sweep"), ports(None), timings).is_ok());
        let keyed = || WorkerPorts { approval_key: Some(ApprovalKey::generate().0), ..ports(None) };
        assert!(worker(&config("sweep"), keyed(), timings).is_ok());
        assert_eq!(worker(&config("dlq"), keyed(), timings).err(), Some(WiringError::ApprovalKeyGiven("dlq")));
        let keyed_agent = WorkerPorts { approval_key: Some(ApprovalKey::generate().0), ..ports(Some(agent())) };
        assert_eq!(worker(&config("tasks"), keyed_agent, timings).err(), Some(WiringError::ApprovalKeyGiven("tasks")));
    }
}
