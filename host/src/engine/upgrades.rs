//! Upgrades: a deployment's live runs moved to a new build where replay
//! proves it safe. An upgrade is a bulk job (`BulkAction::Upgrade`, so it
//! survives a worker's death and acts on each run once); each run is
//! judged and moved under its lease: its journal is replayed offline on
//! the new build, and only if it replays is the move journaled
//! (`RunMoved`) with the record re-pinned, in one fenced write. A run that
//! does not replay stays pinned, listed with its first divergence.

use keel_core::bulk::{BulkAction, BulkRequest, JobRecord, RunOutcome, Upgrade};
use keel_core::journal::Fact;
use keel_core::{RunFilter, RunId, RunStatus};

use super::Keel;
use super::drive::ActiveRun;
use crate::{Error, Result};

impl Keel {
    /// Submits the upgrade of deployment `name`'s live runs pinned to its
    /// older builds to build `to` (a deployment name, whose current build
    /// it takes, or a build's hash), as a job any worker carries out: each
    /// run whose journal replays on that build moves there; the others
    /// stay, listed with their first divergence. With `dry_run` each run is
    /// judged and none moves; with `ramp` only that share of the runs
    /// (chosen by run ID, the same each time) is taken.
    pub async fn submit_upgrade(
        &self,
        name: &str,
        to: &str,
        dry_run: bool,
        ramp: Option<u8>,
    ) -> Result<JobRecord> {
        let deployment = self.deployment(name).await?;
        let target = self.deployment(to).await?;
        if let Some(share) = ramp.filter(|s| !(1..=100).contains(s)) {
            return Err(Error::InvalidInput {
                reason: format!("the ramp is a share of 1 to 100 percent, not {share}"),
            });
        }
        let request = BulkRequest {
            action: BulkAction::Upgrade,
            filter: RunFilter {
                statuses: RunStatus::live(),
                ..RunFilter::default()
            },
            reason: None,
            force: false,
            upgrade: Some(Upgrade {
                name: deployment.name,
                to: target.hash.to_string(),
                dry_run,
                ramp,
            }),
            restart: None,
        };
        self.submit_bulk(request).await
    }

    /// Judges `run_id` for `upgrade` and, unless it is a dry run, moves it:
    /// `Done` when it moved (or would), `Skipped` when the upgrade is not
    /// about it (another deployment's, on the build already, outside the
    /// ramp, ended), `Failed` naming why it stays pinned; an error when it
    /// could not be judged (the caller says how it reports that).
    pub(super) async fn move_run(
        &self,
        run_id: &RunId,
        upgrade: &Upgrade,
        by: &str,
    ) -> Result<RunOutcome> {
        let run = self.get_run(run_id).await?;
        let builds = self.deployments().await?;
        let of_name = builds
            .iter()
            .any(|d| d.name == upgrade.name && d.hash == run.component_hash);
        let there = run.component_hash.as_str() == upgrade.to;
        if run.status.is_final() || !of_name || there || !upgrade.takes(run_id) {
            return Ok(RunOutcome::Skipped);
        }
        let to = self.component_by_hash(&upgrade.to).await?;
        if to.check_workflow(&run.workflow).is_err() {
            return Ok(RunOutcome::Failed(format!(
                "build {} has no workflow `{}`",
                short(&upgrade.to),
                run.workflow
            )));
        }
        // Judged and moved under the run's lease: no driver writes its
        // journal meanwhile.
        let busy =
            || RunOutcome::Failed("it was being driven; run the upgrade again to move it".into());
        let Some(_active) = ActiveRun::claim(&self.inner, run_id.as_str()) else {
            return Ok(busy());
        };
        let Some(lease) = self.lease(run_id.as_str()).await? else {
            return Ok(busy());
        };
        let judged = async {
            let mut run = self.get_run(run_id).await?;
            let entries = self.store().journal(run_id.as_str()).await?;
            let verdict = self.replay_entries(&to, &run, entries.clone()).await?;
            if !verdict.is_ok() {
                return Ok(RunOutcome::Failed(format!(
                    "its journal does not replay on build {}: {}",
                    short(&upgrade.to),
                    verdict.summary()
                )));
            }
            if upgrade.dry_run || run.status.is_final() {
                return Ok(RunOutcome::Done);
            }
            let index =
                keel_core::index::JournalIndex::new(entries).map_err(|e| Error::JournalWrite {
                    run_id: run.run_id.clone(),
                    reason: format!("the stored journal is malformed: {e}"),
                })?;
            let moved = index.next_entry(
                Fact::RunMoved {
                    from: run.component_hash.to_string(),
                    to: upgrade.to.clone(),
                    by: by.into(),
                },
                self.now_ms(),
            );
            run.component_hash = to.hash.clone();
            self.store()
                .append(run_id.as_str(), &[moved], Some(&run), Some(&lease))
                .await?;
            tracing::info!(%run_id, to = short(&upgrade.to), "run moved to another build");
            Ok::<_, Error>(RunOutcome::Done)
        }
        .await;
        // Due again at once: taking the lease took any wake the run had.
        self.store()
            .release_lease(&lease, Some(self.now_ms()))
            .await?;
        self.due_changed();
        judged
    }
}

/// A build's hash, shortened for messages.
fn short(hash: &str) -> &str {
    &hash[..12.min(hash.len())]
}
