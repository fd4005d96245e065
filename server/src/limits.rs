//! The concurrency-limit endpoints: list the groups and overrides, set an
//! operator's limit, reset it. The engine and the store decide; these
//! translate.

use axum::Json;
use axum::extract::State;

use crate::MAX_BODY;
use crate::body::Body;
use crate::error::ApiResult;
use crate::extract::{Param, json_object};
use crate::state::AppState;
use crate::wire::{LimitChange, LimitList, LimitRequest, LimitResetRequest};

/// `GET /v1/limits`.
pub async fn list(State(s): State<AppState>) -> ApiResult<Json<LimitList>> {
    Ok(Json(LimitList {
        limits: s.keel.limits().await?,
    }))
}

/// `POST /v1/limits/{workflow}`: `{"limit": N, "key": "..."}`.
pub async fn set(
    State(s): State<AppState>,
    Param(workflow): Param,
    body: Body<MAX_BODY>,
) -> ApiResult<Json<LimitChange>> {
    let request: LimitRequest = json_object(body)?;
    let started = s
        .keel
        .set_limit(&workflow, request.key.as_deref(), request.limit)
        .await?;
    changed(&s, started).await
}

/// `POST /v1/limits/{workflow}/reset`: `{"key": "..."}` or `{}`.
pub async fn reset(
    State(s): State<AppState>,
    Param(workflow): Param,
    body: Body<MAX_BODY>,
) -> ApiResult<Json<LimitChange>> {
    let request: LimitResetRequest = json_object(body)?;
    let started = s
        .keel
        .reset_limit(&workflow, request.key.as_deref())
        .await?;
    changed(&s, started).await
}

async fn changed(s: &AppState, started: Vec<keel_core::RunId>) -> ApiResult<Json<LimitChange>> {
    Ok(Json(LimitChange {
        started: started.into_iter().map(|r| r.into_string()).collect(),
        limits: s.keel.limits().await?,
    }))
}
