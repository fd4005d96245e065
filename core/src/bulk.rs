//! Bulk operations: one action (cancel, retry, delete, pause, resume, or
//! the upgrade of a deployment's live runs to a build) applied to every run
//! a listing filter selects, carried out as a job that any worker can take
//! over. The job's record is its progress: where the next page of runs
//! starts, the runs of the page being acted on, the counts and a sample of
//! the failures. A worker writes the page's runs into the record before it
//! acts on them, so a worker that takes over after a crash knows which
//! runs may already have been acted on and acts on each of them only if
//! the action has not landed: a run is acted on once. The decisions are
//! here; the engine acts and the store keeps the records.

use serde::{Deserialize, Serialize};

use crate::query::RunFilter;
use crate::records::RunStatus;
use crate::schedule::Claim;
use crate::{Entry, Fact, RunId};

/// How many runs one page of a job acts on between two writes of its
/// record.
pub const JOB_PAGE: usize = 100;

/// How many failed runs a job's record keeps as a sample.
pub const JOB_ERROR_SAMPLE: usize = 20;

/// How many runs an upgrade's record lists as left pinned, each with its
/// first divergence: every one, up to this.
pub const UPGRADE_PINNED_LIST: usize = 1000;

/// What a bulk operation does to each run it selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Ask each live run to cancel (its cleanup runs), or terminate it
    /// with `force`.
    Cancel,
    /// Retry each failed run from its failure.
    Retry,
    /// Delete each ended run with everything stored for it; with `force`,
    /// a live run is terminated first.
    Delete,
    /// Pause each live run (no code of it runs until resumed).
    Pause,
    /// Resume each paused run where it stood.
    Resume,
    /// Move each live run of a deployment's older builds to its new build
    /// where its journal replays there ([`BulkRequest::upgrade`]).
    Upgrade,
    /// Restart each ended run from a point ([`BulkRequest::restart`]).
    Restart,
    /// Fork each run from a point into a new run
    /// ([`BulkRequest::restart`]), whose ID derives from the job's and the
    /// source's ([`fork_id`]).
    Fork,
}

impl BulkAction {
    /// The action's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Cancel => "cancel",
            BulkAction::Retry => "retry",
            BulkAction::Delete => "delete",
            BulkAction::Pause => "pause",
            BulkAction::Resume => "resume",
            BulkAction::Upgrade => "upgrade",
            BulkAction::Restart => "restart",
            BulkAction::Fork => "fork",
        }
    }

    /// The action named by [`BulkAction::as_str`].
    pub fn parse(s: &str) -> Option<BulkAction> {
        [
            BulkAction::Cancel,
            BulkAction::Retry,
            BulkAction::Delete,
            BulkAction::Pause,
            BulkAction::Resume,
            BulkAction::Upgrade,
            BulkAction::Restart,
            BulkAction::Fork,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
    }

    /// Why this action passes over a run of `status`, or `None` if it acts
    /// on it.
    pub fn passes_over(self, status: RunStatus, force: bool) -> Option<String> {
        let why = match self {
            BulkAction::Cancel | BulkAction::Pause | BulkAction::Upgrade if status.is_final() => {
                "it has ended"
            }
            BulkAction::Resume if status != RunStatus::Paused => "only a paused run is resumed",
            BulkAction::Retry if status != RunStatus::Failed => "only a failed run is retried",
            BulkAction::Restart if !status.is_final() => "only an ended run is restarted",
            BulkAction::Delete if !status.is_final() && !force => {
                "it is live (delete with force to terminate it first)"
            }
            _ => return None,
        };
        Some(format!("it is {}: {why}", status.as_str()))
    }

    /// Whether this action, taken on a run whose journal was `journal_len`
    /// entries long, has landed, judged from the run's journal since: a
    /// retry journals `RunRetried`, a restart `RunRestarted`. Cancels,
    /// deletions, pauses and resumes are idempotent, and a fork's run
    /// is found by its ID, so they need no such check (`false`).
    pub fn landed_since(self, journal_len: u64, journal: &[Entry]) -> bool {
        journal.iter().any(|e| {
            e.seq >= journal_len
                && matches!(
                    (self, &e.fact),
                    (BulkAction::Retry, Fact::RunRetried { .. })
                        | (BulkAction::Restart, Fact::RunRestarted { .. })
                )
        })
    }
}

