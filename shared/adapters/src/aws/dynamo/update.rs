//! The update-expression builder of the DynamoDB store: every attribute name aliased (`status`, `query`, `ttl`… are reserved words).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use swarm_core::domain::Usage;

use super::codec::{s, usage_attributes};

/// Builds an `UpdateExpression` whose attribute names are all aliased
/// (`status`, `query`, `ttl`… are DynamoDB reserved words).
#[derive(Default)]
pub(super) struct Update {
    set: Vec<String>,
    add: Vec<String>,
    remove: Vec<String>,
    pub(super) names: HashMap<String, String>,
    pub(super) values: HashMap<String, AttributeValue>,
}

impl Update {
    pub(super) fn name(&mut self, attr: &str) -> String {
        let alias = format!("#{attr}");
        self.names.insert(alias.clone(), attr.to_owned());
        alias
    }

    pub(super) fn value(&mut self, placeholder: &str, v: AttributeValue) -> String {
        let p = format!(":{placeholder}");
        self.values.insert(p.clone(), v);
        p
    }

    pub(super) fn set(&mut self, attr: &str, v: AttributeValue) -> &mut Self {
        let name = self.name(attr);
        let value = self.value(attr, v);
        self.set.push(format!("{name} = {value}"));
        self
    }

    pub(super) fn set_expr(&mut self, expr: String) -> &mut Self {
        self.set.push(expr);
        self
    }

    pub(super) fn add(&mut self, attr: &str, v: AttributeValue) -> &mut Self {
        let name = self.name(attr);
        let value = self.value(attr, v);
        self.add.push(format!("{name} {value}"));
        self
    }

    pub(super) fn remove(&mut self, attr: &str) -> &mut Self {
        let name = self.name(attr);
        self.remove.push(name);
        self
    }

    pub(super) fn add_usage(&mut self, usage: &Usage) -> &mut Self {
        for (attr, v) in usage_attributes(usage) {
            self.add(attr, v);
        }
        self
    }

    /// `status IN (...)` condition on the aliased `status` attribute.
    pub(super) fn status_in(&mut self, statuses: &[&str]) -> String {
        let name = self.name("status");
        let values: Vec<String> =
            statuses.iter().enumerate().map(|(i, st)| self.value(&format!("from{i}"), s(*st))).collect();
        format!("attribute_exists(#PK) AND {name} IN ({})", values.join(", "))
    }

    pub(super) fn expression(&self) -> String {
        let mut parts = Vec::new();
        if !self.set.is_empty() {
            parts.push(format!("SET {}", self.set.join(", ")));
        }
        if !self.add.is_empty() {
            parts.push(format!("ADD {}", self.add.join(", ")));
        }
        if !self.remove.is_empty() {
            parts.push(format!("REMOVE {}", self.remove.join(", ")));
        }
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::dynamo::codec::n;

    #[test]
    fn update_expression_aliases_every_name() {
        let mut u = Update::default();
        u.set("status", s("RUNNING")).add("usage_prompt_tokens", n(3)).remove("checkpoint");
        assert_eq!(
            u.expression(),
            "SET #status = :status ADD #usage_prompt_tokens :usage_prompt_tokens REMOVE #checkpoint"
        );
        assert_eq!(u.names.get("#status").map(String::as_str), Some("status"));
    }
}
