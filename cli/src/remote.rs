//! The CLI as a client of keel's API, the only way its commands reach a
//! store: a server's over TCP (`--server URL`), the one a worker serves on
//! its private socket, or the router run in this process over a store no
//! worker holds. Each request goes through the same handlers whichever the
//! transport, and its answer is read back into the same replies, so every
//! command answers the same through every door.

use std::path::{Path, PathBuf};

use anyhow::Context;
use axum::body::Body;
use http_body_util::BodyExt;
use keel_host::core::journal::Entry;
use keel_host::core::{Deployment, RunRecord, RunStatus};
use keel_server::wire::{
    BackfillRequest, DeploymentList, ErrorBody, EventList, EventView, FireList, HookList, HookView,
    JobList, JobView, LimitChange, LimitList, LimitRequest, LimitResetRequest, PauseRequest,
    RunDetail, RunList, RunView, ScheduleList, StartHookRequest, StartRequest,
};
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tower::ServiceExt;

use crate::control::{CHUNK_POLL, RemoteError, Reply, Request, StartSpec};
use std::time::Duration;

/// How long one call waits for a run on the server (its longest wait).
const WAIT_MS: u64 = 60_000;

/// Where the API is.
enum Transport {
    /// A keel server over TCP (`--server URL`).
    Http(reqwest::Client),
    /// The worker holding a sled store, on its private socket.
    Socket(PathBuf),
    /// This process's own router over a store it opened, when no worker
    /// holds the store.
    InProcess(axum::Router),
}

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Nothing was sent: the API could not be reached.
    #[error("{0}")]
    Unreachable(String),
    /// The request was sent but no answer came back: it may have taken
    /// effect.
    #[error("{0}")]
    Unanswered(String),
}

/// keel's API, wherever it is served: every command that reads or changes
/// a store speaks to it, the same way through each transport.
pub struct Client {
    base: Url,
    transport: Transport,
    token: Option<String>,
}

impl Client {
    /// A client of the server at `base` (`http://host:port`).
    pub fn new(base: &str, token: Option<&str>) -> anyhow::Result<Client> {
        let base = Url::parse(base).with_context(|| {
            format!("--server `{base}` is not a URL; write for example http://127.0.0.1:8080")
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            anyhow::bail!("--server `{base}` must be an http:// or https:// URL");
        }
        Ok(Client {
            base,
            transport: Transport::Http(
                reqwest::Client::builder()
                    .user_agent(user_agent())
                    .build()
                    .context("making an HTTP client")?,
            ),
            token: token.map(str::to_owned),
        })
    }

    /// A client of the worker that serves the API on `socket`.
    pub fn socket(socket: &Path) -> Client {
        Client::local(Transport::Socket(socket.to_path_buf()))
    }

    /// A client of the API served in this process over `keel`.
    pub async fn in_process(keel: keel_host::Keel) -> anyhow::Result<Client> {
        let metrics = std::sync::Arc::new(keel_server::Metrics::default());
        let router = keel_server::private_router(keel, metrics).await?;
        Ok(Client::local(Transport::InProcess(router)))
    }

    fn local(transport: Transport) -> Client {
        Client {
            base: Url::parse("http://localhost/").expect("a URL"),
            transport,
            token: None,
        }
    }

    /// The URL of the path made of `segments` (each percent-encoded), with
    /// `query`.
    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("an http URL has a path")
            .pop_if_empty()
            .extend(segments);
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        url
    }

