//! The LLM rules every chat model shares: retries without storms, transcript pairing and compression, token prices; and the pair of models a function uses.

pub mod pricing;
pub mod retry;
pub mod transcript;

use std::fmt;
use std::sync::Arc;

use crate::ports::ChatModel;

/// The models a function uses: `main` for planning, tool loops and the reply;
/// `sub` for compression (the same instance as `main` when no sub model is set).
#[derive(Clone)]
pub struct Models {
    pub main: Arc<dyn ChatModel>,
    pub sub: Arc<dyn ChatModel>,
}

impl Models {
    /// The same model for every purpose.
    pub fn single(model: Arc<dyn ChatModel>) -> Self {
        Self { main: model.clone(), sub: model }
    }
}

impl fmt::Debug for Models {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Models").field("main", &self.main.label()).field("sub", &self.sub.label()).finish()
    }
}
