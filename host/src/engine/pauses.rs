//! Pauses: an operator's hold on a live run. The pause is stored
//! (`PauseStore`) and wakes the run wherever it is; its driver takes hold
//! before any more of the run's code runs (at the start of a drive, or at
//! the activation's next wait once its running step attempts end),
//! journals `RunPaused` with the status it held, and stores the record
//! `paused`, which is due never: no step, timer or payload reaches the
//! code, payloads queue, and no instance is kept. A resume lifts the pause
//! and wakes the run; its next driver journals `RunResumed` and goes on
//! where the run stood (a run none of whose code ran gets its status and
//! start time back).

use std::sync::Arc;

use keel_core::journal::Fact;
use keel_core::lifecycle::PauseRequest;
use keel_core::{RunRecord, RunStatus};
use keel_store::Lease;

use super::{Keel, lock};
use crate::activation::RunJournal;
use crate::effects::Effect;
use crate::{Error, Result};

/// What a drive of a paused (or resumed) run does.
pub(super) enum Held {
    /// The drive stops here: the run is paused, or resumed to wait (its
    /// start time, its concurrency slot). Its record is stored.
    Stopped(RunRecord),
    /// The run goes on: its journal, with its resume recorded.
    Resumed(RunRecord, Arc<RunJournal>),
}

impl Keel {
    /// Pauses a live run, by `by` (`api`, `cli`, `job JOB_ID`): the pause
    /// is stored, durably, waking the run wherever it is driven, and its
    /// driver stops the run before any more of its code runs (an
    /// activation at its next wait, once the step attempts it has running
    /// end). From then until [`Keel::resume_run`] no step, timer or
    /// payload reaches its code (payloads queue) and it holds no instance.
    /// Pausing a paused run keeps its first pause. A run that has ended is
    /// refused ([`Error::RunEnded`]). Returns the run as it is after the
    /// request: `paused` once a driver has taken hold.
    pub async fn pause_run(&self, run_id: &str, by: &str) -> Result<RunRecord> {
        let request = PauseRequest {
            by: by.into(),
            at_ms: self.now_ms(),
        };
        match self.store().request_pause(run_id, &request).await? {
            None => return Err(self.ended(run_id, "paused").await),
            Some(held) if held == request => {
                tracing::info!(run_id, by, "run paused");
                match lock(&self.inner.live).get(run_id) {
                    Some(journal) => journal.hint_pause(),
                    None => self.due_changed(),
                }
            }
            Some(_) => {}
        }
        self.get_run(run_id).await
    }

    /// Resumes a paused run, by `by`: the pause is lifted, durably, and
    /// the run woken; its next driver journals the resume and goes on
    /// where the run stood. A run no pause holds is returned as it is; one
    /// that has ended is refused ([`Error::RunEnded`]).
    pub async fn resume_run(&self, run_id: &str, by: &str) -> Result<RunRecord> {
        let lifted = self.store().lift_pause(run_id).await?;
        let run = self.get_run(run_id).await?;
        if lifted.is_none() && run.status.is_final() {
            return Err(self.ended(run_id, "resumed").await);
        }
        if lifted.is_some() {
            tracing::info!(run_id, by, "run resumed");
            self.poke(run_id);
            self.due_changed();
        }
        Ok(run)
    }

    /// The pause that holds `run_id`, if one does.
    pub async fn pause_of(&self, run_id: &str) -> Result<Option<PauseRequest>> {
        Ok(self.store().pause_request(run_id).await?)
    }

    /// A refusal of `action` on a run that has ended.
    async fn ended(&self, run_id: &str, action: &'static str) -> Error {
        match self.get_run(run_id).await {
            Ok(run) => Error::RunEnded {
                run_id: run.run_id,
                status: run.status.as_str().into(),
                action,
            },
            Err(e) => e,
        }
    }

    /// At the start of a drive of a run that `pause` holds or whose
    /// record says it is paused: takes hold (journals the pause, stores
    /// the record `paused`) or lets go (journals the resume, restores the
    /// status a run that never ran code had).
    pub(super) async fn hold_or_resume(
        &self,
        lease: &Lease,
        mut run: RunRecord,
        pause: Option<PauseRequest>,
    ) -> Result<Held> {
        if pause.is_some() && run.status == RunStatus::Paused {
            return self.settle(lease, run).await.map(Held::Stopped);
        }
        let entries = self.store().journal(run.run_id.as_str()).await?;
        let journal = Arc::new(self.journal_of(lease, entries)?);
        if let Some(request) = pause {
            journal.record(request.fact(&run))?;
            return self.stop_paused(run, &journal).await.map(Held::Stopped);
        }
        let (status, wake_at_ms) = match journal.paused().map(|e| e.fact) {
            Some(Fact::RunPaused {
                status, wake_at_ms, ..
            }) => (RunStatus::parse(&status), wake_at_ms),
            _ => (None, None),
        };
        journal.record(Fact::RunResumed)?;
        tracing::info!("run resumed");
        run.updated_at_ms = self.now_ms();
        run.status = status.unwrap_or(RunStatus::Running);
        run.wake_at_ms = wake_at_ms;
        let waits = match run.status {
            RunStatus::Queued => true,
            RunStatus::Scheduled => wake_at_ms.is_some_and(|at| at > self.now_ms()),
            _ => false,
        };
        if !waits {
            return Ok(Held::Resumed(run, journal));
        }
        journal.set_run(run.clone());
        journal.gate(Effect::Pause).await?;
        Ok(Held::Stopped(run))
    }

    /// Stores `run`'s record again, unchanged, under `lease`, for a drive
    /// that stops without running code (a paused or queued run someone
    /// woke, or released due at once): the store makes the run due as the
    /// record says (never, for these) rather than as the release that made
    /// it due asked, so it is not claimed again on every pass.
    pub(super) async fn settle(&self, lease: &Lease, run: RunRecord) -> Result<RunRecord> {
        self.store()
            .append(run.run_id.as_str(), &[], Some(&run), Some(lease))
            .await?;
        Ok(run)
    }

    /// Stores `run` paused with what `journal` recorded (its pause).
    pub(super) async fn stop_paused(
        &self,
        mut run: RunRecord,
        journal: &RunJournal,
    ) -> Result<RunRecord> {
        tracing::info!("run paused");
        run.status = RunStatus::Paused;
        run.wake_at_ms = None;
        run.updated_at_ms = self.now_ms();
        journal.set_run(run.clone());
        journal.gate(Effect::Pause).await?;
        self.inner.config.observer.run_suspended(&run.workflow);
        Ok(run)
    }
}
