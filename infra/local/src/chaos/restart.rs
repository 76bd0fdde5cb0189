//! A chaos run's stack that can die mid-run and come back (`swarm-chaos --restart-at`): the clients, the operator and the run's checks reach the stack through [`Stacks`]; a restart drops the running stack the way `kill -9` drops the process — every mapping, invocation, trigger, schedule and server, and every API invocation in flight (its caller gets no answer) — and starts a new one on the same named emulator stack with the dead one's secrets and shop, while the requests made meanwhile wait for it, as a client retrying a refused connection would.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use swarm_core::domain::ConversationId;
use tokio::sync::{Notify, watch};

use crate::chaos::report::RestartFacts;
use crate::platform::counters::{CounterSnapshot, Received};
use crate::{BackendChoice, LocalStack, StackOptions};

/// Longest a request waits for the stack to come back, and the restart for the dead stack's last
/// request to let go of it.
const RESTART_WAIT: Duration = Duration::from_secs(120);

/// The run's stack, as it is now.
pub struct Stacks {
    /// `None` while it restarts.
    current: watch::Sender<Option<Arc<LocalStack>>>,
    /// The options the first stack was started with (the restart's, with its secrets and shop).
    options: StackOptions,
    /// What the stacks that died saw.
    retired: Mutex<Retired>,
    /// Every conversation a client was answered 202 for, in order, and whether after the restart.
    accepted: Mutex<Vec<(String, bool)>>,
    accepted_more: Notify,
    restarted: Mutex<Option<RestartFacts>>,
}

#[derive(Default)]
struct Retired {
    counters: CounterSnapshot,
    received: Vec<Received>,
    peaks: BTreeMap<String, u64>,
}

impl Stacks {
    /// `stack`, started with `options` (a restart starts again with them, on the same stack).
    pub fn new(stack: LocalStack, options: StackOptions) -> Self {
        Self {
            current: watch::Sender::new(Some(Arc::new(stack))),
            options,
            retired: Mutex::default(),
            accepted: Mutex::default(),
            accepted_more: Notify::new(),
            restarted: Mutex::default(),
        }
    }

    /// The stack now, waiting (at most [`RESTART_WAIT`]) while it restarts.
    ///
    /// Errors: it did not come back in time.
    pub async fn stack(&self) -> anyhow::Result<Arc<LocalStack>> {
        let mut rx = self.current.subscribe();
        let now = tokio::time::timeout(RESTART_WAIT, rx.wait_for(Option::is_some))
            .await
            .context("the stack did not come back from its restart")?
            .context("the stack is gone")?;
        now.clone().context("the stack is gone")
    }

    /// One request to the stack (`call` with it): waits while it restarts; a stack killed while
    /// the request is in flight gives no answer, an error, as a process killed mid-request would.
    pub async fn call<T, F, Fut>(&self, call: F) -> anyhow::Result<T>
    where
        F: FnOnce(Arc<LocalStack>) -> Fut,
        Fut: Future<Output = anyhow::Result<T>>,
    {
        let mut rx = self.current.subscribe();
        let stack = {
            let now = tokio::time::timeout(RESTART_WAIT, rx.wait_for(Option::is_some))
                .await
                .context("the stack did not come back from its restart")?
                .context("the stack is gone")?;
            now.clone().context("the stack is gone")?
        };
        tokio::select! {
            answer = call(stack) => answer,
            _ = rx.changed() => anyhow::bail!("no answer: the stack was killed during the request"),
        }
    }

    /// A client was answered 202 for conversation `id`.
    pub fn accepted(&self, id: &str) {
        let after = self.restarted.lock().unwrap_or_else(PoisonError::into_inner).is_some();
        self.accepted.lock().unwrap_or_else(PoisonError::into_inner).push((id.to_owned(), after));
        self.accepted_more.notify_waiters();
    }

