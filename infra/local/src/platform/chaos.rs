//! The chaos hook of the local platform: per opportunity, a seeded decision whether to inject a fault of each kind (a crash at a named point, a duplicated or delayed SQS delivery, a poison message, a dropped or duplicated stream record, a client re-post, a tool error or hang, an approval decision posted twice or a rejection, a store write throttled or applied with its answer lost, a send of several messages sent in part), the count of every fault injected, and the subtasks an injection hit where it is known.
//!
//! Each kind keeps its own RNG (seeded from the run's seed and the kind) and spaces its
//! injections: with rate `r`, the gap between two injections is `1/r` opportunities times a
//! factor drawn uniformly from `[0.5, 1.5]` (narrower when that would make a gap shorter than one
//! opportunity), and the first comes within `1/r` opportunities.
//! The long-run share is `r`, as with a coin per opportunity, but a kind that meets at least
//! `1.5/r` opportunities is always injected — a short CI run cannot miss one by bad luck.
//! Crash points go through [`swarm_core::faults`]: [`Chaos`] is the [`FaultPlan`] every
//! invocation runs under.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use swarm_core::faults::{CrashPoint, FaultPlan};

/// A kind of fault the platform injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// The function dies at this point (Lambda killing the sandbox).
    Crash(CrashPoint),
    /// An SQS batch handed to two invocations at once (at-least-once delivery).
    DuplicateDelivery,
    /// An SQS batch held before its invocation (a slow poller; its messages stay in flight).
    DelayedDelivery,
    /// A tasks-queue message its worker fails on every receive before it begins (as a worker
    /// whose store is throttled on that item every time): listed in `batchItemFailures` with the
    /// worker's retry visibility, redriven to the DLQ after `maxReceiveCount` receives, where the
    /// DLQ consumer closes its subtask.
    PoisonMessage,
    /// A stream record the aggregator's filter passed never reaches it (dropped after
    /// `MaximumRetryAttempts`, or lost).
    StreamRecordDropped,
    /// A stream record delivered twice.
    StreamRecordDuplicated,
    /// The API client saw a 5xx or no answer and posts again with the same `Idempotency-Key`.
    ClientRepost,
    /// A `tools/call` answered with an error before it reached the tool server.
    ToolError,
    /// A `tools/call` whose answer is held back (the tool ran; its caller waits).
    ToolHang,
    /// A request refused while the tool server is down (its window of downtime).
    ToolUpstreamDown,
    /// The operator posts one decision on an approval twice at once (a double click, a retry racing the first).
    ApprovalPostedTwice,
    /// The operator rejects an approval instead of approving it (its refund must never run).
    ApprovalRejected,
    /// A store write applied whose answer is lost (DynamoDB answered 5xx, or the attempt timed out
    /// after applying it): the caller gets a transient error and retries.
    StoreAnswerLost,
    /// A store write refused by throttling (`ProvisionedThroughputExceededException` after the
    /// adapter's own retries): nothing written, the caller gets a transient error.
    StoreThrottled,
    /// A send of several messages of which only some are sent (`SendMessageBatch` answering the
    /// rest in `Failed`, still failing after the adapter's own rounds).
    SqsSendPartial,
}

impl FaultKind {
    /// Every kind the chaos run can meet, crash points first (in [`CrashPoint::ALL`] order; the
    /// scenario's refund subtasks open a support ticket before their refund, so
    /// `worker_between_effects` is met too).
    pub fn all() -> Vec<FaultKind> {
        let mut all: Vec<FaultKind> = CrashPoint::ALL.iter().map(|p| FaultKind::Crash(*p)).collect();
        all.extend([
            FaultKind::DuplicateDelivery,
            FaultKind::DelayedDelivery,
            FaultKind::PoisonMessage,
            FaultKind::StreamRecordDropped,
            FaultKind::StreamRecordDuplicated,
            FaultKind::ClientRepost,
            FaultKind::ToolError,
            FaultKind::ToolHang,
            FaultKind::ToolUpstreamDown,
            FaultKind::ApprovalPostedTwice,
            FaultKind::ApprovalRejected,
            FaultKind::StoreAnswerLost,
            FaultKind::StoreThrottled,
            FaultKind::SqsSendPartial,
        ]);
        all
    }

