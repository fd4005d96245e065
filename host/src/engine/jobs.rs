//! Bulk operations: a job applies one action (cancel, retry, delete) to
//! every run a listing filter selected when it was submitted, a page at a
//! time, under a claim any worker takes over once it has expired. Before a
//! page's runs are acted on they are written into the job's record, so
//! the worker that takes over after a crash acts on each of them only if
//! the action has not landed (`core::bulk` decides). Every write of the
//! record is a compare-and-set on its revision: a worker that lost the
//! claim, or a job cancelled meanwhile, stops at its next write.

use std::collections::HashSet;

use keel_core::bulk::{
    BulkAction, BulkRequest, InFlight, JOB_PAGE, JobRecord, JobState, RunOutcome, fork_id,
};
use keel_core::journal::Fact;
use keel_core::query::MAX_PAGE;
use keel_core::{RunCursor, RunRecord};
use keel_store::StoreError;

use super::{ForkOptions, Keel, lock};
use crate::{Error, Result};

/// What a bulk operation would do, counted before it is submitted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BulkPreview {
    /// Runs the filter selects that the action applies to.
    pub acted_on: u64,
    /// Runs the filter selects that the action would pass over (their
    /// status does not take it).
    pub passed_over: u64,
    /// The first runs it would act on.
    pub sample: Vec<RunRecord>,
}

impl Keel {
    /// Counts what `request` would act on, with the first `sample` runs,
    /// without changing anything.
    pub async fn preview_bulk(&self, request: &BulkRequest, sample: usize) -> Result<BulkPreview> {
        refuse_unfiltered(request)?;
        let mut preview = BulkPreview::default();
        let mut cursor = None;
        loop {
            let page = self
                .runs_page(&request.filter, cursor.as_ref(), MAX_PAGE)
                .await?;
            for run in page.runs {
                if request
                    .action
                    .passes_over(run.status, request.force)
                    .is_some()
                {
                    preview.passed_over += 1;
                    continue;
                }
                preview.acted_on += 1;
                if preview.sample.len() < sample {
                    preview.sample.push(run);
                }
            }
            match page.next_cursor.as_deref().and_then(RunCursor::decode) {
                Some(next) => cursor = Some(next),
                None => return Ok(preview),
            }
        }
    }

    /// Stores a job for `request`, running, for any worker to carry out
    /// ([`Keel::run_job`]); it acts on the runs admitted until now.
    pub async fn submit_bulk(&self, request: BulkRequest) -> Result<JobRecord> {
        refuse_unfiltered(&request)?;
        let job_id = uuid::Uuid::now_v7().to_string();
        let job = JobRecord::new(job_id, request, self.now_ms());
        self.store().create_job(&job).await?;
        tracing::info!(
            job_id = %job.job_id,
            action = job.request.action.as_str(),
            "bulk job submitted"
        );
        self.inner.progress.notify_waiters();
        self.due_changed();
        Ok(job)
    }

    /// The job `job_id`; [`Error::JobNotFound`] if there is none.
    pub async fn job(&self, job_id: &str) -> Result<JobRecord> {
        self.store()
            .job(job_id)
            .await?
            .ok_or_else(|| Error::JobNotFound {
                job_id: job_id.into(),
            })
    }

    /// Up to `limit` jobs, newest first.
    pub async fn jobs(&self, limit: usize) -> Result<Vec<JobRecord>> {
        Ok(self.store().jobs(limit).await?)
    }

