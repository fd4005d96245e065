//! Runs: start (and wait), list, get, detail, journal, result, cancel,
//! retry, pause, resume, restart, fork, delete and live updates.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use keel_core::deployment::Target;
use keel_core::{RunCursor, RunFilter, RunId, RunRecord, RunStatus};
use keel_host::{Keel, StartHook, StartOptions, Until};
use serde_json::Value;

use crate::MAX_BODY;
use crate::body::Body;
use crate::error::{ApiError, ApiResult};
use crate::extract::*;
use crate::state::AppState;
use crate::wire::*;

/// `POST /v1/workflows/{workflow}/runs`.
pub async fn start(
    State(s): State<AppState>,
    Param(workflow): Param,
    scoped: Option<axum::Extension<crate::auth::Scoped>>,
    headers: axum::http::HeaderMap,
    body: Body<MAX_BODY>,
) -> ApiResult<(StatusCode, Json<RunView>)> {
    let request: StartRequest = json_object(body)?;
    crate::tokens::check_start(scoped.as_deref(), &request)?;
    let wait = Wait {
        ms: wait_ms(request.wait_ms)?,
        until: Wait::settled(request.return_on_wait),
    };
    let run_id = request
        .run_id
        .as_deref()
        .map(RunId::parse)
        .transpose()
        .map_err(keel_host::Error::from)?;
    if request.delay_ms.is_some() && request.start_at_ms.is_some() {
        return Err(ApiError::invalid(
            "give `delay_ms` or `start_at_ms`, not both",
        ));
    }
    if request.timeout_ms == Some(0) {
        return Err(ApiError::invalid(
            "`timeout_ms` is at least 1; leave it out for the workflow's own timeout",
        ));
    }
    let options = StartOptions {
        // The handler drives it at once (`drive_and_wait`), unless nobody
        // waits for it and this engine leaves such runs to a worker.
        driven_here: wait.ms > 0 || s.keel.drives_in_background(),
        run_id,
        start_at_ms: request.start_at_ms,
        delay: request.delay_ms.map(Duration::from_millis),
        priority: request.priority,
        timeout: request.timeout_ms.map(Duration::from_millis),
        attributes: request.attributes,
        additional_metadata: request.additional_metadata,
        // The caller's trace (W3C Trace Context), which the run's spans join.
        traceparent: headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        carried: Vec::new(),
        hook: request.hook.map(|hook| StartHook {
            token: hook.token,
            min_retention: hook.retention_ms.map(Duration::from_millis),
            metadata: hook.metadata,
        }),
    };
    let target = match &request.deployment {
        Some(name) => Target::Name(name),
        None => Target::Latest,
    };
    let input = request.input.to_string();
    let run = s
        .keel
        .start_workflow(&workflow, target, &input, &options)
        .await?;
    let run = drive_and_wait(&s.keel, run, wait).await?;
    Ok((
        StatusCode::CREATED,
        Json(RunView::with_slot(&s.keel, &run).await?),
    ))
}

/// How long a request waits for a run it moved on, and for what.
pub(crate) struct Wait {
    pub(crate) ms: u64,
    pub(crate) until: Until,
}

impl Wait {
    /// The wait a request's query asks for: `wait_ms` (bounded) and
    /// `return_on_wait`.
    pub(crate) fn from_query(q: &Query) -> ApiResult<Wait> {
        Ok(Wait {
            ms: wait_ms(q.number("wait_ms")?)?,
            until: Wait::settled(q.flag("return_on_wait")?),
        })
    }

    /// Until the run waits (`return_on_wait`), or else until it ends.
    pub(crate) fn settled(return_on_wait: bool) -> Until {
        match return_on_wait {
            true => Until::Settled,
            false => Until::Ended,
        }
    }
}