    /// A stable name for tables and logs, e.g. `crash:worker_after_count`, `sqs_duplicate_delivery`.
    pub fn name(self) -> String {
        match self {
            FaultKind::Crash(point) => format!("crash:{}", point.name()),
            FaultKind::DuplicateDelivery => "sqs_duplicate_delivery".into(),
            FaultKind::DelayedDelivery => "sqs_delayed_delivery".into(),
            FaultKind::PoisonMessage => "sqs_poison_message".into(),
            FaultKind::StreamRecordDropped => "stream_record_dropped".into(),
            FaultKind::StreamRecordDuplicated => "stream_record_duplicated".into(),
            FaultKind::ClientRepost => "api_client_repost".into(),
            FaultKind::ToolError => "tool_error".into(),
            FaultKind::ToolHang => "tool_hang".into(),
            FaultKind::ToolUpstreamDown => "tool_upstream_down".into(),
            FaultKind::ApprovalPostedTwice => "approval_posted_twice".into(),
            FaultKind::ApprovalRejected => "approval_rejected".into(),
            FaultKind::StoreAnswerLost => "store_answer_lost".into(),
            FaultKind::StoreThrottled => "store_throttled".into(),
            FaultKind::SqsSendPartial => "sqs_send_partial".into(),
        }
    }

    /// Whether a subtask that met this fault can still succeed: every kind but a poisoned message
    /// (failed on every receive until the DLQ consumer closes its subtask) and a rejected approval
    /// (its refund must never run).
    pub fn is_recoverable(self) -> bool {
        !matches!(self, FaultKind::PoisonMessage | FaultKind::ApprovalRejected)
    }

    /// A number unique to the kind (its RNG's stream).
    fn stream(self) -> u64 {
        match self {
            FaultKind::Crash(point) => 100 + CrashPoint::ALL.iter().position(|p| *p == point).map_or(99, |i| i as u64),
            FaultKind::DuplicateDelivery => 1,
            FaultKind::DelayedDelivery => 2,
            FaultKind::StreamRecordDropped => 3,
            FaultKind::StreamRecordDuplicated => 4,
            FaultKind::ClientRepost => 5,
            FaultKind::ToolError => 6,
            FaultKind::ToolHang => 7,
            FaultKind::ToolUpstreamDown => 8,
            FaultKind::ApprovalPostedTwice => 9,
            FaultKind::ApprovalRejected => 10,
            FaultKind::PoisonMessage => 11,
            FaultKind::StoreAnswerLost => 12,
            FaultKind::StoreThrottled => 13,
            FaultKind::SqsSendPartial => 14,
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.name())
    }
}

/// The tool server's faults (the fault proxy in front of the demo shop).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolFaults {
    /// Share of `tools/call` requests answered with an error without reaching the server.
    pub error: f64,
    /// Share of `tools/call` requests whose answer is held back for `hang_for`.
    pub hang: f64,
    pub hang_for: Duration,
    /// The server goes down at this `tools/call` (1-based) …
    pub down_after_calls: Option<u64>,
    /// … for this long: every request meanwhile is refused (503).
    pub down_for: Duration,
}

impl Default for ToolFaults {
    fn default() -> Self {
        Self {
            error: 0.0,
            hang: 0.0,
            hang_for: Duration::from_secs(60),
            down_after_calls: None,
            down_for: Duration::ZERO,
        }
    }
}

impl ToolFaults {
    /// Whether any tool fault is asked for (then the stack puts the fault proxy in front of the shop).
    pub fn any(&self) -> bool {
        self.error > 0.0 || self.hang > 0.0 || (self.down_after_calls.is_some() && !self.down_for.is_zero())
    }
}

/// What a chaos run injects, each rate a share of its opportunities in `[0, 1]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChaosSettings {
    pub seed: u64,
    /// Per crash point: the share of the times an invocation reaches it that it dies there.
    pub crash: BTreeMap<CrashPoint, f64>,
    /// Per SQS batch.
    pub duplicate_delivery: f64,
    /// Per SQS batch; held for a time drawn uniformly from `[0, delivery_delay_max]`.
    pub delayed_delivery: f64,
    pub delivery_delay_max: Duration,
    /// Per tasks-queue message, at its first receive: poison it ([`FaultKind::PoisonMessage`]).
    pub poison_message: f64,
    /// Per stream record the aggregator's filter passes.
    pub stream_drop: f64,
    pub stream_duplicate: f64,
    /// Per failed `POST /conversations` (5xx or no answer).
    pub client_repost: f64,
    pub tools: ToolFaults,
    /// Per approval the operator decides: post the decision twice at once.
    pub approval_twice: f64,
    /// Per approval the operator decides: reject it (else approve it).
    pub approval_reject: f64,
    /// Per store write a function's store applied: lose its answer.
    pub store_answer_lost: f64,
    /// Per store write a function makes: refuse it as throttled.
    pub store_throttle: f64,
    /// Per send of two or more messages a function makes: send only some.
    pub sqs_send_partial: f64,
}

