//! The API's handlers: deployments, runs (start, get, result with wait,
//! cancel, list, journal, live updates), hooks, events, workers, health and
//! metrics. Each parses its input itself, so that every refusal is a JSON
//! error naming the problem.

use std::convert::Infallible;
use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use keel_core::deployment::Target;
use keel_core::timeline::timeline;
use keel_core::{
    Deployment, GrantSpec, RunCursor, RunFilter, RunId, RunRecord, RunStatus, StepLimits,
};
use keel_host::{DeploySpec, Keel, StartHook, StartOptions, Until};
use serde::de::DeserializeOwned;

use crate::body::Body;
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::wire::*;
use crate::{MAX_BODY, MAX_COMPONENT};

/// An endpoint of the API: its path, method, OpenAPI operation and
/// handler. [`table`] lists every one; the router is built from it and a
/// test checks it against the OpenAPI document, both ways.
pub struct Route {
    pub path: &'static str,
    /// The method `handler` takes (read by the document's test).
    #[allow(dead_code)]
    pub method: axum::http::Method,
    /// Its `operationId` in `/openapi.json` (read by the document's test).
    #[allow(dead_code)]
    pub operation: &'static str,
    pub handler: axum::routing::MethodRouter<AppState>,
}

/// Every endpoint of the API (the console's pages are the console's).
pub fn table() -> Vec<Route> {
    use crate::{jobs, limits, schedules};
    use axum::http::Method;
    use axum::routing::{delete, get, post, put};
    let route = |path, method: Method, operation, handler| Route {
        path,
        method,
        operation,
        handler,
    };
    vec![
        route("/healthz", Method::GET, "health", get(health)),
        route("/metrics", Method::GET, "metrics", get(metrics)),
        route(
            "/openapi.json",
            Method::GET,
            "openapi",
            get(crate::console::openapi),
        ),
        route(
            "/v1/deployments",
            Method::GET,
            "listDeployments",
            get(deployments),
        ),
        route("/v1/deployments", Method::POST, "deploy", post(deploy)),
        route(
            "/v1/deployments/{name}",
            Method::GET,
            "getDeployment",
            get(deployment),
        ),
        route(
            "/v1/deployments/{name}/component",
            Method::GET,
            "inspectDeployment",
            get(deployment_component),
        ),
        route(
            "/v1/deployments/{name}/grants",
            Method::POST,
            "grantDeployment",
            post(grant),
        ),
        route(
            "/v1/workflows/{workflow}/runs",
            Method::POST,
            "startRun",
            post(start),
        ),
        route("/v1/runs", Method::GET, "listRuns", get(list_runs)),
        route(
            "/v1/runs/bulk",
            Method::POST,
            "bulkRuns",
            post(jobs::submit),
        ),
        route("/v1/jobs", Method::GET, "listJobs", get(jobs::list)),
        route("/v1/jobs/{job_id}", Method::GET, "getJob", get(jobs::get)),
        route(
            "/v1/jobs/{job_id}/cancel",
            Method::POST,
            "cancelJob",
            post(jobs::cancel),
        ),
        route("/v1/limits", Method::GET, "listLimits", get(limits::list)),
        route(
            "/v1/limits/{workflow}",
            Method::POST,
            "setLimit",
            post(limits::set),
        ),
        route(
            "/v1/limits/{workflow}/reset",
            Method::POST,
            "resetLimit",
            post(limits::reset),
        ),
        route("/v1/runs/{run_id}", Method::GET, "getRun", get(get_run)),
        route(
            "/v1/runs/{run_id}",
            Method::DELETE,
            "deleteRun",
            delete(delete_run),
        ),
        route(
            "/v1/store/stats",
            Method::GET,
            "storeStats",
            get(store_stats),
        ),
        route("/v1/store/purge", Method::POST, "purgeStore", post(purge)),
        route(
            "/v1/components/prune",
            Method::POST,
            "pruneComponents",
            post(prune_components),
        ),
        route(
            "/v1/runs/{run_id}/detail",
            Method::GET,
            "getRunDetail",
            get(run_detail),
        ),
        route(
            "/v1/runs/{run_id}/journal",
            Method::GET,
            "getJournal",
            get(journal),
        ),
        route(
            "/v1/runs/{run_id}/result",
            Method::GET,
            "getResult",
            get(result),
        ),
        route(
            "/v1/runs/{run_id}/cancel",
            Method::POST,
            "cancelRun",
            post(cancel),
        ),
        route(
            "/v1/runs/{run_id}/retry",
            Method::POST,
            "retryRun",
            post(retry),
        ),
        route(
            "/v1/runs/{run_id}/events",
            Method::GET,
            "runEvents",
            get(run_events),
        ),
        route("/v1/hooks", Method::GET, "listHooks", get(list_hooks)),
        route("/v1/hooks/{token}", Method::GET, "getHook", get(get_hook)),
        route(
            "/v1/hooks/{token}/resume",
            Method::POST,
            "resumeHook",
            post(resume),
        ),
        route(
            "/v1/hooks/{token}/replies/{payload_id}",
            Method::GET,
            "getReply",
            get(get_reply),
        ),
        route(
            "/v1/runs/{run_id}/streams",
            Method::GET,
            "listStreams",
            get(list_streams),
        ),
        route(
            "/v1/runs/{run_id}/streams/{name}",
            Method::GET,
            "followStream",
            get(follow_stream),
        ),
        route("/v1/events", Method::GET, "listEvents", get(list_events)),
        route(
            "/v1/events/{key}",
            Method::POST,
            "pushEvent",
            post(push_event),
        ),
        route("/v1/workers", Method::GET, "listWorkers", get(workers)),
        route(
            "/v1/webhooks",
            Method::GET,
            "listWebhooks",
            get(crate::webhooks::list),
        ),
        route(
            "/v1/webhooks",
            Method::POST,
            "createWebhook",
            post(crate::webhooks::create),
        ),
        route(
            "/v1/webhooks/{id}",
            Method::GET,
            "getWebhook",
            get(crate::webhooks::get),
        ),
        route(
            "/v1/webhooks/{id}",
            Method::DELETE,
            "deleteWebhook",
            delete(crate::webhooks::delete),
        ),
        route(
            "/v1/webhooks/{id}",
            Method::POST,
            "deliverWebhook",
            post(crate::webhooks::deliver),
        ),
        route(
            "/v1/tokens",
            Method::POST,
            "createToken",
            post(crate::tokens::create),
        ),
        route(
            "/v1/schedules",
            Method::GET,
            "listSchedules",
            get(schedules::list),
        ),
        route(
            "/v1/schedules",
            Method::POST,
            "createSchedule",
            post(schedules::create),
        ),
        route(
            "/v1/schedules/{name}",
            Method::GET,
            "getSchedule",
            get(schedules::get),
        ),
        route(
            "/v1/schedules/{name}",
            Method::PUT,
            "updateSchedule",
            put(schedules::update),
        ),
        route(
            "/v1/schedules/{name}",
            Method::DELETE,
            "deleteSchedule",
            delete(schedules::delete),
        ),
        route(
            "/v1/schedules/{name}/pause",
            Method::POST,
            "pauseSchedule",
            post(schedules::pause),
        ),
        route(
            "/v1/schedules/{name}/resume",
            Method::POST,
            "resumeSchedule",
            post(schedules::resume),
        ),
        route(
            "/v1/schedules/{name}/trigger",
            Method::POST,
            "triggerSchedule",
            post(schedules::trigger),
        ),
        route(
            "/v1/schedules/{name}/backfill",
            Method::POST,
            "backfillSchedule",
            post(schedules::backfill),
        ),
    ]
}

