//! Deployments: upload, grants, listing and the component's bytes.

use std::path::Path as FsPath;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use keel_core::{Deployment, GrantSpec, StepLimits};
use keel_host::DeploySpec;

use crate::body::Body;
use crate::error::{ApiError, ApiResult};
use crate::extract::*;
use crate::state::AppState;
use crate::wire::*;
use crate::{MAX_BODY, MAX_COMPONENT};

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
