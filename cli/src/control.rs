//! Requests the CLI makes of a store (start, resume, look up, cancel, push
//! events), each sent to keel's API ([`crate::remote`]): a server's, the
//! API the `keel worker` holding a sled store serves on a Unix socket in
//! the store's directory ([`serve`]), or this process's own over the store.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_host::Keel;
use keel_host::core::flow::{LimitRow, RunSlot};
use keel_host::core::journal::Entry;
use keel_host::core::{
    Deployment, ErrorKind, ErrorReport, EventRecord, GrantSpec, HookRecord, RunFilter, RunRecord,
    StepLimits,
};
use keel_server::wire::{ChildView, FireView, ScheduleRequest, ScheduleView};
use serde_json::Value;
use tokio::net::UnixListener;

/// A start as the CLI asks for it, whichever way it reaches the store.
#[derive(Debug)]
pub struct StartSpec {
    /// A component file, deployed on the way; an absolute path: the
    /// worker may run elsewhere.
    pub component: Option<PathBuf>,
    /// Or a deployment's name or component hash; with neither, the
    /// latest deployment exporting the workflow.
    pub deployment: Option<String>,
    /// The workflow to start.
    pub workflow: String,
    /// Its input, as JSON.
    pub input: String,
    /// A start token.
    pub token: Option<String>,
    /// How long the token is kept after the run ends.
    pub retention_ms: Option<u64>,
    /// The start hook's metadata.
    pub metadata: Option<Value>,
    /// `additional_metadata` of key expressions.
    pub additional_metadata: Option<Value>,
    /// Admit only: a worker drives the run.
    pub detach: bool,
    /// Grants of the component's deployment; `None` keeps those of an
    /// earlier deployment of it.
    pub grants: Option<GrantSpec>,
    /// The run's ID, chosen by the CLI, so that it can name the run if
    /// the worker dies before answering.
    pub run_id: Option<String>,
    /// A delayed start's time (ms since the epoch).
    pub start_at_ms: Option<u64>,
    /// Or its delay, from the admission (on the store's clock).
    pub delay_ms: Option<u64>,
    /// 1 (highest) to 5, for the workflow's concurrency queue.
    pub priority: Option<u8>,
    /// Cancel the run if it has not ended this long after its start.
    pub timeout_ms: Option<u64>,
    /// The run's searchable attributes.
    pub attributes: keel_host::core::Attributes,
}

