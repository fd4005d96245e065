//! Driving runs: one activation at a time per run in this process, how an
//! activation's end is recorded (suspended, completed, failed, cancelled),
//! waiting for a run's result, cancelling, and offline replay.

use std::sync::Arc;
use std::time::Duration;

use keel_core::divergence::Verdict;
use keel_core::flow::SlotState;
use keel_core::journal::Fact;
use keel_core::lifecycle::{self, Cleanup};
use keel_core::{Entry, ErrorKind, RunError, RunId, RunRecord, RunStatus};
use keel_store::{Lease, StoreError, Wake};
use tracing::Instrument;

use super::pauses::Held;
use super::{Inner, Keel, lock};
use crate::activation::{Outside, RunJournal, Suspend};
use crate::component::Loaded;
use crate::effects::Effect;
use crate::runtime::Ended;
use crate::{Error, Result};

/// What a wait for a run waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// The run has ended.
    Ended,
    /// The run has ended, or it waits (on a hook, another run, its start
    /// time, a concurrency slot, or a timer not due within
    /// [`SHORT_WAIT`]), however its instance is kept.
    Settled,
    /// The run is paused (its driver has stopped it), or has ended.
    Paused,
}

/// A run waiting on a timer due within this has not settled: it is about
/// to go on.
pub const SHORT_WAIT: Duration = Duration::from_secs(1);

impl Until {
    /// Whether `run` has reached this at `now_ms`.
    pub fn reached(self, run: &RunRecord, now_ms: u64) -> bool {
        let soon = now_ms.saturating_add(SHORT_WAIT.as_millis() as u64);
        run.status.is_final()
            || match self {
                Until::Ended => false,
                Until::Settled => run.status.waits() && run.wake_at_ms.is_none_or(|at| at > soon),
                Until::Paused => run.status == RunStatus::Paused,
            }
    }
}

/// How often a wait for a run's end looks at the store again when nothing
/// in this process woke it (another process may have moved the run on).
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// Marks a run active in this process for as long as it lives.
pub(super) struct ActiveRun<'a> {
    inner: &'a Inner,
    run_id: RunId,
}

impl<'a> ActiveRun<'a> {
    pub(super) fn claim(inner: &'a Inner, run_id: &str) -> Option<Self> {
        lock(&inner.active)
            .insert(run_id.into())
            .then(|| ActiveRun {
                inner,
                run_id: run_id.into(),
            })
    }

    /// Lets others wake the run's activation through its journal.
    fn publish(&self, journal: &Arc<RunJournal>) {
        lock(&self.inner.live).insert(self.run_id.clone(), journal.clone());
    }
}

impl Drop for ActiveRun<'_> {
    fn drop(&mut self) {
        lock(&self.inner.live).remove(&self.run_id);
        lock(&self.inner.active).remove(&self.run_id);
        self.inner.progress.notify_waiters();
    }
}

impl Keel {
    pub(super) fn journal_of(&self, lease: &Lease, entries: Vec<Entry>) -> Result<RunJournal> {
        let clock = self.inner.config.clock.clone();
        let store = Some(self.store().clone());
        Ok(
            RunJournal::fenced(store, clock, &lease.run_id, entries, Some(lease.clone()))?
                .observed(self.inner.config.observer.clone())
                .announcing(self.inner.journaled.clone())
                .bounded(self.inner.config.limits.max_journal_entries),
        )
    }

    /// Takes the run's lease for this worker, or `None` if another worker
    /// holds it. A lease the run's admission took here is void from then on.
    pub(super) async fn lease(&self, run_id: &str) -> Result<Option<Lease>> {
        self.inner.admitted_leases.forget(run_id);
        let config = &self.inner.config;
        let ttl = config.lease_ttl.as_millis() as u64;
        Ok(self
            .store()
            .acquire_lease(run_id, &config.worker_id, ttl, self.now_ms())
            .await?)
    }

    /// Renews `lease` every third of its time to live until the returned
    /// task is aborted; a lost lease stops the activation of `journal`.
    fn keep_lease(&self, lease: Lease, journal: Arc<RunJournal>) -> tokio::task::JoinHandle<()> {
        let keel = self.clone();
        tokio::spawn(async move {
            let ttl = keel.inner.config.lease_ttl;
            let mut lease = lease;
            loop {
                tokio::time::sleep(ttl / 3).await;
                let renewed = keel
                    .store()
                    .renew_lease(&lease, ttl.as_millis() as u64, keel.now_ms())
                    .await;
                match renewed {
                    Ok(l) => lease = l,
                    Err(e @ StoreError::LeaseLost { .. }) => {
                        tracing::warn!(run_id = %lease.run_id, "{e}");
                        journal.fail(e.to_string());
                        return;
                    }
                    // Retried at the next tick; the lease may still hold.
                    Err(e) => {
                        tracing::warn!(run_id = %lease.run_id, "renewing the lease failed: {e}")
                    }
                }
            }
        })
    }