/// The longest a request waits for a run's end.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// What every handler reaches.
#[derive(Clone)]
pub struct AppState {
    pub keel: Keel,
    pub metrics: Arc<Metrics>,
    pub auth: crate::auth::Auth,
}

/// A path parameter; one that is not valid (invalid UTF-8 in its
/// escapes, say) is a JSON error like every other refusal.
pub struct Param(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Param {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Param(value)),
            Err(e) => Err(ApiError::invalid(format!(
                "the path `{}` is not valid: {}",
                parts.uri.path(),
                e.body_text()
            ))),
        }
    }
}

/// Two path parameters, refused as [`Param`] refuses one.
pub struct Params(pub String, pub String);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match Path::<(String, String)>::from_request_parts(parts, state).await {
            Ok(Path((a, b))) => Ok(Params(a, b)),
            Err(e) => Err(ApiError::invalid(format!(
                "the path `{}` is not valid: {}",
                parts.uri.path(),
                e.body_text()
            ))),
        }
    }
}

/// A run ID from the path, parsed (a run ID outside the safe set is 400).
pub struct RunIdParam(pub RunId);

impl<S: Send + Sync> FromRequestParts<S> for RunIdParam {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        let Param(raw) = Param::from_request_parts(parts, state).await?;
        RunId::parse(&raw)
            .map(RunIdParam)
            .map_err(|e| ApiError::invalid(e.to_string()))
    }
}

