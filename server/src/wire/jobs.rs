//! Bulk operations and the jobs that carry them out.

use keel_core::RunStatus;
use keel_core::bulk::{BulkAction, JobCounts, JobRecord, JobState, RunFailure};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::RunView;

/// Which runs a bulk operation acts on: the filters of `GET /v1/runs`
/// (at least one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkFilter {
    /// Any of these statuses.
    #[serde(default)]
    pub status: Vec<RunStatus>,
    /// This workflow.
    pub workflow: Option<String>,
    /// Admitted at or after this time (ms since the epoch).
    pub since_ms: Option<u64>,
    /// Admitted before this time (ms since the epoch).
    pub until_ms: Option<u64>,
    /// The run ID or the workflow contains this text.
    pub search: Option<String>,
    /// Fired by this schedule.
    pub schedule: Option<String>,
    /// Has every one of these attributes with this value.
    #[serde(default)]
    pub attributes: keel_core::Attributes,
}

impl From<BulkFilter> for keel_core::RunFilter {
    fn from(f: BulkFilter) -> Self {
        keel_core::RunFilter {
            statuses: f.status,
            workflow: f.workflow,
            since_ms: f.since_ms,
            until_ms: f.until_ms,
            search: f.search,
            schedule: f.schedule,
            attributes: f.attributes,
        }
    }
}

impl From<&keel_core::RunFilter> for BulkFilter {
    fn from(f: &keel_core::RunFilter) -> Self {
        BulkFilter {
            status: f.statuses.clone(),
            workflow: f.workflow.clone(),
            since_ms: f.since_ms,
            until_ms: f.until_ms,
            search: f.search.clone(),
            schedule: f.schedule.clone(),
            attributes: f.attributes.clone(),
        }
    }
}

/// `POST /v1/runs/bulk`: an action on every run a filter selects, carried
/// out as a job.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequestBody {
    pub action: BulkAction,
    pub filter: BulkFilter,
    /// `cancel`: the reason each run's cleanup sees (at most 1024 bytes).
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// `cancel`: end each run at once, without its cleanup. `delete`: end
    /// live runs at once, then delete them.
    #[serde(default)]
    pub force: bool,
    /// `restart` and `fork`: the step whose first scheduling each run
    /// starts over from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_step: Option<String>,
    /// `restart` and `fork`: the journal position each run starts over
    /// from, instead of a step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
    /// `restart` and `fork`: a deployment name (its current build as each
    /// run is acted on) or a build's hash to run on; each run's own build
    /// if absent. A run whose journal does not replay there is not acted
    /// on, and the job lists it with the first difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<String>,
    /// Count the runs it would act on and show a few; submit nothing.
    #[serde(default)]
    pub dry_run: bool,
}

impl BulkRequestBody {
    /// Where each run of a restart or a fork starts over, or why the body
    /// says it wrongly (none for a restart or fork; one for another
    /// action).
    pub fn restart(&self) -> Result<Option<keel_core::bulk::BulkRestart>, String> {
        let restart = super::RestartRequest {
            from_step: self.from_step.clone(),
            at: self.at,
            on: self.on.clone(),
        };
        match self.action {
            BulkAction::Restart | BulkAction::Fork => Ok(Some(keel_core::bulk::BulkRestart {
                from: restart.point()?,
                on: restart.on,
            })),
            _ if self.from_step.is_some() || self.at.is_some() || self.on.is_some() => Err(
                "`from_step`, `at` and `on` are a bulk restart's or fork's; this action takes none"
                    .into(),
            ),
            _ => Ok(None),
        }
    }
}

/// `POST /v1/deployments/{name}/upgrade`: the build a deployment's live
/// runs move to, where their journals replay.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpgradeRequest {
    /// The build: a deployment name (its current build) or a build's hash;
    /// the deployment's own current build if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Judge each run (would it replay there?) and move none.
    #[serde(default)]
    pub dry_run: bool,
    /// Move only this share of the runs, in percent (the same runs each
    /// time; a later upgrade with a larger share, or none, moves the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub ramp: Option<u8>,
}

/// What a bulk operation would do (`dry_run`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct BulkPreviewView {
    /// Runs the filter selects that the action applies to.
    pub acted_on: u64,
    /// Runs the filter selects whose status the action passes over.
    pub passed_over: u64,
    /// The first runs it would act on.
    pub sample: Vec<RunView>,
}

/// A bulk operation's job and its progress.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct JobView {
    pub job_id: String,
    pub action: BulkAction,
    /// The filter, bounded to the runs admitted before the job was
    /// submitted (`until_ms`).
    pub filter: BulkFilter,
    pub reason: Option<String>,
    pub force: bool,
    /// An upgrade's deployment and build, share and dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<keel_core::bulk::Upgrade>,
    /// A restart's or fork's point and build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<keel_core::bulk::BulkRestart>,
    pub state: JobState,
    pub counts: JobCounts,
    /// The first runs the action failed on (an upgrade: every run it
    /// left pinned, with its first divergence).
    pub errors: Vec<RunFailure>,
    /// The worker carrying it out, while one does.
    pub worker: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub finished_at_ms: Option<u64>,
}

impl From<&JobRecord> for JobView {
    fn from(job: &JobRecord) -> Self {
        JobView {
            job_id: job.job_id.clone(),
            action: job.request.action,
            filter: BulkFilter::from(&job.request.filter),
            reason: job.request.reason.clone(),
            force: job.request.force,
            upgrade: job.request.upgrade.clone(),
            restart: job.request.restart.clone(),
            state: job.state,
            counts: job.counts,
            errors: job.errors.clone(),
            worker: job.claim.as_ref().map(|c| c.owner.clone()),
            created_at_ms: job.created_at_ms,
            updated_at_ms: job.updated_at_ms,
            finished_at_ms: job.finished_at_ms,
        }
    }
}

/// `GET /v1/jobs`: the newest jobs first.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct JobList {
    pub jobs: Vec<JobView>,
}