impl ChaosSettings {
    /// No fault at all.
    pub fn quiet(seed: u64) -> Self {
        Self {
            seed,
            crash: BTreeMap::new(),
            duplicate_delivery: 0.0,
            delayed_delivery: 0.0,
            delivery_delay_max: Duration::ZERO,
            poison_message: 0.0,
            stream_drop: 0.0,
            stream_duplicate: 0.0,
            client_repost: 0.0,
            tools: ToolFaults::default(),
            approval_twice: 0.0,
            approval_reject: 0.0,
            store_answer_lost: 0.0,
            store_throttle: 0.0,
            sqs_send_partial: 0.0,
        }
    }

    /// The rate of `kind` (the tool server's downtime is a window, not a rate: 1 while configured).
    pub fn rate(&self, kind: FaultKind) -> f64 {
        match kind {
            FaultKind::Crash(point) => self.crash.get(&point).copied().unwrap_or(0.0),
            FaultKind::DuplicateDelivery => self.duplicate_delivery,
            FaultKind::DelayedDelivery => self.delayed_delivery,
            FaultKind::PoisonMessage => self.poison_message,
            FaultKind::StreamRecordDropped => self.stream_drop,
            FaultKind::StreamRecordDuplicated => self.stream_duplicate,
            FaultKind::ClientRepost => self.client_repost,
            FaultKind::ToolError => self.tools.error,
            FaultKind::ToolHang => self.tools.hang,
            FaultKind::ToolUpstreamDown => {
                if self.tools.down_after_calls.is_some() && !self.tools.down_for.is_zero() {
                    1.0
                } else {
                    0.0
                }
            }
            FaultKind::ApprovalPostedTwice => self.approval_twice,
            FaultKind::ApprovalRejected => self.approval_reject,
            FaultKind::StoreAnswerLost => self.store_answer_lost,
            FaultKind::StoreThrottled => self.store_throttle,
            FaultKind::SqsSendPartial => self.sqs_send_partial,
        }
    }

    /// Errors: a rate outside `[0, 1]` (named by its kind).
    pub fn validate(&self) -> Result<(), String> {
        for kind in FaultKind::all() {
            let r = self.rate(kind);
            if !(0.0..=1.0).contains(&r) {
                return Err(format!("the rate of {kind} must be between 0 and 1, not {r}"));
            }
        }
        Ok(())
    }
}

/// Opportunities and injections of one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCount {
    /// Times the fault could have been injected.
    pub opportunities: u64,
    pub injected: u64,
}

/// One kind's seeded spacing of injections.
struct Spacing {
    rng: StdRng,
    /// Mean opportunities between two injections (`1/rate`); `None` never injects.
    mean_gap: Option<f64>,
    /// Inject at the opportunity whose number reaches this.
    next_at: f64,
    count: KindCount,
}

impl Spacing {
    fn new(seed: u64, kind: FaultKind, rate: f64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed ^ kind.stream().wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mean_gap = (rate > 0.0).then(|| 1.0 / rate.min(1.0));
        let next_at = mean_gap.map_or(f64::INFINITY, |g| 1.0 + rng.random::<f64>() * (g - 1.0).max(0.0));
        Self { rng, mean_gap, next_at, count: KindCount::default() }
    }

    fn opportunity(&mut self) -> bool {
        self.count.opportunities += 1;
        let Some(gap) = self.mean_gap else { return false };
        let n = self.count.opportunities as f64;
        if n < self.next_at {
            return false;
        }
        // The jitter never makes a gap shorter than one opportunity, so rate 1 injects every time.
        let jitter = (0.5f64).min((gap - 1.0) / gap);
        while self.next_at <= n {
            self.next_at += gap * self.rng.random_range(1.0 - jitter..=1.0 + jitter);
        }
        self.count.injected += 1;
        true
    }
}

