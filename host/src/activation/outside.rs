//! The one narrow interface through which an activation reaches beyond its
//! run: the store, the clock, waking other runs, running a step's attempts
//! and starting a child run. The engine implements it; an offline replay
//! implements it with nothing behind it, since replay never writes.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use keel_core::journal::StartOutcome;
use keel_core::lifecycle::ChildOptions;
use keel_core::manifest::RetryPolicy;
use keel_core::{Clock, RunId, StepId};
use keel_store::Store;
use tokio::task::JoinHandle;

use super::RunJournal;
use crate::component::Loaded;
use crate::{Error, Result};

/// A step to execute, from its next attempt until it completes or fails;
/// its outcome is recorded in `journal`.
pub struct StepCall {
    pub journal: Arc<RunJournal>,
    pub component: Arc<Loaded>,
    pub run_id: RunId,
    pub command: u32,
    pub name: String,
    pub input: String,
    pub step_id: StepId,
    pub retry: RetryPolicy,
    /// The attempt to start first (attempts already started are counted).
    pub next_attempt: u32,
    /// Attempts started before the run was retried: the retry budget
    /// counts from the attempt after them.
    pub before_retry: u32,
    /// No attempt starts before then (a failed attempt's backoff).
    pub not_before_ms: Option<u64>,
    /// When the attempt's start and result become durable (the
    /// workflow's setting).
    pub durability: keel_core::manifest::Durability,
}

/// A run a workflow starts: its ID derives from the parent's command.
pub struct ChildStart {
    /// The parent's component (the child's, unless `options` names a
    /// deployment).
    pub component: Arc<Loaded>,
    pub parent: RunId,
    pub run_id: RunId,
    pub workflow: String,
    pub input: String,
    pub options: ChildOptions,
    /// The parent run's span as a W3C `traceparent`, if the parent is
    /// traced: the child's spans join its trace.
    pub traceparent: Option<String>,
}

/// What an activation may ask of the world outside its run.
#[async_trait]
pub trait Outside: Send + Sync {
    /// The store; `None` for an offline replay, which never writes.
    fn store(&self) -> Option<&Arc<dyn Store>>;

    /// The clock every time-dependent decision reads.
    fn clock(&self) -> &Arc<dyn Clock>;

    /// Timers due within this bound are awaited in memory; later ones
    /// suspend the run.
    fn park_limit(&self) -> Duration;

    /// The run's bounds.
    fn limits(&self) -> crate::RunLimits;

    /// The durability of a workflow that declares none.
    fn default_durability(&self) -> keel_core::manifest::Durability;

    /// Wakes `run_id` (its activation, or the worker) after this run
    /// changed something it waits on.
    fn wake(&self, run_id: &RunId);

    /// Tells whoever waits for `run_id` to settle that it now waits (its
    /// record says so) while its activation waits in memory.
    fn settled(&self, run_id: &RunId);

    /// Runs a step's attempts in the background.
    fn spawn_step(&self, step: StepCall) -> Result<JoinHandle<()>>;

    /// Starts a child run; how the start ended is journaled by the caller.
    async fn start_child(&self, child: ChildStart) -> Result<StartOutcome>;
}

/// The outside of an offline replay: nothing is executed or written.
pub struct Offline {
    pub clock: Arc<dyn Clock>,
}

#[async_trait]
impl Outside for Offline {
    fn store(&self) -> Option<&Arc<dyn Store>> {
        None
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    fn park_limit(&self) -> Duration {
        Duration::ZERO
    }

    fn limits(&self) -> crate::RunLimits {
        crate::RunLimits::unbounded()
    }

    fn default_durability(&self) -> keel_core::manifest::Durability {
        keel_core::manifest::Durability::default()
    }

    fn wake(&self, _run_id: &RunId) {}

    fn settled(&self, _run_id: &RunId) {}

    fn spawn_step(&self, _step: StepCall) -> Result<JoinHandle<()>> {
        Err(Error::Wasm(
            "an offline replay never executes a step".into(),
        ))
    }

    async fn start_child(&self, _child: ChildStart) -> Result<StartOutcome> {
        Err(Error::Wasm("an offline replay never starts a run".into()))
    }
}