/// Drives `run` in the background (it goes on if the client leaves) and
/// waits up to `wait.ms` for it to end; returns its record as it then is.
/// What brought the run here (its start, a payload, a retry) was
/// acknowledged, so a failure while waiting answers with the record last
/// read, never with an error a client could take for a refusal.
pub(crate) async fn drive_and_wait(
    keel: &Keel,
    run: RunRecord,
    wait: Wait,
) -> ApiResult<RunRecord> {
    let run_id = run.run_id.clone();
    let known = run.clone();
    match wait_on(keel, run, wait).await {
        Ok(run) => Ok(run),
        // No worker here carries the run on after a failure (the CLI's own
        // engine): the caller is told the drive broke, naming the run.
        Err(e) if !keel.drives_in_background() => Err(e),
        Err(e) => {
            tracing::warn!(
                %run_id,
                "waiting for an acknowledged run failed ({}); answering with its record as last read",
                e.detail.message
            );
            Ok(known)
        }
    }
}

pub(crate) async fn wait_on(keel: &Keel, run: RunRecord, wait: Wait) -> ApiResult<RunRecord> {
    if wait.ms == 0 {
        keel.drive_in_background(&run.run_id);
        return Ok(run);
    }
    let timeout = Duration::from_millis(wait.ms).min(MAX_WAIT);
    keel.drive_and_wait(&run.run_id, wait.until, timeout)
        .await
        .map_err(Into::into)
}

/// `GET /v1/runs`: filters `status` (repeatable or comma-separated),
/// `workflow`, `since_ms`, `until_ms`, `search`; `limit` and `cursor`.
pub async fn list_runs(
    State(s): State<AppState>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<RunList>> {
    let q = Query::parse(raw);
    let mut statuses = Vec::new();
    for status in q.all("status").iter().flat_map(|s| s.split(',')) {
        let status = status.trim();
        if status.is_empty() {
            continue;
        }
        statuses.push(RunStatus::named(status).map_err(|e| ApiError::invalid(e.to_string()))?);
    }
    let filter = RunFilter {
        statuses,
        workflow: q.one("workflow").filter(|w| !w.is_empty()),
        since_ms: q.number("since_ms")?,
        until_ms: q.number("until_ms")?,
        search: q.one("search").filter(|w| !w.is_empty()),
        schedule: q.one("schedule").filter(|s| !s.is_empty()),
        attributes: q.attributes()?,
    };
    let limit = q.number("limit")?.unwrap_or(50);
    let max = keel_core::query::MAX_PAGE as u64;
    if !(1..=max).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "`limit` {limit} is not 1 to {max}; page on with `cursor` (the `next_cursor` of each page)"
        )));
    }
    let limit = limit as usize;
    let cursor = match q.one("cursor").filter(|c| !c.is_empty()) {
        Some(c) => Some(RunCursor::decode(&c).ok_or_else(|| {
            ApiError::invalid(format!(
                "`cursor` `{c}` is not a cursor; pass the `next_cursor` of the previous page"
            ))
        })?),
        None => None,
    };
    let page = s.keel.runs_page(&filter, cursor.as_ref(), limit).await?;
    Ok(Json(RunList {
        runs: page.runs.iter().map(RunView::from).collect(),
        next_cursor: page.next_cursor,
    }))
}

/// `GET /v1/runs/{run_id}`.
pub async fn get_run(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
) -> ApiResult<Json<RunView>> {
    let run = s.keel.get_run(&run_id).await?;
    Ok(Json(RunView::read(&s.keel, &run).await?))
}

/// `DELETE /v1/runs/{run_id}?cancel=true`: deletes an ended run with
/// everything stored for it (archived first if the server archives); a
/// live run is refused (409) unless `cancel` ends it first.
pub async fn delete_run(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<keel_core::retention::Deleted>> {
    let cancel = Query::parse(raw).flag("cancel")?;
    Ok(Json(s.keel.delete_runs(&[run_id], cancel).await?))
}

/// `GET /v1/runs/{run_id}/detail`: the run, its timeline and journal.
pub async fn run_detail(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
) -> ApiResult<Json<RunDetail>> {
    let run = s.keel.get_run(&run_id).await?;
    Ok(Json(RunDetail::read(&s.keel, &run).await?))
}

/// `GET /v1/runs/{run_id}/journal?format=entries|file`: the entries, or
/// the journal file `keel replay` reads (the run's record with them).
pub async fn journal(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let file = match Query::parse(raw).one("format").as_deref() {
        None | Some("entries") => false,
        Some("file") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "query parameter `format` is `entries` or `file`, not `{other}`"
            )));
        }
    };
    let journal = s.keel.journal(&run_id).await?;
    if !file {
        let entries: Vec<JournalEntry> = journal.iter().map(JournalEntry::of).collect();
        return Ok(Json(entries).into_response());
    }
    let run = s.keel.get_run(&run_id).await?;
    let file = keel_core::file::JournalFile::new(&run, journal);
    Ok(([(header::CONTENT_TYPE, "application/json")], file.to_json()).into_response())
}

