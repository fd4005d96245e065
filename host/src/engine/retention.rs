//! Retention: the purge of ended runs kept past their retention (by any
//! worker, in bounded batches, each run archived first if asked), deletion
//! on request, and the store's figures.

use std::path::{Path, PathBuf};

use keel_core::file::JournalFile;
use std::collections::BTreeSet;

use keel_core::retention::{Deleted, Pruned, RetentionRules, StoreStats, prunable_components};
use keel_core::{RunCursor, RunId, RunRecord};

use super::{Keel, lock};
use crate::{Error, Result};

/// How many ended runs one batch of a purge reads and deletes at most: one
/// store transaction, short enough never to hold up live runs.
pub const PURGE_BATCH: usize = 500;

/// What a purge did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Purge {
    /// What was deleted.
    pub deleted: Deleted,
    /// The ended runs read and decided on.
    pub examined: u64,
    /// Runs archived ([`crate::RetentionConfig::archive_dir`]).
    pub archived: u64,
    /// Whether the pass went over every ended run it could purge (false:
    /// stopped at its batch budget; the next pass goes on from there).
    pub complete: bool,
}

impl Keel {
    /// Purges ended runs kept past their retention (their deployment's,
    /// else [`crate::RetentionConfig::default_ms`]), keeping a retained start
    /// token until its own retention passes: at most `max_batches`
    /// batches of [`PURGE_BATCH`], from where the last pass of this engine
    /// stopped. Each batch is archived (if configured) and then deleted in
    /// one store operation; on a store processes share, a run another
    /// worker is deleting at the same time is left to it.
    pub async fn purge_ended(&self, max_batches: usize) -> Result<Purge> {
        let rules = self.retention_rules().await?;
        let mut purge = Purge::default();
        let Some(shortest) = rules.shortest_ms() else {
            purge.complete = true;
            return Ok(purge);
        };
        let now = self.now_ms();
        let created_before = now.saturating_sub(shortest).saturating_add(1);
        let mut cursor = lock(&self.inner.purge_cursor).take();
        for _ in 0..max_batches {
            let page = self
                .store()
                .ended_runs(created_before, cursor.as_ref(), PURGE_BATCH)
                .await?;
            purge.examined += page.len() as u64;
            let due: Vec<&RunRecord> = page.iter().filter(|r| rules.is_due(r, now)).collect();
            if !due.is_empty() {
                purge.archived += self.archive(&due).await?;
                let ids: Vec<RunId> = due.iter().map(|r| r.run_id.clone()).collect();
                purge
                    .deleted
                    .add(self.store().delete_runs(&ids, Some(now)).await?);
            }
            cursor = page.last().map(RunCursor::of);
            if page.len() < PURGE_BATCH {
                purge.complete = true;
                cursor = None;
                break;
            }
        }
        *lock(&self.inner.purge_cursor) = cursor;
        // Events are kept as long as runs without a retention of their
        // own: no run needs its event's record (its input is journaled).
        if let Some(ms) = self.inner.config.retention.default_ms {
            self.store()
                .delete_events_before(now.saturating_sub(ms))
                .await?;
        }
        if !purge.deleted.runs.is_empty() {
            tracing::info!(
                runs = purge.deleted.runs.len(),
                journal_entries = purge.deleted.journal_entries,
                bytes = purge.deleted.bytes,
                archived = purge.archived,
                "purged ended runs past their retention"
            );
            self.inner.config.observer.runs_purged(&purge.deleted);
        }
        Ok(purge)
    }

    /// The retention of every deployment, with the engine's default.
    async fn retention_rules(&self) -> Result<RetentionRules> {
        let deployments = self.deployments().await?;
        Ok(RetentionRules::new(
            self.inner.config.retention.default_ms,
            &deployments,
        ))
    }

    /// Deletes ended runs on request, each with everything stored for it,
    /// retained tokens included (archived first if configured). A live run is refused
    /// ([`Error::RunLive`], nothing deleted) unless `cancel`, which ends it
    /// at once (no cleanup) before it is deleted; an unknown run is
    /// [`Error::RunNotFound`].
    pub async fn delete_runs(&self, run_ids: &[RunId], cancel: bool) -> Result<Deleted> {
        let mut runs = Vec::with_capacity(run_ids.len());
        for run_id in run_ids {
            let run = self.get_run(run_id).await?;
            if !run.status.is_final() && !cancel {
                return Err(Error::RunLive {
                    run_id: run.run_id,
                    status: run.status.as_str().into(),
                });
            }
            runs.push(run);
        }
        for run in runs.iter_mut().filter(|r| !r.status.is_final()) {
            *run = self.terminate(&run.run_id).await?;
        }
        let refs: Vec<&RunRecord> = runs.iter().collect();
        self.archive(&refs).await?;
        let deleted = self.store().delete_runs(run_ids, None).await?;
        tracing::info!(runs = deleted.runs.len(), "deleted runs on request");
        self.inner.config.observer.runs_purged(&deleted);
        Ok(deleted)
    }