/// What the CLI asks of the store.
#[derive(Debug)]
pub enum Request {
    /// Start a run and drive it until it completes, fails or waits.
    Start(StartSpec),
    /// Deploy a component.
    Deploy {
        component: PathBuf,
        name: Option<String>,
        /// `None` keeps the name's grants.
        grants: Option<GrantSpec>,
        limits: StepLimits,
        retention_ms: Option<u64>,
        force: bool,
    },
    /// Add (or with `replace`, set) grants on a deployment name's builds
    /// or one build.
    Grant {
        target: String,
        grants: GrantSpec,
        replace: bool,
    },
    ListDeployments,
    ShowDeployment {
        name: String,
    },
    /// Resume a hook and drive its run on; with `wait_reply_ms`, answer
    /// with the workflow's reply.
    Resume {
        token: String,
        payload: String,
        payload_id: Option<String>,
        wait_reply_ms: Option<u64>,
    },
    /// The reply to a payload delivered with an ID, waiting up to
    /// `wait_ms` for it.
    HookReply {
        token: String,
        payload_id: String,
        wait_ms: u64,
    },
    /// The streams a run wrote.
    Streams {
        run_id: String,
    },
    /// The next chunks of a run's stream from `from`, waiting a while for
    /// the first (a long poll).
    Chunks {
        run_id: String,
        stream: String,
        from: u64,
    },
    GetHook {
        token: String,
    },
    ListHooks,
    ListWorkers,
    GetRun {
        run_id: String,
    },
    /// Cancel a run (`force`: at once), and with `wait` drive it to its end.
    Cancel {
        run_id: String,
        reason: String,
        force: bool,
        wait: bool,
    },
    /// What a deployment's build exports (`keel inspect NAME`).
    Inspect {
        target: String,
    },
    /// Retry a failed run (on another build, with `on`) and drive it on.
    Retry {
        run_id: String,
        on: Option<String>,
    },
    /// Delete ended runs (`cancel`: live ones too, ended at once first).
    DeleteRuns {
        run_ids: Vec<String>,
        cancel: bool,
    },
    /// A bulk action on the runs `filter` selects: with `dry_run` counted
    /// only; with `wait`, carried out to its end before the answer.
    Bulk {
        action: keel_host::core::bulk::BulkAction,
        filter: RunFilter,
        reason: Option<String>,
        force: bool,
        dry_run: bool,
        wait: bool,
    },
    ListJobs {
        limit: usize,
    },
    ShowJob {
        job_id: String,
    },
    CancelJob {
        job_id: String,
    },
    /// Delete the components nothing names, stored over `grace_ms` ago.
    PruneComponents {
        grace_ms: u64,
        dry_run: bool,
    },
    /// What a waiting run waits on.
    WaitingOn {
        run_id: String,
    },
    /// What the store holds.
    StoreStats,
    /// Purge the ended runs past their retention now.
    Purge,
    /// A run's record once it ends (with `wait`, after driving it there).
    Result {
        run_id: String,
        wait: bool,
    },
    /// One page of runs, below `before` (a cursor) if given.
    ListRuns {
        filter: RunFilter,
        limit: usize,
        before: Option<String>,
    },
    /// A run and its journal.
    ShowRun {
        run_id: String,
    },
    /// Ingest an event and drive the runs it starts.
    PushEvent {
        key: String,
        payload: String,
        metadata: String,
    },
    ListEvents,
    CreateToken(keel_server::wire::TokenRequest),
    CreateWebhook(keel_server::wire::WebhookRequest),
    ListWebhooks,
    ShowWebhook {
        id: String,
    },
    DeleteWebhook {
        id: String,
    },
    CreateSchedule(ScheduleRequest),
    UpdateSchedule(ScheduleRequest),
    ListSchedules,
    ShowSchedule {
        name: String,
    },
    PauseSchedule {
        name: String,
        note: Option<String>,
    },
    ResumeSchedule {
        name: String,
        note: Option<String>,
    },
    TriggerSchedule {
        name: String,
    },
    BackfillSchedule {
        name: String,
        from_ms: u64,
        to_ms: u64,
    },
    DeleteSchedule {
        name: String,
    },
    ListLimits,
    SetLimit {
        workflow: String,
        key: Option<String>,
        limit: u32,
    },
    ResetLimit {
        workflow: String,
        key: Option<String>,
    },
}

impl Request {
    /// Whether it only reads the store (a copy of it would answer it the
    /// same).
    pub fn reads_only(&self) -> bool {
        matches!(
            self,
            Request::ListDeployments
                | Request::ShowDeployment { .. }
                | Request::Streams { .. }
                | Request::GetHook { .. }
                | Request::ListHooks
                | Request::ListWorkers
                | Request::GetRun { .. }
                | Request::Inspect { .. }
                | Request::ListJobs { .. }
                | Request::ShowJob { .. }
                | Request::WaitingOn { .. }
                | Request::StoreStats
                | Request::Result { wait: false, .. }
                | Request::ListRuns { .. }
                | Request::ShowRun { .. }
                | Request::ListEvents
                | Request::ListWebhooks
                | Request::ShowWebhook { .. }
                | Request::ListSchedules
                | Request::ShowSchedule { .. }
                | Request::ListLimits
        )
    }
}