/// A query string's pairs.
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    pub(crate) fn parse(raw: Option<String>) -> Query {
        Query(
            form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }

    fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn one(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    fn flag(&self, name: &str) -> ApiResult<bool> {
        match self.one(name).as_deref() {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(ApiError::invalid(format!(
                "query parameter `{name}` is true or false, not `{other}`"
            ))),
        }
    }

    /// The attribute filters: `attr=KEY=VALUE` (repeated) and
    /// `attr.KEY=VALUE`, all of which a run must have.
    fn attributes(&self) -> ApiResult<keel_core::Attributes> {
        let mut wanted = keel_core::Attributes::new();
        for (name, value) in &self.0 {
            let (key, value) = match name.strip_prefix("attr.") {
                Some(key) => (key, value.as_str()),
                None if name == "attr" => value.split_once('=').ok_or_else(|| {
                    ApiError::invalid(format!(
                        "`attr` `{value}` is not KEY=VALUE; pass `attr=tenant=acme`"
                    ))
                })?,
                None => continue,
            };
            keel_core::records::check_attribute_filter(key, value).map_err(ApiError::invalid)?;
            wanted.insert(key.to_string(), value.to_string());
        }
        Ok(wanted)
    }

    pub(crate) fn number(&self, name: &str) -> ApiResult<Option<u64>> {
        self.one(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::invalid(format!(
                        "query parameter `{name}` must be a non-negative integer, not `{v}`"
                    ))
                })
            })
            .transpose()
    }
}

/// A JSON body; an empty body is `None`.
fn json_body(Body(body): Body<MAX_BODY>) -> ApiResult<Option<serde_json::Value>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| ApiError::invalid(format!("the request body is not JSON: {e}")))
}

/// A JSON object body as `T`; an empty body is `T::default()`. Numbers
/// written with a zero fraction (`5.0`) count as integers, as in JSON
/// Schema.
pub(crate) fn json_object<T: DeserializeOwned + Default>(body: Body<MAX_BODY>) -> ApiResult<T> {
    match json_body(body)? {
        None => Ok(T::default()),
        Some(mut value @ serde_json::Value::Object(_)) => {
            integral(&mut value, INTEGRAL_FIELDS);
            if let Some(hook) = value.get_mut("hook") {
                integral(hook, &["retention_ms"]);
            }
            serde_json::from_value(value).map_err(|e| {
                ApiError::invalid(format!("the request body is not the object expected: {e}"))
            })
        }
        Some(_) => Err(ApiError::invalid(
            "the request body must be a JSON object; see /openapi.json",
        )),
    }
}

/// The whole-number fields of the request bodies (times and durations in
/// milliseconds).
const INTEGRAL_FIELDS: &[&str] = &[
    "wait_ms",
    "ttl_ms",
    "grace_ms",
    "delay_ms",
    "start_at_ms",
    "end_at_ms",
    "every_ms",
    "offset_ms",
    "catchup_window_ms",
    "from_ms",
    "to_ms",
    "priority",
    "limit",
];

/// Turns `fields` of `object` holding whole numbers written as floats
/// into integers.
fn integral(object: &mut serde_json::Value, fields: &[&str]) {
    for field in fields {
        if let Some(n) = object.get_mut(*field)
            && let Some(f) = n.as_f64()
            && n.is_f64()
            && f.fract() == 0.0
            && (0.0..=u64::MAX as f64).contains(&f)
        {
            *n = serde_json::Value::from(f as u64);
        }
    }
}

/// A wait in milliseconds, at most [`MAX_WAIT`].
fn wait_ms(ms: Option<u64>) -> ApiResult<u64> {
    let ms = ms.unwrap_or(0);
    if ms > MAX_WAIT.as_millis() as u64 {
        return Err(ApiError::invalid(format!(
            "`wait_ms` is at most {} (a longer wait is a loop of calls)",
            MAX_WAIT.as_millis()
        )));
    }
    Ok(ms)
}

