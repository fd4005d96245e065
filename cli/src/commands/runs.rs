//! `keel run`, `keel start`, `keel runs …` and `keel journal export`:
//! starting runs, following them until they end or wait, and reading,
//! changing and selecting them, each a call of keel's API.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use http_body_util::BodyExt;
use keel_host::core::file::JournalFile;
use keel_host::core::journal::Entry;
use keel_host::core::timeline::WaitingOn;
use keel_host::core::{Clock, ErrorKind, RunFilter, RunRecord, RunStatus};
use keel_server::wire::{
    BulkPreviewView, ChildView, ChunkView, JobView, QueriesView, QueryView, RunDetail, RunList,
    RunView, StartHookRequest, StartRequest, StreamList,
};
use reqwest::Method;
use serde_json::Value;

use crate::args::{Cli, Format, RunArgs, RunOptions, RunsCommand, StartArgs, StartTarget};
use crate::connect::connect;
use crate::print;
use crate::remote::{CallError, Client, RemoteError, WAIT_MS};
use crate::request::{grants_of, json_arg, run_filter, text_arg};

/// How long one read of a stream waits for its next chunk.
const CHUNK_POLL: Duration = Duration::from_secs(10);

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
    /// The start request as the API takes it (its run ID chosen here, so
    /// that the CLI can name the run if no answer comes).
    pub request: StartRequest,
    /// Admit only: a worker drives the run.
    pub detach: bool,
    /// Grants of the component's deployment; `None` keeps those of an
    /// earlier deployment of it.
    pub grants: Option<keel_host::core::GrantSpec>,
}

impl StartSpec {
    /// A start of `start`'s workflow with the options every start has; the
    /// caller sets the rest. The CLI picks the run
    /// ID, so that it can name the run if no answer comes.
    fn new(cli: &Cli, start: &StartTarget, options: &RunOptions) -> anyhow::Result<StartSpec> {
        let grants = grants_of(cli)?;
        let (component, deployment) = target(&start.component)?;
        let input = text_arg("--input", &start.input)?;
        let input: Value =
            serde_json::from_str(&input).map_err(|e| keel_host::Error::InvalidInput {
                reason: format!("the input is not valid JSON: {e}"),
            })?;
        Ok(StartSpec {
            component,
            deployment,
            workflow: start.workflow.clone(),
            request: StartRequest {
                run_id: Some(uuid::Uuid::now_v7().to_string()),
                input,
                deployment: None,
                hook: None,
                additional_metadata: None,
                delay_ms: None,
                start_at_ms: None,
                priority: options.priority,
                timeout_ms: options.timeout.map(|t| t.as_millis() as u64),
                attributes: options.attr.iter().cloned().collect(),
                wait_ms: Some(WAIT_MS),
                return_on_wait: true,
            },
            detach: false,
            grants: (!grants.is_empty()).then_some(grants),
        })
    }

    /// The start `keel run` asks for.
    fn of_run(cli: &Cli, args: &RunArgs) -> anyhow::Result<StartSpec> {
        let mut spec = StartSpec::new(cli, &args.target, &args.options)?;
        spec.request.additional_metadata = json_arg("--metadata", &args.metadata)?;
        Ok(spec)
    }

    /// The start `keel start` asks for.
    fn of_start(cli: &Cli, args: &StartArgs) -> anyhow::Result<StartSpec> {
        let mut spec = StartSpec::new(cli, &args.target, &args.options)?;
        let request = &mut spec.request;
        if args.run_id.is_some() {
            request.run_id = args.run_id.clone();
        }
        request.start_at_ms = args.start_at;
        request.delay_ms = args.delay.map(|d| d.as_millis() as u64);
        request.hook = match &args.token {
            Some(token) => Some(StartHookRequest {
                token: token.clone(),
                retention_ms: args.retention.map(|r| r.as_millis() as u64),
                metadata: json_arg("--metadata", &args.metadata)?,
            }),
            None => None,
        };
        request.additional_metadata = json_arg("--additional-metadata", &args.additional_metadata)?;
        if args.detach {
            request.wait_ms = None;
            spec.detach = true;
        }
        Ok(spec)
    }
}