/// What a bulk operation was asked to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkRequest {
    pub action: BulkAction,
    /// Which runs; the job acts on the runs admitted before it was
    /// submitted (its `until_ms`).
    pub filter: RunFilter,
    /// Cancel: the reason each run's cleanup sees.
    pub reason: Option<String>,
    /// Cancel: terminate without cleanup. Delete: terminate live runs
    /// first.
    pub force: bool,
    /// Upgrade: which deployment's runs go to which build.
    pub upgrade: Option<Upgrade>,
    /// Restart and fork: where each run starts over, and on which build.
    pub restart: Option<BulkRestart>,
}

/// Where each run of a bulk restart or fork starts over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BulkRestart {
    pub from: crate::restart::RestartPoint,
    /// A deployment name (its current build when each run is acted on) or
    /// a build's hash; the run's own build if `None`.
    pub on: Option<String>,
}

/// The ID of the run a bulk fork job `job_id` makes of run `source`: the
/// same on every try, so a worker that takes the job over finds the forks
/// made before.
pub fn fork_id(job_id: &str, source: &RunId) -> RunId {
    source.derived(&format!("fork {job_id}"))
}

/// The upgrade of a deployment's live runs to a build.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Upgrade {
    /// The deployment name whose older builds' runs move.
    pub name: String,
    /// The hash of the build they move to.
    pub to: String,
    /// Only judge each run (would it replay there?); move none.
    pub dry_run: bool,
    /// Move only this percentage of the runs (chosen by run ID, the same
    /// every time: a later upgrade with a larger share moves the rest).
    pub ramp: Option<u8>,
}

impl Upgrade {
    /// Whether the ramp takes `run_id`: its bucket (0 to 99, from a hash
    /// of the ID) is under the ramp's share.
    pub fn takes(&self, run_id: &RunId) -> bool {
        let bucket = run_id
            .as_str()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
            % 100;
        self.ramp.is_none_or(|share| bucket < u64::from(share))
    }
}

impl BulkRequest {
    /// Why this request cannot be run, or `None`. A filter that selects
    /// every run is refused: acting on every run is said with a status.
    pub fn refusal(&self) -> Option<String> {
        if matches!(self.action, BulkAction::Restart | BulkAction::Fork) && self.restart.is_none() {
            return Some(format!(
                "a bulk {} names where each run starts over: a step (`from_step`) or a journal position (`at`)",
                self.action.as_str()
            ));
        }
        if self.action == BulkAction::Upgrade && self.upgrade.is_none() {
            return Some(
                "an upgrade names its deployment and the build its runs move to: `keel deployments upgrade NAME --to BUILD` (POST /v1/deployments/{name}/upgrade)".into(),
            );
        }
        let f = &self.filter;
        for (key, value) in &f.attributes {
            if let Err(why) = crate::records::check_attribute_filter(key, value) {
                return Some(format!("the filter's attributes: {why}"));
            }
        }
        let selects_all = f.statuses.is_empty()
            && f.workflow.is_none()
            && f.since_ms.is_none()
            && f.until_ms.is_none()
            && f.search.is_none()
            && f.schedule.is_none()
            && f.attributes.is_empty();
        selects_all.then(|| {
            format!(
                "a bulk {} needs a filter (a status, a workflow, a time, an attribute); to act on every run, name the statuses",
                self.action.as_str()
            )
        })
    }
}

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Some worker carries it out, or will.
    Running,
    /// Every selected run was acted on (or passed over).
    Completed,
    /// Stopped on request; the runs acted on stay so.
    Cancelled,
}

impl JobState {
    /// The state's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Cancelled => "cancelled",
        }
    }
}

/// A run of the page being acted on, with its journal's length when the
/// page began (so that a worker taking over sees whether a retry landed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub run_id: RunId,
    pub journal_len: u64,
}

/// What a job did, in runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobCounts {
    /// Runs the filter selected so far.
    pub matched: u64,
    /// Runs the action was taken on.
    pub done: u64,
    /// Runs passed over (the action does not apply to their status any
    /// more, or they are gone).
    pub skipped: u64,
    /// Runs on which the action failed (see the record's `errors`).
    pub failed: u64,
}

