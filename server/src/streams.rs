//! A run's streams: listing them and following one as server-sent events.

use std::convert::Infallible;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use keel_core::RunId;

use crate::error::{ApiError, ApiResult};
use crate::extract::*;
use crate::state::AppState;
use crate::wire::*;

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
