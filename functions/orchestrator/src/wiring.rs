//! The orchestrator function built from its config and its ports — the one place the Lambda's `main` and the local stack both build it (the planner behind the API, and the approvals API beside it).

use std::sync::Arc;

use swarm_adapters::config::AwsClients;
use swarm_core::access::AccessStore;
use swarm_core::approval::ApprovalKey;
use swarm_core::ports::{ChatModel, ConversationStore, ToolGateway};
use swarm_core::roles::TaskQueues;
use swarm_core::timings::Timings;

use crate::{Approvals, Orchestrator, OrchestratorConfig, OrchestratorSettings};

/// What the orchestrator function is built over.
pub struct OrchestratorPorts {
    /// The conversation store, as this function's role reaches it.
    pub store: Arc<dyn ConversationStore>,
    /// Identity mappings and the per-customer counters (the same table).
    pub access: Arc<dyn AccessStore>,
    /// A sender for each queue it may send to: the tasks queue and the refund role's.
    pub queues: TaskQueues,
    /// The planning model.
    pub model: Arc<dyn ChatModel>,
    /// The gateway client holding the planner's token only (it lists tools, calls none).
    pub tools: Arc<dyn ToolGateway>,
}

/// The settings of `config` over `timings` (the standard table on Lambda, the scaled one locally):
/// the deadline is the config's `DEADLINE_SECS`, the idle expiry its `CONVERSATION_IDLE_EXPIRY_SECS`
/// when set, the rest the table's.
pub fn settings(config: &OrchestratorConfig, timings: &Timings) -> OrchestratorSettings {
    let table = OrchestratorSettings::from_timings(timings);
    OrchestratorSettings {
        deadline_secs: config.deadline_secs,
        idle_expiry: config.idle_expiry.unwrap_or(table.idle_expiry),
        ..table
    }
}

/// The orchestrator over `ports`: the config's role table and per-customer limits, [`settings`].
pub fn orchestrator(config: &OrchestratorConfig, ports: OrchestratorPorts, timings: &Timings) -> Orchestrator {
    Orchestrator::new(
        ports.store,
        ports.queues,
        ports.model,
        ports.tools,
        config.roles.clone(),
        settings(config, timings),
    )
    .with_limits(ports.access, config.limits)
}

/// The orchestrator on AWS over `aws`'s table and queues, its model and gateway client built from
/// `config` (secrets read through the extension), and the identity directory: what both Lambda
/// binaries serve (`orchestrator` behind the HTTP API, `orchestrator-stream` on the function URL).
/// Errors: a secret cannot be read, the model or the gateway client cannot be built.
pub async fn on_aws(
    config: &OrchestratorConfig,
    aws: &AwsClients,
) -> Result<(Orchestrator, Arc<dyn AccessStore>), lambda_http::Error> {
    let models = config.llm.models(&config.secrets).await?;
    let access = aws.access(&config.table);
    let ports = OrchestratorPorts {
        store: aws.store(&config.table),
        access: access.clone(),
        queues: aws.queues(&config.queues),
        model: models.main,
        tools: config.gateway.connect(&config.secrets).await?,
    };
    Ok((orchestrator(config, ports, Timings::standard()), access))
}

/// The approvals API's core (same function, same role): decisions written to `store`, approved
/// calls sent on `queues`, tokens signed with `key`.
pub fn approvals(
    store: Arc<dyn ConversationStore>,
    queues: TaskQueues,
    key: ApprovalKey,
    timings: &Timings,
) -> Approvals {
    Approvals::new(store, queues, key, timings)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;

    /// A config of the required variables and `extra`.
    fn config(extra: (&str, &str)) -> OrchestratorConfig {
        let env: HashMap<&str, &str> = [
            ("TABLE_NAME", "swarm"),
            ("TASKS_QUEUE_URL", "http://127.0.0.1:9/000000000000/tasks"),
            ("GATEWAY_URL", "http://127.0.0.1:9/mcp"),
            ("GATEWAY_TOKEN", "tok-wiring-0123456789"),
            ("LLM_BASE_URL", "http://127.0.0.1:9/v1"),
            ("LLM_MODEL", "m"),
            extra,
        ]
        .into();
        OrchestratorConfig::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap()
    }

    #[test]
    fn the_deadline_is_the_configs_and_the_rest_the_tables() {
        let config = config(("DEADLINE_SECS", "7"));
        let scaled = Timings::standard().scaled(0.1);
        let s = settings(&config, &scaled);
        assert_eq!(s.deadline_secs, 7);
        assert_eq!(s.planning_lease, scaled.orchestrator.lease);
        let (lambda, own) = (settings(&config, Timings::standard()), config.settings());
        assert_eq!((lambda.deadline_secs, lambda.plan_timeout), (own.deadline_secs, own.plan_timeout));
        assert_eq!(s.idle_expiry, scaled.conversation.idle_expiry, "unset: the table's, scaled");
        assert_eq!(lambda.idle_expiry, Duration::from_secs(87_300));
    }

    #[test]
    fn the_idle_expiry_is_the_configs_when_set() {
        let config = config(("CONVERSATION_IDLE_EXPIRY_SECS", "172800"));
        assert_eq!(settings(&config, &Timings::standard().scaled(0.1)).idle_expiry, Duration::from_secs(172_800));
        assert_eq!(config.settings().idle_expiry, Duration::from_secs(172_800));
    }
}
