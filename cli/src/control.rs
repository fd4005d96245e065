//! Requests the CLI makes of a store (start, resume, look up, cancel, push
//! events):
//! executed in this process when it can open the store, or forwarded to the
//! `keel worker` that holds the store's lock, over a Unix socket in the
//! store's directory, one JSON line each way.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use keel_host::core::deployment::Target;
use keel_host::core::flow::{LimitRow, RunSlot};
use keel_host::core::journal::Entry;
use keel_host::core::{
    Deployment, ErrorKind, ErrorReport, EventRecord, GrantSpec, HookRecord, RunCursor, RunFilter,
    RunRecord, StepLimits,
};
use keel_host::{DeploySpec, Keel, StartHook, StartOptions};
use keel_server::wire::{ChildView, FireView, ScheduleRequest, ScheduleView, WebhookView};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// A start as the CLI asks for it, whichever way it reaches the store.
#[derive(Debug, Serialize, Deserialize)]
pub struct StartSpec {
    /// A component file, deployed on the way; an absolute path: the
    /// worker may run elsewhere.
    #[serde(default)]
    pub component: Option<PathBuf>,
    /// Or a deployment's name or component hash; with neither, the
    /// latest deployment exporting the workflow.
    #[serde(default)]
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
    #[serde(default)]
    pub detach: bool,
    /// Grants of the component's deployment; `None` keeps those of an
    /// earlier deployment of it.
    #[serde(default)]
    pub grants: Option<GrantSpec>,
    /// The run's ID, chosen by the CLI, so that it can name the run if
    /// the worker dies before answering.
    #[serde(default)]
    pub run_id: Option<String>,
    /// A delayed start's time (ms since the epoch).
    #[serde(default)]
    pub start_at_ms: Option<u64>,
    /// 1 (highest) to 5, for the workflow's concurrency queue.
    #[serde(default)]
    pub priority: Option<u8>,
    /// Cancel the run if it has not ended this long after its start.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The run's searchable attributes.
    #[serde(default)]
    pub attributes: keel_host::core::Attributes,
}

impl StartSpec {
    /// The engine's options for this start.
    pub fn options(&self) -> StartOptions {
        StartOptions {
            run_id: self.run_id.clone().map(Into::into),
            start_at_ms: self.start_at_ms,
            priority: self.priority,
            timeout: self.timeout_ms.map(Duration::from_millis),
            attributes: self.attributes.clone(),
            additional_metadata: self.additional_metadata.clone(),
            hook: self.token.clone().map(|token| StartHook {
                token,
                min_retention: self.retention_ms.map(Duration::from_millis),
                metadata: self.metadata.clone(),
            }),
            traceparent: None,
            // Driven at once unless detached.
            driven_here: !self.detach,
        }
    }
}

/// What the CLI asks of the store.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
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
        #[serde(default)]
        retention_ms: Option<u64>,
        #[serde(default)]
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
        #[serde(default)]
        payload_id: Option<String>,
        #[serde(default)]
        wait_reply_ms: Option<u64>,
    },
    /// The reply to a payload delivered with an ID, waiting up to
    /// `wait_ms` for it.
    HookReply {
        token: String,
        payload_id: String,
        #[serde(default)]
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
        #[serde(default)]
        reason: String,
        #[serde(default)]
        force: bool,
        #[serde(default)]
        wait: bool,
    },
    /// What a deployment's build exports (`keel inspect NAME`).
    Inspect {
        target: String,
    },
    /// Retry a failed run (on another build, with `on`) and drive it on.
    Retry {
        run_id: String,
        #[serde(default)]
        on: Option<String>,
    },
    /// Delete ended runs (`cancel`: live ones too, ended at once first).
    DeleteRuns {
        run_ids: Vec<String>,
        #[serde(default)]
        cancel: bool,
    },
    /// A bulk action on the runs `filter` selects: with `dry_run` counted
    /// only; with `wait`, carried out to its end before the answer.
    Bulk {
        action: keel_host::core::bulk::BulkAction,
        filter: RunFilter,
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        force: bool,
        #[serde(default)]
        dry_run: bool,
        #[serde(default)]
        wait: bool,
    },
    ListJobs {
        #[serde(default = "default_limit")]
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
        #[serde(default)]
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
        #[serde(default)]
        filter: RunFilter,
        #[serde(default = "default_limit")]
        limit: usize,
        #[serde(default)]
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

fn default_limit() -> usize {
    50
}

/// How long one `Chunks` request waits for a stream's next chunk.
pub(crate) const CHUNK_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// The answer to a [`Request`].
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
        #[serde(default)]
        slot: Option<RunSlot>,
        /// The runs its workflow started.
        #[serde(default)]
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
    Error(RemoteError),
}

