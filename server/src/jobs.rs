//! The bulk-operation endpoints: submit an action on the runs a filter
//! selects (or count them with `dry_run`), list jobs, read one, cancel one.
//! The engine carries jobs out; these translate.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use keel_core::bulk::BulkRequest;

use crate::MAX_BODY;
use crate::body::Body;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Param, Query, json_object};
use crate::runs::MAX_REASON;
use crate::state::AppState;
use crate::wire::{BulkPreviewView, BulkRequestBody, JobList, JobView, RunView, UpgradeRequest};

/// How many runs a dry run shows.
const SAMPLE: usize = 10;

/// How many jobs a listing shows at most.
const MAX_JOBS: u64 = 1000;

/// `POST /v1/runs/bulk`: 202 with the job (and its `Location`), or 200
/// with what it would do for a `dry_run`.
pub async fn submit(State(s): State<AppState>, body: Body<MAX_BODY>) -> ApiResult<Response> {
    let Some(body): Option<BulkRequestBody> = json_object(body)? else {
        return Err(ApiError::invalid(
            "the request body must be {\"action\": ..., \"filter\": {...}}; see /openapi.json",
        ));
    };
    if body.reason.as_ref().is_some_and(|r| r.len() > MAX_REASON) {
        return Err(ApiError::invalid(format!(
            "`reason` is longer than {MAX_REASON} bytes"
        )));
    }
    let dry_run = body.dry_run;
    let restart = body.restart().map_err(ApiError::invalid)?;
    let request = BulkRequest {
        action: body.action,
        filter: body.filter.into(),
        reason: body.reason,
        force: body.force,
        upgrade: None,
        restart,
    };
    if dry_run {
        let preview = s.keel.preview_bulk(&request, SAMPLE).await?;
        let view = BulkPreviewView {
            acted_on: preview.acted_on,
            passed_over: preview.passed_over,
            sample: preview.sample.iter().map(RunView::from).collect(),
        };
        return Ok(Json(view).into_response());
    }
    let job = s.keel.submit_bulk(request).await?;
    s.keel.spawn_job(job.job_id.clone());
    let location = format!("/v1/jobs/{}", job.job_id);
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(JobView::from(&job)),
    )
        .into_response())
}

/// `POST /v1/deployments/{name}/upgrade`: 202 with the upgrade's job (and
/// its `Location`), which moves the name's live runs to the build asked
/// (its current one if none) where their journals replay (judges them
/// only, with `dry_run`).
pub async fn upgrade(
    State(s): State<AppState>,
    Param(name): Param,
    body: Body<MAX_BODY>,
) -> ApiResult<Response> {
    let body: UpgradeRequest = json_object(body)?;
    let to = body.to.as_deref().unwrap_or(&name);
    let job = s
        .keel
        .submit_upgrade(&name, to, body.dry_run, body.ramp)
        .await?;
    s.keel.spawn_job(job.job_id.clone());
    let location = format!("/v1/jobs/{}", job.job_id);
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(JobView::from(&job)),
    )
        .into_response())
}

/// `GET /v1/jobs?limit=N`: the newest jobs first.
pub async fn list(State(s): State<AppState>, RawQuery(raw): RawQuery) -> ApiResult<Json<JobList>> {
    let limit = Query::parse(raw).number("limit")?.unwrap_or(50);
    if !(1..=MAX_JOBS).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "`limit` {limit} is not 1 to {MAX_JOBS}"
        )));
    }
    let jobs = s.keel.jobs(limit as usize).await?;
    Ok(Json(JobList {
        jobs: jobs.iter().map(JobView::from).collect(),
    }))
}

/// `GET /v1/jobs/{job_id}`.
pub async fn get(State(s): State<AppState>, Param(job_id): Param) -> ApiResult<Json<JobView>> {
    Ok(Json(JobView::from(&s.keel.job(&job_id).await?)))
}

/// `POST /v1/jobs/{job_id}/cancel`: stops a running job; the runs acted
/// on stay so.
pub async fn cancel(State(s): State<AppState>, Param(job_id): Param) -> ApiResult<Json<JobView>> {
    Ok(Json(JobView::from(&s.keel.cancel_job(&job_id).await?)))
}
