//! Cancellation on request: a cancel stored for the run's driver to
//! journal (the workflow's cleanup runs within its grace), and the hard
//! stop (`terminate`) that ends a run where it is. How a cancelled run's
//! end is recorded lives with the drive (`drive.rs`).

use std::time::Duration;

use keel_core::journal::Fact;
use keel_core::lifecycle::{self, CancelRequest, Cleanup};
use keel_core::{RunRecord, RunStatus};
use keel_store::Wake;

use super::drive::{ActiveRun, unconfirmed};
use super::{Keel, lock};
use crate::runtime::Ended;
use crate::{Error, Result};

impl Keel {
    /// Asks for a run to be cancelled, by `by` for `reason`: the request
    /// is stored (waking the run wherever it is driven), its driver
    /// journals it, and the workflow receives it at its next wait and runs
    /// its cleanup within the cancel grace. A run that never started its
    /// code (queued, or a delayed start not yet due) ends at once. Returns
    /// the run as it is after the request; a finished run as it is.
    pub async fn cancel(&self, run_id: &str, reason: &str, by: &str) -> Result<RunRecord> {
        self.cancel_inner(run_id, reason, by)
            .await
            .map_err(|e| unconfirmed(e, run_id, "cancel"))
    }

    /// A cancel someone asked for (the API, the CLI): as [`Keel::cancel`],
    /// or [`Keel::terminate`] with `force`, but a run that had already
    /// ended is refused with [`Error::RunEnded`] naming its status, since
    /// nothing was cancelled.
    pub async fn cancel_on_request(
        &self,
        run_id: &str,
        reason: &str,
        by: &str,
        force: bool,
    ) -> Result<RunRecord> {
        let run = self.get_run(run_id).await?;
        if run.status.is_final() {
            return Err(Error::RunEnded {
                run_id: run.run_id,
                status: run.status.as_str().into(),
                action: "cancelled",
            });
        }
        match force {
            true => self.terminate(run_id).await,
            false => self.cancel(run_id, reason, by).await,
        }
    }

    async fn cancel_inner(&self, run_id: &str, reason: &str, by: &str) -> Result<RunRecord> {
        let run = self.get_run(run_id).await?;
        if run.status.is_final() {
            return Ok(run);
        }
        let request = CancelRequest {
            reason: reason.into(),
            by: by.into(),
            at_ms: self.now_ms(),
        };
        if self.never_activated(&run).await? {
            return self.terminate_inner(run_id, Some(&request)).await;
        }
        let asked = self.store().request_cancel(run_id, &request).await?;
        if asked.is_some() {
            tracing::info!(run_id, reason, by, "cancel requested");
            match lock(&self.inner.live).get(run_id) {
                Some(journal) => journal.hint_cancel(),
                None => self.due_changed(),
            }
            self.inner.progress.notify_waiters();
        }
        self.get_run(run_id).await
    }

    /// A run that is queued for a slot, or a delayed start not yet
    /// activated: no code of it has run, so there is nothing to clean up.
    async fn never_activated(&self, run: &RunRecord) -> Result<bool> {
        Ok(match run.status {
            RunStatus::Queued => true,
            RunStatus::Scheduled => !self
                .store()
                .journal(run.run_id.as_str())
                .await?
                .iter()
                .any(|e| e.fact.command().is_some()),
            _ => false,
        })
    }

    /// Ends a run at once, with status `cancelled` and no cleanup, and
    /// releases its tokens (after any retention). An activation driving
    /// it, in this process or another sharing the store, is stopped where
    /// it is. A finished run is returned as it is.
    pub async fn terminate(&self, run_id: &str) -> Result<RunRecord> {
        self.terminate_inner(run_id, None)
            .await
            .map_err(|e| unconfirmed(e, run_id, "cancel"))
    }

    /// [`Keel::terminate`]; with `request`, of a run none of whose code
    /// ran, which journals the request and ends cancelled by it.
    async fn terminate_inner(
        &self,
        run_id: &str,
        request: Option<&CancelRequest>,
    ) -> Result<RunRecord> {
        let mut announced = false;
        loop {
            let run = self.get_run(run_id).await?;
            if run.status.is_final() {
                return Ok(run);
            }
            if let Some(_active) = ActiveRun::claim(&self.inner, run_id)
                && let Some(lease) = self.lease(run_id).await?
            {
                let entries = self.store().journal(run_id).await?;
                let journal = self.journal_of(&lease, entries)?;
                if let Some(request) = request {
                    let (reason, by) = (request.reason.clone(), request.by.clone());
                    let fact = lifecycle::cancelled_end(&reason, &by, Cleanup::NotStarted);
                    journal.record(Fact::CancelRequested { reason, by })?;
                    return self.end_cancelled(run, fact, &journal).await;
                }
                let cancelled = Error::Cancelled {
                    run_id: run.run_id.clone(),
                };
                return self.finish(run, Ended::Failed(cancelled), &journal).await;
            }
            let ended = self.inner.progress.notified();
            if let Some(journal) = lock(&self.inner.live).get(run_id) {
                journal.terminate();
            } else if !announced {
                // Another process drives it: its driver stops it.
                self.store()
                    .announce(&Wake::Terminate(run_id.into()))
                    .await?;
                announced = true;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), ended).await;
        }
    }
}
