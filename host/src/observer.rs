//! What the engine reports as it works, for metrics: runs admitted,
//! suspended and ended, step attempts and how they ended, journal flushes
//! and how long they took. The engine calls an [`Observer`]; a front end (the HTTP
//! server's `/metrics`) implements it. Calls are cheap and never block.

use std::time::Duration;

use keel_core::RunStatus;

/// How a step attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    Completed,
    /// Failed and will be retried.
    Retried,
    /// Failed for good (fatal, or out of retries).
    Failed,
}

impl AttemptOutcome {
    /// The outcome in snake case.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Completed => "completed",
            AttemptOutcome::Retried => "retried",
            AttemptOutcome::Failed => "failed",
        }
    }
}

/// Receives the engine's reports. Every method does nothing by default.
pub trait Observer: Send + Sync {
    /// A run of `workflow` was admitted.
    fn run_started(&self, _workflow: &str) {}

    /// A run of `workflow` is activated for the first time, `waited` after
    /// its admission (or its delayed start's time): the wait for a worker
    /// and for a concurrency slot.
    fn run_first_activated(&self, _workflow: &str, _waited: Duration) {}

    /// A fire of schedule `schedule` was decided with `outcome`, `lag_ms`
    /// after its nominal time (`None` for a backfill, whose times are past
    /// by design).
    fn schedule_fired(
        &self,
        _schedule: &str,
        _outcome: keel_core::schedule::FireOutcome,
        _lag_ms: Option<u64>,
    ) {
    }

    /// A run of `workflow` ended with `status` after `lifetime` since its
    /// admission.
    fn run_ended(&self, _workflow: &str, _status: RunStatus, _lifetime: Duration) {}

    /// Attempt `attempt` of step `step` of run `run_id` starts.
    fn step_started(&self, _run_id: &str, _step: &str, _attempt: u32) {}

    /// An attempt of step `step` ended.
    fn step_attempt(&self, _step: &str, _outcome: AttemptOutcome) {}

    /// Attempt `attempt` of step `step` failed with `error` and the next
    /// starts after `delay`.
    fn step_retrying(&self, _step: &str, _attempt: u32, _delay: Duration, _error: &str) {}

    /// A batch of journal entries was made durable in `elapsed`.
    fn journal_flush(&self, _entries: usize, _elapsed: Duration) {}

    /// An activation of a run of `workflow` suspended: its instance was
    /// dropped, and the run resumes later by replay.
    fn run_suspended(&self, _workflow: &str) {}

    /// Ended runs were deleted (purged past their retention, or on
    /// request).
    fn runs_purged(&self, _deleted: &keel_core::retention::Deleted) {}

    /// The store was counted (a worker does so every few minutes, and
    /// every `store stats` does): what it holds.
    fn store_counted(&self, _stats: &keel_core::retention::StoreStats) {}
}

/// The observer that ignores everything.
#[derive(Debug, Default)]
pub struct Unobserved;

impl Observer for Unobserved {}