/// A component argument: a file (by its absolute path: the API may be
/// served elsewhere) or a deployment's name or hash.
fn target(component: &str) -> anyhow::Result<(Option<PathBuf>, Option<String>)> {
    let path = Path::new(component);
    if component.ends_with(".wasm") || path.is_file() {
        let absolute = std::path::absolute(path)
            .map_err(|e| anyhow::anyhow!("resolving {}: {e}", path.display()))?;
        Ok((Some(absolute), None))
    } else {
        Ok((None, Some(component.to_string())))
    }
}

/// A run as the API answered, with what it waits on while it waits.
pub struct RunAnswer {
    pub run: RunRecord,
    pub waiting_on: Vec<WaitingOn>,
}

impl RunAnswer {
    /// A run read as it is: what it waits on only if it waits.
    fn read(mut view: RunView) -> RunAnswer {
        if view.status != RunStatus::Waiting {
            view.waiting_on.clear();
        }
        RunAnswer::settled(view)
    }

    /// A run that has ended or settled to wait (queued, scheduled or
    /// waiting), with what it waits on.
    fn settled(mut view: RunView) -> RunAnswer {
        let waiting_on = std::mem::take(&mut view.waiting_on);
        RunAnswer {
            run: view.into(),
            waiting_on,
        }
    }
}

/// A run with its journal, as `runs show` reads it.
pub struct ShownRun {
    pub run: RunRecord,
    pub journal: Vec<Entry>,
    /// Its place in its concurrency group, if it has one.
    pub slot: Option<keel_host::core::flow::RunSlot>,
    /// The runs its workflow started.
    pub children: Vec<ChildView>,
}

impl Client {
    /// Starts a run (deploying its component file on the way) and, unless
    /// detached, follows it until it ends or waits.
    pub async fn start(&self, spec: StartSpec) -> anyhow::Result<RunAnswer> {
        let mut request = spec.request;
        request.deployment = match spec.component {
            Some(path) => Some(
                self.ensure_deployed(&path, spec.grants)
                    .await?
                    .hash
                    .into_string(),
            ),
            None => spec.deployment,
        };
        let started: RunView = match self
            .post(&["v1", "workflows", &spec.workflow, "runs"], &[], &request)
            .await
        {
            Ok(run) => run,
            // Sent, but no answer came back: the server may have admitted
            // the run.
            Err(e) if matches!(e.downcast_ref(), Some(CallError::Unanswered(_))) => {
                return Err(keel_host::Error::StartOutcomeUnknown {
                    run_id: request.run_id.clone().unwrap_or_default().into(),
                    reason: format!("{e:#}"),
                }
                .into());
            }
            Err(e) => return Err(e),
        };
        match spec.detach {
            true => Ok(RunAnswer::read(started)),
            false => self.until_it_waits(started).await,
        }
    }

    /// A run as it is now.
    pub async fn run(&self, run_id: &str) -> anyhow::Result<RunView> {
        self.get(&["v1", "runs", run_id], &[]).await
    }

    /// `run` once it has ended (long-polling its result), or as it is
    /// without `wait`.
    async fn until_final(&self, mut run: RunView, wait: bool) -> anyhow::Result<RunView> {
        while wait && !run.status.is_final() {
            run = self.result(&run.run_id).await?;
        }
        Ok(run)
    }

    /// A run once it has ended, or as it is after the API's longest wait.
    async fn result(&self, run_id: &str) -> anyhow::Result<RunView> {
        let query = [("wait_ms", WAIT_MS.to_string())];
        self.get(&["v1", "runs", run_id, "result"], &query).await
    }

    /// Follows a run the API drives until it ends or waits; a run that
    /// waits comes with what it waits on, as the answer that saw it
    /// settle gave it.
    pub(crate) async fn until_it_waits(&self, mut run: RunView) -> anyhow::Result<RunAnswer> {
        while !run.status.is_final() && !run.status.waits() {
            run = self.result(&run.run_id).await?;
        }
        Ok(RunAnswer::settled(run))
    }

