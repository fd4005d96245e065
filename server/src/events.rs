//! Events: pushing one to the workflows subscribed to its name, and
//! listing those pushed.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::MAX_BODY;
use crate::body::Body;
use crate::error::ApiResult;
use crate::extract::*;
use crate::state::AppState;
use crate::wire::*;

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
            s.keel.drive_in_background(run_id);
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
