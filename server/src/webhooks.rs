//! The webhook endpoints: create, list, show and delete webhooks (with the
//! server's token), and `POST /v1/webhooks/{id}`, which a sender reaches
//! without keel's token: its signature is its credential, checked by the
//! engine before anything is delivered.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use keel_host::Received;

use crate::MAX_BODY;
use crate::body::Body;
use crate::error::ApiResult;
use crate::extract::{Param, json_object};
use crate::state::AppState;
use crate::wire::{DeliveryView, EventView, WebhookList, WebhookRequest, WebhookView};

/// Whether a request is a delivery to a webhook: `POST /v1/webhooks/{id}`.
pub fn is_delivery(method: &Method, path: &str) -> bool {
    method == Method::POST
        && path
            .strip_prefix("/v1/webhooks/")
            .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// `POST /v1/webhooks`.
pub async fn create(
    State(s): State<AppState>,
    body: Body<MAX_BODY>,
) -> ApiResult<(StatusCode, Json<WebhookView>)> {
    let request: WebhookRequest = json_object(body)?;
    let (target, scheme) = request.spec()?;
    let record = s
        .keel
        .create_webhook(&request.id, target, scheme, &request.secret)
        .await?;
    Ok((StatusCode::CREATED, Json(WebhookView::of(&record))))
}

/// `GET /v1/webhooks`.
pub async fn list(State(s): State<AppState>) -> ApiResult<Json<WebhookList>> {
    let webhooks = s.keel.webhooks().await?;
    Ok(Json(WebhookList {
        webhooks: webhooks.iter().map(WebhookView::of).collect(),
    }))
}

/// `GET /v1/webhooks/{id}`.
pub async fn get(State(s): State<AppState>, Param(id): Param) -> ApiResult<Json<WebhookView>> {
    Ok(Json(WebhookView::of(&s.keel.webhook(&id).await?)))
}

/// `DELETE /v1/webhooks/{id}`.
pub async fn delete(State(s): State<AppState>, Param(id): Param) -> ApiResult<Json<WebhookView>> {
    Ok(Json(WebhookView::of(&s.keel.delete_webhook(&id).await?)))
}

/// `POST /v1/webhooks/{id}`: a signed delivery, its raw body the payload.
pub async fn deliver(
    State(s): State<AppState>,
    Param(id): Param,
    headers: HeaderMap,
    Body(body): Body<MAX_BODY>,
) -> ApiResult<Json<DeliveryView>> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let received = s.keel.receive_webhook(&id, header, &body).await?;
    Ok(Json(match received {
        Received::Hook { token, resumed } => {
            if !resumed.duplicate {
                s.keel.drive_in_background(&resumed.run_id);
            }
            DeliveryView {
                token: Some(token),
                run_id: Some(resumed.run_id.to_string()),
                duplicate: resumed.duplicate,
                event: None,
            }
        }
        Received::Event { token, event } => {
            for outcome in event.outcomes.iter().filter(|o| !o.deduplicated) {
                if let Some(run_id) = &outcome.run_id {
                    s.keel.drive_in_background(run_id);
                }
            }
            DeliveryView {
                token,
                run_id: None,
                duplicate: false,
                event: Some(EventView::from(&event)),
            }
        }
    }))
}