    /// Deletes the stored components that no run names and that are not
    /// the latest build of a deployment name, last stored at least
    /// `grace_ms` ago (a component a start or a deploy has just stored is
    /// kept for the reference it is about to get), with the deployment
    /// records of the superseded builds among them; with `dry_run`, only
    /// says which.
    pub async fn prune_components(&self, grace_ms: u64, dry_run: bool) -> Result<Pruned> {
        self.forget_deployments();
        let deployments = self.deployments().await?;
        let runs = self.store().list_runs().await?;
        // Newest first: the first of each name is its latest build.
        let mut names = BTreeSet::new();
        let latest: Vec<&keel_core::Deployment> = deployments
            .iter()
            .filter(|d| names.insert(d.name.as_str()))
            .collect();
        let referenced: BTreeSet<&str> = latest
            .iter()
            .map(|d| d.hash.as_str())
            .chain(runs.iter().map(|r| r.component_hash.as_str()))
            .collect();
        let stored = self.store().components().await?;
        let now = self.now_ms();
        let prunable = prunable_components(
            stored.iter().map(|c| (c.hash.as_str(), c.stored_at_ms)),
            &referenced,
            now,
            grace_ms,
        );
        let superseded: Vec<&keel_core::Deployment> = deployments
            .iter()
            .filter(|d| prunable.iter().any(|h| h == d.hash.as_str()))
            .collect();
        let kept_referenced = stored
            .iter()
            .filter(|c| referenced.contains(c.hash.as_str()))
            .count() as u64;
        let mut pruned = Pruned {
            referenced: kept_referenced,
            recent: stored.len() as u64 - kept_referenced - prunable.len() as u64,
            dry_run,
            ..Pruned::default()
        };
        if dry_run {
            pruned.bytes = stored
                .iter()
                .filter(|c| prunable.contains(&c.hash))
                .map(|c| c.size_bytes)
                .sum();
            pruned.components = prunable;
            pruned.deployments = superseded.iter().map(|d| label(d)).collect();
            return Ok(pruned);
        }
        // The records first: a deployment never names missing bytes. One
        // redeployed since it was read is kept, and so are its bytes.
        let mut candidates = Vec::new();
        for hash in &prunable {
            match superseded.iter().find(|d| d.hash.as_str() == hash) {
                Some(d) => {
                    if self
                        .store()
                        .delete_deployment(d.hash.as_str(), d.deployed_at_ms)
                        .await?
                    {
                        pruned.deployments.push(label(d));
                        candidates.push(hash.clone());
                    }
                }
                None => candidates.push(hash.clone()),
            }
        }
        self.forget_deployments();
        let cutoff = now.saturating_sub(grace_ms);
        let deleted = self.store().delete_components(&candidates, cutoff).await?;
        for c in &deleted {
            self.inner.runtime.forget(&c.hash);
        }
        pruned.bytes = deleted.iter().map(|c| c.size_bytes).sum();
        pruned.components = deleted.into_iter().map(|c| c.hash).collect();
        if !pruned.components.is_empty() {
            tracing::info!(
                components = pruned.components.len(),
                deployments = pruned.deployments.len(),
                bytes = pruned.bytes,
                "pruned components no run names and no deployment runs"
            );
        }
        Ok(pruned)
    }

    /// What the store holds.
    pub async fn store_stats(&self) -> Result<StoreStats> {
        let stats = self.store().stats().await?;
        self.inner.config.observer.store_counted(&stats);
        Ok(stats)
    }

    /// Writes each run's journal file into the archive directory, if one
    /// is configured, durably (a run is deleted only once its file is on
    /// disk); how many were written.
    async fn archive(&self, runs: &[&RunRecord]) -> Result<u64> {
        let Some(dir) = &self.inner.config.retention.archive_dir else {
            return Ok(0);
        };
        for run in runs {
            let file = JournalFile::new(run, self.store().journal(&run.run_id).await?);
            write_archive(dir, &run.run_id, &file.to_bytes())?;
        }
        sync_dir(dir)?;
        Ok(runs.len() as u64)
    }
}

/// A deployment as a prune names it: `NAME@HASH`.
fn label(d: &keel_core::Deployment) -> String {
    format!("{}@{}", d.name, d.hash)
}

/// The archive file of `run_id` in `dir`.
pub fn archive_path(dir: &Path, run_id: &str) -> PathBuf {
    dir.join(format!("{run_id}.keel"))
}

/// Writes `bytes` as `run_id`'s archive file in `dir` (created private to
/// this user): to a temporary file, flushed, then renamed, so a file of
/// that name is always whole.
fn write_archive(dir: &Path, run_id: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))?;
    let path = archive_path(dir, run_id);
    let partial = dir.join(format!(".{run_id}.keel.partial"));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .map_err(io(&partial))?;
    out.write_all(bytes).map_err(io(&partial))?;
    out.sync_all().map_err(io(&partial))?;
    std::fs::rename(&partial, &path).map_err(io(&path))
}

/// Makes the renames into `dir` durable.
fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })
}
