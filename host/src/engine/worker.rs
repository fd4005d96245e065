//! The worker: claims the runs that are due (pending, interrupted, woken,
//! their timer or start come, their lease expired under a dead worker)
//! from the store's due index in batches, with their leases, and drives
//! each in its own task. Nothing in a pass reads a run that is not due.

use std::collections::HashMap;
use std::time::Duration;

use keel_core::{RunId, RunRecord};
use keel_store::{Lease, WorkerRecord};

use super::{Keel, lock};
use crate::Result;

/// How often a worker purges ended runs past their retention, in
/// milliseconds of the engine's clock.
pub const PURGE_INTERVAL_MS: u64 = 10_000;

/// A worker is shown gone once it has not heartbeaten for this many lease
/// times (it heartbeats every third of one).
pub const GONE_AFTER_LEASES: u64 = 3;

/// A gone worker is forgotten this long after it was first shown gone.
pub const FORGET_GONE_AFTER_MS: u64 = 3_600_000;

/// A worker sharing the store, as the operators see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerState {
    pub record: WorkerRecord,
    /// Runs whose leases it holds now.
    pub runs: usize,
    /// It has not heartbeaten for [`GONE_AFTER_LEASES`] lease times.
    pub gone: bool,
}

/// Whether a worker last heard of at `heartbeat_at_ms` is gone at `now_ms`.
fn is_gone(heartbeat_at_ms: u64, now_ms: u64, lease_ms: u64) -> bool {
    heartbeat_at_ms.saturating_add(GONE_AFTER_LEASES * lease_ms) < now_ms
}

type DriveTasks = tokio::task::JoinSet<(RunId, Result<RunRecord>)>;

/// Logs how a worker's drive ended; returns the run's ID ("" if unknown)
/// and whether the drive failed. A drive a shutdown stopped (`stopping`) is
/// a handover, not an error: another worker takes the run on.
fn log_driven(
    result: std::result::Result<(RunId, Result<RunRecord>), tokio::task::JoinError>,
    stopping: bool,
) -> (RunId, Option<String>) {
    match result {
        Ok((run_id, Ok(run))) => {
            tracing::info!(%run_id, status = run.status.as_str(), "worker drove run");
            (run_id, None)
        }
        Ok((run_id, Err(e))) if stopping => {
            tracing::info!(%run_id, "run handed over at shutdown: {e}");
            (run_id, Some(e.to_string()))
        }
        Ok((run_id, Err(e))) => {
            tracing::error!(%run_id, "worker could not drive the run: {e}");
            (run_id, Some(e.to_string()))
        }
        Err(e) => {
            tracing::error!("worker task failed: {e}");
            (RunId::default(), Some(e.to_string()))
        }
    }
}

/// What a worker loop did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkSummary {
    /// Drives started.
    pub driven: usize,
    /// Runs it could not drive for a reason outside them (their component
    /// missing, the store failing), still failing when it stopped: each
    /// with how many drives failed and the last error.
    pub undriven: Vec<(RunId, u32, String)>,
}

/// Runs whose last drive failed for a reason outside the run (its component
/// missing from the store, a storage error): each is due again after a
/// delay that doubles with every failure, from 100 ms up to a minute,
/// instead of at once and forever. The delay is the store's (the release
/// of the failed drive's lease asks for the run again then), so every
/// worker sharing the store keeps it; the count is this process's.
#[derive(Debug, Default)]
pub(super) struct Retries {
    /// Failures in a row and the last error.
    failed: HashMap<RunId, (u32, String)>,
}

impl Retries {
    const FIRST_MS: u64 = 100;
    const MAX_MS: u64 = 60_000;

    /// Records a failed drive at `now_ms`; returns when to try again.
    pub(super) fn failed(&mut self, run_id: RunId, now_ms: u64, error: String) -> u64 {
        let (failures, last) = self.failed.entry(run_id).or_insert((0, String::new()));
        *failures += 1;
        *last = error;
        let delay = Self::FIRST_MS
            .saturating_mul(1 << (*failures - 1).min(20))
            .min(Self::MAX_MS);
        now_ms.saturating_add(delay)
    }