/// An error the worker met executing a forwarded request.
#[derive(Clone, Debug, thiserror::Error, Serialize, Deserialize)]
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

/// The worker closed the connection without answering: it may have died
/// after the request took effect.
#[derive(Debug, thiserror::Error)]
#[error(
    "the worker holding the store closed the connection without answering (it may have died); check with `keel runs list` whether the request took effect before repeating it"
)]
pub struct NoAnswer;

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

/// Executes a request on an open store.
pub async fn execute(keel: &Keel, request: Request) -> keel_host::Result<Reply> {
    Ok(match request {
        Request::Start(start) => {
            let options = start.options();
            let StartSpec {
                component,
                deployment,
                workflow,
                input,
                detach,
                grants,
                ..
            } = start;
            let run = match (component, deployment) {
                (Some(path), _) => {
                    let spec = grants.map(|grants| DeploySpec {
                        grants: Some(grants),
                        ..DeploySpec::default()
                    });
                    let (_, loaded) = keel.deploy_file(&path, spec).await?;
                    keel.start_with(&loaded, &workflow, &input, &options)
                        .await?
                }
                (None, Some(name)) => {
                    keel.start_workflow(&workflow, Target::Name(&name), &input, &options)
                        .await?
                }
                (None, None) => {
                    keel.start_workflow(&workflow, Target::Latest, &input, &options)
                        .await?
                }
            };
            if detach {
                Reply::Run(run)
            } else {
                settle(keel, &run.run_id).await?
            }
        }
        Request::Resume {
            token,
            payload,
            payload_id,
            wait_reply_ms: None,
        } => {
            let run_id = keel
                .deliver(&token, &payload, payload_id.as_deref())
                .await?
                .run_id;
            settle(keel, &run_id).await?
        }
        Request::Resume {
            token,
            payload,
            payload_id,
            wait_reply_ms: Some(ms),
        } => {
            let payload_id = payload_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
            let delivered = keel.deliver(&token, &payload, Some(&payload_id)).await?;
            let run = keel
                .drive_and_wait(&delivered.run_id, keel_host::Until::Settled, Duration::MAX)
                .await?;
            let wait = std::time::Duration::from_millis(ms);
            let reply = keel
                .wait_reply_to(&delivered, &token, &payload_id, wait)
                .await?
                .reply;
            Reply::Replied {
                run,
                payload_id,
                reply,
            }
        }
        Request::HookReply {
            token,
            payload_id,
            wait_ms,
        } => {
            let wait = std::time::Duration::from_millis(wait_ms);
            let reply = keel.wait_reply(&token, &payload_id, wait).await?;
            Reply::Answer(keel_server::wire::ReplyView::from(&reply))
        }
        Request::Streams { run_id } => Reply::Streams(
            keel.streams(&run_id)
                .await?
                .iter()
                .map(keel_server::wire::StreamView::from)
                .collect(),
        ),
        Request::Chunks {
            run_id,
            stream,
            from,
        } => {
            use futures::StreamExt;
            keel.get_run(&run_id).await?;
            let run_id = keel_host::core::RunId::from(run_id.as_str());
            let mut follower = Box::pin(keel.follow_stream(&run_id, &stream, from));
            let mut chunks = Vec::new();
            let mut done = false;
            // The first chunk, waited for a while; then what is there.
            let first = tokio::time::timeout(CHUNK_POLL, follower.next()).await;
            match first {
                Ok(Some(chunk)) => chunks.push(chunk?),
                Ok(None) => done = true,
                Err(_) => {}
            }
            while !done && chunks.len() < keel_host::CHUNK_PAGE {
                match futures::FutureExt::now_or_never(follower.next()) {
                    Some(Some(chunk)) => chunks.push(chunk?),
                    Some(None) => done = true,
                    None => break,
                }
            }
            Reply::Chunks {
                chunks: chunks
                    .iter()
                    .map(keel_server::wire::ChunkView::from)
                    .collect(),
                done,
            }
        }
        Request::GetHook { token } => Reply::Hook(keel.get_hook(&token).await?),
        Request::ListHooks => Reply::Hooks(keel.list_hooks().await?),
        Request::ListWorkers => {
            Reply::Workers(keel.workers().await?.into_iter().map(Into::into).collect())
        }
        Request::GetRun { run_id } => Reply::Run(keel.get_run(&run_id).await?),
        Request::Cancel {
            run_id,
            reason,
            force,
            wait,
        } => {
            let run = keel
                .cancel_on_request(&run_id, &reason, "cli", force)
                .await?;
            match wait && !run.status.is_final() {
                true => Reply::Run(keel.result(&run_id, true).await?),
                false => Reply::Run(run),
            }
        }
        Request::Inspect { target } => {
            let loaded = keel.deployed_component(&target).await?;
            Reply::Component(keel_server::wire::ComponentView::from(loaded.as_ref()))
        }
        Request::Retry { run_id, on } => {
            match on {
                Some(target) => keel.retry_on(&run_id, &target).await?,
                None => keel.retry(&run_id).await?,
            };
            settle(keel, &run_id).await?
        }
        Request::DeleteRuns { run_ids, cancel } => {
            let run_ids: Vec<_> = run_ids.into_iter().map(Into::into).collect();
            Reply::Deleted(keel.delete_runs(&run_ids, cancel).await?)
        }
        Request::Bulk {
            action,
            filter,
            reason,
            force,
            dry_run,
            wait,
        } => {
            let request = keel_host::core::bulk::BulkRequest {
                action,
                filter,
                reason,
                force,
            };
            if dry_run {
                return Ok(Reply::Preview(preview(keel, &request).await?));
            }
            let job = keel.submit_bulk(request).await?;
            match wait {
                true => Reply::Job((&keel.run_job(&job.job_id).await?).into()),
                false => {
                    keel.spawn_job(job.job_id.clone());
                    Reply::Job((&job).into())
                }
            }
        }
        Request::ListJobs { limit } => {
            Reply::Jobs(keel.jobs(limit).await?.iter().map(Into::into).collect())
        }
        Request::ShowJob { job_id } => Reply::Job((&keel.job(&job_id).await?).into()),
        Request::CancelJob { job_id } => Reply::Job((&keel.cancel_job(&job_id).await?).into()),
        Request::PruneComponents { grace_ms, dry_run } => {
            Reply::Pruned(keel.prune_components(grace_ms, dry_run).await?)
        }
        Request::WaitingOn { run_id } => {
            Reply::WaitingOn(keel.waiting_on(&keel.get_run(&run_id).await?).await?)
        }
        Request::StoreStats => Reply::Stats(keel.store_stats().await?),
        Request::Purge => Reply::Purged(keel.purge_ended(usize::MAX).await?.into()),
        Request::Result { run_id, wait } => Reply::Run(keel.result(&run_id, wait).await?),
        Request::ListRuns {
            filter,
            limit,
            before,
        } => {
            let before = before
                .map(|c| {
                    RunCursor::decode(&c).ok_or_else(|| keel_host::Error::InvalidInput {
                        reason: format!("`{c}` is not a cursor of a runs listing"),
                    })
                })
                .transpose()?;
            let page = keel.runs_page(&filter, before.as_ref(), limit).await?;
            Reply::Runs {
                runs: page.runs,
                next_cursor: page.next_cursor,
            }
        }
        Request::Deploy {
            component,
            name,
            grants,
            limits,
            retention_ms,
            force,
        } => {
            let spec = DeploySpec {
                name,
                grants,
                limits,
                retention_ms,
                force,
            };
            Reply::Deployment(keel.deploy_file(&component, Some(spec)).await?.0)
        }
        Request::Grant {
            target,
            grants,
            replace,
        } => Reply::Deployments(keel.grant(&target, &grants, replace).await?),
        Request::ListDeployments => Reply::Deployments(keel.deployments().await?.as_ref().clone()),
        Request::ShowDeployment { name } => Reply::Deployment(keel.deployment(&name).await?),
        Request::CreateToken(request) => {
            let secret = keel.signing_secret().await?;
            Reply::Token(keel_server::tokens::mint(&secret, request).map_err(|e| {
                keel_host::Error::InvalidInput {
                    reason: e.detail.message,
                }
            })?)
        }
        Request::CreateWebhook(request) => {
            let (target, scheme) = request.spec()?;
            Reply::Webhook(WebhookView::of(
                &keel
                    .create_webhook(&request.id, target, scheme, &request.secret)
                    .await?,
            ))
        }
        Request::ListWebhooks => {
            Reply::Webhooks(keel.webhooks().await?.iter().map(WebhookView::of).collect())
        }
        Request::ShowWebhook { id } => Reply::Webhook(WebhookView::of(&keel.webhook(&id).await?)),
        Request::DeleteWebhook { id } => {
            Reply::Webhook(WebhookView::of(&keel.delete_webhook(&id).await?))
        }
        Request::CreateSchedule(request) => Reply::Schedule(ScheduleView::of(
            &keel.create_schedule(request.spec()?).await?,
        )),
        Request::UpdateSchedule(request) => Reply::Schedule(ScheduleView::of(
            &keel.update_schedule(request.spec()?).await?,
        )),
        Request::ListSchedules => Reply::Schedules(
            keel.schedules()
                .await?
                .iter()
                .map(ScheduleView::of)
                .collect(),
        ),
        Request::ShowSchedule { name } => {
            Reply::Schedule(keel_server::schedules::view(keel, &keel.schedule(&name).await?).await?)
        }
        Request::PauseSchedule { name, note } => {
            Reply::Schedule(ScheduleView::of(&keel.pause_schedule(&name, note).await?))
        }
        Request::ResumeSchedule { name, note } => {
            Reply::Schedule(ScheduleView::of(&keel.resume_schedule(&name, note).await?))
        }
        Request::TriggerSchedule { name } => {
            Reply::Fires(vec![FireView::from(&keel.trigger_schedule(&name).await?)])
        }
        Request::BackfillSchedule {
            name,
            from_ms,
            to_ms,
        } => Reply::Fires(
            keel.backfill_schedule(&name, from_ms, to_ms)
                .await?
                .iter()
                .map(FireView::from)
                .collect(),
        ),
        Request::DeleteSchedule { name } => {
            Reply::Schedule(ScheduleView::of(&keel.delete_schedule(&name).await?))
        }
        Request::ShowRun { run_id } => Reply::Journal {
            run: keel.get_run(&run_id).await?,
            journal: keel.journal(&run_id).await?,
            slot: keel.run_slot(&run_id).await?,
            children: keel
                .children(&run_id)
                .await?
                .iter()
                .map(ChildView::from)
                .collect(),
        },
        Request::ListLimits => Reply::Limits {
            limits: keel.limits().await?,
            started: Vec::new(),
        },
        Request::SetLimit {
            workflow,
            key,
            limit,
        } => {
            let started = keel.set_limit(&workflow, key.as_deref(), limit).await?;
            Reply::Limits {
                limits: keel.limits().await?,
                started: started.into_iter().map(|r| r.into_string()).collect(),
            }
        }
        Request::ResetLimit { workflow, key } => {
            let started = keel.reset_limit(&workflow, key.as_deref()).await?;
            Reply::Limits {
                limits: keel.limits().await?,
                started: started.into_iter().map(|r| r.into_string()).collect(),
            }
        }
        Request::PushEvent {
            key,
            payload,
            metadata,
        } => {
            let event = keel.push_event(&key, &payload, &metadata).await?;
            let started = event.outcomes.iter().filter(|o| !o.deduplicated);
            for run_id in started.filter_map(|o| o.run_id.as_ref()) {
                settle(keel, run_id).await?;
            }
            Reply::Event(event)
        }
        Request::ListEvents => Reply::Events(keel.list_events().await?),
    })
}