    fn accepted_ids(&self) -> Vec<String> {
        self.accepted.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|(id, _)| id.clone()).collect()
    }

    /// Restarts the stack once `after` conversations have been accepted; answers without one if
    /// `clients_done` is notified first (`notify_one`: a notice given before this waits counts). `started` is the run's start (the restart's time is told from it).
    ///
    /// Errors: the stack could not be killed or started again (the run cannot go on).
    pub async fn restart_after(&self, after: usize, started: Instant, clients_done: &Notify) -> anyhow::Result<()> {
        let reached = async {
            loop {
                let more = self.accepted_more.notified();
                if self.accepted.lock().unwrap_or_else(PoisonError::into_inner).len() >= after {
                    return;
                }
                more.await;
            }
        };
        tokio::select! {
            () = reached => {}
            () = clients_done.notified() => return Ok(()),
        }
        self.restart(started).await
    }

    /// Kills the stack as `kill -9` would and starts it again on the same named stack.
    async fn restart(&self, started: Instant) -> anyhow::Result<()> {
        let killed_at = started.elapsed();
        let old = self.current.send_replace(None).context("no stack to restart")?;
        // Every request in flight on it has been told no answer: wait until each has let go of it.
        let old = alone(old).await?;
        let accepted_ids = self.accepted_ids();
        let (carried, store) = (old.carried(), old.store());
        {
            let mut retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
            retired.counters = retired.counters.plus(old.counters().snapshot());
            retired.received.extend(old.received());
            for (f, peak) in old.counters().peak_concurrency() {
                let kept = retired.peaks.entry(f).or_default();
                *kept = (*kept).max(peak);
            }
        }
        old.kill().await;
        let mut open_ids = Vec::new();
        for id in &accepted_ids {
            let c = store.get_conversation(&ConversationId::from_trusted(id.clone())).await?;
            if c.is_none_or(|c| !c.status.is_terminal()) {
                open_ids.push(id.clone());
            }
        }
        let open_at_kill = open_ids.len();
        let mut options = self.options.clone();
        options.carried = Some(carried);
        if let BackendChoice::Emulator(e) = &mut options.backend {
            e.fresh = false;
        }
        let begun = Instant::now();
        let new = LocalStack::start(options).await.context("starting the stack again after its kill")?;
        let facts = RestartFacts {
            killed_at,
            accepted_at_kill: accepted_ids.len(),
            open_at_kill,
            open_ids,
            restarted_in: begun.elapsed(),
            backend: new.describe_backend(),
            accepted_after: 0,
        };
        eprintln!(
            "  {:>6.1} s: the stack was killed (kill -9) after {} accepted conversations, {open_at_kill} of them open; \
             started again on the same stack in {:.1} s",
            killed_at.as_secs_f64(),
            facts.accepted_at_kill,
            facts.restarted_in.as_secs_f64()
        );
        *self.restarted.lock().unwrap_or_else(PoisonError::into_inner) = Some(facts);
        self.current.send_replace(Some(Arc::new(new)));
        Ok(())
    }

    /// What the restart did, if it happened, with the conversations accepted after it.
    pub fn restart_facts(&self) -> Option<RestartFacts> {
        let mut facts = self.restarted.lock().unwrap_or_else(PoisonError::into_inner).clone()?;
        facts.accepted_after =
            self.accepted.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|(_, after)| *after).count();
        Some(facts)
    }

    /// The platform's counters over every stack of the run.
    pub async fn counters(&self) -> anyhow::Result<CounterSnapshot> {
        let now = self.stack().await?.counters().snapshot();
        Ok(self.retired.lock().unwrap_or_else(PoisonError::into_inner).counters.plus(now))
    }

    /// Every message the mappings of every stack of the run received, in order.
    pub async fn received(&self) -> anyhow::Result<Vec<Received>> {
        let now = self.stack().await?.received();
        let mut all = self.retired.lock().unwrap_or_else(PoisonError::into_inner).received.clone();
        all.extend(now);
        Ok(all)
    }

    /// The most invocations at once per function, over every stack of the run (one at a time).
    pub async fn peak_concurrency(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let mut peaks = self.retired.lock().unwrap_or_else(PoisonError::into_inner).peaks.clone();
        for (f, peak) in self.stack().await?.counters().peak_concurrency() {
            let kept = peaks.entry(f).or_default();
            *kept = (*kept).max(peak);
        }
        Ok(peaks)
    }

    /// Shuts the stack down (a named stack's table and queues are kept by that; see
    /// [`crate::EmulatorOptions::delete_stack`]). Errors: a request still holds it after [`RESTART_WAIT`].
    pub async fn shutdown(self) -> anyhow::Result<()> {
        if let Some(stack) = self.current.send_replace(None) {
            alone(stack).await?.shutdown().await;
        }
        Ok(())
    }
}

/// The stack once nobody else holds it: the requests on it were told no answer and let go.
async fn alone(mut stack: Arc<LocalStack>) -> anyhow::Result<LocalStack> {
    let until = Instant::now() + RESTART_WAIT;
    loop {
        match Arc::try_unwrap(stack) {
            Ok(stack) => return Ok(stack),
            Err(shared) if Instant::now() < until => stack = shared,
            Err(_) => anyhow::bail!("a request still held the stack {RESTART_WAIT:?} after it was killed"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
