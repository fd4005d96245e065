//! The schedule endpoints: create, list, read, delete, pause, resume,
//! trigger and backfill. The engine decides everything; these translate.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::MAX_BODY;
use crate::body::Body;
use crate::error::ApiResult;
use crate::extract::{Param, json_object};
use crate::state::AppState;
use crate::wire::{
    BackfillRequest, FireList, FireView, PauseRequest, ScheduleList, ScheduleRequest, ScheduleView,
};
use keel_core::schedule::ScheduleRecord;

/// The view of `record` with the status of each recent fire's run.
pub async fn view(
    keel: &keel_host::Keel,
    record: &ScheduleRecord,
) -> keel_host::Result<ScheduleView> {
    let mut view = ScheduleView::of(record);
    for fire in &mut view.recent {
        if let Some(run_id) = &fire.run_id {
            fire.run_status = match keel.get_run(run_id).await {
                Ok(run) => Some(run.status),
                Err(keel_host::Error::RunNotFound { .. }) => None,
                Err(e) => return Err(e),
            };
        }
    }
    Ok(view)
}

/// `POST /v1/schedules`.
pub async fn create(
    State(s): State<AppState>,
    body: Body<MAX_BODY>,
) -> ApiResult<(StatusCode, Json<ScheduleView>)> {
    let request: ScheduleRequest = json_object(body)?;
    let record = s.keel.create_schedule(request.spec()?).await?;
    Ok((StatusCode::CREATED, Json(ScheduleView::of(&record))))
}

/// `PUT /v1/schedules/{name}`: new settings for a schedule (its fires and
/// pause are kept).
pub async fn update(
    State(s): State<AppState>,
    Param(name): Param,
    body: Body<MAX_BODY>,
) -> ApiResult<Json<ScheduleView>> {
    let mut request: ScheduleRequest = json_object(body)?;
    match &request.name {
        None => request.name = Some(name),
        Some(named) if *named == name => {}
        Some(named) => {
            return Err(crate::error::ApiError::invalid(format!(
                "the body names schedule `{named}`, the path `{name}`; a schedule is not renamed"
            )));
        }
    }
    let record = s.keel.update_schedule(request.spec()?).await?;
    Ok(Json(ScheduleView::of(&record)))
}

/// `GET /v1/schedules`.
pub async fn list(State(s): State<AppState>) -> ApiResult<Json<ScheduleList>> {
    let schedules = s.keel.schedules().await?;
    Ok(Json(ScheduleList {
        schedules: schedules.iter().map(ScheduleView::of).collect(),
    }))
}

/// `GET /v1/schedules/{name}`.
pub async fn get(State(s): State<AppState>, Param(name): Param) -> ApiResult<Json<ScheduleView>> {
    Ok(Json(view(&s.keel, &s.keel.schedule(&name).await?).await?))
}

/// `DELETE /v1/schedules/{name}`: answers with the schedule as it was.
pub async fn delete(
    State(s): State<AppState>,
    Param(name): Param,
) -> ApiResult<Json<ScheduleView>> {
    Ok(Json(ScheduleView::of(
        &s.keel.delete_schedule(&name).await?,
    )))
}

/// `POST /v1/schedules/{name}/pause`.
pub async fn pause(
    State(s): State<AppState>,
    Param(name): Param,
    body: Body<MAX_BODY>,
) -> ApiResult<Json<ScheduleView>> {
    let request: PauseRequest = json_object(body)?;
    let record = s.keel.pause_schedule(&name, request.note).await?;
    Ok(Json(ScheduleView::of(&record)))
}

/// `POST /v1/schedules/{name}/resume`.
pub async fn resume(
    State(s): State<AppState>,
    Param(name): Param,
    body: Body<MAX_BODY>,
) -> ApiResult<Json<ScheduleView>> {
    let request: PauseRequest = json_object(body)?;
    let record = s.keel.resume_schedule(&name, request.note).await?;
    Ok(Json(ScheduleView::of(&record)))
}

/// `POST /v1/schedules/{name}/trigger`: one fire now.
pub async fn trigger(State(s): State<AppState>, Param(name): Param) -> ApiResult<Json<FireView>> {
    Ok(Json(FireView::from(&s.keel.trigger_schedule(&name).await?)))
}

/// `POST /v1/schedules/{name}/backfill`.
pub async fn backfill(
    State(s): State<AppState>,
    Param(name): Param,
    body: Body<MAX_BODY>,
) -> ApiResult<Json<FireList>> {
    let request: BackfillRequest = json_object(body)?;
    let fires = s
        .keel
        .backfill_schedule(&name, request.from_ms, request.to_ms)
        .await?;
    Ok(Json(FireList {
        fires: fires.iter().map(FireView::from).collect(),
    }))
}