/// `GET /v1/runs/{run_id}/result?wait_ms=N`: 200 once the run has ended,
/// 202 with the run as it is if it has not within the wait.
pub async fn result(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
    RawQuery(raw): RawQuery,
) -> ApiResult<(StatusCode, Json<RunView>)> {
    let wait = Duration::from_millis(wait_ms(Query::parse(raw).number("wait_ms")?)?);
    let run = s.keel.wait_for(&run_id, Until::Ended, wait).await?;
    let status = if run.status.is_final() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(RunView::from(&run))))
}

/// Longest cancel reason the API takes, in bytes.
pub(crate) const MAX_REASON: usize = 1024;

/// `POST /v1/runs/{run_id}/cancel?reason=TEXT&force=true&wait_ms=N`: asks
/// for the run to be cancelled (the workflow runs its cleanup), or with
/// `force` ends it at once; answers with the run after up to `wait_ms`
/// (200 once ended, 202 while its cleanup runs).
pub async fn cancel(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
    Door(by): Door,
    RawQuery(raw): RawQuery,
) -> ApiResult<(StatusCode, Json<RunView>)> {
    let q = Query::parse(raw);
    let reason = q.one("reason").unwrap_or_default();
    if reason.len() > MAX_REASON {
        return Err(ApiError::invalid(format!(
            "query parameter `reason` is {} bytes; at most {MAX_REASON}",
            reason.len()
        )));
    }
    let wait = Wait {
        ms: wait_ms(q.number("wait_ms")?)?,
        until: Wait::settled(false),
    };
    let force = q.flag("force")?;
    let run = s
        .keel
        .cancel_on_request(&run_id, &reason, by, force)
        .await?;
    // Driven here unless a worker drives it: its cleanup runs now.
    let run = match run.status.is_final() {
        true => run,
        false => drive_and_wait(&s.keel, run, wait).await?,
    };
    let status = match run.status.is_final() {
        true => StatusCode::OK,
        false => StatusCode::ACCEPTED,
    };
    Ok((status, Json(RunView::from(&run))))
}