    /// Retries a failed run from its first step that failed for good (or
    /// from its end, if no step failed): the journal records the retry,
    /// that step runs again with fresh attempts and its step ID, and the
    /// steps completed before it keep their results. The run is live again
    /// on return (a worker, or `drive`, takes it on). Its tokens and key,
    /// released when it failed, are not claimed again. Refused for a run
    /// that did not fail, and for one that failed by non-determinism,
    /// which a retry would replay into again.
    pub async fn retry(&self, run_id: &str) -> Result<RunRecord> {
        self.retry_pinned(run_id, None).await
    }

    /// Retries a failed run on the build `target` names (a deployment name,
    /// whose current build it takes, or a hash or its unique prefix): the
    /// run is pinned to that build from then on, so a fix deployed after it
    /// failed (code, or a grant of the new build) reaches it. Refused, with
    /// the first difference, unless its journal up to where the retry
    /// starts over replays on that build; a run that failed because its
    /// code no longer matched its journal is retried this way once fixed.
    pub async fn retry_on(&self, run_id: &str, target: &str) -> Result<RunRecord> {
        let run = self.get_run(run_id).await?;
        let deployment = self.deployment(target).await?;
        if deployment.hash == run.component_hash {
            return self.retry(run_id).await;
        }
        let loaded = self.component_by_hash(&deployment.hash).await?;
        loaded.check_workflow(&run.workflow)?;
        let entries = self.store().journal(run_id).await?;
        let index = keel_core::index::JournalIndex::new(entries.clone()).map_err(|e| {
            Error::JournalWrite {
                run_id: run.run_id.clone(),
                reason: format!("the stored journal is malformed: {e}"),
            }
        })?;
        let Some(plan) = index.retry_plan() else {
            return self.retry(run_id).await;
        };
        let kept = entries[..(plan.from_seq as usize).min(entries.len())].to_vec();
        let verdict = self.replay_entries(&loaded, &run, kept).await?;
        if !verdict.is_ok() {
            return Err(Error::NotRetryable {
                run_id: run.run_id.clone(),
                reason: format!(
                    "its journal does not replay on build {} of `{}`: {}; retry it on a build whose code matches, or start a new run",
                    &deployment.hash.as_str()[..12.min(deployment.hash.as_str().len())],
                    deployment.name,
                    verdict.summary()
                ),
            });
        }
        tracing::info!(run_id, from = %run.component_hash, to = %deployment.hash, "run moved to another build for its retry");
        self.retry_pinned(run_id, Some(deployment.hash)).await
    }

    /// [`Keel::retry`], moving the run to build `on` if given (checked by
    /// the caller).
    async fn retry_pinned(
        &self,
        run_id: &str,
        on: Option<keel_core::ComponentHash>,
    ) -> Result<RunRecord> {
        let run = self.get_run(run_id).await?;
        let refuse = |reason: String| Error::NotRetryable {
            run_id: run.run_id.clone(),
            reason,
        };
        if run.status != RunStatus::Failed {
            return Err(refuse(format!(
                "it is {}; only a failed run is retried",
                run.status.as_str()
            )));
        }
        if on.is_none()
            && run
                .error
                .as_ref()
                .is_some_and(|e| e.kind == ErrorKind::NonDeterminism.as_str())
        {
            return Err(refuse(
                "it failed because its code no longer matches its journal, and a retry would replay into the same divergence; deploy a build that matches and retry the run on it, or start a new run".into(),
            ));
        }
        let entries = self.store().journal(run_id).await?;
        let index =
            keel_core::index::JournalIndex::new(entries).map_err(|e| Error::JournalWrite {
                run_id: run.run_id.clone(),
                reason: format!("the stored journal is malformed: {e}"),
            })?;
        let plan = index
            .retry_plan()
            .ok_or_else(|| refuse("its journal records no failure".into()))?;
        let from_seq = plan.from_seq;
        if let Some(why) = keel_core::restart::undone_work_refusal(&index, from_seq) {
            return Err(refuse(why));
        }
        let entry = index.next_entry(Fact::RunRetried { from_seq }, self.now_ms());
        // A retry from a payload the run refused skips it, or the run
        // would be handed it again and fail again.
        let mut entries = vec![entry.clone()];
        if let Some((token, payload)) = plan.skip {
            tracing::info!(
                run_id,
                token,
                payload,
                "the retry skips the payload the run refused"
            );
            entries.push(Entry {
                seq: entry.seq + 1,
                at_ms: entry.at_ms,
                fact: Fact::PayloadSkipped {
                    token,
                    index: payload,
                },
            });
        }
        let reopened = self.reopen(run.clone(), entries, on).await?;
        let run =
            reopened.ok_or_else(|| refuse("it holds no concurrency slot to take back".into()))?;
        tracing::info!(run_id, from_seq, "run retried");
        Ok(run)
    }