/// A run the action failed on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunFailure {
    pub run_id: RunId,
    pub error: String,
}

/// What became of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    Done,
    Skipped,
    Failed(String),
}

/// A bulk operation as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Time-sortable, unique.
    pub job_id: String,
    pub request: BulkRequest,
    pub state: JobState,
    /// Where the next page of runs starts (`RunCursor::encode`); `None`
    /// before the first page, and after the last.
    pub cursor: Option<String>,
    /// The page being acted on holds the last runs the filter selects.
    pub last_page: bool,
    /// The runs of the page being acted on; empty between pages.
    pub in_flight: Vec<InFlight>,
    pub counts: JobCounts,
    /// The first [`JOB_ERROR_SAMPLE`] failures.
    pub errors: Vec<RunFailure>,
    /// The worker carrying it out, and until when (another takes it over
    /// once it has expired).
    pub claim: Option<Claim>,
    /// Bumped by every write: an update names the revision it read, and
    /// is refused if another write came first.
    pub revision: u64,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub finished_at_ms: Option<u64>,
}

impl crate::codec::Stored for JobRecord {
    /// 2: the request's `upgrade` was added; 3: its `restart`.
    const VERSION: u16 = 3;

    fn decode_earlier(version: u16, bytes: &[u8]) -> Option<Result<Self, postcard::Error>> {
        match version {
            1 => Some(crate::codec::decode_layout::<JobRecordV1>(bytes).map(Into::into)),
            2 => Some(crate::codec::decode_layout::<JobRecordV2>(bytes).map(Into::into)),
            _ => None,
        }
    }
}

/// A job's record as keel wrote it before bulk restarts and forks
/// (layout 2): its request had no `restart`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobRecordV2 {
    job_id: String,
    request: (BulkAction, RunFilter, Option<String>, bool, Option<Upgrade>),
    state: JobState,
    cursor: Option<String>,
    last_page: bool,
    in_flight: Vec<InFlight>,
    counts: JobCounts,
    errors: Vec<RunFailure>,
    claim: Option<Claim>,
    revision: u64,
    created_at_ms: u64,
    updated_at_ms: u64,
    finished_at_ms: Option<u64>,
}

impl From<JobRecordV2> for JobRecord {
    fn from(v2: JobRecordV2) -> JobRecord {
        let (action, filter, reason, force, upgrade) = v2.request;
        let v1 = JobRecordV1 {
            job_id: v2.job_id,
            request: (action, filter, reason, force),
            state: v2.state,
            cursor: v2.cursor,
            last_page: v2.last_page,
            in_flight: v2.in_flight,
            counts: v2.counts,
            errors: v2.errors,
            claim: v2.claim,
            revision: v2.revision,
            created_at_ms: v2.created_at_ms,
            updated_at_ms: v2.updated_at_ms,
            finished_at_ms: v2.finished_at_ms,
        };
        let mut record = JobRecord::from(v1);
        record.request.upgrade = upgrade;
        record
    }
}

/// A job's record as keel wrote it before upgrades (layout 1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobRecordV1 {
    job_id: String,
    request: (BulkAction, RunFilter, Option<String>, bool),
    state: JobState,
    cursor: Option<String>,
    last_page: bool,
    in_flight: Vec<InFlight>,
    counts: JobCounts,
    errors: Vec<RunFailure>,
    claim: Option<Claim>,
    revision: u64,
    created_at_ms: u64,
    updated_at_ms: u64,
    finished_at_ms: Option<u64>,
}

impl From<JobRecordV1> for JobRecord {
    fn from(v1: JobRecordV1) -> JobRecord {
        let (action, filter, reason, force) = v1.request;
        JobRecord {
            job_id: v1.job_id,
            request: BulkRequest {
                action,
                filter,
                reason,
                force,
                upgrade: None,
                restart: None,
            },
            state: v1.state,
            cursor: v1.cursor,
            last_page: v1.last_page,
            in_flight: v1.in_flight,
            counts: v1.counts,
            errors: v1.errors,
            claim: v1.claim,
            revision: v1.revision,
            created_at_ms: v1.created_at_ms,
            updated_at_ms: v1.updated_at_ms,
            finished_at_ms: v1.finished_at_ms,
        }
    }
}