    /// A run with its journal.
    pub async fn show_run(&self, run_id: &str) -> anyhow::Result<ShownRun> {
        let detail: RunDetail = self.get(&["v1", "runs", run_id, "detail"], &[]).await?;
        let journal = detail
            .journal
            .iter()
            .map(|e| e.to_entry())
            .collect::<Result<Vec<Entry>, String>>()
            .map_err(|e| {
                anyhow::anyhow!("the server sent a journal entry this keel cannot read: {e}")
            })?;
        Ok(ShownRun {
            slot: detail.run.concurrency.clone(),
            children: detail.run.children.clone(),
            run: detail.run.into(),
            journal,
        })
    }

    /// One page of at most `limit` runs, below `before` if given, with the
    /// cursor of the next page if there is one.
    async fn list_runs(
        &self,
        filter: &RunFilter,
        limit: usize,
        before: Option<String>,
    ) -> anyhow::Result<(Vec<RunRecord>, Option<String>)> {
        let mut query = vec![("limit", limit.to_string())];
        query.extend(before.map(|cursor| ("cursor", cursor)));
        for status in &filter.statuses {
            query.push(("status", status.as_str().to_string()));
        }
        query.extend(filter.workflow.clone().map(|w| ("workflow", w)));
        query.extend(filter.since_ms.map(|since| ("since_ms", since.to_string())));
        query.extend(filter.schedule.clone().map(|s| ("schedule", s)));
        for (key, value) in &filter.attributes {
            query.push(("attr", format!("{key}={value}")));
        }
        let page: RunList = self.get(&["v1", "runs"], &query).await?;
        let runs = page.runs.into_iter().map(RunRecord::from).collect();
        Ok((runs, page.next_cursor))
    }

    /// The next chunks of a run's stream from `from`: the server-sent
    /// events that arrive within a while of the first (or of asking), and
    /// whether the stream ended (the server closed the event stream).
    async fn chunks(
        &self,
        run_id: &str,
        stream: &str,
        from: u64,
    ) -> anyhow::Result<(Vec<ChunkView>, bool)> {
        let url = self.url(
            &["v1", "runs", run_id, "streams", stream],
            &[("from", from.to_string())],
        );
        let (status, mut body) = self.exchange(Method::GET, url.clone(), None).await?;
        if !status.is_success() {
            // The refusal, as every other call reads it.
            let (_, refused): (_, Value) = self.call(Method::GET, url, None).await?;
            anyhow::bail!("the server refused the stream: {refused}");
        }
        let mut text = String::new();
        let mut chunks = Vec::new();
        loop {
            let wait = match chunks.is_empty() {
                true => CHUNK_POLL,
                false => Duration::from_millis(50),
            };
            let next = match tokio::time::timeout(wait, body.frame()).await {
                Ok(next) => next
                    .transpose()
                    .map_err(|e| CallError::Unanswered(format!("the stream broke off: {e}")))?,
                Err(_) => return Ok((chunks, false)),
            };
            let Some(frame) = next else {
                return Ok((chunks, true));
            };
            let Ok(bytes) = frame.into_data() else {
                continue;
            };
            text.push_str(&String::from_utf8_lossy(&bytes));
            while let Some(end) = text.find("\n\n") {
                let block: String = text.drain(..end + 2).collect();
                let data = block.lines().find_map(|l| l.strip_prefix("data:"));
                let event = block.lines().find_map(|l| l.strip_prefix("event:"));
                match (event.map(str::trim), data) {
                    (Some("error"), Some(message)) => anyhow::bail!("{}", message.trim()),
                    (_, Some(data)) => chunks.push(serde_json::from_str(data.trim())?),
                    _ => {}
                }
            }
        }
    }