    /// Makes an ended run live again with `entries` (its retry or restart)
    /// appended, pinned to build `on` if given: a run that failed holding
    /// a concurrency slot gets it back deferred (it comes due at once and
    /// asks for a slot, or queues, like a delayed start). `None`, with
    /// nothing written, for a run of a workflow with a concurrency limit
    /// that holds no slot to take back (it did not fail).
    pub(super) async fn reopen(
        &self,
        mut run: RunRecord,
        entries: Vec<Entry>,
        on: Option<keel_core::ComponentHash>,
    ) -> Result<Option<RunRecord>> {
        let run_id = run.run_id.clone();
        let run_id = run_id.as_str();
        let at_ms = entries.first().map_or(self.now_ms(), |e| e.at_ms);
        // What an unconfirmed write's answer names as the operation.
        let operation = match entries.first().map(|e| &e.fact) {
            Some(Fact::RunRestarted { .. }) => "restart",
            _ => "retry",
        };
        let deferred = self
            .store()
            .rearm_slot(run_id)
            .await
            .map_err(|e| unconfirmed(e.into(), run_id, operation))?;
        if !deferred && run.status != RunStatus::Failed && self.limited(&run).await? {
            return Ok(None);
        }
        (run.status, run.wake_at_ms) = match deferred {
            true => (RunStatus::Scheduled, Some(at_ms)),
            false => (RunStatus::Pending, None),
        };
        run.error = None;
        run.output = None;
        run.updated_at_ms = at_ms;
        if let Some(hash) = on {
            run.component_hash = hash;
        }
        self.store()
            .append(run_id, &entries, Some(&run), None)
            .await
            .map_err(|e| unconfirmed(e.into(), run_id, operation))?;
        let _ = self.inner.journaled.send(run.run_id.clone());
        self.store().announce(&Wake::Admitted).await?;
        self.inner.progress.notify_waiters();
        self.due_changed();
        Ok(Some(run))
    }

    /// Whether `run`'s workflow declares a concurrency limit.
    async fn limited(&self, run: &RunRecord) -> Result<bool> {
        let loaded = self.component_by_hash(&run.component_hash).await?;
        Ok(loaded.concurrency(&run.workflow).is_some())
    }

    /// A run's record once it has ended; with `wait`, drives it (and waits
    /// for its timers) until it ends.
    pub async fn result(&self, run_id: &str, wait: bool) -> Result<RunRecord> {
        let run = self.drive(run_id).await?;
        if !wait || run.status.is_final() {
            return Ok(run);
        }
        self.until(run_id, Until::Ended, None, true, None).await
    }

    /// A run's record once it has reached `until` (ended, or settled), or
    /// as it is when `timeout` passes. It never drives the run: a worker
    /// (or a caller's `drive`) does.
    pub async fn wait_for(
        &self,
        run_id: &str,
        until: Until,
        timeout: Duration,
    ) -> Result<RunRecord> {
        let deadline = tokio::time::Instant::now().checked_add(timeout);
        self.until(run_id, until, deadline, false, None).await
    }

    /// Drives a run whose start, payload or retry was just acknowledged, in
    /// the background, for a caller that does not wait for it: the one way
    /// to do so. An engine without [`Config::background_drives`] (a CLI
    /// with no worker) leaves the run to the next worker instead.
    ///
    /// [`Config::background_drives`]: crate::Config::background_drives
    pub fn drive_in_background(&self, run_id: &str) {
        if self.drives_in_background() {
            self.drive_for_caller(run_id);
        }
    }

