//! The periodic sweep as EventBridge Scheduler runs it: every (scaled) `sweep.period` one invocation of the worker's sweep handler, cut at the sweep function's timeout, under the fault plan.

use std::sync::Arc;
use std::time::Duration;

use swarm_core::faults::FaultPlan;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use worker::{Closer, SweepReport};

use super::counters::{Counters, add};
use super::invoke::{Ended, invoke};
use crate::events;

/// The schedule and the sweep function.
pub struct Sweeper {
    /// The sweep function: a closer alone.
    pub worker: Arc<Closer>,
    /// Time between two invocations (`sweep.period_secs`).
    pub period: Duration,
    /// The sweep function's timeout: the invocation is cut there.
    pub timeout: Duration,
    /// A fault plan per invocation (crash points), if any.
    pub faults: Option<Arc<dyn FaultPlan>>,
    pub counters: Arc<Counters>,
}

impl Sweeper {
    /// Invokes the sweep every `period` (the first one a period after start) until `shutdown`. An
    /// invocation ends before the next is due (the timing table's rules keep the timeout within the period).
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval_at(Instant::now() + self.period, self.period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = shutdown.changed() => return,
            }
            tokio::select! {
                _ = self.invoke_once() => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// One sweep invocation; `None` when it did not return (timed out or killed).
    pub async fn invoke_once(&self) -> Option<SweepReport> {
        add(&self.counters.sweep_invocations, 1);
        let context = events::lambda_context("sweeper", self.timeout);
        let event = lambda_runtime::LambdaEvent::new(serde_json::json!({}), context);
        match invoke(self.timeout, self.faults.as_ref(), worker::handler::sweep(&self.worker, event)).await {
            Ended::Returned(Ok(report)) => Some(report),
            Ended::Returned(Err(e)) => {
                tracing::error!(error = %e, "sweep invocation failed");
                None
            }
            ended => {
                tracing::warn!(outcome = ended.describe(), "sweep invocation did not return");
                let counter = match ended {
                    Ended::Killed => &self.counters.killed_invocations,
                    _ => &self.counters.timed_out_invocations,
                };
                add(counter, 1);
                None
            }
        }
    }
}