impl JobRecord {
    /// A new job for `request`, submitted at `now_ms`: it selects only runs
    /// admitted until then, so runs started since are left alone.
    pub fn new(job_id: String, mut request: BulkRequest, now_ms: u64) -> JobRecord {
        let until = now_ms.saturating_add(1);
        request.filter.until_ms = Some(request.filter.until_ms.map_or(until, |u| u.min(until)));
        JobRecord {
            job_id,
            request,
            state: JobState::Running,
            cursor: None,
            last_page: false,
            in_flight: Vec::new(),
            counts: JobCounts::default(),
            errors: Vec::new(),
            claim: None,
            revision: 0,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            finished_at_ms: None,
        }
    }

    /// Whether `owner` may carry the job out at `now_ms`: it is running
    /// and unclaimed, claimed by `owner`, or its claim has expired.
    pub fn is_claimable(&self, owner: &str, now_ms: u64) -> bool {
        self.state == JobState::Running
            && self
                .claim
                .as_ref()
                .is_none_or(|c| c.owner == owner || c.until_ms <= now_ms)
    }

    /// Whether `owner`'s claim has at least `margin_ms` left at `now_ms`.
    pub fn claim_holds(&self, owner: &str, now_ms: u64, margin_ms: u64) -> bool {
        self.claim
            .as_ref()
            .is_some_and(|c| c.owner == owner && now_ms.saturating_add(margin_ms) < c.until_ms)
    }

    /// Claims (or renews) the job for `owner` until `now_ms + ttl_ms`.
    pub fn claim(&mut self, owner: &str, now_ms: u64, ttl_ms: u64) {
        self.claim = Some(Claim {
            owner: owner.into(),
            until_ms: now_ms.saturating_add(ttl_ms),
        });
        self.updated_at_ms = now_ms;
    }

    /// A page of runs is about to be acted on; `next_cursor` is where the
    /// page after it starts (`None`: it is the last).
    pub fn begin_page(&mut self, runs: Vec<InFlight>, next_cursor: Option<String>) {
        self.counts.matched += runs.len() as u64;
        self.in_flight = runs;
        self.last_page = next_cursor.is_none();
        self.cursor = next_cursor;
    }

    /// Counts what became of `run_id`, and takes it off the page's runs
    /// in flight: a record written from here on (a claim renewed mid-page)
    /// leaves it to no worker that resumes the page, so no run is acted
    /// on or counted twice.
    pub fn record(&mut self, run_id: &RunId, outcome: RunOutcome) {
        self.in_flight.retain(|r| r.run_id != *run_id);
        match outcome {
            RunOutcome::Done => self.counts.done += 1,
            RunOutcome::Skipped => self.counts.skipped += 1,
            RunOutcome::Failed(error) => {
                self.counts.failed += 1;
                let kept = match self.request.action {
                    BulkAction::Upgrade => UPGRADE_PINNED_LIST,
                    _ => JOB_ERROR_SAMPLE,
                };
                if self.errors.len() < kept {
                    self.errors.push(RunFailure {
                        run_id: run_id.clone(),
                        error,
                    });
                }
            }
        }
    }

    /// The page's runs were all acted on: the job goes on to the next
    /// page, or has completed after the last.
    pub fn end_page(&mut self, now_ms: u64) {
        self.in_flight.clear();
        self.updated_at_ms = now_ms;
        if self.last_page {
            self.finish(JobState::Completed, now_ms);
        }
    }