    /// Drives an acknowledged run in a task of its own, for a caller that
    /// waits for something the drive brings (its settling, a reply); the
    /// drive goes on if the caller stops waiting.
    pub fn drive_for_caller(&self, run_id: &str) -> tokio::task::JoinHandle<Result<RunRecord>> {
        let (keel, run_id) = (self.clone(), run_id.to_string());
        let span = tracing::Span::current();
        tokio::spawn(
            async move {
                let driven = keel.drive_acknowledged(&run_id).await;
                if let Err(e) = &driven {
                    tracing::warn!(%run_id, "driving an acknowledged run failed: {e}");
                }
                driven
            }
            .instrument(span),
        )
    }

    /// Whether runs nobody waits for are driven here (see
    /// [`Keel::drive_in_background`]).
    pub fn drives_in_background(&self) -> bool {
        self.inner.config.background_drives
    }

    /// Drives a run whose start, payload or retry was just acknowledged, in
    /// the background (the drive goes on if the caller stops waiting), and
    /// waits up to `timeout` (without bound if it overflows the clock:
    /// `Duration::MAX`) for it to reach `until`; returns its record as it
    /// then is. A failure of the drive is `DriveInterrupted` naming
    /// the run, so that no caller mistakes it for a refusal of what was
    /// acknowledged.
    pub async fn drive_and_wait(
        &self,
        run_id: &str,
        until: Until,
        timeout: Duration,
    ) -> Result<RunRecord> {
        // The record as acknowledged: a run that waited then has not
        // settled again until its record changes (or the drive ends), or
        // another driver has written it since.
        let acknowledged = self.now_ms();
        let before = self.get_run(run_id).await?;
        let drive = self.drive_for_caller(run_id);
        let deadline = tokio::time::Instant::now().checked_add(timeout);
        let since = Some((before, acknowledged));
        let waited = self.until(run_id, until, deadline, false, since);
        tokio::pin!(waited);
        tokio::select! {
            waited = &mut waited => waited,
            driven = drive => match driven {
                Ok(Ok(run)) if until.reached(&run, self.now_ms()) => Ok(run),
                Ok(Ok(_)) => waited.await,
                Ok(Err(e)) => Err(e),
                Err(join) => Err(Error::DriveInterrupted {
                    run_id: run_id.into(),
                    reason: format!("the drive stopped: {join}"),
                }),
            },
        }
    }

    /// The one wait for a run: returns its record once it has reached
    /// `until` or `deadline` has passed; with `since` (a record and the
    /// time something moved the run on), a record written before that
    /// time and equal to it reaches nothing but an end (the run has yet to
    /// move on from it). With
    /// `drive`, this process drives the run whenever it is due (its timer
    /// fired, a payload came), so no worker is needed. Woken at once by an
    /// end, a payload or a run settling in this process, by the run's
    /// timer, and every second for what other processes do.
    async fn until(
        &self,
        run_id: &str,
        until: Until,
        deadline: Option<tokio::time::Instant>,
        drive: bool,
        since: Option<(RunRecord, u64)>,
    ) -> Result<RunRecord> {
        let mut just_drove = false;
        loop {
            // Registered before the read, so that an end in between wakes it.
            let progress = self.inner.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            let run = self.get_run(run_id).await?;
            let now = tokio::time::Instant::now();
            let moved = since.as_ref().is_none_or(|(before, at)| {
                run.status.is_final() || *before != run || run.updated_at_ms >= *at
            });
            if (moved && until.reached(&run, self.now_ms())) || deadline.is_some_and(|d| now >= d) {
                return Ok(run);
            }
            // A drive that could not move the run on (another process
            // holds it) is not repeated before the next wake.
            if drive && !std::mem::take(&mut just_drove) && self.is_due(&run).await? {
                self.drive(run_id).await?;
                just_drove = true;
                continue;
            }
            let now_ms = self.now_ms();
            let timer = run.wake_at_ms.map_or(LOOK_AGAIN, |at| {
                Duration::from_millis(at.saturating_sub(now_ms)).min(LOOK_AGAIN)
            });
            let wake = deadline.map_or(now + timer, |d| d.min(now + timer));
            let _ = tokio::time::timeout_at(wake, progress).await;
        }
    }

    /// The run can make progress now.
    pub(super) async fn is_due(&self, run: &RunRecord) -> Result<bool> {
        Ok(match run.status {
            RunStatus::Pending | RunStatus::Running => true,
            RunStatus::Scheduled => run.wake_at_ms.is_none_or(|at| at <= self.now_ms()),
            RunStatus::Waiting => {
                run.wake_at_ms.is_some_and(|at| at <= self.now_ms())
                    || self.store().is_woken(&run.run_id).await?
            }
            _ => false,
        })
    }

