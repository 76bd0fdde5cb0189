//! The orchestrator's one typed config: every variable it reads, parsed once at cold start from the shared pieces.

use swarm_adapters::config::{
    AuthConfig, ConfigError, GatewayClientConfig, LimitsConfig, QueueUrls, SecretSource, SecretsExtension, TableConfig,
    Vars, var_list,
};
use swarm_adapters::llm::LlmConfig;
use swarm_core::access::CustomerLimits;
use swarm_core::roles::{PLANNER_ROLE, RoleTable};

use std::time::Duration;

use crate::OrchestratorSettings;
use crate::api::AllowedOrigins;
use crate::api::OperatorAllowlist;

/// The longest `CONVERSATION_IDLE_EXPIRY_SECS` (the template parameter's `MaxValue`): 30 days.
const MAX_IDLE_EXPIRY_SECS: u64 = 2_592_000;

/// Everything the orchestrator Lambda reads from its environment.
#[derive(Clone, Debug)]
pub struct OrchestratorConfig {
    pub table: TableConfig,
    pub queues: QueueUrls,
    /// The planner's credential: it lists tools to plan with and calls none (`WORKER_ROLE` defaults to `planner`).
    pub gateway: GatewayClientConfig,
    pub llm: LlmConfig,
    pub secrets: SecretsExtension,
    /// `AUTH_MODE`, `JWT_CUSTOMER_CLAIM`, `JWT_CUSTOMER_MAPPING`: where the caller's identity comes from.
    pub auth: AuthConfig,
    /// `CUSTOMER_CONVERSATIONS_PER_MINUTE`, `CUSTOMER_MAX_SUBTASKS`.
    pub limits: CustomerLimits,
    /// `ROLE_TABLE`: which role runs a subtask, from its tools (`tool=role,…`); unset → the demo table.
    pub roles: RoleTable,
    /// `DEADLINE_SECS`: seconds from a conversation's creation to its deadline (default 120).
    pub deadline_secs: u64,
    /// `CONVERSATION_IDLE_EXPIRY_SECS`: how long a conversation takes follow-ups after its latest
    /// turn started (the template's `ConversationIdleExpirySecs`). Unset: the timing table's
    /// `conversation.idle_expiry_secs`.
    pub idle_expiry: Option<Duration>,
    /// `APPROVAL_KEY` (or the secret named by `APPROVAL_KEY_SECRET_ARN`): the key approval tokens
    /// are signed with, shared only with the gateway. Unset: the approvals API is off.
    pub approval_key: Option<SecretSource>,
    /// `OPERATOR_PRINCIPALS`: the IAM users and roles (ARNs, comma-separated) who decide
    /// approvals on AWS; a principal mapped to a customer never does. Unset: nobody.
    pub operators: OperatorAllowlist,
    /// `CORS_ALLOWED_ORIGINS`: browser origins allowed to call the API, comma-separated (the
    /// template's `CorsAllowOrigins`, which API Gateway's CORS configuration answers with too).
    pub cors: AllowedOrigins,
}

