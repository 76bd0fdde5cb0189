//! The local stack's demo gateway: one random bearer token per demo role, the gateway's credential for the demo shop and the approval key ([`DemoTokens`]), and the configuration in front of the demo shop ([`demo_config`]). Not the production configuration: that is read from `GATEWAY_CONFIG` ([`crate::config`]).

use std::collections::{BTreeMap, HashMap};

use secrecy::{ExposeSecret, SecretString};

use crate::config::{ConsentConfig, GatewayConfig, RoleConfig, SideEffectConfig, UpstreamConfig};

/// One random bearer token per demo role (`support`, `refund`, `planner`), the gateway's own
/// credential for the demo shop (its upstream `Authorization` header), and the approval key the
/// local stack's gateway and approvals API share. `Debug` shows none of them.
#[derive(Clone, Debug)]
pub struct DemoTokens {
    tokens: BTreeMap<String, SecretString>,
    shop: SecretString,
    approval_key: SecretString,
}

/// The demo roles, in the order [`demo_config`] defines them.
pub const DEMO_ROLES: [&str; 3] = ["support", "refund", "planner"];

/// The shop's tools that read.
const SHOP_READS: [&str; 6] = [
    "shop__get_order",
    "shop__list_customer_orders",
    "shop__track_shipment",
    "shop__get_product",
    "shop__check_coupon",
    "shop__get_refund_policy",
];

/// Each demo role's tools, by name (an allowlist, as `template.yaml`'s `GATEWAY_CONFIG`): a tool
/// the shop adds reaches no role until it is named here.
pub const DEMO_ROLE_TOOLS: [(&str, &[&str]); 3] = [
    ("support", &SHOP_READS),
    (
        "refund",
        &[
            "shop__get_order",
            "shop__list_customer_orders",
            "shop__get_refund_policy",
            "shop__refund",
            "shop__open_ticket",
        ],
    ),
    (
        "planner",
        &[
            "shop__get_order",
            "shop__list_customer_orders",
            "shop__track_shipment",
            "shop__get_product",
            "shop__check_coupon",
            "shop__get_refund_policy",
            "shop__refund",
            "shop__open_ticket",
        ],
    ),
];

/// 32 random bytes as hex.
fn random_token() -> SecretString {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    SecretString::from(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

impl DemoTokens {
    /// Fresh tokens: 32 random bytes as hex, one per demo role.
    pub fn generate() -> Self {
        let tokens = DEMO_ROLES.iter().map(|role| (role.to_string(), random_token())).collect();
        let (_, approval_key) = swarm_core::approval::ApprovalKey::generate();
        Self { tokens, shop: random_token(), approval_key: SecretString::from(approval_key) }
    }

    /// The credential the gateway presents to the demo shop (give it to the shop's `ShopAccess`).
    pub fn shop_upstream(&self) -> &SecretString {
        &self.shop
    }

    /// The approval key (hex text), for the approvals API of the same stack.
    pub fn approval_key(&self) -> &str {
        self.approval_key.expose_secret()
    }

    /// The token of `role`, if it is a demo role.
    pub fn token(&self, role: &str) -> Option<&SecretString> {
        self.tokens.get(role)
    }

    /// role → token, as `McpToolGateway::new` takes it.
    pub fn role_tokens(&self) -> HashMap<String, SecretString> {
        self.tokens.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// The local stack's gateway: upstream `shop` (prefix `shop__`) at `shop_url`, called with
/// `Authorization: Bearer <tokens.shop_upstream()>`;
/// roles `support` (every shop tool that reads), `refund`
/// (`shop__refund`, `shop__open_ticket`, `shop__get_refund_policy`, `shop__get_order`,
/// `shop__list_customer_orders`) and `planner` (lists every shop tool, calls none), each
/// [`DEMO_ROLE_TOOLS`] by name (the template's lists);
/// `shop__refund` side-effecting with consent for every refund (the approval key of `tokens`),
/// `shop__open_ticket` side-effecting without consent (it moves no money; like every side effect
/// it is the refund role's, journaled and confirmed by the refund worker).
pub fn demo_config(shop_url: &str, tokens: &DemoTokens) -> GatewayConfig {
    let token = |role: &str| tokens.token(role).cloned().unwrap_or_default();
    // Its waits are the timing table's (`UpstreamConfig::new`'s defaults); the local stack scales them.
    let mut shop = UpstreamConfig::new("shop", shop_url);
    let credential = format!("Bearer {}", tokens.shop_upstream().expose_secret());
    shop.headers.insert("authorization".into(), SecretString::from(credential));
    let roles: BTreeMap<String, RoleConfig> = DEMO_ROLE_TOOLS
        .iter()
        .map(|(name, tools)| {
            let tools = tools.iter().map(|t| (*t).to_owned()).collect();
            let role = RoleConfig { token: token(name), tools, deny: Vec::new(), call: *name != "planner" };
            ((*name).to_owned(), role)
        })
        .collect();
    let mut config = GatewayConfig::new(vec![shop], roles);
    config.side_effects = BTreeMap::from([
        ("shop__refund".to_owned(), SideEffectConfig { consent: Some(ConsentConfig::every_call()) }),
        ("shop__open_ticket".to_owned(), SideEffectConfig { consent: None }),
    ]);
    config.approval_key = Some(tokens.approval_key.clone());
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_tokens_are_random_per_role_and_hidden_in_debug() {
        let a = DemoTokens::generate();
        let b = DemoTokens::generate();
        let token = |t: &DemoTokens, role: &str| t.token(role).unwrap().expose_secret().to_owned();
        assert_ne!(token(&a, "support"), token(&b, "support"));
        assert_ne!(token(&a, "support"), token(&a, "refund"));
        assert_ne!(a.shop_upstream().expose_secret(), token(&a, "support"));
        let config = demo_config("http://127.0.0.1:1/mcp", &a);
        assert_eq!(
            config.upstreams[0].headers["authorization"].expose_secret(),
            format!("Bearer {}", a.shop_upstream().expose_secret())
        );
        assert_eq!(token(&a, "planner").len(), 64);
        let printed = format!("{a:?}");
        for secret in DEMO_ROLES.map(|r| token(&a, r)).into_iter().chain([a.shop_upstream().expose_secret().to_owned()])
        {
            assert!(!printed.contains(&secret), "{printed}");
        }
        assert!(!printed.contains(a.approval_key()) && printed.contains("REDACTED"), "{printed}");
        assert_eq!(a.role_tokens().len(), 3);
    }

    #[test]
    fn demo_roles_name_their_tools_and_only_the_refund_role_may_refund() {
        let config = demo_config("http://127.0.0.1:1/mcp", &DemoTokens::generate());
        for (name, role) in &config.roles {
            assert!(role.deny.is_empty(), "{name}");
            assert!(role.tools.iter().all(|t| !t.contains(['*', '?', '['])), "{name}: {:?}", role.tools);
        }
        let may_refund: Vec<(&str, bool)> = config
            .roles
            .iter()
            .filter(|(_, r)| r.tools.iter().any(|t| t == "shop__refund"))
            .map(|(name, r)| (name.as_str(), r.call))
            .collect();
        assert_eq!(may_refund, [("planner", false), ("refund", true)], "the planner lists it and calls nothing");
    }
}