    /// Sends a request and returns the response, its body unread.
    async fn exchange(
        &self,
        method: Method,
        url: Url,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<(StatusCode, Body), CallError> {
        let (content_type, bytes) = body.unwrap_or(("application/json", Vec::new()));
        match &self.transport {
            Transport::Http(http) => {
                let mut request = http
                    .request(method, url)
                    .header(CONTENT_TYPE, content_type)
                    .body(bytes);
                if let Some(token) = &self.token {
                    request = request.bearer_auth(token);
                }
                let response = request.send().await.map_err(|e| {
                    let reason = format!(
                        "cannot reach the keel server at {}; is `keel serve` running there? ({e})",
                        self.base
                    );
                    match e.is_connect() || e.is_builder() {
                        true => CallError::Unreachable(reason),
                        false => CallError::Unanswered(reason),
                    }
                })?;
                let status = response.status();
                Ok((status, Body::from_stream(response.bytes_stream())))
            }
            Transport::Socket(path) => {
                let request = local_request(method, &url, content_type, bytes);
                let unanswered = |e: hyper::Error| {
                    CallError::Unanswered(format!(
                        "the worker holding the store at {} closed the connection without answering (it may have died: {e}); check with `keel runs list` whether the request took effect before repeating it",
                        path.display()
                    ))
                };
                let stream = tokio::net::UnixStream::connect(path).await.map_err(|e| {
                    CallError::Unreachable(format!(
                        "cannot reach the worker holding the store at {}: {e}",
                        path.display()
                    ))
                })?;
                let io = hyper_util::rt::TokioIo::new(stream);
                let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
                    .await
                    .map_err(unanswered)?;
                tokio::spawn(connection);
                let response = sender.send_request(request).await.map_err(unanswered)?;
                Ok((response.status(), Body::new(response.into_body())))
            }
            Transport::InProcess(router) => {
                let request = local_request(method, &url, content_type, bytes);
                let response = match router.clone().oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                Ok((response.status(), response.into_body()))
            }
        }
    }

    /// Calls the API; a JSON error body becomes a [`RemoteError`].
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> anyhow::Result<(StatusCode, T)> {
        let (status, body) = self.exchange(method, url.clone(), body).await?;
        let bytes = body
            .collect()
            .await
            .map_err(|e| CallError::Unanswered(format!("the answer to {url} broke off: {e}")))?
            .to_bytes();
        if !status.is_success() {
            let error = serde_json::from_slice::<ErrorBody>(&bytes).map_err(|_| {
                anyhow::anyhow!(
                    "the server answered {status} to {url}: {}",
                    String::from_utf8_lossy(&bytes)
                )
            })?;
            return Err(RemoteError {
                kind: error.error.kind,
                message: error.error.message,
                ids: error.error.ids.into_iter().collect(),
            }
            .into());
        }
        let value = serde_json::from_slice(&bytes).with_context(|| {
            format!("the server's answer to {url} is not what this keel expects")
        })?;
        Ok((status, value))
    }

    async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> anyhow::Result<T> {
        Ok(self
            .call(Method::GET, self.url(segments, query), None)
            .await?
            .1)
    }

    async fn post<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
        body: &impl serde::Serialize,
    ) -> anyhow::Result<T> {
        let body = ("application/json", serde_json::to_vec(body)?);
        Ok(self
            .call(Method::POST, self.url(segments, query), Some(body))
            .await?
            .1)
    }

