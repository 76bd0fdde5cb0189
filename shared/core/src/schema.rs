//! JSON Schemas (`schemars`) of the domain values the public API shows, written here rather than derived where the types live: each lists exactly the values its serde form takes (a new variant fails to compile until it is listed), so the API's OpenAPI document is checked against what the handlers really serialise.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use crate::approval::ApprovalStatus;
use crate::domain::{ConversationStatus, FailureKind, HandoffReason, SubtaskStatus, Usage};
use crate::effects::EffectState;
use crate::view::LowerCase;

/// The serde names of `values`, in order.
fn names<T: serde::Serialize>(values: &[T]) -> Vec<String> {
    values.iter().filter_map(|v| serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_owned))).collect()
}

fn string_enum(description: &str, values: Vec<String>) -> Schema {
    json_schema!({ "type": "string", "enum": values, "description": description })
}

/// Every variant of each enum, checked to be complete by an exhaustive `match`.
macro_rules! all_of {
    ($ty:ident: $($variant:ident),+ $(,)?) => {{
        #[allow(dead_code)]
        fn exhaustive(v: $ty) {
            match v {
                $($ty::$variant)|+ => {}
            }
        }
        [$($ty::$variant),+]
    }};
}

macro_rules! enum_schema {
    ($ty:ident, $description:expr, [$($variant:ident),+ $(,)?]) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                stringify!($ty).into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                string_enum($description, names(&all_of!($ty: $($variant),+)))
            }
        }
    };
}

enum_schema!(
    ConversationStatus,
    "PLANNING → RUNNING → AGGREGATING → DONE, or FAILED, or HANDOFF (answered, and a person takes over).",
    [Planning, Running, Aggregating, Done, Failed, Handoff]
);
enum_schema!(
    SubtaskStatus,
    "Where a subtask stands; SUCCEEDED, FAILED, SKIPPED, AWAITING_APPROVAL and SUBMITTED are final for the reply.",
    [Pending, Queued, Running, Succeeded, Failed, Skipped, AwaitingApproval, Submitted]
);
enum_schema!(
    FailureKind,
    "The stable code of a failed subtask's cause.",
    [
        DeadlinePassed,
        ModelFailed,
        NoAnswer,
        ToolsUnavailable,
        ToolsRefused,
        OutOfTime,
        TokenBudgetExhausted,
        DeadLetter,
        NotApproved,
        ActionFailed,
        Internal
    ]
);
enum_schema!(HandoffReason, "Why a person takes the conversation over.", [CustomerAsked, ToolFailures, Policy]);
enum_schema!(
    ApprovalStatus,
    "Where an approval stands (a pending one past its expiry reads expired).",
    [Pending, Approved, Rejected, Expired, Executed]
);
enum_schema!(
    EffectState,
    "Where a side-effecting call stands: intent (submitted, being confirmed), done, awaiting_approval, rejected, expired.",
    [Intent, Done, AwaitingApproval, Rejected, Expired]
);

/// The schema of `T`'s, its values in lower case: a `state` beside an upper-case `status`.
impl<T: JsonSchema> JsonSchema for LowerCase<T> {
    fn schema_name() -> Cow<'static, str> {
        format!("{}LowerCase", T::schema_name()).into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let upper = T::json_schema(generator);
        let values: Vec<String> = upper
            .get("enum")
            .and_then(serde_json::Value::as_array)
            .map(|values| values.iter().filter_map(|v| v.as_str().map(str::to_ascii_lowercase)).collect())
            .unwrap_or_default();
        string_enum(&format!("`{}` in lower case.", T::schema_name()), values)
    }
}

impl JsonSchema for Usage {
    fn schema_name() -> Cow<'static, str> {
        "Usage".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let count = json_schema!({ "type": ["integer", "null"], "minimum": 0 });
        json_schema!({
            "type": "object",
            "description": "Token usage and cost; a field the provider did not report is null, never 0.",
            "properties": {
                "prompt_tokens": count.clone(),
                "completion_tokens": count.clone(),
                "cached_tokens": count,
                "cost_usd": { "type": ["number", "null"], "minimum": 0 }
            },
            "required": ["prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd"],
            "additionalProperties": false
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_enum_lists_its_serde_names_and_they_read_back() {
        let schema = schemars::schema_for!(ConversationStatus);
        let values: Vec<String> = serde_json::from_value(schema.as_value()["enum"].clone()).unwrap_or_default();
        assert_eq!(values, ["PLANNING", "RUNNING", "AGGREGATING", "DONE", "FAILED", "HANDOFF"]);
        for v in &values {
            assert!(serde_json::from_value::<ConversationStatus>(serde_json::json!(v)).is_ok(), "{v}");
        }
        let kinds = schemars::schema_for!(FailureKind);
        let listed: Vec<String> = serde_json::from_value(kinds.as_value()["enum"].clone()).unwrap_or_default();
        let codes: Vec<&str> = FailureKind::ALL.iter().map(|k| k.code()).collect();
        assert_eq!(listed, codes);
        let usage = serde_json::to_value(Usage { prompt_tokens: Some(3), ..Usage::default() }).unwrap_or_default();
        let keys: Vec<&String> = usage.as_object().map(|o| o.keys().collect()).unwrap_or_default();
        assert_eq!(keys.len(), 4, "the schema's four properties are the serialised ones: {usage}");
    }
}