    /// Deletes runs one request each, after checking that none is live
    /// (without `cancel`), so that a refusal deletes nothing, as the
    /// engine's own deletion does.
    async fn delete_runs(
        &self,
        run_ids: &[String],
        cancel: bool,
    ) -> anyhow::Result<keel_host::core::retention::Deleted> {
        if !cancel {
            for run_id in run_ids {
                let run = self.run(run_id).await?;
                if !run.status.is_final() {
                    return Err(keel_host::Error::RunLive {
                        run_id: run.run_id.into(),
                        status: run.status.as_str().into(),
                    }
                    .into());
                }
            }
        }
        let mut deleted = keel_host::core::retention::Deleted::default();
        let query = [("cancel", cancel.to_string())];
        for run_id in run_ids {
            deleted.add(self.delete(&["v1", "runs", run_id], &query).await?);
        }
        Ok(deleted)
    }

    /// A bulk job, once it has ended (the API carries it out).
    pub(crate) async fn job_ended(&self, job_id: &str) -> anyhow::Result<JobView> {
        loop {
            let job: JobView = self.get(&["v1", "jobs", job_id], &[]).await?;
            if job.state != keel_host::core::bulk::JobState::Running {
                return Ok(job);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// `keel run`: the run as it ended or settled to wait.
pub async fn run(cli: &Cli, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let spec = StartSpec::of_run(cli, args)?;
    started(cli, spec).await
}

/// `keel start`: the run as it ended or settled to wait, or as admitted
/// with `--detach`.
pub async fn start(cli: &Cli, args: &StartArgs) -> anyhow::Result<ExitCode> {
    let spec = StartSpec::of_start(cli, args)?;
    started(cli, spec).await
}

async fn started(cli: &Cli, spec: StartSpec) -> anyhow::Result<ExitCode> {
    let answer = connect(cli, false).await?.start(spec).await?;
    print::print_run_answer(&answer.run, &answer.waiting_on, false, cli.json);
    Ok(print::exit_for(&answer.run))
}

/// `keel runs …`.
pub async fn runs(cli: &Cli, command: &RunsCommand) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    let client = &connect(cli, reads_only(command)).await?;
    match command {
        RunsCommand::List {
            filter,
            limit,
            before,
            all,
        } => {
            list(
                client,
                &run_filter(filter),
                *limit,
                before.clone(),
                *all,
                json,
            )
            .await
        }
        RunsCommand::Get { run_id } => {
            let answer = RunAnswer::read(client.run(run_id).await?);
            print::print_run_answer(&answer.run, &answer.waiting_on, false, json);
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Show { run_id } => {
            let shown = client.show_run(run_id).await?;
            let ShownRun {
                run,
                journal,
                slot,
                children,
            } = &shown;
            print::show_run(run, journal, slot.as_ref(), children, json);
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Result { run_id, wait } => {
            let run = match (wait, client.alone()) {
                (true, Some(keel)) => result_alone(keel, run_id).await?,
                _ => {
                    let current = client.run(run_id).await?;
                    client.until_final(current, *wait).await?.into()
                }
            };
            print::print_result(&run, json);
            Ok(print::exit_for(&run))
        }
        RunsCommand::Cancel {
            run_id,
            reason,
            force,
            detach,
        } => {
            let query = [
                ("reason", reason.clone()),
                ("force", force.to_string()),
                ("wait_ms", if *detach { 0 } else { WAIT_MS }.to_string()),
            ];
            let asked: RunView = client
                .post(&["v1", "runs", run_id, "cancel"], &query, &())
                .await?;
            let run: RunRecord = client.until_final(asked, !*detach).await?.into();
            if run.status.is_final() && run.status != RunStatus::Cancelled {
                // It had ended before: the cancel did nothing.
                return Err(RemoteError::new(
                    ErrorKind::RunEnded,
                    format!(
                        "run {} had already ended ({}); nothing was cancelled",
                        run.run_id,
                        run.status.as_str()
                    ),
                    vec![("run_id".into(), run.run_id.to_string())],
                )
                .into());
            }
            print::print_run_answer(&run, &[], false, json);
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Retry { run_id, on } => {
            let mut query = vec![
                ("wait_ms", WAIT_MS.to_string()),
                ("return_on_wait", "true".into()),
            ];
            query.extend(on.clone().map(|target| ("on", target)));
            let retried: RunView = client
                .post(&["v1", "runs", run_id, "retry"], &query, &())
                .await?;
            let answer = client.until_it_waits(retried).await?;
            print::print_run_answer(&answer.run, &answer.waiting_on, false, json);
            Ok(print::exit_for(&answer.run))
        }
        RunsCommand::Restart { run_id, point, on } => {
            let body = restart_body(point, on, None)?.restart();
            let restarted: RunView = client
                .post(&["v1", "runs", run_id, "restart"], &settle_query(), &body)
                .await?;
            let answer = client.until_it_waits(restarted).await?;
            print::print_run_answer(&answer.run, &answer.waiting_on, false, json);
            Ok(print::exit_for(&answer.run))
        }
        RunsCommand::Fork {
            run_id,
            point,
            on,
            input,
        } => {
            let body = restart_body(point, on, input.as_deref())?;
            let forked: RunView = client
                .post(&["v1", "runs", run_id, "fork"], &settle_query(), &body)
                .await?;
            let answer = client.until_it_waits(forked).await?;
            print::print_run_answer(&answer.run, &answer.waiting_on, false, json);
            Ok(print::exit_for(&answer.run))
        }
        RunsCommand::Query { run_id, name } => {
            match name {
                Some(name) => {
                    let answer: QueryView = client
                        .get(&["v1", "runs", run_id, "queries", name], &[])
                        .await?;
                    print::print_query(&answer, json);
                }
                None => {
                    let queries: QueriesView =
                        client.get(&["v1", "runs", run_id, "queries"], &[]).await?;
                    print::print_queries(&queries, json);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Pause { run_id, detach } => {
            let query = [("wait_ms", if *detach { 0 } else { WAIT_MS }.to_string())];
            let paused: RunView = client
                .post(&["v1", "runs", run_id, "pause"], &query, &())
                .await?;
            print::print_paused(&paused, json);
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Resume { run_id } => {
            let query = [
                ("wait_ms", WAIT_MS.to_string()),
                ("return_on_wait", "true".into()),
            ];
            let resumed: RunView = client
                .post(&["v1", "runs", run_id, "resume"], &query, &())
                .await?;
            let answer = client.until_it_waits(resumed).await?;
            print::print_run_answer(&answer.run, &answer.waiting_on, false, json);
            Ok(print::exit_for(&answer.run))
        }
        RunsCommand::Delete { run_ids, cancel } => {
            print::print_deleted(&client.delete_runs(run_ids, *cancel).await?, json);
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Bulk {
            action,
            filter,
            dry_run,
            reason,
            force,
            point,
            on,
            detach,
        } => {
            let body = keel_server::wire::BulkRequestBody {
                action: (*action).into(),
                filter: (&run_filter(filter)).into(),
                reason: reason.clone(),
                force: *force,
                from_step: point.from_step.clone(),
                at: point.at,
                on: on.clone(),
                dry_run: *dry_run,
            };
            if *dry_run {
                let preview: BulkPreviewView =
                    client.post(&["v1", "runs", "bulk"], &[], &body).await?;
                print::print_preview(&cli.command, &preview, json);
                return Ok(ExitCode::SUCCESS);
            }
            let job: JobView = client.post(&["v1", "runs", "bulk"], &[], &body).await?;
            let job = match detach {
                true => job,
                false => client.job_ended(&job.job_id).await?,
            };
            Ok(super::operations::job_answer(&job, json))
        }
        RunsCommand::Streams { run_id } => {
            let list: StreamList = client.get(&["v1", "runs", run_id, "streams"], &[]).await?;
            print::print_streams(&list.streams, json);
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Stream { run_id, name, from } => {
            follow_stream(client, run_id, name, *from, json).await
        }
    }
}

/// `keel journal export`: a run's journal, as the file `keel replay` reads.
pub async fn export(
    cli: &Cli,
    run_id: &str,
    output: Option<&Path>,
    format: Format,
) -> anyhow::Result<ExitCode> {
    let shown = connect(cli, true).await?.show_run(run_id).await?;
    let file = JournalFile::new(&shown.run, shown.journal);
    crate::export_journal(&file, run_id, output, format, cli.json)
}

/// `keel runs list`: pages of at most [`MAX_PAGE`] runs, each below the
/// last one's cursor, until `limit` runs are listed (then the cursor of
/// the rest is printed) or, with `all`, every run, printed as each page
/// arrives.
///
/// [`MAX_PAGE`]: keel_host::core::query::MAX_PAGE
async fn list(
    client: &Client,
    filter: &RunFilter,
    limit: u64,
    mut before: Option<String>,
    all: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use keel_host::core::query::MAX_PAGE;
    let mut listed = Vec::new();
    let mut header = !json;
    loop {
        let left = usize::try_from(limit).unwrap_or(usize::MAX) - listed.len();
        let page = if all { MAX_PAGE } else { left.min(MAX_PAGE) };
        let (runs, next_cursor) = client.list_runs(filter, page, before.take()).await?;
        if all {
            print::stream_runs(&runs, json, &mut header);
        } else {
            listed.extend(runs);
        }
        before = next_cursor;
        if before.is_none() || (!all && listed.len() as u64 >= limit) {
            break;
        }
    }
    if all {
        if header {
            println!("no runs");
        }
    } else {
        print::print_run_page(&listed, before.as_deref(), json);
    }
    Ok(ExitCode::SUCCESS)
}

/// `keel runs stream`: prints the stream's chunks as they come, batch by
/// batch (each a long poll), until it is closed or its run has ended.
async fn follow_stream(
    client: &Client,
    run_id: &str,
    stream: &str,
    mut from: u64,
    json: bool,
) -> anyhow::Result<ExitCode> {
    loop {
        let (chunks, done) = client.chunks(run_id, stream, from).await?;
        for chunk in &chunks {
            print::print_chunk(chunk, json);
            from = chunk.index + 1;
        }
        if done {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// `runs result --wait` with no worker holding the store: drives the run
/// and waits for its timers; a run that waits for a hook or another run is
/// refused at once, since nothing but a resume or a worker moves it on and
/// this process holds the store they need.
async fn result_alone(keel: &keel_host::Keel, run_id: &str) -> anyhow::Result<RunRecord> {
    loop {
        let run = keel.drive(run_id).await?;
        if run.status.is_final() {
            return Ok(run);
        }
        match run.wake_at_ms {
            Some(at) => {
                let now = keel_host::SystemClock.now_ms();
                tokio::time::sleep(Duration::from_millis(at.saturating_sub(now))).await;
            }
            None => {
                return Err(RemoteError::new(
                    ErrorKind::NeedsWorker,
                    format!(
                        "run {run_id} waits for a hook's payload or another run's end, and no worker holds this store to move it on"
                    ),
                    vec![("run_id".into(), run_id.into())],
                )
                .into());
            }
        }
    }
}

/// Whether `command` only reads runs (a copy of the store answers it the
/// same).
fn reads_only(command: &RunsCommand) -> bool {
    matches!(
        command,
        RunsCommand::List { .. }
            | RunsCommand::Get { .. }
            | RunsCommand::Show { .. }
            | RunsCommand::Streams { .. }
            | RunsCommand::Result { wait: false, .. }
    )
}

/// The query of a command that drives a run until it ends or waits.
fn settle_query() -> [(&'static str, String); 2] {
    [
        ("wait_ms", WAIT_MS.to_string()),
        ("return_on_wait", "true".into()),
    ]
}

/// The body of a fork (or, by its `restart`, a restart) from the command
/// line's arguments.
fn restart_body(
    point: &crate::args::RestartPointArgs,
    on: &Option<String>,
    input: Option<&str>,
) -> anyhow::Result<keel_server::wire::ForkRequest> {
    Ok(keel_server::wire::ForkRequest {
        from_step: point.from_step.clone(),
        at: point.at,
        on: on.clone(),
        input: input
            .map(|i| crate::request::json_text_arg("--input", i))
            .transpose()?,
        run_id: None,
    })
}
