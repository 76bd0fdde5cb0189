//! Port traits: the conversation store (as role traits), the task queue (sending side), the chat model and the tool gateway.
//!
//! The function cores talk only to these traits (`Arc<dyn Trait>`), so the same
//! code runs on Lambda (AWS adapters), in the local stack (embedded adapters)
//! and in tests. Every error says whether it is transient (retry may help) or
//! permanent. The receiving side of a queue is the event source mapping's
//! business, not a function's: it belongs to the local platform (`infra/local`).

mod model;
mod queue;
mod store;
mod tools;

pub use model::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Purpose, Rejection, ToolCall,
    ToolChoice, ToolSpec,
};
pub use queue::{MAX_DELAY_SECONDS, MAX_VISIBILITY_SECONDS, QueueError, SQS_BATCH_LIMIT, TaskQueue};
pub use store::{
    AccountingStore, AnswerStore, ApprovalStore, AttemptStart, Call, CloseOutcome, ConversationHistory,
    ConversationPage, ConversationPosition, ConversationRecords, ConversationStore, CountOutcome, CreateOutcome,
    EventLog, IntentOutcome, JournalStore, LeaseAsk, LeaseOutcome, LeasePhase, RecordOutcome, StoreDecorator,
    StoreError, StoreOp, SubtaskStore, TurnOutcome,
};
pub use tools::{LogSafeToolError, ToolContext, ToolError, ToolGateway, ToolOutput};
