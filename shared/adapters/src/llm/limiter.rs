//! The AIMD cap on LLM calls in flight per model instance: halve on a 429, grow back slowly, never below one.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Successes in a row after which the in-flight cap grows by one.
pub const AIMD_GROWTH_SUCCESSES: u32 = 8;

/// What a finished call tells the limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Success,
    RateLimited,
    Neutral,
}

/// AIMD cap on calls in flight: halve on a 429 (once per "window": a 429 of a
/// call that started before the last decrease does not count again), +1 after
/// [`AIMD_GROWTH_SUCCESSES`] successes, floor 1, ceiling `max_in_flight`.
/// Shrinking takes idle permits at once and forgets permits coming back while there is still debt.
#[derive(Debug)]
pub(super) struct AimdLimiter {
    sem: Arc<Semaphore>,
    state: Mutex<AimdState>,
    ceiling: usize,
}

#[derive(Debug)]
struct AimdState {
    limit: usize,
    /// Permits to forget as they come back.
    debt: usize,
    successes: u32,
    /// Bumped on every decrease.
    epoch: u64,
}

/// One call's place under the cap; dropping it (also on cancellation) frees the place.
pub(super) struct Slot {
    limiter: Arc<AimdLimiter>,
    permit: Option<OwnedSemaphorePermit>,
    epoch: u64,
}

impl AimdLimiter {
    pub(super) fn new(max_in_flight: usize) -> Self {
        let ceiling = max_in_flight.max(1);
        Self {
            sem: Arc::new(Semaphore::new(ceiling)),
            state: Mutex::new(AimdState { limit: ceiling, debt: 0, successes: 0, epoch: 0 }),
            ceiling,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AimdState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn limit(&self) -> usize {
        self.lock().limit
    }

    /// Waits (FIFO) for a place; the caller bounds the wait with its deadline.
    pub(super) async fn acquire(self: &Arc<Self>) -> Slot {
        // The semaphore is never closed, so an error cannot happen; without a
        // permit the call would merely run uncapped.
        let permit = self.sem.clone().acquire_owned().await.ok();
        let epoch = self.lock().epoch;
        Slot { limiter: self.clone(), permit, epoch }
    }

    fn record(&self, outcome: Outcome, epoch: u64) {
        let mut st = self.lock();
        match outcome {
            Outcome::RateLimited if epoch == st.epoch => {
                let halved = (st.limit / 2).max(1);
                st.debt += st.limit - halved;
                st.limit = halved;
                // Idle permits go at once; those in flight as they come back.
                let taken = self.sem.forget_permits(st.debt);
                st.debt -= taken;
                st.successes = 0;
                st.epoch += 1;
            }
            Outcome::Success => {
                st.successes += 1;
                if st.successes >= AIMD_GROWTH_SUCCESSES && st.limit < self.ceiling {
                    st.limit += 1;
                    st.successes = 0;
                    if st.debt > 0 {
                        st.debt -= 1;
                    } else {
                        self.sem.add_permits(1);
                    }
                }
            }
            Outcome::RateLimited | Outcome::Neutral => {}
        }
    }
}

impl Slot {
    pub(super) fn finish(self, outcome: Outcome) {
        self.limiter.record(outcome, self.epoch);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            let mut st = self.limiter.lock();
            if st.debt > 0 {
                st.debt -= 1;
                permit.forget();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cap_halves_once_per_window_and_grows_back_slowly() {
        let l = Arc::new(AimdLimiter::new(16));
        let slots: Vec<Slot> = futures::future::join_all((0..16).map(|_| l.acquire())).await;
        assert_eq!(l.sem.available_permits(), 0);
        // All 16 in flight get a 429: one window, one halving.
        for s in slots {
            s.finish(Outcome::RateLimited);
        }
        assert_eq!(l.limit(), 8);
        assert_eq!(l.sem.available_permits(), 8, "8 permits forgotten as they came back");
        // A 429 in the new window halves again.
        l.acquire().await.finish(Outcome::RateLimited);
        assert_eq!(l.limit(), 4);
        assert_eq!(l.sem.available_permits(), 4);
        for _ in 0..AIMD_GROWTH_SUCCESSES {
            l.acquire().await.finish(Outcome::Success);
        }
        assert_eq!(l.limit(), 5);
        assert_eq!(l.sem.available_permits(), 5);
    }

    #[tokio::test]
    async fn cap_never_drops_below_one_nor_grows_past_the_ceiling() {
        let l = Arc::new(AimdLimiter::new(2));
        for _ in 0..5 {
            l.acquire().await.finish(Outcome::RateLimited);
        }
        assert_eq!(l.limit(), 1);
        assert_eq!(l.sem.available_permits(), 1);
        for _ in 0..(AIMD_GROWTH_SUCCESSES * 5) {
            l.acquire().await.finish(Outcome::Success);
        }
        assert_eq!(l.limit(), 2);
        assert_eq!(l.sem.available_permits(), 2);
    }
}