/// `GET /healthz`: that the server and its store answer. Anyone may ask,
/// so it names the store only to a caller holding the server's token.
pub async fn health(
    State(s): State<AppState>,
    headers: axum::http::HeaderMap,
) -> ApiResult<Json<Health>> {
    s.keel.runs_page(&RunFilter::default(), None, 1).await?;
    let authorized = s.auth.required() && s.auth.authorizes(&headers);
    Ok(Json(Health {
        status: "ok".into(),
        store: authorized.then(|| s.keel.location()),
        version: authorized.then(|| env!("CARGO_PKG_VERSION").into()),
    }))
}

/// `GET /metrics`.
pub async fn metrics(State(s): State<AppState>) -> ApiResult<Response> {
    let text = s.metrics.render(&s.keel).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// `POST /v1/deployments`: the component's bytes as the body; name,
/// grants and limits in the query.
pub async fn deploy(
    State(s): State<AppState>,
    RawQuery(raw): RawQuery,
    Body(body): Body<MAX_COMPONENT>,
) -> ApiResult<(StatusCode, Json<Deployment>)> {
    let q = Query::parse(raw);
    if body.is_empty() {
        return Err(ApiError::invalid(
            "the body must be the component's bytes (a `.wasm` built for wasm32-wasip2)",
        ));
    }
    let grants = GrantSpec {
        http: q.all("allow_http"),
        dirs: q.all("allow_dir"),
        env: q.all("allow_env"),
    };
    let spec = DeploySpec {
        name: q.one("name").filter(|n| !n.is_empty()),
        // No grant given keeps the name's, unless asked for none.
        grants: (!grants.is_empty() || q.flag("no_grants")?).then_some(grants),
        force: q.flag("force")?,
        limits: StepLimits {
            max_memory_mib: q.number("max_memory_mib")?,
            step_timeout_ms: q.number("step_timeout_ms")?,
        },
        retention_ms: q.number("retention_ms")?,
    };
    let origin = FsPath::new("<uploaded component>");
    let (deployment, _) = s.keel.deploy(origin, &body, spec).await?;
    Ok((StatusCode::CREATED, Json(deployment)))
}

/// `POST /v1/deployments/{name}/grants`: adds grants to every build of a
/// deployment name (or the one build of a hash); runs pinned to them get
/// them at their next activation.
pub async fn grant(
    State(s): State<AppState>,
    Param(name): Param,
    body: Body<MAX_BODY>,
) -> ApiResult<Json<DeploymentList>> {
    let request: GrantRequest = json_object(body)?;
    let grants = GrantSpec {
        http: request.http,
        dirs: request.dirs,
        env: request.env,
    };
    let deployments = s.keel.grant(&name, &grants, request.replace).await?;
    Ok(Json(DeploymentList { deployments }))
}

/// `GET /v1/deployments`.
pub async fn deployments(State(s): State<AppState>) -> ApiResult<Json<DeploymentList>> {
    Ok(Json(DeploymentList {
        deployments: s.keel.deployments().await?.as_ref().clone(),
    }))
}

/// `GET /v1/deployments/{name}`: by name (its latest) or hash.
pub async fn deployment(
    State(s): State<AppState>,
    Param(name): Param,
) -> ApiResult<Json<Deployment>> {
    Ok(Json(s.keel.deployment(&name).await?))
}

/// `GET /v1/deployments/{name}/component`: what the build a deployment
/// name (its current build) or hash names exports, schemas included, as
/// `keel inspect` shows it.
pub async fn deployment_component(
    State(s): State<AppState>,
    Param(name): Param,
) -> ApiResult<Json<ComponentView>> {
    let loaded = s.keel.deployed_component(&name).await?;
    Ok(Json(ComponentView::from(loaded.as_ref())))
}

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
        return_on_wait: request.return_on_wait,
    };
    let run_id = request
        .run_id
        .as_deref()
        .map(RunId::parse)
        .transpose()
        .map_err(keel_host::Error::from)?;
    let start_at_ms = match (request.delay_ms, request.start_at_ms) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "give `delay_ms` or `start_at_ms`, not both",
            ));
        }
        (Some(delay), None) => Some(s.keel.clock_ms().saturating_add(delay)),
        (None, at) => at,
    };
    if request.timeout_ms == Some(0) {
        return Err(ApiError::invalid(
            "`timeout_ms` is at least 1; leave it out for the workflow's own timeout",
        ));
    }
    let options = StartOptions {
        // The handler drives it at once (`drive_and_wait`).
        driven_here: true,
        run_id,
        start_at_ms,
        priority: request.priority,
        timeout: request.timeout_ms.map(Duration::from_millis),
        attributes: request.attributes,
        additional_metadata: request.additional_metadata,
        // The caller's trace (W3C Trace Context), which the run's spans join.
        traceparent: headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
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

/// How long a request waits for a run it moved on.
struct Wait {
    ms: u64,
    /// Answer once the run waits, without waiting for its end.
    return_on_wait: bool,
}

/// Drives `run` in the background (it goes on if the client leaves) and
/// waits up to `wait.ms` for it to end; returns its record as it then is.
/// What brought the run here (its start, a payload, a retry) was
/// acknowledged, so a failure while waiting answers with the record last
/// read, never with an error a client could take for a refusal.
async fn drive_and_wait(keel: &Keel, run: RunRecord, wait: Wait) -> ApiResult<RunRecord> {
    let run_id = run.run_id.clone();
    let known = run.clone();
    match wait_on(keel, run, wait).await {
        Ok(run) => Ok(run),
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

async fn wait_on(keel: &Keel, run: RunRecord, wait: Wait) -> ApiResult<RunRecord> {
    let until = match wait.return_on_wait {
        true => Until::Settled,
        false => Until::Ended,
    };
    let timeout = Duration::from_millis(wait.ms).min(MAX_WAIT);
    let driven = keel.drive_and_wait(&run.run_id, until, timeout).await?;
    // A run that waits (to start, or for a concurrency slot) answers at
    // once when asked to.
    Ok(match wait.ms {
        0 => run,
        _ => driven,
    })
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

/// `GET /v1/store/stats`: what the store holds.
pub async fn store_stats(
    State(s): State<AppState>,
) -> ApiResult<Json<keel_core::retention::StoreStats>> {
    Ok(Json(s.keel.store_stats().await?))
}

/// `POST /v1/store/purge`: purges the ended runs past their retention now
/// (the workers do so on their own every few seconds).
pub async fn purge(State(s): State<AppState>) -> ApiResult<Json<crate::wire::PurgeView>> {
    Ok(Json(s.keel.purge_ended(usize::MAX).await?.into()))
}

/// `POST /v1/components/prune`: deletes the stored components no
/// deployment and no run names, stored before the grace.
pub async fn prune_components(
    State(s): State<AppState>,
    body: Body<MAX_BODY>,
) -> ApiResult<Json<keel_core::retention::Pruned>> {
    let request: PruneRequest = json_object(body)?;
    let grace_ms = request.grace_ms.unwrap_or(3_600_000);
    if grace_ms > MAX_GRACE_MS {
        return Err(ApiError::invalid(format!(
            "`grace_ms` {grace_ms} is over a century ({MAX_GRACE_MS})"
        )));
    }
    Ok(Json(
        s.keel.prune_components(grace_ms, request.dry_run).await?,
    ))
}

/// `GET /v1/runs/{run_id}/detail`: the run, its timeline and journal.
pub async fn run_detail(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
) -> ApiResult<Json<RunDetail>> {
    let run = s.keel.get_run(&run_id).await?;
    let journal = s.keel.journal(&run_id).await?;
    Ok(Json(RunDetail {
        run: RunView::read(&s.keel, &run).await?,
        timeline: timeline(&journal),
        journal: journal.iter().map(JournalEntry::of).collect(),
        now_ms: s.keel.clock_ms(),
    }))
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
    let run = s.keel.wait_for_end(&run_id, wait).await?;
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
        return_on_wait: false,
    };
    let force = q.flag("force")?;
    let run = s
        .keel
        .cancel_on_request(&run_id, &reason, "api", force)
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
    let wait = Wait {
        ms: wait_ms(q.number("wait_ms")?)?,
        return_on_wait: q.flag("return_on_wait")?,
    };
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

fn sse_json(name: &str, value: &impl serde::Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(value).expect("views serialize"))
}

/// `GET /v1/hooks`.
pub async fn list_hooks(State(s): State<AppState>) -> ApiResult<Json<HookList>> {
    Ok(Json(HookList {
        hooks: s
            .keel
            .list_hooks()
            .await?
            .iter()
            .map(HookView::from)
            .collect(),
    }))
}

/// `GET /v1/hooks/{token}`.
pub async fn get_hook(State(s): State<AppState>, Param(token): Param) -> ApiResult<Json<HookView>> {
    Ok(Json(HookView::from(&s.keel.get_hook(&token).await?)))
}

/// `POST /v1/hooks/{token}/resume?wait_ms=N&payload_id=ID&wait_reply_ms=N`:
/// the body is the payload (any JSON; empty is `null`). Answers with the
/// hook's run, after waiting up to `wait_ms` for it to end; with
/// `wait_reply_ms`, with the workflow's reply too, or 202 and where to
/// fetch it once the wait passes. A resume retried with the same
/// `payload_id` delivers nothing twice.
pub async fn resume(
    State(s): State<AppState>,
    Param(token): Param,
    RawQuery(raw): RawQuery,
    body: Body<MAX_BODY>,
) -> ApiResult<axum::response::Response> {
    let q = Query::parse(raw);
    let wait = Wait {
        ms: wait_ms(q.number("wait_ms")?)?,
        return_on_wait: q.flag("return_on_wait")?,
    };
    let wait_reply = q
        .number("wait_reply_ms")?
        .map(|ms| wait_ms(Some(ms)))
        .transpose()?;
    let payload_id = q
        .one("payload_id")
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let payload = json_body(body)?.unwrap_or(serde_json::Value::Null);
    let resumed = s
        .keel
        .deliver(&token, &payload.to_string(), Some(&payload_id))
        .await?;
    let run_id = resumed.run_id.clone();
    // Delivered: from here on, a failure to read the run is no refusal.
    let interrupted = |e: keel_host::Error| {
        ApiError::from(keel_host::Error::DriveInterrupted {
            run_id: run_id.clone(),
            reason: e.to_string(),
        })
    };
    let run = s.keel.get_run(&run_id).await.map_err(interrupted)?;
    let mut reply = None;
    let run = match wait_reply {
        Some(ms) => {
            // The run is driven meanwhile; the reply ends the wait.
            let (keel, id) = (s.keel.clone(), run_id.clone());
            tokio::spawn(async move { keel.drive(&id).await });
            let got = s
                .keel
                .wait_reply_to(&resumed, &token, &payload_id, Duration::from_millis(ms))
                .await
                .map_err(interrupted)?;
            reply = got.reply;
            s.keel.get_run(&run_id).await.map_err(interrupted)?
        }
        None => drive_and_wait(&s.keel, run, wait).await?,
    };
    let mut view = moved_on(&s.keel, &run).await;
    view.payload_id = Some(payload_id.clone());
    view.reply = reply.as_deref().map(crate::wire::value_of);
    if wait_reply.is_some() && reply.is_none() {
        let location = format!(
            "/v1/hooks/{}/replies/{}",
            encode_path(&token),
            encode_path(&payload_id)
        );
        return Ok((
            StatusCode::ACCEPTED,
            [(axum::http::header::LOCATION, location)],
            Json(view),
        )
            .into_response());
    }
    Ok(Json(view).into_response())
}

/// A path segment, percent-encoded.
fn encode_path(segment: &str) -> String {
    form_urlencoded::byte_serialize(segment.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// `GET /v1/hooks/{token}/replies/{payload_id}?wait_ms=N`: the workflow's
/// reply to a payload delivered with that ID, waiting up to `wait_ms` for
/// it; 202 while it has not replied.
pub async fn get_reply(
    State(s): State<AppState>,
    Params(token, payload_id): Params,
    RawQuery(raw): RawQuery,
) -> ApiResult<(StatusCode, Json<ReplyView>)> {
    let q = Query::parse(raw);
    let ms = wait_ms(q.number("wait_ms")?)?;
    let reply = s
        .keel
        .wait_reply(&token, &payload_id, Duration::from_millis(ms))
        .await?;
    let status = if reply.reply.is_some() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(ReplyView::from(&reply))))
}

/// `GET /v1/runs/{run_id}/streams`.
pub async fn list_streams(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
) -> ApiResult<Json<StreamList>> {
    let streams = s.keel.streams(&run_id).await?;
    Ok(Json(StreamList {
        streams: streams.iter().map(StreamView::from).collect(),
    }))
}

/// `GET /v1/runs/{run_id}/streams/{name}?from=N`: the stream's chunks as
/// server-sent events, from index `from` (or after the `Last-Event-ID` a
/// reconnecting client sends), each with its index as the event's `id`;
/// ends when the stream is closed or the run has ended.
pub async fn follow_stream(
    State(s): State<AppState>,
    Params(run_id, name): Params,
    RawQuery(raw): RawQuery,
    headers: axum::http::HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let run_id = RunId::parse(&run_id).map_err(keel_host::Error::from)?;
    keel_core::stream::check_stream_name(&name).map_err(ApiError::invalid)?;
    let q = Query::parse(raw);
    let last_seen = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::invalid("`Last-Event-ID` is the index of the last chunk received")
                })?,
        ),
        None => None,
    };
    let from = q.number("from")?;
    let from = match last_seen {
        Some(index) => index.saturating_add(1),
        None => from.unwrap_or(0),
    };
    s.keel.get_run(&run_id).await?;
    let stream = futures::StreamExt::map(s.keel.follow_stream(&run_id, &name, from), |chunk| {
        Ok(match chunk {
            Ok(chunk) => {
                let view = ChunkView::from(&chunk);
                sse_json(&view.kind, &view).id(chunk.index.to_string())
            }
            Err(e) => Event::default().event("error").data(e.to_string()),
        })
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The view of a run that an acknowledged change (a retry, a payload)
/// moved on, with what it waits on; that is left out if it cannot be read,
/// since the change stands.
async fn moved_on(keel: &Keel, run: &RunRecord) -> RunView {
    let mut view = RunView::from(run);
    view.waiting_on = keel.waiting_on(run).await.unwrap_or_default();
    view
}

/// `POST /v1/events/{key}`.
pub async fn push_event(
    State(s): State<AppState>,
    Param(key): Param,
    body: Body<MAX_BODY>,
) -> ApiResult<(StatusCode, Json<EventView>)> {
    let request: PushEventRequest = json_object(body)?;
    let metadata = request.metadata.unwrap_or_else(|| serde_json::json!({}));
    let event = s
        .keel
        .push_event(&key, &request.payload.to_string(), &metadata.to_string())
        .await?;
    for outcome in event.outcomes.iter().filter(|o| !o.deduplicated) {
        if let Some(run_id) = &outcome.run_id {
            let (keel, run_id) = (s.keel.clone(), run_id.clone());
            tokio::spawn(async move { keel.drive(&run_id).await });
        }
    }
    Ok((StatusCode::CREATED, Json(EventView::from(&event))))
}

/// `GET /v1/events`.
pub async fn list_events(State(s): State<AppState>) -> ApiResult<Json<EventList>> {
    let mut events: Vec<EventView> = s
        .keel
        .list_events()
        .await?
        .iter()
        .map(EventView::from)
        .collect();
    events.reverse();
    Ok(Json(EventList { events }))
}

/// `GET /v1/workers`.
pub async fn workers(State(s): State<AppState>) -> ApiResult<Json<WorkerList>> {
    let workers = s
        .keel
        .workers()
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    Ok(Json(WorkerList { workers }))
}

/// Any other path.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        keel_core::ErrorKind::NotFound,
        format!(
            "no endpoint at `{}`; the API is described at /openapi.json",
            uri.path()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document describes exactly the routes the router serves, each
    /// under its operation ID.
    #[test]
    fn every_route_is_documented_and_every_documented_operation_is_routed() {
        let doc = crate::openapi::document();
        let paths = doc["paths"].as_object().unwrap();
        let routes = table();
        for route in &routes {
            let method = route.method.as_str().to_ascii_lowercase();
            let operation = &paths
                .get(route.path)
                .unwrap_or_else(|| panic!("{} is not in /openapi.json", route.path))[&method];
            assert_eq!(
                operation["operationId"], route.operation,
                "{} {}: {operation}",
                route.method, route.path
            );
        }
        for (path, operations) in paths {
            for method in operations.as_object().unwrap().keys() {
                assert!(
                    routes
                        .iter()
                        .any(|r| r.path == path && r.method.as_str().eq_ignore_ascii_case(method)),
                    "/openapi.json documents {method} {path}, which no route serves"
                );
            }
        }
    }
}
