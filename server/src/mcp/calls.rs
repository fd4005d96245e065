//! Tool calls: a workflow's tool starts a run, `keel-resume-hook`
//! answers a run's hook, `keel-await-run` waits for a run. Each answers
//! with the run as the wait left it ([`ToolAnswer`]), forwarding the
//! chunks the run's streams get meanwhile as progress notifications.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use keel_core::access::Scope;
use keel_core::deployment::Target;
use keel_core::timeline::WaitingOn;
use keel_core::{RunId, RunRecord, RunStatus};
use keel_host::{Keel, StartOptions, Until};
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ErrorData, JsonObject,
    ProgressNotificationParam, Resource,
};
use rmcp::service::RequestContext;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::catalog::{AWAIT_RUN, RESUME_HOOK, may_start, takes_object};
use super::{forbidden, internal, resources, scope};
use crate::error::ApiError;
use crate::hooks::{Resume, resume_and_wait};
use crate::runs::{Wait, drive_and_wait};
use crate::state::AppState;
use crate::wire::{
    AwaitRunArgs, ChunkView, HookView, ResumeHookArgs, RunView, StreamProgress, ToolAnswer,
};

/// The `_meta` key of a caller's idempotency key: a call retried with it
/// finds the run (or the payload) the first one started.
pub const IDEMPOTENCY_KEY: &str = "keel/idempotency_key";

/// How long a call waits for its run when it says nothing.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Answers a `tools/call`.
pub(super) async fn call(
    s: &AppState,
    request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, ErrorData> {
    let scope = scope(context);
    let args = request.arguments.unwrap_or_default();
    let key = idempotency_key(context)?;
    match request.name.as_ref() {
        RESUME_HOOK => {
            let args: ResumeHookArgs = arguments(args)?;
            if let Some(scope) = scope.as_ref().filter(|s| !may_resume(s, &args.token)) {
                return Err(forbidden(scope, &format!("resuming hook `{}`", args.token)));
            }
            resume(s, args, key, context).await
        }
        AWAIT_RUN => {
            let args: AwaitRunArgs = arguments(args)?;
            if let Some(scope) = scope
                .as_ref()
                .filter(|s| !resources::may_read(s, &args.run_id))
            {
                return Err(forbidden(scope, &format!("reading run {}", args.run_id)));
            }
            await_run(s, args, context).await
        }
        workflow => {
            if let Some(scope) = scope.as_ref()
                && (!may_start(Some(scope), workflow) || narrowed(scope))
            {
                return Err(forbidden(scope, &format!("calling tool `{workflow}`")));
            }
            start(s, workflow, args, key, context).await
        }
    }
}

/// Whether a token of `scope` may resume the hook holding `token`.
fn may_resume(scope: &Scope, token: &str) -> bool {
    matches!(scope, Scope::ResumeHook { token: t } if t == token)
}

/// Whether `scope` asks starts for a hook token or run ID, which a tool
/// call does not give: such a token starts over the HTTP API only.
fn narrowed(scope: &Scope) -> bool {
    matches!(
        scope,
        Scope::StartWorkflow { hook_token, run_id, .. } if hook_token.is_some() || run_id.is_some()
    )
}

/// The caller's idempotency key: `_meta`'s [`IDEMPOTENCY_KEY`], or, in a
/// session, the session's ID with the request's (a request the client
/// sends again in its session is the same call).
fn idempotency_key(context: &RequestContext<RoleServer>) -> Result<Option<String>, ErrorData> {
    match context.meta.0.get(IDEMPOTENCY_KEY) {
        Some(Value::String(key)) if !key.is_empty() => return Ok(Some(key.clone())),
        Some(other) => {
            return Err(ErrorData::invalid_params(
                format!("`_meta.\"{IDEMPOTENCY_KEY}\"` is a non-empty string, not {other}"),
                None,
            ));
        }
        None => {}
    }
    let session = context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok());
    Ok(session.map(|session| format!("session {session} request {}", context.id)))
}

/// The payload ID a resume with `key` delivers under: one of the safe set
/// whatever the key holds.
fn payload_id_of(key: &str) -> String {
    RunId::keyed("mcp resume", key).to_string()
}

/// A tool's arguments as `T`, or the error naming what is wrong.
fn arguments<T: DeserializeOwned>(args: JsonObject) -> Result<T, ErrorData> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| ErrorData::invalid_params(format!("the arguments do not fit: {e}"), None))
}