/// `POST /v1/runs/{run_id}/retry?wait_ms=N&return_on_wait=true`: retries a
/// failed run from its failed step and drives it, answering after up to
/// `wait_ms` with the run as it then is.
pub async fn retry(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<RunView>> {
    let q = Query::parse(raw);
    let wait = Wait::from_query(&q)?;
    let run = match q.one("on") {
        Some(target) => s.keel.retry_on(&run_id, &target).await?,
        None => s.keel.retry(&run_id).await?,
    };
    let run = drive_and_wait(&s.keel, run, wait).await?;
    Ok(Json(moved_on(&s.keel, &run).await))
}

/// `GET /v1/runs/{run_id}/events`: server-sent events, `entry` for each
/// journal entry (those already written first) and `run` whenever the
/// run's record changes; the stream ends after the run ends. It follows
/// the engine's watch of the run, which hears of each write at once.
pub async fn run_events(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    s.keel.get_run(&run_id).await?;
    let stream = futures::StreamExt::map(s.keel.watch(&run_id), |watched| {
        Ok(match watched {
            Ok(keel_host::Watched::Entry(entry)) => sse_json("entry", &JournalEntry::of(&entry)),
            Ok(keel_host::Watched::Run(run)) => sse_json("run", &RunView::from(&run)),
            Err(e) => Event::default().event("error").data(e.to_string()),
        })
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The view of a run that an acknowledged change (a retry, a payload)
/// moved on, with what it waits on; that is left out if it cannot be read,
/// since the change stands.
/// `POST /v1/runs/{run_id}/pause?wait_ms=N`: pauses the run (no code of
/// it runs until resumed; payloads queue), answering after up to
/// `wait_ms` with the run: 200 once its driver has stopped it (`paused`),
/// 202 while it has yet to (a step attempt it has running ends first).
pub async fn pause(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
    Door(by): Door,
    RawQuery(raw): RawQuery,
) -> ApiResult<(StatusCode, Json<RunView>)> {
    let wait = Wait {
        ms: wait_ms(Query::parse(raw).number("wait_ms")?)?,
        until: Until::Paused,
    };
    let run = s.keel.pause_run(&run_id, by).await?;
    let run = match run.status {
        RunStatus::Paused => run,
        _ => drive_and_wait(&s.keel, run, wait).await?,
    };
    let status = match run.status {
        RunStatus::Paused => StatusCode::OK,
        _ => StatusCode::ACCEPTED,
    };
    Ok((status, Json(RunView::read(&s.keel, &run).await?)))
}

/// `POST /v1/runs/{run_id}/resume?wait_ms=N&return_on_wait=true`: lifts
/// the run's pause and drives it, answering after up to `wait_ms` with the
/// run as it then is (a run no pause held, as it is).
pub async fn resume(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
    Door(by): Door,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<RunView>> {
    let q = Query::parse(raw);
    let wait = Wait::from_query(&q)?;
    let run = s.keel.resume_run(&run_id, by).await?;
    let run = match run.status.is_final() {
        true => run,
        false => drive_and_wait(&s.keel, run, wait).await?,
    };
    Ok(Json(RunView::read(&s.keel, &run).await?))
}

/// `POST /v1/runs/{run_id}/restart?wait_ms=N&return_on_wait=true`:
/// restarts an ended run from a step or a journal position (on another
/// build if asked) and drives it, answering after up to `wait_ms`.
pub async fn restart(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
    Door(by): Door,
    RawQuery(raw): RawQuery,
    body: Body<MAX_BODY>,
) -> ApiResult<Json<RunView>> {
    let q = Query::parse(raw);
    let wait = Wait::from_query(&q)?;
    let request: RestartRequest = json_object(body)?;
    let point = request.point().map_err(ApiError::invalid)?;
    let run = s
        .keel
        .restart_run(&run_id, &point, request.on.as_deref(), by)
        .await?;
    let run = drive_and_wait(&s.keel, run, wait).await?;
    Ok(Json(moved_on(&s.keel, &run).await))
}

/// `POST /v1/runs/{run_id}/fork?wait_ms=N&return_on_wait=true`: a new run
/// whose journal carries the run's up to a step or a journal position (on
/// another build, with another input, if asked), driven and answered
/// after up to `wait_ms`.
pub async fn fork(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
    Door(by): Door,
    RawQuery(raw): RawQuery,
    body: Body<MAX_BODY>,
) -> ApiResult<(StatusCode, Json<RunView>)> {
    let q = Query::parse(raw);
    let wait = Wait::from_query(&q)?;
    let request: ForkRequest = json_object(body)?;
    let point = request.restart().point().map_err(ApiError::invalid)?;
    let options = keel_host::ForkOptions {
        on: request.on.clone(),
        input: request.input.as_ref().map(Value::to_string),
        run_id: request
            .run_id
            .as_deref()
            .map(RunId::parse)
            .transpose()
            .map_err(keel_host::Error::from)?,
    };
    let run = s.keel.fork_run(&run_id, &point, &options, by).await?;
    let run = drive_and_wait(&s.keel, run, wait).await?;
    Ok((StatusCode::CREATED, Json(moved_on(&s.keel, &run).await)))
}

pub(crate) async fn moved_on(keel: &Keel, run: &RunRecord) -> RunView {
    let mut view = RunView::from(run);
    view.waiting_on = keel.waiting_on(run).await.unwrap_or_default();
    view
}