    /// The next chunks of a run's stream from `from`: the server-sent
    /// events that arrive within a while of the first (or of asking), and
    /// whether the stream ended (the server closed the event stream).
    async fn chunks(
        &self,
        run_id: &str,
        stream: &str,
        from: u64,
    ) -> anyhow::Result<(Vec<keel_server::wire::ChunkView>, bool)> {
        let url = self.url(
            &["v1", "runs", run_id, "streams", stream],
            &[("from", from.to_string())],
        );
        let (status, mut body) = self.exchange(Method::GET, url.clone(), None).await?;
        if !status.is_success() {
            // The refusal, as every other call reads it.
            let (_, refused): (StatusCode, Value) = self.call(Method::GET, url, None).await?;
            anyhow::bail!("the server refused the stream: {refused}");
        }
        let mut text = String::new();
        let mut chunks = Vec::new();
        loop {
            let wait = if chunks.is_empty() {
                CHUNK_POLL
            } else {
                Duration::from_millis(50)
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

    /// Reads the job until it has ended (the server carries it out).
    async fn job_ended(&self, job_id: &str) -> anyhow::Result<JobView> {
        loop {
            let job: JobView = self.get(&["v1", "jobs", job_id], &[]).await?;
            if job.state != keel_host::core::bulk::JobState::Running {
                return Ok(job);
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
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
                let run: RunView = self.get(&["v1", "runs", run_id], &[]).await?;
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
            let url = self.url(&["v1", "runs", run_id], &query);
            deleted.add(self.call(Method::DELETE, url, None).await?.1);
        }
        Ok(deleted)
    }

    /// Sends `request` and returns the server's answer as a reply.
    pub async fn send(&self, request: Request) -> anyhow::Result<Reply> {
        let run = |v: RunView| Reply::Run(RunRecord::from(v));
        Ok(match request {
            Request::Start(StartSpec {
                component,
                deployment,
                workflow,
                input,
                token,
                retention_ms,
                metadata,
                additional_metadata,
                detach,
                grants,
                run_id,
                start_at_ms,
                delay_ms,
                priority,
                timeout_ms,
                attributes,
            }) => {
                let deployment = match component {
                    Some(path) => Some(
                        self.ensure_deployed(&path, grants)
                            .await?
                            .hash
                            .into_string(),
                    ),
                    None => deployment,
                };
                let input: Value =
                    serde_json::from_str(&input).map_err(|e| keel_host::Error::InvalidInput {
                        reason: e.to_string(),
                    })?;
                let request = StartRequest {
                    run_id,
                    input,
                    deployment,
                    hook: token.map(|token| StartHookRequest {
                        token,
                        retention_ms,
                        metadata,
                    }),
                    additional_metadata,
                    delay_ms,
                    start_at_ms,
                    priority,
                    timeout_ms,
                    attributes,
                    wait_ms: (!detach).then_some(WAIT_MS),
                    return_on_wait: true,
                };
                let started: RunView = match self
                    .post(&["v1", "workflows", &workflow, "runs"], &[], &request)
                    .await
                {
                    Ok(run) => run,
                    // Sent, but no answer came back: the server may have
                    // admitted the run.
                    Err(e) if matches!(e.downcast_ref(), Some(CallError::Unanswered(_))) => {
                        return Err(keel_host::Error::StartOutcomeUnknown {
                            run_id: request.run_id.clone().unwrap_or_default().into(),
                            reason: format!("{e:#}"),
                        }
                        .into());
                    }
                    Err(e) => return Err(e),
                };
                if detach {
                    run(started)
                } else {
                    self.until_it_waits(started).await?
                }
            }
            Request::Resume {
                token,
                payload,
                payload_id,
                wait_reply_ms,
            } => {
                let payload: Value =
                    serde_json::from_str(&payload).map_err(|e| keel_host::Error::InvalidInput {
                        reason: format!("--payload: {e}"),
                    })?;
                let mut query = vec![
                    ("wait_ms", WAIT_MS.to_string()),
                    ("return_on_wait", "true".into()),
                ];
                if let Some(id) = &payload_id {
                    query.push(("payload_id", id.clone()));
                }
                if let Some(ms) = wait_reply_ms {
                    query.push(("wait_reply_ms", ms.min(WAIT_MS).to_string()));
                }
                let resumed: RunView = self
                    .post(&["v1", "hooks", &token, "resume"], &query, &payload)
                    .await?;
                match wait_reply_ms {
                    Some(_) => Reply::Replied {
                        payload_id: resumed.payload_id.clone().unwrap_or_default(),
                        reply: resumed.reply.as_ref().map(Value::to_string),
                        run: resumed.into(),
                    },
                    None => self.until_it_waits(resumed).await?,
                }
            }
            Request::HookReply {
                token,
                payload_id,
                wait_ms,
            } => {
                let query = [("wait_ms", wait_ms.min(WAIT_MS).to_string())];
                let path = ["v1", "hooks", &token, "replies", &payload_id];
                Reply::Answer(self.get(&path, &query).await?)
            }
            Request::Streams { run_id } => {
                let list: keel_server::wire::StreamList =
                    self.get(&["v1", "runs", &run_id, "streams"], &[]).await?;
                Reply::Streams(list.streams)
            }
            Request::Chunks {
                run_id,
                stream,
                from,
            } => {
                let (chunks, done) = self.chunks(&run_id, &stream, from).await?;
                Reply::Chunks { chunks, done }
            }
            Request::GetHook { token } => Reply::Hook(
                self.get::<HookView>(&["v1", "hooks", &token], &[])
                    .await?
                    .into(),
            ),
            Request::ListWorkers => Reply::Workers(
                self.get::<keel_server::wire::WorkerList>(&["v1", "workers"], &[])
                    .await?
                    .workers,
            ),
            Request::ListHooks => Reply::Hooks(
                self.get::<HookList>(&["v1", "hooks"], &[])
                    .await?
                    .hooks
                    .into_iter()
                    .map(Into::into)
                    .collect(),
            ),
            Request::GetRun { run_id } => run(self.get(&["v1", "runs", &run_id], &[]).await?),
            Request::Cancel {
                run_id,
                reason,
                force,
                wait,
            } => {
                let query = [
                    ("reason", reason),
                    ("force", force.to_string()),
                    ("wait_ms", if wait { WAIT_MS } else { 0 }.to_string()),
                ];
                let asked: RunView = self
                    .post(&["v1", "runs", &run_id, "cancel"], &query, &())
                    .await?;
                run(self.until_final(asked, wait).await?)
            }
            Request::Inspect { target } => Reply::Component(
                self.get(&["v1", "deployments", &target, "component"], &[])
                    .await?,
            ),
            Request::Retry { run_id, on } => {
                let mut query = vec![
                    ("wait_ms", WAIT_MS.to_string()),
                    ("return_on_wait", "true".into()),
                ];
                query.extend(on.map(|target| ("on", target)));
                let retried: RunView = self
                    .post(&["v1", "runs", &run_id, "retry"], &query, &())
                    .await?;
                self.until_it_waits(retried).await?
            }
            Request::Result { run_id, wait } => {
                let current: RunView = self.get(&["v1", "runs", &run_id], &[]).await?;
                run(self.until_final(current, wait).await?)
            }
            Request::ListRuns {
                filter,
                limit,
                before,
            } => {
                let mut query = vec![("limit", limit.to_string())];
                if let Some(cursor) = before {
                    query.push(("cursor", cursor));
                }
                for status in &filter.statuses {
                    query.push(("status", status.as_str().to_string()));
                }
                if let Some(workflow) = filter.workflow {
                    query.push(("workflow", workflow));
                }
                if let Some(since) = filter.since_ms {
                    query.push(("since_ms", since.to_string()));
                }
                if let Some(schedule) = filter.schedule {
                    query.push(("schedule", schedule));
                }
                for (key, value) in filter.attributes {
                    query.push(("attr", format!("{key}={value}")));
                }
                let page: RunList = self.get(&["v1", "runs"], &query).await?;
                Reply::Runs {
                    runs: page.runs.into_iter().map(RunRecord::from).collect(),
                    next_cursor: page.next_cursor,
                }
            }
            Request::ShowRun { run_id } => {
                let detail: RunDetail = self.get(&["v1", "runs", &run_id, "detail"], &[]).await?;
                let journal = detail
                    .journal
                    .iter()
                    .map(|e| e.to_entry())
                    .collect::<Result<Vec<Entry>, String>>()
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "the server sent a journal entry this keel cannot read: {e}"
                        )
                    })?;
                Reply::Journal {
                    slot: detail.run.concurrency.clone(),
                    children: detail.run.children.clone(),
                    run: detail.run.into(),
                    journal,
                }
            }
            Request::PushEvent {
                key,
                payload,
                metadata,
            } => {
                let parse = |flag: &str, s: &str| {
                    serde_json::from_str::<Value>(s).map_err(|e| keel_host::Error::InvalidInput {
                        reason: format!("{flag}: {e}"),
                    })
                };
                let body = serde_json::json!({
                    "payload": parse("--payload", &payload)?,
                    "metadata": parse("--metadata", &metadata)?,
                });
                let event: EventView = self.post(&["v1", "events", &key], &[], &body).await?;
                Reply::Event(event.into())
            }
            Request::ListEvents => {
                let mut events: Vec<_> = self
                    .get::<EventList>(&["v1", "events"], &[])
                    .await?
                    .events
                    .into_iter()
                    .map(Into::into)
                    .collect();
                // The API lists newest first; the CLI oldest first.
                events.reverse();
                Reply::Events(events)
            }
            Request::Deploy {
                component,
                name,
                grants,
                limits,
                retention_ms,
                force,
            } => {
                let mut query: Vec<(&str, String)> = Vec::new();
                if let Some(name) = name {
                    query.push(("name", name));
                }
                match grants {
                    Some(grants) if grants.is_empty() => query.push(("no_grants", "true".into())),
                    Some(grants) => query.extend(grant_query(grants)),
                    None => {}
                }
                if force {
                    query.push(("force", "true".into()));
                }
                if let Some(mib) = limits.max_memory_mib {
                    query.push(("max_memory_mib", mib.to_string()));
                }
                if let Some(ms) = limits.step_timeout_ms {
                    query.push(("step_timeout_ms", ms.to_string()));
                }
                if let Some(ms) = retention_ms {
                    query.push(("retention_ms", ms.to_string()));
                }
                Reply::Deployment(self.upload(&component, &query).await?)
            }
            Request::Grant {
                target,
                grants,
                replace,
            } => {
                let body = keel_server::wire::GrantRequest {
                    http: grants.http,
                    dirs: grants.dirs,
                    env: grants.env,
                    replace,
                };
                let changed: keel_server::wire::DeploymentList = self
                    .post(&["v1", "deployments", &target, "grants"], &[], &body)
                    .await?;
                Reply::Deployments(changed.deployments)
            }
            Request::DeleteRuns { run_ids, cancel } => {
                Reply::Deleted(self.delete_runs(&run_ids, cancel).await?)
            }
            Request::Bulk {
                action,
                filter,
                reason,
                force,
                dry_run,
                wait,
            } => {
                let body = keel_server::wire::BulkRequestBody {
                    action,
                    filter: (&filter).into(),
                    reason,
                    force,
                    dry_run,
                };
                if dry_run {
                    return Ok(Reply::Preview(
                        self.post(&["v1", "runs", "bulk"], &[], &body).await?,
                    ));
                }
                let job: JobView = self.post(&["v1", "runs", "bulk"], &[], &body).await?;
                match wait {
                    true => Reply::Job(self.job_ended(&job.job_id).await?),
                    false => Reply::Job(job),
                }
            }
            Request::ListJobs { limit } => Reply::Jobs(
                self.get::<JobList>(&["v1", "jobs"], &[("limit", limit.to_string())])
                    .await?
                    .jobs,
            ),
            Request::ShowJob { job_id } => {
                Reply::Job(self.get(&["v1", "jobs", &job_id], &[]).await?)
            }
            Request::CancelJob { job_id } => Reply::Job(
                self.post(&["v1", "jobs", &job_id, "cancel"], &[], &())
                    .await?,
            ),
            Request::PruneComponents { grace_ms, dry_run } => {
                let body = keel_server::wire::PruneRequest {
                    grace_ms: Some(grace_ms),
                    dry_run,
                };
                Reply::Pruned(
                    self.post(&["v1", "components", "prune"], &[], &body)
                        .await?,
                )
            }
            Request::WaitingOn { run_id } => Reply::WaitingOn(
                self.get::<RunView>(&["v1", "runs", &run_id], &[])
                    .await?
                    .waiting_on,
            ),
            Request::StoreStats => Reply::Stats(self.get(&["v1", "store", "stats"], &[]).await?),
            Request::Purge => Reply::Purged(self.post(&["v1", "store", "purge"], &[], &()).await?),
            Request::ListDeployments => Reply::Deployments(
                self.get::<DeploymentList>(&["v1", "deployments"], &[])
                    .await?
                    .deployments,
            ),
            Request::ShowDeployment { name } => {
                Reply::Deployment(self.get(&["v1", "deployments", &name], &[]).await?)
            }
            Request::CreateToken(request) => {
                Reply::Token(self.post(&["v1", "tokens"], &[], &request).await?)
            }
            Request::CreateWebhook(request) => {
                Reply::Webhook(self.post(&["v1", "webhooks"], &[], &request).await?)
            }
            Request::ListWebhooks => Reply::Webhooks(
                self.get::<keel_server::wire::WebhookList>(&["v1", "webhooks"], &[])
                    .await?
                    .webhooks,
            ),
            Request::ShowWebhook { id } => {
                Reply::Webhook(self.get(&["v1", "webhooks", &id], &[]).await?)
            }
            Request::DeleteWebhook { id } => Reply::Webhook(
                self.call(
                    Method::DELETE,
                    self.url(&["v1", "webhooks", &id], &[]),
                    None,
                )
                .await?
                .1,
            ),
            Request::CreateSchedule(request) => {
                Reply::Schedule(self.post(&["v1", "schedules"], &[], &request).await?)
            }
            Request::UpdateSchedule(request) => {
                let name = request.name.clone().unwrap_or_default();
                let url = self.url(&["v1", "schedules", &name], &[]);
                let body = ("application/json", serde_json::to_vec(&request)?);
                Reply::Schedule(self.call(Method::PUT, url, Some(body)).await?.1)
            }
            Request::ListSchedules => Reply::Schedules(
                self.get::<ScheduleList>(&["v1", "schedules"], &[])
                    .await?
                    .schedules,
            ),
            Request::ShowSchedule { name } => {
                Reply::Schedule(self.get(&["v1", "schedules", &name], &[]).await?)
            }
            Request::PauseSchedule { name, note } => Reply::Schedule(
                self.post(
                    &["v1", "schedules", &name, "pause"],
                    &[],
                    &PauseRequest { note },
                )
                .await?,
            ),
            Request::ResumeSchedule { name, note } => Reply::Schedule(
                self.post(
                    &["v1", "schedules", &name, "resume"],
                    &[],
                    &PauseRequest { note },
                )
                .await?,
            ),
            Request::TriggerSchedule { name } => Reply::Fires(vec![
                self.post(
                    &["v1", "schedules", &name, "trigger"],
                    &[],
                    &serde_json::json!({}),
                )
                .await?,
            ]),
            Request::BackfillSchedule {
                name,
                from_ms,
                to_ms,
            } => Reply::Fires(
                self.post::<FireList>(
                    &["v1", "schedules", &name, "backfill"],
                    &[],
                    &BackfillRequest { from_ms, to_ms },
                )
                .await?
                .fires,
            ),
            Request::ListLimits => Reply::Limits {
                limits: self.get::<LimitList>(&["v1", "limits"], &[]).await?.limits,
                started: Vec::new(),
            },
            Request::SetLimit {
                workflow,
                key,
                limit,
            } => {
                let body = LimitRequest { key, limit };
                let change: LimitChange =
                    self.post(&["v1", "limits", &workflow], &[], &body).await?;
                Reply::Limits {
                    limits: change.limits,
                    started: change.started,
                }
            }
            Request::ResetLimit { workflow, key } => {
                let body = LimitResetRequest { key };
                let change: LimitChange = self
                    .post(&["v1", "limits", &workflow, "reset"], &[], &body)
                    .await?;
                Reply::Limits {
                    limits: change.limits,
                    started: change.started,
                }
            }
            Request::DeleteSchedule { name } => Reply::Schedule(
                self.call(
                    Method::DELETE,
                    self.url(&["v1", "schedules", &name], &[]),
                    None,
                )
                .await?
                .1,
            ),
        })
    }

    /// Uploads a component file as a deployment.
    async fn upload(&self, path: &Path, query: &[(&str, String)]) -> anyhow::Result<Deployment> {
        let bytes = tokio::fs::read(path)
            .await
            .with_context(|| format!("reading {}", path.display()))?;
        let mut query = query.to_vec();
        if !query.iter().any(|(k, _)| *k == "name")
            && let Some(stem) = path.file_stem()
        {
            query.push(("name", stem.to_string_lossy().into_owned()));
        }
        let url = self.url(&["v1", "deployments"], &query);
        Ok(self
            .call(Method::POST, url, Some(("application/wasm", bytes)))
            .await?
            .1)
    }

    /// The server's deployment of the component at `path`: uploaded unless
    /// the server has it and no grants are given.
    async fn ensure_deployed(
        &self,
        path: &Path,
        grants: Option<keel_host::core::GrantSpec>,
    ) -> anyhow::Result<Deployment> {
        let bytes = tokio::fs::read(path)
            .await
            .with_context(|| format!("reading {}", path.display()))?;
        let hash = keel_host::component::content_hash(&bytes);
        if grants.is_none() {
            match self
                .get::<Deployment>(&["v1", "deployments", &hash], &[])
                .await
            {
                Ok(deployment) => return Ok(deployment),
                Err(e)
                    if e.downcast_ref::<RemoteError>().is_some_and(|r| {
                        r.report().kind == keel_host::core::ErrorKind::DeploymentNotFound
                    }) => {}
                Err(e) => return Err(e),
            }
        }
        self.upload(path, &grant_query(grants.unwrap_or_default()))
            .await
    }

    /// `run` once it has ended (long-polling its result), or as it is
    /// without `wait`.
    async fn until_final(&self, mut run: RunView, wait: bool) -> anyhow::Result<RunView> {
        while wait && !run.status.is_final() {
            run = self
                .get(
                    &["v1", "runs", &run.run_id, "result"],
                    &[("wait_ms", WAIT_MS.to_string())],
                )
                .await?;
        }
        Ok(run)
    }

    /// Follows a run the API drives until it ends or waits; a run that
    /// waits comes with what it waits on, as the answer that saw it
    /// settle gave it (asked again by the caller if that answer had none).
    async fn until_it_waits(&self, mut run: RunView) -> anyhow::Result<Reply> {
        let waits = |s: RunStatus| {
            matches!(
                s,
                RunStatus::Waiting | RunStatus::Scheduled | RunStatus::Queued
            )
        };
        while !run.status.is_final() && !waits(run.status) {
            let (_, next) = self
                .call::<RunView>(
                    Method::GET,
                    self.url(
                        &["v1", "runs", &run.run_id, "result"],
                        &[("wait_ms", WAIT_MS.to_string())],
                    ),
                    None,
                )
                .await?;
            run = next;
        }
        let waiting_on = std::mem::take(&mut run.waiting_on);
        Ok(match waiting_on.is_empty() {
            true => Reply::Run(run.into()),
            false => Reply::RunWaiting {
                run: run.into(),
                waiting_on,
            },
        })
    }
}

/// Grants as the deploy endpoint's query takes them.
fn grant_query(grants: keel_host::core::GrantSpec) -> Vec<(&'static str, String)> {
    let http = grants.http.into_iter().map(|h| ("allow_http", h));
    let dirs = grants.dirs.into_iter().map(|d| ("allow_dir", d));
    let env = grants.env.into_iter().map(|e| ("allow_env", e));
    http.chain(dirs).chain(env).collect()
}

/// A request to a local transport (a worker's socket, this process): the
/// path and query, addressed to `localhost`, as the router's guard expects.
fn local_request(
    method: Method,
    url: &Url,
    content_type: &str,
    bytes: Vec<u8>,
) -> axum::http::Request<Body> {
    let target = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    };
    let mut request = axum::http::Request::new(Body::from(bytes));
    *request.method_mut() = method;
    *request.uri_mut() = target.parse().expect("a URL's path and query form a URI");
    let headers = request.headers_mut();
    headers.insert(reqwest::header::HOST, HeaderValue::from_static("localhost"));
    if let Ok(agent) = HeaderValue::from_str(&user_agent()) {
        headers.insert(reqwest::header::USER_AGENT, agent);
    }
    if let Ok(value) = HeaderValue::from_str(content_type) {
        headers.insert(CONTENT_TYPE, value);
    }
    request
}

/// The `User-Agent` this CLI sends, by which the API names it as the door
/// a request came through.
fn user_agent() -> String {
    format!("{}{}", keel_server::CLI_AGENT, env!("CARGO_PKG_VERSION"))
}