/// The run's chaos: decisions per opportunity, counts per kind.
pub struct Chaos {
    settings: ChaosSettings,
    kinds: Mutex<BTreeMap<FaultKind, Spacing>>,
    /// Draws that are not decisions (delays, error shapes), in one seeded stream.
    draws: Mutex<StdRng>,
    /// Ids of the poisoned messages: failed on every receive.
    poisoned: Mutex<HashSet<String>>,
    /// The faults injected where the injector knew the subtask they hit: `(conversation, subtask)` → kinds.
    met: Mutex<BTreeMap<(String, String), BTreeSet<FaultKind>>>,
    /// Store faults by operation name: `(answers lost, throttled)`.
    store_ops: Mutex<BTreeMap<&'static str, (u64, u64)>>,
}

impl Chaos {
    /// Errors: a rate outside `[0, 1]`.
    pub fn new(settings: ChaosSettings) -> Result<Self, String> {
        settings.validate()?;
        let kinds =
            FaultKind::all().into_iter().map(|k| (k, Spacing::new(settings.seed, k, settings.rate(k)))).collect();
        let draws = Mutex::new(StdRng::seed_from_u64(settings.seed.wrapping_add(0x5EED)));
        Ok(Self {
            settings,
            kinds: Mutex::new(kinds),
            draws,
            poisoned: Mutex::default(),
            met: Mutex::default(),
            store_ops: Mutex::default(),
        })
    }

    pub fn settings(&self) -> &ChaosSettings {
        &self.settings
    }

    /// One opportunity for `kind`: whether to inject it now (counted when it is).
    pub fn decide(&self, kind: FaultKind) -> bool {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        let injected = kinds.get_mut(&kind).is_some_and(Spacing::opportunity);
        if injected {
            tracing::warn!(fault = %kind, "injected fault");
        }
        injected
    }

    /// Whether the message `message_id`, received for the `receive_count`th time, is poisoned:
    /// decided at its first receive (one opportunity of [`FaultKind::PoisonMessage`]), kept after.
    pub fn poisoned(&self, message_id: &str, receive_count: u32) -> bool {
        let mut poisoned = self.poisoned.lock().unwrap_or_else(PoisonError::into_inner);
        if poisoned.contains(message_id) {
            return true;
        }
        if receive_count <= 1 && self.decide(FaultKind::PoisonMessage) {
            poisoned.insert(message_id.to_owned());
            return true;
        }
        false
    }

    /// Notes that an injection of `kind` hit subtask `subtask` of conversation `conversation`.
    pub fn tag(&self, kind: FaultKind, conversation: &str, subtask: &str) {
        let mut met = self.met.lock().unwrap_or_else(PoisonError::into_inner);
        met.entry((conversation.to_owned(), subtask.to_owned())).or_default().insert(kind);
    }

