//! The server's own endpoints: health, metrics, the store's figures,
//! purges and pruning, and the workers sharing the store.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use keel_core::RunFilter;

use crate::MAX_BODY;
use crate::body::Body;
use crate::error::{ApiError, ApiResult};
use crate::extract::*;
use crate::state::AppState;
use crate::wire::*;

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

/// `GET /metrics`: OpenMetrics to a scraper that asks for it (`Accept:
/// application/openmetrics-text`, as Prometheus does), else the
/// Prometheus text format that every scraper and `promtool` reads.
pub async fn metrics(
    State(s): State<AppState>,
    headers: axum::http::HeaderMap,
) -> ApiResult<Response> {
    let text = s.metrics.render(&s.keel).await?;
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    Ok(match openmetrics {
        true => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        false => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            crate::metrics::prometheus_text(&text),
        ),
    }
    .into_response())
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
