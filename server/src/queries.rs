//! Queries of a run's state: answered by an offline replay of its journal,
//! which writes nothing (`Keel::queries`).

use axum::Json;
use axum::extract::State;

use crate::error::ApiResult;
use crate::extract::{Params, RunIdParam};
use crate::state::AppState;
use crate::wire::{QueriesView, QueryView};

/// `GET /v1/runs/{run_id}/queries`: every query the run's workflow set,
/// as a replay of its journal left them.
pub async fn list(
    State(s): State<AppState>,
    RunIdParam(run_id): RunIdParam,
) -> ApiResult<Json<QueriesView>> {
    Ok(Json(s.keel.queries(&run_id).await?.into()))
}

/// `GET /v1/runs/{run_id}/queries/{name}`: one query's value; 404
/// `query_not_found` naming the queries set when the workflow set no
/// `name`.
pub async fn get(
    State(s): State<AppState>,
    Params(run_id, name): Params,
) -> ApiResult<Json<QueryView>> {
    let run_id = keel_core::RunId::parse(&run_id).map_err(keel_host::Error::from)?;
    let (queries, value) = s.keel.query(&run_id, &name).await?;
    Ok(Json(QueryView::of(&queries, &name, &value)))
}