    /// Ends the job in `state` and drops its claim.
    pub fn finish(&mut self, state: JobState, now_ms: u64) {
        self.state = state;
        self.claim = None;
        self.in_flight.clear();
        self.updated_at_ms = now_ms;
        self.finished_at_ms = Some(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Entry;

    fn request(action: BulkAction) -> BulkRequest {
        BulkRequest {
            action,
            filter: RunFilter {
                statuses: vec![RunStatus::Failed],
                ..RunFilter::default()
            },
            reason: None,
            force: false,
            upgrade: None,
            restart: None,
        }
    }

    #[test]
    fn a_job_of_layout_2_is_read_with_its_upgrade_and_no_restart() {
        let mut job = JobRecord::new("j".into(), request(BulkAction::Upgrade), 5);
        job.request.upgrade = Some(Upgrade {
            name: "order".into(),
            to: "h".into(),
            dry_run: true,
            ramp: Some(10),
        });
        job.counts.failed = 2;
        let r = &job.request;
        let v2 = JobRecordV2 {
            job_id: job.job_id.clone(),
            request: (
                r.action,
                r.filter.clone(),
                r.reason.clone(),
                r.force,
                r.upgrade.clone(),
            ),
            state: job.state,
            cursor: None,
            last_page: false,
            in_flight: Vec::new(),
            counts: job.counts,
            errors: Vec::new(),
            claim: None,
            revision: 0,
            created_at_ms: 5,
            updated_at_ms: 5,
            finished_at_ms: None,
        };
        let bytes = postcard::to_stdvec(&(2u16, v2)).unwrap();
        let read: JobRecord = crate::codec::decode(&bytes, "job").unwrap();
        assert_eq!(read, job);
    }

    #[test]
    fn a_restart_or_fork_names_its_point_and_a_restart_passes_over_live_runs() {
        for action in [BulkAction::Restart, BulkAction::Fork] {
            let refusal = request(action).refusal().unwrap();
            assert!(refusal.contains("`from_step`"), "{refusal}");
        }
        let live = BulkAction::Restart.passes_over(RunStatus::Waiting, false);
        assert!(live.unwrap().contains("only an ended run is restarted"));
        assert_eq!(
            BulkAction::Fork.passes_over(RunStatus::Waiting, false),
            None
        );
        let source = RunId::from("r-1");
        assert_eq!(fork_id("j-1", &source), fork_id("j-1", &source));
        assert_ne!(fork_id("j-1", &source), fork_id("j-2", &source));
    }

    #[test]
    fn a_job_of_layout_1_is_read_without_an_upgrade() {
        let mut job = JobRecord::new("j".into(), request(BulkAction::Retry), 5);
        job.counts.done = 3;
        let r = &job.request;
        let v1 = JobRecordV1 {
            job_id: job.job_id.clone(),
            request: (r.action, r.filter.clone(), r.reason.clone(), r.force),
            state: job.state,
            cursor: None,
            last_page: false,
            in_flight: Vec::new(),
            counts: job.counts,
            errors: Vec::new(),
            claim: None,
            revision: 0,
            created_at_ms: 5,
            updated_at_ms: 5,
            finished_at_ms: None,
        };
        let bytes = postcard::to_stdvec(&(1u16, v1)).unwrap();
        let read: JobRecord = crate::codec::decode(&bytes, "job").unwrap();
        assert_eq!(read, job);
    }

    #[test]
    fn a_ramp_takes_the_same_runs_every_time_and_about_its_share() {
        let upgrade = |ramp| Upgrade {
            name: "order".into(),
            to: "h".into(),
            dry_run: false,
            ramp,
        };
        let ids: Vec<RunId> = (0..1000).map(|i| RunId::from(format!("run-{i}"))).collect();
        let taken = |ramp| ids.iter().filter(|id| upgrade(ramp).takes(id)).count();
        assert_eq!(taken(None), 1000);
        assert_eq!(taken(Some(100)), 1000);
        assert_eq!(taken(Some(0)), 0);
        let tenth = taken(Some(10));
        assert!((50..=150).contains(&tenth), "{tenth}");
        assert!(
            ids.iter()
                .filter(|id| upgrade(Some(10)).takes(id))
                .all(|id| upgrade(Some(50)).takes(id)),
            "a larger share takes what a smaller one took"
        );
    }

    #[test]
    fn a_job_selects_only_runs_admitted_until_it_was_submitted() {
        let job = JobRecord::new("j".into(), request(BulkAction::Retry), 1_000);
        assert_eq!(job.request.filter.until_ms, Some(1_001));
        let mut earlier = request(BulkAction::Retry);
        earlier.filter.until_ms = Some(500);
        let job = JobRecord::new("j".into(), earlier, 1_000);
        assert_eq!(job.request.filter.until_ms, Some(500), "the earlier bound");
    }

    #[test]
    fn a_filter_that_selects_every_run_is_refused() {
        let mut all = request(BulkAction::Delete);
        all.filter = RunFilter::default();
        let why = all.refusal().unwrap();
        assert!(why.contains("bulk delete needs a filter"), "{why}");
        assert_eq!(request(BulkAction::Delete).refusal(), None);
        let mut bad = request(BulkAction::Delete);
        bad.filter.attributes.insert("ten ant".into(), "a".into());
        let why = bad.refusal().unwrap();
        assert!(why.contains("attribute name `ten ant`"), "{why}");
    }

    #[test]
    fn each_action_passes_over_the_runs_it_does_not_apply_to() {
        use RunStatus::*;
        let cancel = BulkAction::Cancel;
        assert_eq!(cancel.passes_over(Waiting, false), None);
        assert!(
            cancel
                .passes_over(Completed, false)
                .unwrap()
                .contains("ended")
        );
        assert_eq!(BulkAction::Retry.passes_over(Failed, false), None);
        assert!(BulkAction::Retry.passes_over(Running, false).is_some());
        assert_eq!(BulkAction::Delete.passes_over(Cancelled, false), None);
        let live = BulkAction::Delete.passes_over(Running, false).unwrap();
        assert!(live.contains("force"), "{live}");
        assert_eq!(BulkAction::Delete.passes_over(Running, true), None);
    }

    #[test]
    fn a_retry_has_landed_once_the_journal_records_one_after_the_page_began() {
        let entry = |seq, fact| Entry {
            seq,
            at_ms: 0,
            fact,
        };
        let earlier_retry = entry(3, Fact::RunRetried { from_seq: 2 });
        let journal = vec![earlier_retry.clone()];
        assert!(
            !BulkAction::Retry.landed_since(5, &journal),
            "an older retry"
        );
        let journal = vec![earlier_retry, entry(5, Fact::RunRetried { from_seq: 4 })];
        assert!(BulkAction::Retry.landed_since(5, &journal));
        assert!(!BulkAction::Cancel.landed_since(5, &journal));
    }

    #[test]
    fn claims_expire_and_pass_to_another_worker() {
        let mut job = JobRecord::new("j".into(), request(BulkAction::Retry), 0);
        assert!(job.is_claimable("a", 0));
        job.claim("a", 0, 100);
        assert!(job.is_claimable("a", 50) && !job.is_claimable("b", 50));
        assert!(job.claim_holds("a", 50, 10) && !job.claim_holds("a", 95, 10));
        assert!(job.is_claimable("b", 100), "expired");
        job.finish(JobState::Cancelled, 120);
        assert!(!job.is_claimable("a", 120), "ended");
        assert_eq!(job.claim, None);
    }

    #[test]
    fn pages_count_their_runs_and_the_last_completes_the_job() {
        let mut job = JobRecord::new("j".into(), request(BulkAction::Retry), 0);
        let run = |id: &str| InFlight {
            run_id: id.into(),
            journal_len: 4,
        };
        job.begin_page(vec![run("a"), run("b")], Some("9-b".into()));
        job.record(&"a".into(), RunOutcome::Done);
        let left: Vec<&str> = job.in_flight.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(
            left,
            ["b"],
            "a run counted is left to no worker resuming the page"
        );
        job.record(&"b".into(), RunOutcome::Failed("boom".into()));
        job.end_page(10);
        assert_eq!(job.state, JobState::Running);
        assert!(job.in_flight.is_empty());
        job.begin_page(vec![run("c")], None);
        job.record(&"c".into(), RunOutcome::Skipped);
        job.end_page(20);
        assert_eq!(job.state, JobState::Completed);
        assert_eq!(job.finished_at_ms, Some(20));
        let c = job.counts;
        assert_eq!((c.matched, c.done, c.skipped, c.failed), (3, 1, 1, 1));
        assert_eq!(job.errors[0].run_id, "b");
    }

    #[test]
    fn a_job_record_survives_its_encoding() {
        let job = JobRecord::new("j".into(), request(BulkAction::Cancel), 7);
        let bytes = crate::codec::encode(&job);
        assert_eq!(
            crate::codec::decode::<JobRecord>(&bytes, "job").unwrap(),
            job
        );
    }
}