    /// Drives a run whose start, payload or retry was just acknowledged,
    /// as [`Keel::drive`]; a failure of the store on the way is
    /// `DriveInterrupted` naming the run, so that no caller mistakes it for
    /// a refusal of what was acknowledged.
    pub async fn drive_acknowledged(&self, run_id: &str) -> Result<RunRecord> {
        self.drive(run_id).await.map_err(|e| match e {
            e @ (Error::Store(_) | Error::JournalWrite { .. }) => Error::DriveInterrupted {
                run_id: run_id.into(),
                reason: e.to_string(),
            },
            e => e,
        })
    }

    /// Executes a run until it completes, fails or must wait; returns its
    /// record. A finished run is returned as it is; if this process is
    /// already driving the run, waits for that drive to end instead.
    pub async fn drive(&self, run_id: &str) -> Result<RunRecord> {
        let span = tracing::info_span!("run", run_id);
        self.drive_inner(run_id).instrument(span).await
    }

    async fn drive_inner(&self, run_id: &str) -> Result<RunRecord> {
        let admitted = self.admitted_lease(run_id);
        let Some(active) = ActiveRun::claim(&self.inner, run_id) else {
            self.until_not_active(run_id).await;
            return self.get_run(run_id).await;
        };
        let run = self.get_run(run_id).await?;
        if run.status.is_final() || self.is_stopping() {
            return Ok(run);
        }
        // A delayed start is not activated before its time.
        if run.status == RunStatus::Scheduled && !self.is_due(&run).await? {
            return Ok(run);
        }
        let lease = match admitted {
            Some(lease) => Some(lease),
            None => self.lease(run_id).await?,
        };
        let Some(lease) = lease else {
            tracing::debug!("another worker drives the run");
            return Ok(run);
        };
        self.drive_with(lease, &active).await
    }

    /// The lease `run_id`'s admission here took, while at least half its
    /// time to live is left: the run's first drive here starts under it
    /// instead of taking the lease again.
    fn admitted_lease(&self, run_id: &str) -> Option<Lease> {
        let margin = self.inner.config.lease_ttl.as_millis() as u64 / 2;
        self.inner
            .admitted_leases
            .take(run_id, self.now_ms(), margin)
    }

    /// Drives a run whose lease a worker's claim took
    /// (`LeaseStore::claim_due`), as [`Keel::drive`] does.
    pub(super) async fn drive_claimed(&self, lease: Lease) -> Result<RunRecord> {
        let run_id = lease.run_id.clone();
        let span = tracing::info_span!("run", %run_id);
        async {
            let Some(active) = ActiveRun::claim(&self.inner, &run_id) else {
                // This process drives it already, under a lease it takes
                // (or took) after this one. The claim took the run's wake,
                // which that drive may not have seen: due again at once.
                self.store()
                    .release_lease(&lease, Some(self.now_ms()))
                    .await?;
                return self.get_run(&run_id).await;
            };
            self.drive_with(lease, &active).await
        }
        .instrument(span)
        .await
    }

    /// Drives a run under `lease`, then gives the lease up: the run is due
    /// again as its record says after a drive that ended cleanly (it
    /// waits, or ended), and soon after one that did not (the drive may
    /// have taken a wake it never acted on), later after each failure in
    /// a row.
    async fn drive_with(&self, lease: Lease, active: &ActiveRun<'_>) -> Result<RunRecord> {
        let driven = if self.is_stopping() {
            Err(Error::JournalWrite {
                run_id: lease.run_id.clone(),
                reason: "the worker is shutting down".into(),
            })
        } else {
            self.drive_leased(&lease, active).await
        };
        let again_at = match &driven {
            Ok(_) => {
                lock(&self.inner.retries).succeeded(&lease.run_id);
                None
            }
            Err(_) if self.is_stopping() => Some(self.now_ms()),
            Err(e) => Some(lock(&self.inner.retries).failed(
                lease.run_id.clone(),
                self.now_ms(),
                e.to_string(),
            )),
        };
        // An end releases the lease with the run's final record.
        if !driven.as_ref().is_ok_and(|r| r.status.is_final()) {
            match self.store().release_lease(&lease, again_at).await {
                // Due next at its timer, or again soon: earlier than the
                // lease's expiry the worker may be sleeping until (a drive
                // it did not start, an API's or a CLI's).
                Ok(()) => self.due_changed(),
                Err(e) => tracing::warn!("releasing the lease failed: {e}"),
            }
        }
        driven
    }

