//! The API's request and response bodies as types: what the handlers read and serialise, and what the OpenAPI document's schemas are checked against (`schemars`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use swarm_core::view::{ConversationSummary, OperatorApprovalView};

/// `POST /conversations`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
pub struct CreateBody {
    /// The customer's message: 1 to 8,000 characters (after trimming).
    pub message: Option<String>,
    /// Who the message is from; with authentication on, the caller's own (or left out).
    pub customer_id: Option<String>,
}

/// `202` to `POST /conversations` and `POST /conversations/{id}/messages` (the `Location` header
/// names the same URL).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Created {
    pub conversation_id: String,
    /// `/conversations/{conversation_id}`.
    pub status_url: String,
    /// The turn the message is answered in: 0 for the first message, then one more per follow-up.
    #[serde(default)]
    pub turn: u32,
}

/// `GET /conversations`: a page of the caller's conversations, newest first.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ConversationPage {
    pub conversations: Vec<ConversationSummary>,
    /// Pass as `cursor` for the next page; absent on the last page. Opaque: its content may change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `GET /approvals`: a page, newest first.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ApprovalPage {
    pub approvals: Vec<OperatorApprovalView>,
    /// Pass as `cursor` for the next page; absent on the last page. Opaque: its content may change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST /approvals/{id}`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
pub struct DecideBody {
    /// `approve` or `reject`.
    pub decision: Option<String>,
}

/// `POST /operator/conversations/{id}/messages`: a person's answer to a handed-off conversation.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
pub struct OperatorAnswerBody {
    /// What the customer is told (1-8,000 characters), as the person wrote it.
    pub text: Option<String>,
}

/// `201` (told now) or `200` (told before for this key) to `POST /operator/conversations/{id}/messages`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct OperatorAnswer {
    pub conversation_id: String,
    /// The turn the answer is (`turns[turn]` of `GET /conversations/{id}`).
    pub turn: u32,
    /// Always `operator`.
    pub author: swarm_core::turns::TurnAuthor,
    /// Where the customer reads it.
    pub status_url: String,
}

/// `200` to `POST /approvals/{id}`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct Decided {
    pub approval: OperatorApprovalView,
}

/// `GET /health`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Health {
    /// Always `ok`: the function answered (it reads no store).
    pub status: String,
    /// The orchestrator's version.
    pub version: String,
}