    pub(super) fn succeeded(&mut self, run_id: &str) {
        self.failed.remove(run_id);
    }

    /// The runs still failing, sorted.
    fn undriven(&self) -> Vec<(RunId, u32, String)> {
        let mut runs: Vec<_> = self
            .failed
            .iter()
            .map(|(id, (n, e))| (id.clone(), *n, e.clone()))
            .collect();
        runs.sort();
        runs
    }
}

/// How long a worker waits before claiming again when runs are due but
/// none could be taken (another worker is taking them at that moment).
const CONTENDED: Duration = Duration::from_millis(20);

/// The least time between two passes of a worker: wakes that come faster
/// (an admission or a payload each) share a pass.
const BETWEEN_PASSES: Duration = Duration::from_millis(10);

impl Keel {
    /// Takes the leases of up to `limit` runs due now, earliest due first
    /// (`LeaseStore::claim_due`): only due runs are read.
    async fn claim_due(&self, limit: usize) -> Result<Vec<Lease>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let config = &self.inner.config;
        let ttl = config.lease_ttl.as_millis() as u64;
        Ok(self
            .store()
            .claim_due(&config.worker_id, ttl, self.now_ms(), limit)
            .await?)
    }

    /// Deletes expired idempotency keys and retained tokens, at most once a
    /// second of the admission clock (they are already refused by
    /// admission once expired; this only reclaims the space), and starts
    /// the purge of ended runs and the bulk jobs no worker carries out.
    async fn purge_expired(&self) -> Result<()> {
        let now = self.now_ms();
        {
            let mut last = lock(&self.inner.last_purge_ms);
            if now < last.saturating_add(1000) {
                return Ok(());
            }
            *last = now;
        }
        let keys = self.store().purge_expired_keys(now).await?;
        let tokens = self.store().purge_expired_hooks(now).await?;
        // Stale by now: a replay of one is refused by its timestamp.
        let signatures = self.store().purge_expired_signatures(now).await?;
        let payload_ids = self.store().purge_expired_payload_ids(now).await?;
        if keys + tokens > 0 || signatures + payload_ids > 0 {
            tracing::debug!(
                keys,
                tokens,
                signatures,
                payload_ids,
                "expired keys, tokens, webhook signatures and payload IDs deleted"
            );
        }
        self.spawn_purge(now);
        if let Err(e) = self.spawn_jobs().await {
            tracing::warn!(
                "the worker cannot read the bulk jobs (it looks again in a second): {e}"
            );
        }
        Ok(())
    }

    /// Starts a purge of the ended runs past their retention in a task of
    /// its own (so it never holds up the runs this worker drives), every
    /// [`PURGE_INTERVAL_MS`] of the engine's clock, unless one is still
    /// going.
    fn spawn_purge(&self, now: u64) {
        let mut purging = lock(&self.inner.purging);
        let (task, last) = &mut *purging;
        if task.as_ref().is_some_and(|t| !t.is_finished())
            || (*last != 0 && now < last.saturating_add(PURGE_INTERVAL_MS))
        {
            return;
        }
        *last = now.max(1);
        let keel = self.clone();
        *task = Some(tokio::spawn(async move {
            if let Err(e) = keel.purge_ended(usize::MAX).await {
                tracing::warn!("purging ended runs failed (the next pass tries again): {e}");
            }
            if let Err(e) = keel.forget_gone_workers().await {
                tracing::warn!("forgetting gone workers failed (the next pass tries again): {e}");
            }
        }));
    }

    /// Drives every run that can make progress now, and waits for them to
    /// complete, fail or wait. Returns how many it drove.
    pub async fn work_once(&self) -> Result<usize> {
        self.purge_expired().await?;
        let mut tasks = tokio::task::JoinSet::new();
        let due = self
            .claim_due(self.inner.config.max_concurrent_runs)
            .await?;
        for lease in &due {
            self.spawn_drive(&mut tasks, lease);
        }
        while let Some(result) = tasks.join_next().await {
            log_driven(result, self.is_stopping());
        }
        Ok(due.len())
    }

    /// The worker loop: drives runs as they become due, each in its own
    /// task, so that one run parked on a short timer holds up no other.
    /// With `until_idle`, returns once nothing runs and no run is due within
    /// a second (a run that cannot be driven is tried again with backoff,
    /// and reported in the summary). Returns what it did.
    pub async fn work(&self, until_idle: bool) -> Result<WorkSummary> {
        let started_at_ms = self.now_ms();
        let driven = self.work_loop(until_idle, started_at_ms).await;
        let leave = self
            .store()
            .remove_worker(&self.inner.config.worker_id)
            .await;
        if let Err(e) = leave {
            tracing::warn!("the worker could not sign off: {e}");
        }
        driven
    }

    /// Announces this worker as alive, at most every third of a lease.
    async fn heartbeat(&self, started_at_ms: u64, last: &mut u64) {
        let now = self.now_ms();
        let every = self.inner.config.lease_ttl.as_millis() as u64 / 3;
        if now < last.saturating_add(every) {
            return;
        }
        *last = now;
        let worker = WorkerRecord {
            worker_id: self.inner.config.worker_id.clone(),
            host: crate::config::host_name(),
            pid: std::process::id(),
            started_at_ms,
            heartbeat_at_ms: now,
        };
        if let Err(e) = self.store().heartbeat(&worker).await {
            tracing::warn!("the worker's heartbeat failed: {e}");
        }
    }

    async fn work_loop(&self, until_idle: bool, started_at_ms: u64) -> Result<WorkSummary> {
        let mut tasks = tokio::task::JoinSet::new();
        let mut driven = 0;
        let mut last_heartbeat = 0;
        let mut backoff = Duration::from_millis(100);
        // When the last pass began, and whether a wake (not a drive that
        // ended, which frees a slot for the next due run at once) asks for
        // this one.
        let (mut last_pass, mut woken) = (tokio::time::Instant::now(), false);
        loop {
            if self.is_stopping() {
                while let Some(result) = tasks.join_next().await {
                    log_driven(result, true);
                }
                return Ok(WorkSummary {
                    driven,
                    undriven: lock(&self.inner.retries).undriven(),
                });
            }
            if std::mem::take(&mut woken) {
                tokio::time::sleep_until(last_pass + BETWEEN_PASSES).await;
            }
            last_pass = tokio::time::Instant::now();
            self.heartbeat(started_at_ms, &mut last_heartbeat).await;
            // Fires admitted here are driven in this same pass.
            let next_fire = match self.fire_schedules_when_due().await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!("the worker cannot fire schedules: {e}");
                    None
                }
            };
            let slots = self
                .inner
                .config
                .max_concurrent_runs
                .saturating_sub(tasks.len());
            let found = async {
                self.purge_expired().await?;
                let claimed = self.claim_due(slots).await?;
                let next_due = self.store().next_due().await?;
                Ok::<_, crate::Error>((claimed, next_due))
            };
            let (claimed, next_due) = match found.await {
                Ok(found) => {
                    backoff = Duration::from_millis(100);
                    found
                }
                // The store is unreachable (a database restarting, say):
                // drives in flight go on; look again after a while.
                Err(e) => {
                    tracing::warn!(?backoff, "the worker cannot read the store: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            let took_all = claimed.len() < slots;
            for lease in &claimed {
                self.spawn_drive(&mut tasks, lease);
                driven += 1;
            }
            let now = self.now_ms();
            let next_wake = [next_due, next_fire].into_iter().flatten().min();
            let due_now = next_due.is_some_and(|at| at <= now);
            let wait = match next_wake {
                // Due runs left: more than the free slots (wait for a drive
                // to end), or taken by another worker at this moment.
                _ if due_now && !took_all => Duration::from_secs(1),
                _ if due_now => CONTENDED,
                Some(at) => Duration::from_millis(at.saturating_sub(now)),
                None => Duration::from_secs(1),
            };
            if until_idle && tasks.is_empty() && wait >= Duration::from_secs(1) {
                let undriven = lock(&self.inner.retries).undriven();
                return Ok(WorkSummary {
                    driven,
                    undriven: self.still_live(undriven).await,
                });
            }
            tokio::select! {
                // A wake, an admission, or a shutdown.
                () = self.inner.due_changed.notified() => woken = true,
                Some(result) = tasks.join_next() => {
                    log_driven(result, self.is_stopping());
                    // The others that ended meanwhile, for one claim.
                    while let Some(result) = tasks.try_join_next() {
                        log_driven(result, self.is_stopping());
                    }
                }
                () = tokio::time::sleep(wait.min(Duration::from_secs(1))) => {}
            }
        }
    }

    /// The runs among `undriven` that have not ended since: a drive that
    /// failed because another worker sharing the store finished the run
    /// left nothing undone.
    async fn still_live(&self, undriven: Vec<(RunId, u32, String)>) -> Vec<(RunId, u32, String)> {
        let mut live = Vec::new();
        for entry in undriven {
            match self.get_run(&entry.0).await {
                Ok(run) if run.status.is_final() => {}
                _ => live.push(entry),
            }
        }
        live
    }

    fn spawn_drive(&self, tasks: &mut DriveTasks, lease: &Lease) {
        let keel = self.clone();
        let lease = lease.clone();
        tasks.spawn(async move {
            let result = keel.drive_claimed(lease.clone()).await;
            (lease.run_id, result)
        });
    }

    /// The workers sharing the store (those that announced themselves and
    /// did not sign off), with how many runs each holds now and whether
    /// each is gone (no heartbeat for [`GONE_AFTER_LEASES`] lease times: it
    /// was killed, or lost the store).
    pub async fn workers(&self) -> Result<Vec<WorkerState>> {
        let now = self.now_ms();
        let lease_ms = self.inner.config.lease_ttl.as_millis() as u64;
        Ok(self
            .store()
            .list_workers(now)
            .await?
            .into_iter()
            .map(|(record, runs)| WorkerState {
                gone: is_gone(record.heartbeat_at_ms, now, lease_ms),
                record,
                runs,
            })
            .collect())
    }

    /// Forgets the workers gone for longer than [`FORGET_GONE_AFTER_MS`]
    /// (a killed worker never signs off); how many.
    pub async fn forget_gone_workers(&self) -> Result<usize> {
        let now = self.now_ms();
        let lease_ms = self.inner.config.lease_ttl.as_millis() as u64;
        let mut forgotten = 0;
        for (worker, _) in self.store().list_workers(now).await? {
            let long_gone = now.saturating_sub(FORGET_GONE_AFTER_MS);
            if is_gone(worker.heartbeat_at_ms, long_gone, lease_ms) {
                self.store().remove_worker(&worker.worker_id).await?;
                tracing::info!(worker_id = %worker.worker_id, "forgot a worker gone for an hour");
                forgotten += 1;
            }
        }
        Ok(forgotten)
    }

    /// When the next run is due (its timer, its start, a held lease's
    /// expiry), if any: the front of the store's due index.
    pub async fn next_wake(&self) -> Result<Option<u64>> {
        Ok(self.store().next_due().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_gone_after_three_lease_times_without_a_heartbeat() {
        assert!(!is_gone(1_000, 1_000 + 3 * 30_000, 30_000));
        assert!(is_gone(1_000, 1_001 + 3 * 30_000, 30_000));
        assert!(!is_gone(5_000, 1_000, 30_000), "a heartbeat after now");
    }

    #[test]
    fn failed_runs_wait_longer_after_each_failure_up_to_a_minute() {
        let mut retries = Retries::default();
        let run = RunId::from("r");
        let delays: Vec<u64> = (0..12)
            .map(|_| retries.failed(run.clone(), 1_000, "e".into()) - 1_000)
            .collect();
        assert_eq!(&delays[..4], [100, 200, 400, 800]);
        assert_eq!(*delays.last().unwrap(), 60_000);
        assert_eq!(retries.undriven(), [(run.clone(), 12, "e".to_string())]);
        retries.succeeded(&run);
        assert!(retries.undriven().is_empty());
        assert_eq!(retries.failed(run, 0, "e".into()), 100);
    }
}
