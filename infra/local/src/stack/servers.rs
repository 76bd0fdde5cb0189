//! The servers of the local stack: the demo shop, the fault proxy in front of it under a chaos run with tool faults, and the tool gateway with fresh role tokens — which become the stack's secrets, each function given the ARN of its own.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use swarm_adapters::config::ExposeSecret as _;
use swarm_core::timings::Timings;
use tokio::task::JoinHandle;

use super::options::StackOptions;
use crate::platform::tool_faults;
use crate::wiring::{LocalSecret, LocalSecrets};

/// The running servers and the secrets of this run.
pub struct Servers {
    pub shop: Arc<shop_tools::Shop>,
    /// The shop's MCP endpoint.
    pub shop_url: String,
    /// The gateway's MCP endpoint (the functions' `GATEWAY_URL`).
    pub gateway_url: String,
    /// The role tokens, the approval key and this process's LLM key, by their local ARN.
    pub secrets: LocalSecrets,
    /// The tokens those secrets hold (carried to a restart on the same stack).
    pub tokens: tool_gateway::DemoTokens,
    /// The shop, the fault proxy and the gateway, stopped with the stack.
    pub tasks: Vec<JoinHandle<()>>,
}

impl Servers {
    /// Starts the demo shop (it answers the gateway only: the gateway's upstream credential, fresh
    /// per stack), the fault proxy when the chaos run asks for tool faults, and the gateway in front,
    /// its waits the (scaled) table's. With [`StackOptions::carried`], the shop and the tokens are
    /// those of the stack that died (served anew on fresh ports). Errors: a server cannot bind, the
    /// demo data does not load.
    pub async fn start(options: &StackOptions, timings: &Timings) -> anyhow::Result<Self> {
        let (tokens, shop) = match &options.carried {
            Some(carried) => (carried.tokens.clone(), carried.shop.clone()),
            None => (
                tool_gateway::DemoTokens::generate(),
                Arc::new(shop_tools::Shop::demo().context("loading the demo shop")?),
            ),
        };
        let shop_access = shop_tools::ShopAccess::local(tokens.shop_upstream().clone())
            .map_err(|e| anyhow::anyhow!("the demo shop's upstream token: {e}"))?;
        let (shop_addr, shop_task) = shop_tools::serve(loopback(), shop.clone(), shop_access)
            .await
            .context("starting the demo shop tool server")?;
        let shop_url = format!("http://{shop_addr}/mcp");
        let mut tasks = vec![shop_task];
        // Under chaos with tool faults the gateway federates the fault proxy in the shop's place.
        let upstream_url = match options.chaos.as_ref().filter(|c| c.settings().tools.any()) {
            Some(chaos) => {
                let (url, task) =
                    tool_faults::start(&shop_url, chaos.clone()).await.context("starting the tool fault proxy")?;
                tasks.push(task);
                url
            }
            None => shop_url.clone(),
        };
        let config = gateway_config(&upstream_url, &tokens, options, timings);
        let (gateway_addr, gateway_task) =
            tool_gateway::serve(loopback(), config).await.context("starting the tool gateway")?;
        tasks.push(gateway_task);
        let secrets = secrets(&tokens);
        Ok(Self { shop, shop_url, gateway_url: format!("http://{gateway_addr}/mcp"), secrets, tokens, tasks })
    }
}

/// The demo gateway: the stack's consent threshold, the (scaled) table's waits, and the shop kept
/// connected (it lives in this process and never restarts).
fn gateway_config(
    upstream_url: &str,
    tokens: &tool_gateway::DemoTokens,
    options: &StackOptions,
    timings: &Timings,
) -> tool_gateway::GatewayConfig {
    let mut config = tool_gateway::demo_config(upstream_url, tokens);
    config.upstream_keep_alive = true;
    if let Some(above) = options.refund_approval_above_cents {
        for effect in config.side_effects.values_mut() {
            if let Some(consent) = &mut effect.consent {
                consent.above_cents = above;
            }
        }
    }
    for upstream in &mut config.upstreams {
        upstream.call_timeout_secs = timings.gateway.call_timeout.as_secs_f64();
        upstream.discovery_timeout_secs = timings.gateway.discovery_timeout.as_secs_f64();
    }
    scale_gateway(&mut config, options.time_scale);
    config
}

/// The run's secrets: a token per role, the approval key, and `LLM_API_KEY` of this process when set.
fn secrets(tokens: &tool_gateway::DemoTokens) -> LocalSecrets {
    let mut secrets = LocalSecrets::default();
    for secret in LocalSecret::ALL {
        if let Some(token) = secret.role().and_then(|role| tokens.token(role)) {
            secrets.insert(secret, token.expose_secret());
        }
    }
    secrets.insert(LocalSecret::ApprovalKey, tokens.approval_key());
    if let Some(key) = std::env::var("LLM_API_KEY").ok().filter(|k| !k.trim().is_empty()) {
        secrets.insert(LocalSecret::LlmApiKey, key);
    }
    secrets
}

/// Scales the gateway's windows of time — breaker window and open time, `tools/list` cache and
/// discovery retry — by the stack's time scale, like every other timing: an unscaled breaker
/// would stay open for the equivalent of hours. Its call timeouts stay as they are: the worker's
/// own tool timeout (scaled) already cuts a call, and a scaled discovery timeout would measure
/// this machine's CPU rather than the upstream.
fn scale_gateway(config: &mut tool_gateway::GatewayConfig, factor: f64) {
    config.list_ttl_secs *= factor;
    config.discovery_retry_secs *= factor;
    for u in &mut config.upstreams {
        u.breaker.window_secs *= factor;
        u.breaker.open_secs *= factor;
    }
}

pub(super) fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
