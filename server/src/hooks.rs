//! Hooks: listing, reading, resuming with a payload and the workflow's
//! replies.

use std::time::Duration;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;

use crate::MAX_BODY;
use crate::body::Body;
use crate::error::{ApiError, ApiResult};
use crate::extract::*;
use crate::runs::{Wait, drive_and_wait, moved_on};
use crate::state::AppState;
use crate::wire::*;

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
    let resume = Resume {
        wait: Wait::from_query(&q)?,
        wait_reply: q
            .number("wait_reply_ms")?
            .map(|ms| wait_ms(Some(ms)))
            .transpose()?,
        payload_id: q
            .one("payload_id")
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        payload: json_body(body)?.unwrap_or(serde_json::Value::Null),
        token,
    };
    let (token, payload_id, asked_reply) = (
        resume.token.clone(),
        resume.payload_id.clone(),
        resume.wait_reply.is_some(),
    );
    let view = resume_and_wait(&s, resume).await?;
    if asked_reply && view.reply.is_none() {
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

/// A resume: a payload for the hook holding `token`, and what to wait for.
pub(crate) struct Resume {
    pub(crate) token: String,
    pub(crate) payload: serde_json::Value,
    /// A resume retried with it delivers nothing twice.
    pub(crate) payload_id: String,
    /// How long to wait for the run to move on, when no reply is awaited.
    pub(crate) wait: Wait,
    /// How long to wait for the workflow's reply (ms), if at all.
    pub(crate) wait_reply: Option<u64>,
}

/// Delivers a resume's payload and waits as it asks: the run as it then
/// is, with the payload ID, and the workflow's reply when one was awaited
/// and came. A failure after the delivery is `drive_interrupted` naming
/// the run, never a refusal.
pub(crate) async fn resume_and_wait(s: &AppState, resume: Resume) -> ApiResult<RunView> {
    let Resume {
        token,
        payload,
        payload_id,
        wait,
        wait_reply,
    } = resume;
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
            s.keel.drive_for_caller(&run_id);
            let got = s
                .keel
                .wait_reply_to(&resumed, &token, &payload_id, Duration::from_millis(ms))
                .await
                .map_err(interrupted)?;
            reply = got.reply;
            if !s.keel.drives_in_background() {
                // No worker carries the run on after this answer (the
                // CLI's own engine): the run settles before it is given.
                let wait = Duration::from_millis(ms).min(MAX_WAIT);
                s.keel
                    .wait_for(&run_id, keel_host::Until::Settled, wait)
                    .await
                    .map_err(interrupted)?;
            }
            s.keel.get_run(&run_id).await.map_err(interrupted)?
        }
        None => drive_and_wait(&s.keel, run, wait).await?,
    };
    let mut view = moved_on(&s.keel, &run).await;
    view.payload_id = Some(payload_id);
    view.reply = reply.as_deref().map(crate::wire::value_of);
    Ok(view)
}

/// A path segment, percent-encoded.
pub(crate) fn encode_path(segment: &str) -> String {
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