/// How long one `Chunks` request waits for a stream's next chunk.
pub(crate) const CHUNK_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// The answer to a [`Request`].
#[derive(Debug)]
pub enum Reply {
    Run(RunRecord),
    Hook(HookRecord),
    Hooks(Vec<HookRecord>),
    Workers(Vec<keel_server::wire::WorkerView>),
    /// A page of runs, with the cursor of the next page if there is one.
    Runs {
        runs: Vec<RunRecord>,
        next_cursor: Option<String>,
    },
    Journal {
        run: RunRecord,
        journal: Vec<Entry>,
        /// Its place in its concurrency group, if it has one.
        slot: Option<RunSlot>,
        /// The runs its workflow started.
        children: Vec<ChildView>,
    },
    Event(EventRecord),
    Events(Vec<EventRecord>),
    Deployment(Deployment),
    Deployments(Vec<Deployment>),
    /// What a component exports.
    Component(keel_server::wire::ComponentView),
    Schedule(ScheduleView),
    Schedules(Vec<ScheduleView>),
    Token(keel_server::wire::TokenView),
    Webhook(keel_server::wire::WebhookView),
    Webhooks(Vec<keel_server::wire::WebhookView>),
    Fires(Vec<FireView>),
    /// The concurrency groups and overrides, and the runs a change started.
    Limits {
        limits: Vec<LimitRow>,
        started: Vec<String>,
    },
    /// What a deletion deleted.
    Deleted(keel_host::core::retention::Deleted),
    Stats(keel_host::core::retention::StoreStats),
    Purged(keel_server::wire::PurgeView),
    Pruned(keel_host::core::retention::Pruned),
    WaitingOn(Vec<keel_host::core::timeline::WaitingOn>),
    Streams(Vec<keel_server::wire::StreamView>),
    /// A reply to a payload delivered with an ID.
    Answer(keel_server::wire::ReplyView),
    /// Chunks of a stream; `done` once it is closed or its run ended.
    Chunks {
        chunks: Vec<keel_server::wire::ChunkView>,
        done: bool,
    },
    /// A resume that waited for the workflow's reply.
    Replied {
        run: RunRecord,
        payload_id: String,
        /// The reply (JSON), if it came within the wait.
        reply: Option<String>,
    },
    /// A waiting run with what it waits on.
    RunWaiting {
        run: RunRecord,
        waiting_on: Vec<keel_host::core::timeline::WaitingOn>,
    },
    /// What a bulk action would act on.
    Preview(keel_server::wire::BulkPreviewView),
    Job(keel_server::wire::JobView),
    Jobs(Vec<keel_server::wire::JobView>),
}

/// An error the API answered with.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    pub kind: String,
    pub message: String,
    /// The IDs the error carries, as `(field, value)`.
    pub ids: Vec<(String, String)>,
}

impl RemoteError {
    /// The error as the CLI reports it: kind, message and IDs.
    pub fn from_error(e: &keel_host::Error) -> Self {
        RemoteError::from(e.report())
    }

    /// The error as a report, its kind parsed (a kind this keel does not
    /// know, from a newer one, is `Other`).
    pub fn report(&self) -> ErrorReport {
        ErrorReport {
            kind: ErrorKind::parse(&self.kind).unwrap_or(ErrorKind::Other),
            message: self.message.clone(),
            ids: self.ids.clone(),
        }
    }
}

impl From<ErrorReport> for RemoteError {
    fn from(report: ErrorReport) -> Self {
        RemoteError {
            kind: report.kind.as_str().into(),
            message: report.message,
            ids: report.ids,
        }
    }
}

/// The socket a worker listens on: in a directory of the store's that only
/// its owner can enter, so the socket is never reachable by other users,
/// not even between its creation and its chmod.
pub fn socket_path(db: &Path) -> PathBuf {
    db.join("control").join("control.sock")
}

/// Creates the socket's directory (mode 0700) or makes it 0700.
fn private_socket_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path.parent().expect("the socket has a directory");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Serves the API on the store's socket until the task is dropped: the
/// same router `keel serve` serves over TCP, for the store's owner alone.
pub async fn serve(
    keel: Keel,
    db: &Path,
    metrics: Arc<keel_server::Metrics>,
) -> anyhow::Result<()> {
    let path = socket_path(db);
    // This process holds the store's lock, so a socket left here is stale.
    let _ = std::fs::remove_file(&path);
    private_socket_dir(&path)?;
    let listener = UnixListener::bind(&path)?;
    // Only the store's owner may drive its runs.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    tracing::info!(path = %path.display(), "serving the API to this user's CLI");
    let app = keel_server::private_router(keel, metrics).await?;
    keel_server::serve_socket(listener, app).await?;
    Ok(())
}