    /// Drives a run whose lease this worker holds.
    async fn drive_leased(&self, lease: &Lease, active: &ActiveRun<'_>) -> Result<RunRecord> {
        let run_id = lease.run_id.as_str();
        // Read under the lease: another worker may have moved it on.
        let (mut run, pause) = tokio::try_join!(self.get_run(run_id), self.pause_of(run_id))?;
        if run.status.is_final() {
            self.store().release_lease(lease, None).await?;
            return Ok(run);
        }
        let mut resumed = None;
        if pause.is_some() || run.status == RunStatus::Paused {
            match self.hold_or_resume(lease, run, pause).await? {
                Held::Stopped(run) => return Ok(run),
                Held::Resumed(r, journal) => (run, resumed) = (r, Some(journal)),
            }
        }
        if run.status == RunStatus::Queued {
            // Woken or released early (an upgrade judged it): its record
            // makes it due never again until promoted.
            return self.settle(lease, run).await;
        }
        // A delayed start of a workflow with a concurrency limit asks for
        // its slot now; without one it waits in its group's queue.
        if run.status == RunStatus::Scheduled
            && self.store().take_slot(run_id, self.now_ms()).await? == Some(SlotState::Queued)
        {
            tracing::info!("the run's concurrency key is at its limit: queued");
            return self.get_run(run_id).await;
        }
        let loaded = self.component_by_hash(&run.component_hash).await?;
        self.refresh_step_settings(&run.component_hash).await?;
        let journal = match resumed {
            Some(journal) => journal,
            None => self.journal_to_drive(lease, &run).await?,
        };
        // The worker that drove it before stopped without giving it up:
        // the journal says so, durably, before anything it had in flight
        // runs again; a run that keeps killing its workers fails.
        if let Some(lost) = &lease.took_over {
            tracing::warn!(worker = %lost.owner, "taking the run over from a worker that stopped driving it");
            let limit = self.inner.config.limits.max_takeovers;
            if let Some(error) = journal.taken_over(lost, &lease.owner, limit).await? {
                tracing::error!("{error}");
                return self.finish(run, Ended::Failed(error), &journal).await;
            }
        }
        // A cancel asked for before this activation (its wake may have been
        // taken by an activation that crashed) is journaled before the
        // workflow's code runs again.
        if journal.cancel_request().is_none()
            && let Some(request) = self.store().cancel_request(run_id).await?
        {
            journal.record(request.fact())?;
        }
        let renewal = self.keep_lease(lease.clone(), journal.clone());
        active.publish(&journal);
        run.status = RunStatus::Running;
        run.wake_at_ms = None;
        run.updated_at_ms = self.now_ms();
        // Stored with the activation's first flush.
        journal.set_run(run.clone());
        let span = tracing::info_span!(
            "activation",
            otel.name = %format!("activation {}", run.workflow),
            keel.run_id = run_id,
        );
        if let Some((trace_id, span_id, _)) = journal.trace() {
            crate::trace::continue_run(&span, &trace_id, &span_id);
        }
        let ended = self
            .activate(&loaded, &run, journal.clone())
            .instrument(span.clone())
            .await;
        // Gone before the drive returns: it holds the engine, and so the store.
        renewal.abort();
        let _ = renewal.await;
        if let Ended::Failed(e) = &ended
            && e.is_storage()
        {
            // Not the run's failure: what is durable stays, a worker resumes it.
            let Ended::Failed(e) = ended else {
                unreachable!()
            };
            return Err(e);
        }
        // Its waits and its end are events of the activation's span.
        self.finish(run, ended, &journal).instrument(span).await
    }

    /// The journal of a run about to be driven, read from the store.
    async fn journal_to_drive(&self, lease: &Lease, run: &RunRecord) -> Result<Arc<RunJournal>> {
        let entries = self.store().journal(run.run_id.as_str()).await?;
        if entries.len() == 1 {
            let since = match run.status {
                RunStatus::Scheduled => run.wake_at_ms.unwrap_or(run.created_at_ms),
                _ => run.created_at_ms,
            };
            let waited = Duration::from_millis(self.now_ms().saturating_sub(since));
            self.inner
                .config
                .observer
                .run_first_activated(&run.workflow, waited);
        }
        Ok(Arc::new(self.journal_of(lease, entries)?))
    }

    /// Waits until this process no longer drives `run_id`.
    async fn until_not_active(&self, run_id: &str) {
        loop {
            let ended = self.inner.progress.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !lock(&self.inner.active).contains(run_id) {
                return;
            }
            ended.await;
        }
    }

