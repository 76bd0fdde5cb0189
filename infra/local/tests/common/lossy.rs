//! A store decorator that loses answers: the write is applied, then the caller gets a transient
//! error (as an HTTP 500 or an attempt timeout after DynamoDB applied it) — what a retried
//! conditional write must recognise as its own.

use std::collections::HashSet;
use std::sync::Arc;

use anyhow::{Result, ensure};
use swarm_core::ports::{Call, ConversationStore, StoreDecorator, StoreError, StoreOp};

type Store = Arc<dyn ConversationStore>;

/// The store with the answer of each listed operation's first call lost: the write is applied, then the
/// caller gets a transient error (as an HTTP 500 or an attempt timeout after DynamoDB applied it).
pub struct LosesFirstAnswer {
    pub inner: Store,
    pub lose: std::sync::Mutex<HashSet<StoreOp>>,
}

impl StoreDecorator for LosesFirstAnswer {
    fn inner(&self) -> &dyn ConversationStore {
        self.inner.as_ref()
    }

    async fn around<'a, T, F>(&'a self, call: Call<'a>, run: F) -> std::result::Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = std::result::Result<T, StoreError>> + Send + 'a,
    {
        let answer = run.await?;
        let lost = self.lose.lock().map_err(|_| StoreError::Permanent("lock poisoned".into()))?.remove(&call.op);
        if lost {
            return Err(StoreError::Transient(format!("{} answer lost (injected)", call.op.name())));
        }
        Ok(answer)
    }
}

/// [`LosesFirstAnswer`] over `store`, and a function arming it to lose the next answer of `op`.
pub fn losing(store: &Store) -> (Arc<LosesFirstAnswer>, Store) {
    let decorator = Arc::new(LosesFirstAnswer { inner: store.clone(), lose: Default::default() });
    let lossy: Store = decorator.clone();
    (decorator, lossy)
}

impl LosesFirstAnswer {
    pub fn lose(&self, op: StoreOp) -> Result<()> {
        self.lose.lock().map_err(|_| anyhow::anyhow!("lock poisoned"))?.insert(op);
        Ok(())
    }
}

/// The error of a call whose answer was lost; an error when it answered.
pub fn answer_lost<T: std::fmt::Debug>(r: std::result::Result<T, StoreError>) -> Result<()> {
    ensure!(matches!(&r, Err(e) if e.is_transient()), "answer not lost: {r:?}");
    Ok(())
}