    /// Stops a running job: it acts on no run after its worker's next
    /// write; the runs acted on stay so. An ended job is returned as it
    /// is.
    pub async fn cancel_job(&self, job_id: &str) -> Result<JobRecord> {
        loop {
            let mut job = self.job(job_id).await?;
            if job.state != JobState::Running {
                return Ok(job);
            }
            job.finish(JobState::Cancelled, self.now_ms());
            match self.store().update_job(&job).await {
                Ok(revision) => {
                    job.revision = revision;
                    tracing::info!(job_id, "bulk job cancelled");
                    return Ok(job);
                }
                // Its worker wrote progress meanwhile: read it again.
                Err(StoreError::JobConflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Carries out the job `job_id` to its end, unless another worker's
    /// claim on it is live (then it is returned as read). A page a worker
    /// left unfinished is finished first, acting only on the runs whose
    /// action has not landed. Returns the job as this worker left it:
    /// completed, or cancelled by an operator meanwhile.
    pub async fn run_job(&self, job_id: &str) -> Result<JobRecord> {
        use tracing::Instrument;
        self.carry_out_job(job_id)
            .instrument(tracing::info_span!("job", job_id))
            .await
    }

    async fn carry_out_job(&self, job_id: &str) -> Result<JobRecord> {
        let owner = self.inner.config.worker_id.clone();
        let mut job = self.job(job_id).await?;
        if !job.is_claimable(&owner, self.now_ms()) {
            return Ok(job);
        }
        // Two workers may find it unclaimed at once: the other took it.
        match self.renew_claim(&mut job).await {
            Err(Error::JobConflict { .. }) => return self.job(job_id).await,
            claimed => claimed?,
        }
        let mut resumed = !job.in_flight.is_empty();
        loop {
            if !job.in_flight.is_empty() {
                if let Some(ended) = self.act_on_page(&mut job, resumed).await? {
                    return Ok(ended);
                }
                resumed = false;
            }
            if job.state != JobState::Running {
                tracing::info!(
                    job_id,
                    done = job.counts.done,
                    skipped = job.counts.skipped,
                    failed = job.counts.failed,
                    "bulk job completed"
                );
                return Ok(job);
            }
            self.begin_page(&mut job).await?;
        }
    }

    /// Reads the job's next page of runs and writes them into its record
    /// (with each run's journal length, for a retry or a restart) before any is acted
    /// on.
    async fn begin_page(&self, job: &mut JobRecord) -> Result<()> {
        let cursor = job.cursor.as_deref().and_then(RunCursor::decode);
        let page = self
            .runs_page(&job.request.filter, cursor.as_ref(), JOB_PAGE)
            .await?;
        let mut runs = Vec::with_capacity(page.runs.len());
        for run in page.runs {
            let journal_len = match job.request.action {
                BulkAction::Retry | BulkAction::Restart => {
                    self.store().journal(&run.run_id).await?.len() as u64
                }
                BulkAction::Cancel
                | BulkAction::Delete
                | BulkAction::Pause
                | BulkAction::Resume
                | BulkAction::Upgrade
                | BulkAction::Fork => 0,
            };
            runs.push(InFlight {
                run_id: run.run_id,
                journal_len,
            });
        }
        job.begin_page(runs, page.next_cursor);
        if job.in_flight.is_empty() {
            job.end_page(self.now_ms());
        }
        self.renew_claim(job).await
    }

    /// Acts on the runs of the job's page, renewing the claim as it goes,
    /// and writes the page's end. `Some(job)` if the job was ended by
    /// someone else meanwhile (a cancel): nothing more is done.
    async fn act_on_page(&self, job: &mut JobRecord, resumed: bool) -> Result<Option<JobRecord>> {
        let ttl = self.claim_ttl_ms();
        for run in job.in_flight.clone() {
            if !job.claim_holds(&self.inner.config.worker_id, self.now_ms(), ttl / 3)
                && let Some(ended) = self.renew_or_stop(job).await?
            {
                return Ok(Some(ended));
            }
            // The store failed under the action (`Err`): whether it landed
            // is unknown, so the run is reported neither way. The job stops
            // with its page in flight; whoever carries it on next finds
            // what landed (`act_on` on a resumed page).
            let outcome = self.act_on(job, &run, resumed).await?;
            if let RunOutcome::Failed(error) = &outcome {
                tracing::warn!(run_id = %run.run_id, "the bulk action failed: {error}");
            }
            job.record(&run.run_id, outcome);
        }
        job.end_page(self.now_ms());
        self.renew_or_stop(job).await
    }

    /// Writes the job with this worker's claim renewed; `Some(job)` if it
    /// was ended meanwhile by someone else (it is not written).
    async fn renew_or_stop(&self, job: &mut JobRecord) -> Result<Option<JobRecord>> {
        match self.renew_claim(job).await {
            Ok(()) => Ok(None),
            Err(Error::JobConflict { .. }) => {
                let stored = self.job(&job.job_id).await?;
                if stored.state != JobState::Running {
                    return Ok(Some(stored));
                }
                Err(Error::JobConflict {
                    job_id: job.job_id.clone(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Writes the job, claimed by this worker for another claim's time.
    async fn renew_claim(&self, job: &mut JobRecord) -> Result<()> {
        if job.state == JobState::Running {
            job.claim(
                &self.inner.config.worker_id,
                self.now_ms(),
                self.claim_ttl_ms(),
            );
        }
        job.revision = self.store().update_job(job).await?;
        Ok(())
    }

    fn claim_ttl_ms(&self) -> u64 {
        self.inner.config.lease_ttl.as_millis() as u64
    }

    /// Takes the job's action on one run. On a resumed page, a run whose
    /// action has landed (a retry journaled since the page began, a run
    /// cancelled or deleted) counts as done and is not acted on again.
    async fn act_on(&self, job: &JobRecord, run: &InFlight, resumed: bool) -> Result<RunOutcome> {
        let request = &job.request;
        let record = match self.get_run(&run.run_id).await {
            Ok(record) => record,
            Err(Error::RunNotFound { .. }) if resumed && request.action == BulkAction::Delete => {
                return Ok(RunOutcome::Done);
            }
            Err(Error::RunNotFound { .. }) => return Ok(RunOutcome::Skipped),
            Err(e) => return failed(e),
        };
        if resumed {
            let landed = match request.action {
                BulkAction::Retry | BulkAction::Restart => {
                    match self.store().journal(&run.run_id).await {
                        Ok(journal) => request.action.landed_since(run.journal_len, &journal),
                        Err(e) => return failed(e.into()),
                    }
                }
                BulkAction::Cancel => record.status == keel_core::RunStatus::Cancelled,
                // Moved by this job before its worker was lost.
                BulkAction::Upgrade => match self.store().journal(&run.run_id).await {
                    Ok(journal) => journal.iter().any(
                        |e| matches!(&e.fact, Fact::RunMoved { by, .. } if *by == job_actor(job)),
                    ),
                    Err(e) => return failed(e.into()),
                },
                // A fork made before is found by its ID (`run_exists`).
                BulkAction::Delete | BulkAction::Pause | BulkAction::Resume | BulkAction::Fork => {
                    false
                }
            };
            if landed {
                return Ok(RunOutcome::Done);
            }
        }
        if request
            .action
            .passes_over(record.status, request.force)
            .is_some()
        {
            return Ok(RunOutcome::Skipped);
        }
        let by = job_actor(job);
        if let Some(upgrade) = &request.upgrade {
            return self
                .move_run(&run.run_id, upgrade, &by)
                .await
                .or_else(failed);
        }
        let acted = match request.action {
            BulkAction::Cancel if request.force => self.terminate(&run.run_id).await.map(drop),
            BulkAction::Cancel => {
                let reason = request.reason.as_deref().unwrap_or("bulk cancel");
                self.cancel(&run.run_id, reason, &by).await.map(drop)
            }
            BulkAction::Retry => self.retry(&run.run_id).await.map(drop),
            BulkAction::Pause => self.pause_run(&run.run_id, &by).await.map(drop),
            BulkAction::Resume => self.resume_run(&run.run_id, &by).await.map(drop),
            // Submitted with its upgrade (`submit_upgrade`), taken above.
            BulkAction::Upgrade => Err(Error::InvalidInput {
                reason: "an upgrade job names no upgrade".into(),
            }),
            BulkAction::Delete => self
                .delete_runs(std::slice::from_ref(&run.run_id), request.force)
                .await
                .map(drop),
            BulkAction::Restart | BulkAction::Fork => self.restart_or_fork(job, run, &by).await,
        };
        match acted {
            Ok(()) => Ok(RunOutcome::Done),
            // Forked before this worker took the job over.
            Err(Error::RunExists { .. }) if request.action == BulkAction::Fork => {
                Ok(RunOutcome::Done)
            }
            // The run changed since the page was read: the action no
            // longer applies.
            Err(
                Error::NotRetryable { .. }
                | Error::RunLive { .. }
                | Error::RunNotFound { .. }
                | Error::RunEnded { .. },
            ) => Ok(RunOutcome::Skipped),
            Err(e) => failed(e),
        }
    }

    /// Restarts `run` from the job's point, or forks it into the run
    /// [`fork_id`] names, on the job's build if it names one.
    async fn restart_or_fork(&self, job: &JobRecord, run: &InFlight, by: &str) -> Result<()> {
        let Some(restart) = &job.request.restart else {
            return Err(Error::InvalidInput {
                reason: format!("a bulk {} names no point", job.request.action.as_str()),
            });
        };
        if job.request.action == BulkAction::Restart {
            let on = restart.on.as_deref();
            return self
                .restart_run(&run.run_id, &restart.from, on, by)
                .await
                .map(drop);
        }
        let options = ForkOptions {
            on: restart.on.clone(),
            input: None,
            run_id: Some(fork_id(&job.job_id, &run.run_id)),
        };
        self.fork_run(&run.run_id, &restart.from, &options, by)
            .await
            .map(drop)
    }

    /// Starts, each in a task of its own, the running jobs no live claim
    /// holds (submitted here or elsewhere, or left by a dead worker).
    pub(super) async fn spawn_jobs(&self) -> Result<()> {
        let now = self.now_ms();
        for job in self.store().running_jobs().await? {
            if job.is_claimable(&self.inner.config.worker_id, now) {
                self.spawn_job(job.job_id);
            }
        }
        Ok(())
    }

    /// Carries out the job `job_id` in a task of its own, unless this
    /// process is carrying it out already ([`Keel::run_job`]); a failure is
    /// logged, and any worker takes the job over once its claim expires.
    pub fn spawn_job(&self, job_id: String) {
        if !lock(&self.inner.jobs).insert(job_id.clone()) {
            return;
        }
        let keel = self.clone();
        tokio::spawn(async move {
            if let Err(e) = keel.run_job(&job_id).await {
                tracing::warn!(
                    %job_id,
                    "the bulk job stopped (a worker takes it over once its claim expires): {e}"
                );
            }
            lock(&keel.inner.jobs).remove(&job_id);
        });
    }
}

/// The jobs a process is carrying out, by job ID.
pub(super) type JobsRunning = std::sync::Mutex<HashSet<String>>;

fn refuse_unfiltered(request: &BulkRequest) -> Result<()> {
    match request.refusal() {
        Some(reason) => Err(Error::InvalidRequest { reason }),
        None => Ok(()),
    }
}

/// A run's action that failed with `e`: reported failed, unless the store
/// failed under it (the action may have landed or not), which stops the
/// job instead (`Err`).
fn failed(e: Error) -> Result<RunOutcome> {
    if e.is_storage() || e.outcome_unknown() || matches!(e, Error::OutcomeUnknown { .. }) {
        return Err(e);
    }
    Ok(RunOutcome::Failed(e.to_string()))
}

/// Who a job's actions are journaled as being by.
fn job_actor(job: &JobRecord) -> String {
    format!("job {}", job.job_id)
}
