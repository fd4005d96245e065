//! Scoped tokens over HTTP: `POST /v1/tokens` mints one (the server's
//! token is needed, not another scoped one); [`check_start`] holds a start
//! made with a scoped token to the hook token or run ID its scope fixes.
//! [`mint`] is the one way a token is made, by the API and the CLI.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use keel_core::ErrorKind;
use keel_core::access::{self, Scope};

use crate::MAX_BODY;
use crate::auth::Scoped;
use crate::body::Body;
use crate::error::{ApiError, ApiResult};
use crate::extract::json_object;
use crate::state::AppState;
use crate::wire::{StartRequest, TokenRequest, TokenView};

/// `POST /v1/tokens`: `{"scope": {...}, "ttl_ms": N}`.
pub async fn create(
    State(s): State<AppState>,
    scoped: Option<axum::Extension<Scoped>>,
    body: Body<MAX_BODY>,
) -> ApiResult<(StatusCode, Json<TokenView>)> {
    if scoped.is_some() {
        return Err(ApiError::new(
            ErrorKind::Forbidden,
            "a scoped token cannot mint tokens; use the server's token",
        ));
    }
    let request: TokenRequest = json_object::<Option<TokenRequest>>(body)?.ok_or_else(|| {
        ApiError::invalid(
            "the body must say what the token may do: {\"scope\": {\"kind\": \"resume_hook\", \"token\": \"...\"}}",
        )
    })?;
    let secret = s.auth.secret().ok_or_else(|| {
        ApiError::new(
            ErrorKind::Internal,
            "this server has no signing secret, so it cannot mint scoped tokens",
        )
    })?;
    Ok((StatusCode::CREATED, Json(mint(&secret, request)?)))
}

/// A token for `request`, signed with `secret`, minted now (wall clock:
/// tokens expire in real time).
pub fn mint(secret: &[u8], request: TokenRequest) -> ApiResult<TokenView> {
    check_scope(&request.scope)?;
    let claims = access::claims(request.scope, crate::auth::now_ms(), request.ttl_ms)
        .map_err(ApiError::invalid)?;
    Ok(TokenView {
        token: access::mint(secret, &claims),
        scope: claims.scope,
        issued_at_ms: claims.issued_at_ms,
        expires_at_ms: claims.expires_at_ms,
    })
}

/// Refuses a scope naming nothing (an empty hook token, run or workflow).
fn check_scope(scope: &Scope) -> ApiResult<()> {
    let named = match scope {
        Scope::ResumeHook { token } => !token.is_empty(),
        Scope::ReadRun { run_id } => keel_core::RunId::parse(run_id).is_ok(),
        Scope::StartWorkflow {
            workflow, run_id, ..
        } => {
            !workflow.is_empty()
                && run_id
                    .as_deref()
                    .is_none_or(|r| keel_core::RunId::parse(r).is_ok())
        }
    };
    if named {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "the scope must name what it grants: {} names nothing valid",
            scope.describe()
        )))
    }
}

/// Refuses a start made with a scoped token whose scope fixes the start
/// hook token or the run ID, when the request asks for another.
pub fn check_start(scoped: Option<&Scoped>, request: &StartRequest) -> ApiResult<()> {
    let Some(Scoped(claims)) = scoped else {
        return Ok(());
    };
    let Scope::StartWorkflow {
        hook_token, run_id, ..
    } = &claims.scope
    else {
        return Ok(());
    };
    let asked_token = request.hook.as_ref().map(|h| h.token.as_str());
    let fits = hook_token.as_deref().is_none_or(|t| asked_token == Some(t))
        && run_id
            .as_deref()
            .is_none_or(|r| request.run_id.as_deref() == Some(r));
    if fits {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorKind::Forbidden,
            format!(
                "this token may only {}; the start asks for hook token {:?} and run ID {:?}",
                claims.scope.describe(),
                asked_token,
                request.run_id
            ),
        ))
    }
}