    /// Records how an activation ended: a suspended run waits; a finished
    /// one gets its final record, its hooks end and the runs awaiting it are
    /// woken, with its journal's last entry, all durable on return.
    pub(super) async fn finish(
        &self,
        mut run: RunRecord,
        ended: Ended,
        journal: &RunJournal,
    ) -> Result<RunRecord> {
        run.updated_at_ms = self.now_ms();
        run.attributes.extend(journal.attributes());
        // An output over the bound fails the run instead of being stored.
        let ended = match ended {
            Ended::Completed(output) => match self.inner.config.limits.payload(
                output.len(),
                || "the workflow's output".into(),
                Some(&run.run_id),
            ) {
                Ok(()) => Ended::Completed(output),
                Err(e) => Ended::Failed(e),
            },
            other => other,
        };
        let ended = match (journal.cancel_request(), ended) {
            (
                Some(cancel),
                ended @ (Ended::Completed(_) | Ended::Failed(_) | Ended::Continued(_)),
            ) => match cancelled_cleanup(ended) {
                Ok(cleanup) => {
                    let Fact::CancelRequested { reason, by } = cancel.fact else {
                        unreachable!("indexed as a cancel request")
                    };
                    let fact = lifecycle::cancelled_end(&reason, &by, cleanup);
                    return self.end_cancelled(run, fact, journal).await;
                }
                Err(ended) => ended,
            },
            (_, Ended::Continued(input)) => {
                match self.admit_continuation(&run, &input, journal).await {
                    Ok(next) => {
                        run.status = RunStatus::Continued;
                        let fact = Fact::RunContinued {
                            next_run_id: next.into_string(),
                            input,
                        };
                        return self.close(run, fact, journal).await;
                    }
                    Err(e) if e.is_storage() || e.outcome_unknown() => return Err(e),
                    Err(e @ Error::StartOutcomeUnknown { .. }) => return Err(e),
                    // The new run's input is refused: the run fails.
                    Err(e) => Ended::Failed(e),
                }
            }
            (_, ended) => ended,
        };
        let fact = match ended {
            Ended::Completed(output) => {
                run.status = RunStatus::Completed;
                run.output = Some(output.clone());
                Fact::RunCompleted { output }
            }
            Ended::Failed(Error::Cancelled { .. }) => {
                tracing::info!("run cancelled");
                run.status = RunStatus::Cancelled;
                run.error = Some(RunError {
                    kind: ErrorKind::Cancelled.as_str().into(),
                    message: "the run was cancelled at once, without its cleanup".into(),
                });
                Fact::RunCancelled
            }
            Ended::Failed(e) => {
                tracing::info!("run failed: {e}");
                run.status = RunStatus::Failed;
                run.error = Some(RunError {
                    kind: e.kind().as_str().into(),
                    message: e.to_string(),
                });
                Fact::RunFailed {
                    kind: e.kind().as_str().into(),
                    error: e.to_string(),
                }
            }
            Ended::Suspended(Suspend::Waiting { wake_at_ms, on }) => {
                tracing::info!(on, "run waits");
                run.status = RunStatus::Waiting;
                run.wake_at_ms = wake_at_ms;
                journal.set_run(run.clone());
                journal.gate(Effect::Suspend).await?;
                self.inner.config.observer.run_suspended(&run.workflow);
                return Ok(run);
            }
            Ended::Suspended(Suspend::Paused { request }) => {
                journal.record(request.fact(&run))?;
                return self.stop_paused(run, journal).await;
            }
            Ended::Suspended(Suspend::JournalEnd) => {
                return Err(Error::Wasm(
                    "a live activation reached the journal's end".into(),
                ));
            }
            Ended::Continued(_) => unreachable!("a continuation ends above"),
        };
        self.close(run, fact, journal).await
    }

    /// Ends a cancelled run with `fact`, its [`Fact::RunEndedCancelled`].
    pub(super) async fn end_cancelled(
        &self,
        mut run: RunRecord,
        fact: Fact,
        journal: &RunJournal,
    ) -> Result<RunRecord> {
        let Fact::RunEndedCancelled {
            kind,
            error,
            output,
        } = &fact
        else {
            unreachable!("a cancelled end")
        };
        tracing::info!(kind, "run cancelled: {error}");
        run.status = RunStatus::Cancelled;
        run.output = output.clone();
        run.error = Some(RunError {
            kind: kind.clone(),
            message: error.clone(),
        });
        self.close(run, fact, journal).await
    }