/// Drives a run whose start, payload or retry was acknowledged until it
/// ends or waits (the drive goes on in this process after that); a run
/// that waits comes with what it waits on, read by the same engine.
async fn settle(keel: &Keel, run_id: &str) -> keel_host::Result<Reply> {
    let run = keel
        .drive_and_wait(run_id, keel_host::Until::Settled, Duration::MAX)
        .await?;
    if run.status != keel_host::core::RunStatus::Waiting {
        return Ok(Reply::Run(run));
    }
    let waiting_on = keel.waiting_on(&run).await?;
    Ok(Reply::RunWaiting { run, waiting_on })
}

/// Answers requests on the store's socket until the task is dropped.
pub async fn serve(keel: Keel, db: &Path) -> anyhow::Result<()> {
    let path = socket_path(db);
    // This process holds the store's lock, so a socket left here is stale.
    let _ = std::fs::remove_file(&path);
    private_socket_dir(&path)?;
    let listener = UnixListener::bind(&path)?;
    // Only the store's owner may drive its runs.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    tracing::info!(path = %path.display(), "accepting CLI requests");
    loop {
        let (stream, _) = listener.accept().await?;
        let keel = keel.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(&keel, stream).await {
                tracing::warn!("a CLI request failed: {e:#}");
            }
        });
    }
}

