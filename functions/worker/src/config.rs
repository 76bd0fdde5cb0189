//! The worker's one typed config (tasks, refund and DLQ functions alike): every variable it reads, parsed once at cold start from the shared pieces.

use swarm_adapters::config::{
    ConfigError, GatewayClientConfig, QueueUrls, SecretSource, SecretsExtension, TableConfig, Vars, var_list,
};
use swarm_adapters::llm::LlmConfig;
use swarm_core::roles::DEFAULT_ROLE;

use crate::handler::WorkerMode;
use crate::settings::WorkerSettings;

/// Smallest accepted `LLM_TOKEN_BUDGET`: below it a conversation would stop before its first round.
pub const MIN_TOKEN_BUDGET: u64 = 1_000;

/// Everything a worker Lambda reads from its environment. The refund worker
/// is `WORKER_MODE=tasks` with `WORKER_ROLE=refund` (its own queue and
/// credential); the DLQ consumer is `WORKER_MODE=dlq`; the sweeper (invoked by
/// the scheduler) is `WORKER_MODE=sweep`.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// `WORKER_MODE`: `tasks` (default), `dlq` or `sweep`.
    pub mode: WorkerMode,
    pub table: TableConfig,
    /// The queues this function may send to (dependents released, work handed back, deadlines):
    /// `TASKS_QUEUE_URL` is required in tasks and DLQ mode; the sweeper sends nothing and is given none.
    pub queues: QueueUrls,
    /// The role this worker calls tools as (`WORKER_ROLE`, default `support`) and its credential;
    /// `None` in DLQ and sweep mode, which call no tool and hold no credential.
    pub gateway: Option<GatewayClientConfig>,
    /// The models (`LLM_*`); `None` in DLQ and sweep mode, which run no model (the template gives
    /// those functions no `LLM_*` variable and no secret).
    pub llm: Option<LlmConfig>,
    pub secrets: SecretsExtension,
    /// `LLM_TOKEN_BUDGET`: the conversation-wide token stop; past it the
    /// remaining subtasks end with that reason. Unset → no stop.
    pub token_budget: Option<u64>,
    /// `APPROVAL_KEY` (or the secret named by `APPROVAL_KEY_SECRET_ARN`), for the sweeper only (the
    /// wiring refuses it in tasks and DLQ mode): the sweep re-enqueues approved side effects not run past their token's window with a fresh
    /// token (to the role's queue it is given, e.g. `REFUND_QUEUE_URL`). Unset: it counts them only.
    pub approval_key: Option<SecretSource>,
}