impl OrchestratorConfig {
    /// Variables read by the orchestrator itself (the pieces list theirs).
    const OWN_VARS: &'static [&'static str] = &[
        "ROLE_TABLE",
        "DEADLINE_SECS",
        "CONVERSATION_IDLE_EXPIRY_SECS",
        "APPROVAL_KEY",
        "APPROVAL_KEY_SECRET_ARN",
        "OPERATOR_PRINCIPALS",
        "CORS_ALLOWED_ORIGINS",
    ];

    /// Every variable this config reads.
    pub fn vars() -> Vec<&'static str> {
        var_list(&[
            TableConfig::VARS,
            QueueUrls::VARS,
            GatewayClientConfig::VARS,
            LlmConfig::VARS,
            SecretsExtension::VARS,
            AuthConfig::VARS,
            LimitsConfig::VARS,
            Self::OWN_VARS,
        ])
    }

    /// Parses every variable; no I/O (secrets are fetched when the models and
    /// the gateway client are built). The error names the variable and its accepted values.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        let roles = match vars.get("ROLE_TABLE") {
            None => RoleTable::demo(),
            Some(text) => RoleTable::parse(&text).map_err(|reason| ConfigError::Invalid {
                var: "ROLE_TABLE",
                accepted: format!("tool=role pairs separated by commas, e.g. refund=refund ({reason})"),
                value: text,
            })?,
        };
        let operators = match vars.get("OPERATOR_PRINCIPALS") {
            None => OperatorAllowlist::default(),
            Some(text) => OperatorAllowlist::parse(&text).map_err(|reason| ConfigError::Invalid {
                var: "OPERATOR_PRINCIPALS",
                accepted: format!("IAM user or role ARNs separated by commas ({reason})"),
                value: text,
            })?,
        };
        let cors = match vars.get("CORS_ALLOWED_ORIGINS") {
            None => AllowedOrigins::default(),
            Some(text) => AllowedOrigins::parse(text.split(',')).map_err(|reason| ConfigError::Invalid {
                var: "CORS_ALLOWED_ORIGINS",
                accepted: format!("origins separated by commas, e.g. https://console.example.com ({reason})"),
                value: text,
            })?,
        };
        let deadline_secs = vars
            .number("DEADLINE_SECS", 1..=86_400, "a whole number of seconds from 1 to 86400")?
            .unwrap_or(swarm_core::domain::DEFAULT_DEADLINE_SECS);
        let idle_expiry = vars
            .number(
                "CONVERSATION_IDLE_EXPIRY_SECS",
                1..=MAX_IDLE_EXPIRY_SECS,
                "a whole number of seconds from 1 to 2592000 (30 days)",
            )?
            .map(Duration::from_secs);
        Ok(Self {
            table: TableConfig::from_lookup(&lookup)?,
            queues: QueueUrls::from_lookup(&lookup)?,
            gateway: GatewayClientConfig::from_lookup(&lookup, PLANNER_ROLE)?,
            llm: LlmConfig::from_lookup(&lookup)?,
            secrets: SecretsExtension::from_lookup(&lookup)?,
            auth: AuthConfig::from_lookup(&lookup)?,
            limits: LimitsConfig::from_lookup(&lookup)?,
            roles,
            deadline_secs,
            idle_expiry,
            approval_key: SecretSource::from_lookup(&lookup, "APPROVAL_KEY", "APPROVAL_KEY_SECRET_ARN"),
            operators,
            cors,
        })
    }

    /// [`OrchestratorConfig::from_lookup`] over the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The core's settings: the standard table's with this config's deadline and idle expiry
    /// ([`crate::wiring::settings`]).
    pub fn settings(&self) -> OrchestratorSettings {
        crate::wiring::settings(self, swarm_core::timings::Timings::standard())
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
        ("GATEWAY_URL", "https://gw.example.com/mcp"),
        ("GATEWAY_TOKEN_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:planner"),
        ("LLM_BASE_URL", "https://api.deepseek.com/v1"),
        ("LLM_MODEL", "deepseek-chat"),
        ("LLM_API_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:llm"),
    ];

    fn parse(extra: &[(&str, &str)]) -> Result<OrchestratorConfig, ConfigError> {
        let map: HashMap<&str, &str> = BASE.iter().chain(extra).copied().collect();
        OrchestratorConfig::from_lookup(|k| map.get(k).map(|v| v.to_string()))
    }

    #[test]
    fn defaults_are_the_planner_role_no_auth_the_demo_roles_and_a_120_s_deadline() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.gateway.role, "planner");
        assert_eq!(c.auth.mode, swarm_adapters::config::AuthMode::None);
        assert_eq!(c.limits, CustomerLimits::DEFAULT);
        assert_eq!(c.roles, RoleTable::demo());
        assert_eq!(c.settings().deadline_secs, 120);
        assert_eq!((c.idle_expiry, c.settings().idle_expiry.as_secs()), (None, 87_300), "unset: the table's");
        assert_eq!(c.llm.key_secret.as_deref(), Some("arn:aws:secretsmanager:us-east-1:123456789012:secret:llm"));
        assert!(c.approval_key.is_none(), "no key: the approvals API is off");
        assert!(c.operators.is_empty(), "no operators unless named");
        let with =
            parse(&[("APPROVAL_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:approval")])
                .unwrap();
        assert_eq!(with.approval_key.map(|k| k.var().to_owned()).as_deref(), Some("APPROVAL_KEY_SECRET_ARN"));
    }

    #[test]
    fn each_bad_value_is_named_with_what_is_accepted() {
        let c = parse(&[("AUTH_MODE", "jwt"), ("DEADLINE_SECS", "300"), ("ROLE_TABLE", "refund=refund,cancel=refund")])
            .unwrap();
        assert_eq!((c.auth.mode, c.deadline_secs), (swarm_adapters::config::AuthMode::Jwt, 300));
        assert_eq!(c.roles.role_for(&["shop__cancel"]), "refund");
        for (var, value, message) in [
            ("AUTH_MODE", "open", r#"AUTH_MODE must be none, jwt or iam, not "open""#),
            ("DEADLINE_SECS", "soon", r#"DEADLINE_SECS must be a whole number of seconds from 1 to 86400, not "soon""#),
            (
                "CONVERSATION_IDLE_EXPIRY_SECS",
                "0",
                r#"CONVERSATION_IDLE_EXPIRY_SECS must be a whole number of seconds from 1 to 2592000 (30 days), not "0""#,
            ),
            ("ROLE_TABLE", "refund", "ROLE_TABLE must be tool=role pairs separated by commas"),
            (
                "OPERATOR_PRINCIPALS",
                "arn:aws:iam::123456789012:user/*",
                "OPERATOR_PRINCIPALS must be IAM user or role ARNs",
            ),
            ("CORS_ALLOWED_ORIGINS", "console.example.com", "CORS_ALLOWED_ORIGINS must be origins separated by commas"),
        ] {
            let e = parse(&[(var, value)]).unwrap_err();
            assert!(e.to_string().starts_with(message), "{var}={value}: {e}");
        }
    }

    #[test]
    fn no_llm_endpoint_means_no_start() {
        let e = parse(&[("LLM_BASE_URL", "")]).unwrap_err();
        assert!(e.to_string().starts_with("LLM_BASE_URL: missing"), "{e}");
    }
}