async fn answer(keel: &Keel, stream: UnixStream) -> anyhow::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(request) => execute(keel, request)
            .await
            .unwrap_or_else(|e| Reply::Error(RemoteError::from_error(&e))),
        Err(e) => Reply::Error(RemoteError {
            kind: ErrorKind::InvalidRequest.as_str().into(),
            message: format!("the request is not one this keel understands: {e}"),
            ids: Vec::new(),
        }),
    };
    let mut out = serde_json::to_vec(&reply)?;
    out.push(b'\n');
    write.write_all(&out).await?;
    Ok(())
}

/// Sends a request to the worker holding the store and returns its reply,
/// a worker's error as [`Reply::Error`].
/// `None` if no worker listens on the socket: it was left by a worker that
/// is gone, and is removed.
pub async fn forward(db: &Path, request: &Request) -> anyhow::Result<Option<Reply>> {
    let path = socket_path(db);
    let stream = match UnixStream::connect(&path).await {
        Ok(stream) => stream,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            tracing::warn!(path = %path.display(), "removing the socket of a worker that is gone");
            let _ = std::fs::remove_file(&path);
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let (read, mut write) = stream.into_split();
    let mut out = serde_json::to_vec(request)?;
    out.push(b'\n');
    write.write_all(&out).await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    if line.is_empty() {
        return Err(NoAnswer.into());
    }
    Ok(Some(serde_json::from_str(&line)?))
}

/// How many runs a bulk action's dry run shows.
pub const BULK_SAMPLE: usize = 10;

/// What a bulk action would act on, as the API shows it.
async fn preview(
    keel: &Keel,
    request: &keel_host::core::bulk::BulkRequest,
) -> keel_host::Result<keel_server::wire::BulkPreviewView> {
    let preview = keel.preview_bulk(request, BULK_SAMPLE).await?;
    Ok(keel_server::wire::BulkPreviewView {
        acted_on: preview.acted_on,
        passed_over: preview.passed_over,
        sample: preview
            .sample
            .iter()
            .map(keel_server::wire::RunView::from)
            .collect(),
    })
}