    /// The faults injected where the injector knew the subtask they hit ([`Chaos::tag`]).
    pub fn met(&self) -> BTreeMap<(String, String), BTreeSet<FaultKind>> {
        self.met.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Notes a store fault injected into operation `op` (`lost`: its answer lost, else throttled).
    pub fn note_store_fault(&self, op: &'static str, lost: bool) {
        let mut ops = self.store_ops.lock().unwrap_or_else(PoisonError::into_inner);
        let n = ops.entry(op).or_default();
        if lost {
            n.0 += 1;
        } else {
            n.1 += 1;
        }
    }

    /// Store faults by operation name: `(answers lost, throttled)`.
    pub fn store_faults_by_op(&self) -> BTreeMap<&'static str, (u64, u64)> {
        self.store_ops.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many messages were poisoned.
    pub fn poisoned_count(&self) -> usize {
        self.poisoned.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Counts one injection of `kind` that was not a decision (a request refused while the tool server is down).
    pub fn record(&self, kind: FaultKind) {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = kinds.get_mut(&kind) {
            s.count.opportunities += 1;
            s.count.injected += 1;
        }
    }

    /// How long a delayed delivery is held: uniform in `[0, delivery_delay_max]`.
    pub fn delivery_delay(&self) -> Duration {
        let max = self.settings.delivery_delay_max;
        if max.is_zero() {
            return Duration::ZERO;
        }
        let share: f64 = self.draws.lock().unwrap_or_else(PoisonError::into_inner).random();
        max.mul_f64(share)
    }

    /// A fair coin from the run's seeded draws (the shape of an injected error).
    pub fn coin(&self) -> bool {
        self.draws.lock().unwrap_or_else(PoisonError::into_inner).random_bool(0.5)
    }

    /// Opportunities and injections of every kind, in [`FaultKind::all`] order.
    pub fn counts(&self) -> Vec<(FaultKind, KindCount)> {
        let kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        FaultKind::all().into_iter().map(|k| (k, kinds.get(&k).map(|s| s.count).unwrap_or_default())).collect()
    }
}

impl FaultPlan for Chaos {
    fn crash(&self, point: CrashPoint) -> bool {
        self.decide(FaultKind::Crash(point))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    fn with(kind: FaultKind, rate: f64, seed: u64) -> Chaos {
        let mut s = ChaosSettings::quiet(seed);
        match kind {
            FaultKind::Crash(p) => {
                s.crash.insert(p, rate);
            }
            FaultKind::DuplicateDelivery => s.duplicate_delivery = rate,
            FaultKind::StreamRecordDropped => s.stream_drop = rate,
            _ => unreachable!("not used by these tests"),
        }
        Chaos::new(s).unwrap()
    }

    fn decisions(chaos: &Chaos, kind: FaultKind, n: usize) -> Vec<bool> {
        (0..n).map(|_| chaos.decide(kind)).collect()
    }

    #[test]
    fn a_rate_is_the_long_run_share_and_every_stretch_of_one_and_a_half_gaps_holds_an_injection() {
        let kind = FaultKind::Crash(CrashPoint::WorkerAfterCount);
        for seed in 0..20 {
            let chaos = with(kind, 0.05, seed);
            let d = decisions(&chaos, kind, 10_000);
            let injected = d.iter().filter(|x| **x).count();
            assert!((450..=550).contains(&injected), "seed {seed}: {injected} of 10,000 at 5 %");
            let first = d.iter().position(|x| *x).unwrap();
            assert!(first < 20, "seed {seed}: the first injection within 1/rate opportunities, got {first}");
            let positions: Vec<usize> = d.iter().enumerate().filter(|(_, x)| **x).map(|(i, _)| i).collect();
            let widest = positions.windows(2).map(|w| w[1] - w[0]).max().unwrap();
            assert!(widest <= 30, "seed {seed}: a gap of {widest} opportunities at most 1.5/rate");
            assert_eq!(
                chaos.counts().iter().find(|(k, _)| *k == kind).unwrap().1,
                KindCount { opportunities: 10_000, injected: injected as u64 }
            );
        }
    }

    #[test]
    fn the_same_seed_decides_the_same_and_kinds_do_not_disturb_each_other() {
        let kind = FaultKind::DuplicateDelivery;
        let a = with(kind, 0.1, 7);
        let b = with(kind, 0.1, 7);
        let other = FaultKind::StreamRecordDropped;
        let mut da = Vec::new();
        for _ in 0..500 {
            da.push(a.decide(kind));
            a.decide(other); // another kind's opportunities in between change nothing
        }
        assert_eq!(da, decisions(&b, kind, 500));
        assert_ne!(decisions(&with(kind, 0.1, 8), kind, 500), da, "another seed decides otherwise");
    }

    #[test]
    fn rate_zero_never_injects_rate_one_always_and_a_bad_rate_is_refused() {
        let kind = FaultKind::DuplicateDelivery;
        assert!(decisions(&with(kind, 0.0, 1), kind, 1_000).iter().all(|x| !x));
        assert!(decisions(&with(kind, 1.0, 1), kind, 1_000).iter().all(|x| *x));
        let mut s = ChaosSettings::quiet(1);
        s.stream_duplicate = 1.5;
        assert_eq!(
            Chaos::new(s).err().unwrap(),
            "the rate of stream_record_duplicated must be between 0 and 1, not 1.5"
        );
    }

    #[test]
    fn the_plan_crashes_at_a_point_as_its_rate_says_and_counts_it() {
        let point = CrashPoint::AggregatorAfterFlip;
        let chaos = with(FaultKind::Crash(point), 1.0, 3);
        assert!(chaos.crash(point));
        assert!(!chaos.crash(CrashPoint::WorkerAfterCount), "a point without a rate never crashes");
        let counts: BTreeMap<FaultKind, KindCount> = chaos.counts().into_iter().collect();
        assert_eq!(counts[&FaultKind::Crash(point)], KindCount { opportunities: 1, injected: 1 });
        assert_eq!(
            counts[&FaultKind::Crash(CrashPoint::WorkerAfterCount)],
            KindCount { opportunities: 1, injected: 0 }
        );
        assert_eq!(counts.len(), FaultKind::all().len());
    }
}