    /// Ends a run with `fact` once its children are closed by their
    /// policies, or holds its end (the run waits) while a `wait` child is
    /// live: the child's end wakes it, and its next activation, replaying
    /// to the same end, closes again.
    async fn close(
        &self,
        mut run: RunRecord,
        fact: Fact,
        journal: &RunJournal,
    ) -> Result<RunRecord> {
        let hold = !matches!(fact, Fact::RunCancelled);
        let closing = self.close_children(&run, journal, hold).await?;
        let run = if closing.waiting_on.is_empty() {
            self.end_with(run, fact, journal).await?
        } else {
            tracing::info!(waiting_on = ?closing.waiting_on, "the run's end waits for its children");
            run.status = RunStatus::Waiting;
            run.output = None;
            run.error = None;
            run.wake_at_ms = None;
            journal.set_run(run.clone());
            journal.gate(Effect::Suspend).await?;
            self.inner.config.observer.run_suspended(&run.workflow);
            run
        };
        self.drive_cancelled(closing.cancelled);
        Ok(run)
    }

    /// Stores a finished run's final record with its last entry `fact`.
    async fn end_with(
        &self,
        run: RunRecord,
        fact: Fact,
        journal: &RunJournal,
    ) -> Result<RunRecord> {
        for watcher in journal.end(&run, fact).await? {
            self.poke(&watcher);
        }
        if let Some((trace_id, span_id, parent)) = journal.trace() {
            let trace = (trace_id.as_str(), span_id.as_str(), parent.as_deref());
            crate::trace::end_run(&run, trace, run.updated_at_ms);
        }
        tracing::info!(workflow = %run.workflow, status = run.status.as_str(), "run ended");
        let lifetime = run.updated_at_ms.saturating_sub(run.created_at_ms);
        self.inner.config.observer.run_ended(
            &run.workflow,
            run.status,
            Duration::from_millis(lifetime),
        );
        self.inner.progress.notify_waiters();
        Ok(run)
    }

    /// Runs the workflow once from the start over `journal`.
    async fn activate(
        &self,
        loaded: &Arc<Loaded>,
        run: &RunRecord,
        journal: Arc<RunJournal>,
    ) -> Ended {
        let outside: Arc<dyn Outside> = Arc::new(self.clone());
        self.inner
            .runtime
            .activate(outside, loaded, run, journal)
            .await
            .0
    }

    /// Replays a run's journal against `component` (or the run's own)
    /// without executing anything: steps are not run, nothing is written.
    pub async fn replay(&self, run_id: &str, component: Option<&Arc<Loaded>>) -> Result<Verdict> {
        let run = self.get_run(run_id).await?;
        let loaded = match component {
            Some(c) => c.clone(),
            None => self.component_by_hash(&run.component_hash).await?,
        };
        let entries = self.store().journal(run_id).await?;
        self.replay_entries(&loaded, &run, entries).await
    }

    /// Replays `entries` of `run` against `loaded`, offline.
    pub async fn replay_entries(
        &self,
        loaded: &Arc<Loaded>,
        run: &RunRecord,
        entries: Vec<Entry>,
    ) -> Result<Verdict> {
        self.inner.runtime.replay(loaded, run, entries).await
    }
}

/// How a cancelled run's code ended, as its cleanup; `Err` gives back an
/// end that is not the cancel's: a forced cancel, or code that no longer
/// matches its journal (the run fails, so that a fixed component can
/// retry it).
fn cancelled_cleanup(ended: Ended) -> std::result::Result<Cleanup, Ended> {
    match ended {
        Ended::Completed(output) => Ok(Cleanup::Returned(output)),
        // A cancel ends the run: nothing continues it.
        Ended::Continued(_) => Ok(Cleanup::Failed(
            "the workflow continued as new after the run's cancel was requested; no run continues it"
                .into(),
        )),
        Ended::Failed(Error::CancelGrace { why, .. }) => Ok(Cleanup::OverGrace(why)),
        Ended::Failed(Error::WorkflowFailed { message, .. }) => Ok(Cleanup::Failed(message)),
        Ended::Failed(e @ (Error::Cancelled { .. } | Error::NonDeterminism { .. })) => {
            Err(Ended::Failed(e))
        }
        Ended::Failed(e) => Ok(Cleanup::Failed(e.to_string())),
        suspended @ Ended::Suspended(_) => Err(suspended),
    }
}

/// A storage failure during `operation` on `run_id` whose write may have
/// landed, as `OutcomeUnknown`; other errors as they are.
pub(super) fn unconfirmed(e: Error, run_id: &str, operation: &'static str) -> Error {
    if e.outcome_unknown() {
        Error::OutcomeUnknown {
            run_id: run_id.into(),
            operation,
            reason: e.to_string(),
        }
    } else {
        e
    }
}