impl WorkerConfig {
    /// Variables read by the worker itself (the pieces list theirs).
    const OWN_VARS: &'static [&'static str] =
        &["WORKER_MODE", "LLM_TOKEN_BUDGET", "APPROVAL_KEY", "APPROVAL_KEY_SECRET_ARN"];

    /// Every variable this config reads.
    pub fn vars() -> Vec<&'static str> {
        var_list(&[
            TableConfig::VARS,
            QueueUrls::VARS,
            GatewayClientConfig::VARS,
            LlmConfig::VARS,
            SecretsExtension::VARS,
            Self::OWN_VARS,
        ])
    }

    /// Parses every variable; no I/O (secrets are fetched when the models and
    /// the gateway client are built). The error names the variable and its accepted values.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        let mode = vars.one_of(
            "WORKER_MODE",
            &[("tasks", WorkerMode::Tasks), ("dlq", WorkerMode::DeadLetters), ("sweep", WorkerMode::Sweep)],
            WorkerMode::Tasks,
        )?;
        let token_budget = vars.number(
            "LLM_TOKEN_BUDGET",
            MIN_TOKEN_BUDGET..=u64::MAX,
            &format!("a whole number of tokens, at least {MIN_TOKEN_BUDGET} (the conversation-wide stop)"),
        )?;
        let agent = mode == WorkerMode::Tasks;
        Ok(Self {
            mode,
            table: TableConfig::from_lookup(&lookup)?,
            queues: match mode {
                WorkerMode::Sweep => QueueUrls::optional_from_lookup(&lookup)?,
                WorkerMode::Tasks | WorkerMode::DeadLetters => QueueUrls::from_lookup(&lookup)?,
            },
            gateway: agent.then(|| GatewayClientConfig::from_lookup(&lookup, DEFAULT_ROLE)).transpose()?,
            llm: agent.then(|| LlmConfig::from_lookup(&lookup)).transpose()?,
            secrets: SecretsExtension::from_lookup(&lookup)?,
            token_budget,
            approval_key: SecretSource::from_lookup(&lookup, "APPROVAL_KEY", "APPROVAL_KEY_SECRET_ARN"),
        })
    }

    /// [`WorkerConfig::from_lookup`] over the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The core's settings: the defaults with this config's token budget.
    pub fn settings(&self) -> WorkerSettings {
        self.settings_from(swarm_core::timings::Timings::standard())
    }

    /// The core's settings from `timings` (a scaled table locally) with this config's token budget.
    pub fn settings_from(&self, timings: &swarm_core::timings::Timings) -> WorkerSettings {
        WorkerSettings { token_budget: self.token_budget, ..WorkerSettings::from_timings(timings) }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::HashMap;

    use super::*;

    const BASE: &[(&str, &str)] = &[
        ("TABLE_NAME", "swarm"),
        ("TASKS_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/123456789012/tasks"),
        ("REFUND_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/123456789012/refund-tasks"),
        ("GATEWAY_URL", "https://gw.example.com/mcp"),
        ("GATEWAY_TOKEN", "tok-support-0123456789"),
        ("LLM_BASE_URL", "http://127.0.0.1:8089/v1"),
        ("LLM_MODEL", "m"),
    ];

    fn parse(extra: &[(&str, &str)]) -> Result<WorkerConfig, ConfigError> {
        let map: HashMap<&str, &str> = BASE.iter().chain(extra).copied().collect();
        WorkerConfig::from_lookup(|k| map.get(k).map(|v| v.to_string()))
    }

    #[test]
    fn defaults_are_tasks_mode_as_support_with_no_token_stop() {
        let c = parse(&[]).unwrap();
        let role = |c: &WorkerConfig| c.gateway.as_ref().map(|g| g.role.clone());
        assert_eq!((c.mode, role(&c).as_deref(), c.token_budget), (WorkerMode::Tasks, Some("support"), None));
        assert_eq!(c.settings().token_budget, None);
        let c = parse(&[("WORKER_ROLE", "refund"), ("LLM_TOKEN_BUDGET", "50000")]).unwrap();
        assert_eq!((c.mode, role(&c).as_deref()), (WorkerMode::Tasks, Some("refund")));
        assert_eq!(c.settings().token_budget, Some(50_000));
    }

    #[test]
    fn the_dlq_consumer_and_the_sweeper_need_no_gateway_credential() {
        for (mode, expected) in [("dlq", WorkerMode::DeadLetters), ("sweep", WorkerMode::Sweep)] {
            let map: HashMap<&str, &str> = BASE
                .iter()
                .copied()
                .filter(|(k, _)| !k.starts_with("GATEWAY_") && !k.starts_with("LLM_"))
                .chain([("WORKER_MODE", mode)])
                .collect();
            let c = WorkerConfig::from_lookup(|k| map.get(k).map(|v| v.to_string())).unwrap();
            assert_eq!((c.mode, c.gateway, c.llm.is_none()), (expected, None, true));
        }
        // The sweeper may send to no queue: it is given none; the DLQ consumer needs the tasks queue.
        let bare: HashMap<&str, &str> = [("TABLE_NAME", "swarm"), ("WORKER_MODE", "sweep")].into();
        let c = WorkerConfig::from_lookup(|k| bare.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(c.queues, QueueUrls { tasks: None, refund: None });
        let bare: HashMap<&str, &str> = [("TABLE_NAME", "swarm"), ("WORKER_MODE", "dlq")].into();
        let e = WorkerConfig::from_lookup(|k| bare.get(k).map(|v| v.to_string())).unwrap_err();
        assert!(e.to_string().starts_with("TASKS_QUEUE_URL is required"), "{e}");
        let map: HashMap<&str, &str> = BASE.iter().copied().filter(|(k, _)| !k.starts_with("GATEWAY_")).collect();
        let e = WorkerConfig::from_lookup(|k| map.get(k).map(|v| v.to_string())).unwrap_err();
        assert!(e.to_string().starts_with("GATEWAY_URL is required"), "{e}");
    }

    #[test]
    fn the_approval_key_is_read_from_its_secret_and_absent_when_unset() {
        let arn = ("APPROVAL_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:approval");
        let sweep = parse(&[("WORKER_MODE", "sweep"), arn]).unwrap();
        assert_eq!(sweep.approval_key.map(|k| k.var().to_owned()).as_deref(), Some("APPROVAL_KEY_SECRET_ARN"));
        assert!(parse(&[("WORKER_MODE", "sweep")]).unwrap().approval_key.is_none());
    }

    #[test]
    fn a_bad_mode_or_token_budget_stops_the_start_naming_it() {
        let e = parse(&[("WORKER_MODE", "x")]).unwrap_err();
        assert_eq!(e.to_string(), r#"WORKER_MODE must be tasks, dlq or sweep, not "x""#);
        assert_eq!(parse(&[("WORKER_MODE", "sweep")]).unwrap().mode, WorkerMode::Sweep);
        for bad in ["lots", "-5", "999", "1.5e4"] {
            let e = parse(&[("LLM_TOKEN_BUDGET", bad)]).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "LLM_TOKEN_BUDGET must be a whole number of tokens, at least 1000 (the conversation-wide stop), not {bad:?}"
                )
            );
        }
    }
}