/// Starts a run of `workflow` with the call's arguments and waits for it.
async fn start(
    s: &AppState,
    workflow: &str,
    mut args: JsonObject,
    key: Option<String>,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, ErrorData> {
    let (_, info) = s
        .keel
        .workflow(workflow)
        .await
        .map_err(internal)?
        .ok_or_else(|| {
            ErrorData::invalid_params(
                format!("no tool is named `{workflow}`; `tools/list` names them"),
                None,
            )
        })?;
    let input = if takes_object(&info) {
        Value::Object(args)
    } else {
        args.remove("input").unwrap_or(Value::Null)
    };
    let run_id = key.map(|key| RunId::keyed(&format!("mcp {workflow}"), &key));
    let options = StartOptions {
        driven_here: true,
        run_id: run_id.clone(),
        ..StartOptions::default()
    };
    let started = s
        .keel
        .start_workflow(workflow, Target::Latest, &input.to_string(), &options)
        .await;
    let run = match (started, &run_id) {
        (Ok(run), _) => run,
        // A call retried with its key: the run the first one started.
        (Err(keel_host::Error::RunExists { .. }), Some(run_id)) => {
            s.keel.get_run(run_id).await.map_err(internal)?
        }
        (Err(e), _) => return Ok(refused(e.into())),
    };
    let from = BTreeMap::new();
    let waited = forwarding(s, context, &run.run_id, from, async {
        drive_and_wait(&s.keel, run.clone(), settled(None)).await
    })
    .await;
    answer(s, waited).await
}

/// Delivers a payload to a hook and waits for the workflow's reply.
async fn resume(
    s: &AppState,
    args: ResumeHookArgs,
    key: Option<String>,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, ErrorData> {
    let hook = match s.keel.get_hook(&args.token).await {
        Ok(hook) => hook,
        Err(e) => return Ok(refused(e.into())),
    };
    let from = lengths(&s.keel, &hook.run_id).await?;
    let payload_id = args
        .payload_id
        .or(key.as_deref().map(payload_id_of))
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let wait_reply = args
        .wait_reply_ms
        .unwrap_or(DEFAULT_WAIT.as_millis() as u64)
        .min(crate::MAX_WAIT.as_millis() as u64);
    let resume = Resume {
        token: args.token,
        payload: args.payload,
        payload_id,
        wait: settled(None),
        wait_reply: Some(wait_reply),
    };
    let waited = forwarding(s, context, &hook.run_id, from, resume_and_wait(s, resume)).await;
    match waited {
        Ok(view) => answer_view(s, view).await,
        Err(e) => Ok(refused(e)),
    }
}

/// Waits for a run to end or to wait on something.
async fn await_run(
    s: &AppState,
    args: AwaitRunArgs,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResult, ErrorData> {
    let run = match s.keel.get_run(&args.run_id).await {
        Ok(run) => run,
        Err(e) => return Ok(refused(e.into())),
    };
    let from = lengths(&s.keel, &run.run_id).await?;
    let waited = forwarding(s, context, &run.run_id, from, async {
        drive_and_wait(&s.keel, run.clone(), settled(args.wait_ms)).await
    })
    .await;
    answer(s, waited).await
}

/// A wait of `ms` (bounded; [`DEFAULT_WAIT`] if none) for the run to end
/// or to wait on something.
fn settled(ms: Option<u64>) -> Wait {
    Wait {
        ms: ms
            .unwrap_or(DEFAULT_WAIT.as_millis() as u64)
            .min(crate::MAX_WAIT.as_millis() as u64),
        until: Until::Settled,
    }
}

/// How many chunks each of the run's streams holds: a call forwards
/// what comes after.
async fn lengths(keel: &Keel, run_id: &str) -> Result<BTreeMap<String, u64>, ErrorData> {
    let streams = keel.streams(run_id).await.map_err(internal)?;
    Ok(streams.into_iter().map(|s| (s.name, s.chunks)).collect())
}

/// Awaits `wait`, sending the chunks `run_id`'s streams get (from the
/// places `from` gives) as progress notifications when the request asked
/// for progress; every chunk stored before the wait ended is sent before
/// this returns, each stream's in order.
async fn forwarding<T>(
    s: &AppState,
    context: &RequestContext<RoleServer>,
    run_id: &RunId,
    from: BTreeMap<String, u64>,
    wait: impl Future<Output = T>,
) -> T {
    let Some(token) = context.meta.get_progress_token() else {
        return wait.await;
    };
    let mut progress = Progress {
        run_id: run_id.clone(),
        next: from.clone(),
        sent: 0,
    };
    let mut chunks = std::pin::pin!(s.keel.follow_streams(run_id, from));
    let mut wait = std::pin::pin!(wait);
    let mut following = true;
    let out = loop {
        tokio::select! {
            out = &mut wait => break out,
            item = chunks.next(), if following => match item {
                Some(Ok((stream, chunk))) => {
                    progress.send(context, &token, &stream, &chunk).await;
                }
                // The run ended and all it wrote was sent, or the store
                // failed: the answer tells the rest.
                _ => following = false,
            },
        }
    };
    progress.catch_up(s, context, &token).await;
    out
}

/// What a call has forwarded.
struct Progress {
    run_id: RunId,
    /// The next index to send, by stream.
    next: BTreeMap<String, u64>,
    sent: u64,
}

impl Progress {
    /// Sends `chunk` of `stream`, unless it was sent.
    async fn send(
        &mut self,
        context: &RequestContext<RoleServer>,
        token: &rmcp::model::ProgressToken,
        stream: &str,
        chunk: &keel_core::stream::Chunk,
    ) {
        let next = self.next.entry(stream.to_string()).or_insert(0);
        if chunk.index < *next {
            return;
        }
        *next = chunk.index + 1;
        self.sent += 1;
        let message = StreamProgress {
            run_id: self.run_id.to_string(),
            stream: stream.to_string(),
            chunk: ChunkView::from(chunk),
        };
        let message = serde_json::to_string(&message).unwrap_or_default();
        let notification =
            ProgressNotificationParam::new(token.clone(), self.sent as f64).with_message(message);
        if let Err(e) = context.peer.notify_progress(notification).await {
            tracing::debug!(run_id = %self.run_id, "a progress notification was not sent: {e}");
        }
    }

    /// Sends what the streams got that the follower had not yet read.
    async fn catch_up(
        &mut self,
        s: &AppState,
        context: &RequestContext<RoleServer>,
        token: &rmcp::model::ProgressToken,
    ) {
        let mut next = self.next.clone();
        loop {
            let Ok(chunks) = s.keel.new_chunks(&self.run_id, &mut next).await else {
                return;
            };
            if chunks.is_empty() {
                return;
            }
            for (stream, chunk) in &chunks {
                self.send(context, token, stream, chunk).await;
            }
        }
    }
}

/// The answer with the run a wait left, or the refusal.
async fn answer(
    s: &AppState,
    waited: Result<RunRecord, ApiError>,
) -> Result<CallToolResult, ErrorData> {
    match waited {
        Ok(run) => {
            let view = RunView::with_slot(&s.keel, &run).await.map_err(internal)?;
            answer_view(s, view).await
        }
        Err(e) => Ok(refused(e)),
    }
}

/// The answer with `run`: its output (or error) in words and as
/// structured content, the hooks it waits on with their payload schemas,
/// and a link to it as a resource.
async fn answer_view(s: &AppState, run: RunView) -> Result<CallToolResult, ErrorData> {
    let mut hooks = Vec::new();
    for waiting in &run.waiting_on {
        if let WaitingOn::Hook { token } = waiting
            && let Ok(hook) = s.keel.get_hook(token).await
        {
            hooks.push(HookView::from(&hook));
        }
    }
    let text = summary(&run, &hooks);
    let link = ContentBlock::resource_link(
        Resource::new(
            resources::run_uri(&run.run_id),
            format!("run {}", run.run_id),
        )
        .with_mime_type("application/json"),
    );
    let failed = matches!(run.status, RunStatus::Failed | RunStatus::Cancelled);
    let answer = ToolAnswer { run, hooks };
    let structured = serde_json::to_value(&answer).map_err(internal)?;
    let mut result = if failed {
        CallToolResult::structured_error(structured)
    } else {
        CallToolResult::structured(structured)
    };
    result.content = vec![ContentBlock::text(text), link];
    Ok(result)
}

/// The run in words, for a model: its output, its error, or what it waits
/// on and which tool moves it on.
fn summary(run: &RunView, hooks: &[HookView]) -> String {
    let id = &run.run_id;
    if let Some(reply) = &run.reply {
        return format!("The workflow replied: {reply}");
    }
    match run.status {
        RunStatus::Completed => {
            let output = run.output.clone().unwrap_or(Value::Null);
            format!("Run {id} completed with output: {output}")
        }
        RunStatus::Failed | RunStatus::Cancelled => {
            let error = run
                .error
                .as_ref()
                .map_or(String::new(), |e| format!(": {} ({})", e.message, e.kind));
            format!("Run {id} {}{error}", run.status.as_str())
        }
        _ if !hooks.is_empty() => {
            let waits: Vec<String> = hooks
                .iter()
                .map(|h| match &h.payload_schema {
                    Some(schema) => format!("hook `{}` (payload schema: {schema})", h.token),
                    None => format!("hook `{}`", h.token),
                })
                .collect();
            format!(
                "Run {id} waits on {}. Answer with tool `{RESUME_HOOK}` {{\"token\": ..., \"payload\": ...}}.",
                waits.join(" and ")
            )
        }
        status => format!(
            "Run {id} is {}. Call tool `{AWAIT_RUN}` {{\"run_id\": \"{id}\"}} to wait for it, or read resource {}.",
            status.as_str(),
            resources::run_uri(id)
        ),
    }
}

/// A refusal the caller can act on, as a tool error: its kind, message
/// and IDs, and, for input that does not fit its schema, each place that
/// does not. An internal failure is told without its detail.
fn refused(e: ApiError) -> CallToolResult {
    let mut detail = e.detail;
    if e.status.is_server_error() && detail.kind != "drive_interrupted" {
        tracing::warn!(kind = %detail.kind, "an MCP tool call failed: {}", detail.message);
        detail.message = "keel could not answer: the server's log says why".into();
    }
    let mut text = format!("{} ({})", detail.message, detail.kind);
    for problem in &detail.problems {
        text.push_str(&format!("\n- at `{}`: {}", problem.path, problem.message));
    }
    let structured = serde_json::json!({ "error": detail });
    let mut result = CallToolResult::structured_error(structured);
    result.content = vec![ContentBlock::text(text)];
    result
}
