//! The receipt heartbeat of one invocation: its batch's messages kept in flight at a short visibility timeout while it is alive, so a crashed or timed-out invocation's messages — begun or never begun — come back after that, not after the queue's visibility timeout.
//!
//! It runs inside the invocation's future (selected with the batch's work, never spawned): the
//! platform's crash (the invocation dropped) and its function-timeout cut stop it with the work,
//! as Lambda does.

use std::collections::BTreeMap;
use std::convert::Infallible;

use tokio::sync::Mutex;

use crate::outcome::MessageHandler;
use crate::settings::Heartbeat;

/// The messages of one batch the invocation still holds, by queue name: every message until the
/// invocation returns (a finished one is deleted only then), except one given back for a retry.
pub struct Held {
    by_queue: Mutex<BTreeMap<String, Vec<String>>>,
}

impl Held {
    /// Every `(queue, receipt handle)` of the batch.
    pub fn new(messages: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut by_queue: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (queue, handle) in messages {
            if !handle.is_empty() {
                by_queue.entry(queue).or_default().push(handle);
            }
        }
        Self { by_queue: Mutex::new(by_queue) }
    }

    /// Lets go of `receipt_handle` and runs `then` (making it visible again soon) before the next
    /// beat can: a beat never extends a message after it was given back.
    pub async fn let_go<F: Future<Output = ()>>(&self, queue: &str, receipt_handle: &str, then: F) {
        let mut held = self.by_queue.lock().await;
        if let Some(handles) = held.get_mut(queue) {
            handles.retain(|h| h != receipt_handle);
        }
        then.await;
    }

    /// One beat: every held message set to the receipt visibility, each queue's call cut after
    /// `heartbeat.cut` (tried again on the next beat). A handle the queue calls stale (the message was
    /// received again elsewhere) is let go of.
    pub async fn beat(&self, function: &dyn MessageHandler, heartbeat: &Heartbeat) {
        let mut held = self.by_queue.lock().await;
        for (queue, handles) in held.iter_mut().filter(|(_, h)| !h.is_empty()) {
            let call = function.keep_in_flight(queue, handles, heartbeat.receipt_visibility_secs);
            match tokio::time::timeout(heartbeat.cut, call).await {
                Ok(Ok(stale)) => {
                    if !stale.is_empty() {
                        tracing::warn!(queue, stale = stale.len(), "messages no longer held: received again");
                    }
                    handles.retain(|h| !stale.contains(h));
                }
                Ok(Err(e)) => {
                    tracing::warn!(queue, error = %e, "receipt heartbeat failed; tried again on the next beat")
                }
                Err(_) => tracing::warn!(queue, "receipt heartbeat cut at its deadline; tried again on the next beat"),
            }
        }
    }

    /// Beats until dropped: every `heartbeat.every` (the first beat is the caller's, before the work).
    pub async fn beats(&self, function: &dyn MessageHandler, heartbeat: Heartbeat) -> Infallible {
        loop {
            tokio::time::sleep(heartbeat.every).await;
            self.beat(function, &heartbeat).await;
        }
    }
}

/// `work` with `beats` beside it: answers `work`'s output; the beats end when it does.
pub async fn beside<T>(work: impl Future<Output = T>, beats: impl Future<Output = Infallible>) -> T {
    tokio::select! {
        biased;
        out = work => out,
        never = beats => match never {},
    }
}
