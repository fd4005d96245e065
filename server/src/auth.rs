//! Who may use the API: with a token configured, every request but the
//! health check and the console's login must carry it, as
//! `Authorization: Bearer TOKEN` or as the `keel_token` cookie the login
//! sets (so the console's pages and calls are protected too). Tokens are
//! compared in constant time.
//!
//! A scoped token ([`keel_core::access`]) may stand in for the server's
//! token on the few routes its scope names: it is verified with the
//! server's signing secret (no store read), refused with 401 when it is
//! forged or expired and with 403 outside its scope, and its claims ride
//! on the request for the handler to check what only the body says.

use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use keel_core::access::{self, Claims, Scope, TokenError};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The cookie the console's login sets.
pub const COOKIE: &str = "keel_token";

/// The configured token, if any, and the secret scoped tokens are signed
/// with.
#[derive(Clone, Default)]
pub struct Auth {
    token: Option<Arc<[u8; 32]>>,
    secret: Option<Arc<[u8]>>,
}

/// The claims of the scoped token a request was let in with (absent when
/// it carried the server's token, or none on an open server).
#[derive(Clone, Debug)]
pub struct Scoped(pub Claims);

impl Auth {
    /// Requires `token` (if given) on every protected request.
    pub fn new(token: Option<&str>) -> Self {
        Auth {
            token: token.map(|t| Arc::new(Sha256::digest(t.as_bytes()).into())),
            secret: None,
        }
    }

    /// Also accepts scoped tokens signed with `secret`, and mints them.
    pub fn with_secret(mut self, secret: &[u8]) -> Self {
        self.secret = Some(Arc::from(secret));
        self
    }

    /// The secret scoped tokens are signed with, if any.
    pub fn secret(&self) -> Option<Arc<[u8]>> {
        self.secret.clone()
    }

    /// Whether a token is required.
    pub fn required(&self) -> bool {
        self.token.is_some()
    }

    /// Whether `candidate` is the token, in constant time (digests of equal
    /// length are compared, so the length leaks nothing either).
    pub fn accepts(&self, candidate: &str) -> bool {
        match &self.token {
            None => true,
            Some(expected) => {
                let got: [u8; 32] = Sha256::digest(candidate.as_bytes()).into();
                bool::from(got.ct_eq(expected.as_ref()))
            }
        }
    }

    /// Whether a request with `headers` carries the token (true when none
    /// is required).
    pub fn authorizes(&self, headers: &HeaderMap) -> bool {
        !self.required() || Auth::presented(headers).is_some_and(|t| self.accepts(&t))
    }

    /// The token a request carries, from its header or its cookie.
    fn presented(headers: &HeaderMap) -> Option<String> {
        if let Some(bearer) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        {
            return Some(bearer.trim().to_string());
        }
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(name, _)| *name == COOKIE)
            .map(|(_, value)| value.to_string())
    }
}

/// The routes anyone may call, by method (`None`: any) and the route's
/// path as the router matched it: the API's routes its table marks
/// public, and the console's login and shared-run pages (whose data needs
/// the link's scoped token).
#[derive(Clone, Default)]
pub struct PublicRoutes(Arc<Vec<(Option<Method>, &'static str)>>);

impl PublicRoutes {
    pub fn new(routes: impl IntoIterator<Item = (Option<Method>, &'static str)>) -> Self {
        PublicRoutes(Arc::new(routes.into_iter().collect()))
    }

    /// Whether a request the router matched to `matched` (`None`: no
    /// route) is public.
    fn admit(&self, method: &Method, matched: Option<&str>) -> bool {
        let Some(matched) = matched else {
            return false;
        };
        self.0
            .iter()
            .any(|(m, path)| *path == matched && m.as_ref().is_none_or(|m| m == method))
    }
}

/// The middleware: lets a scoped token through only within its scope,
/// and refuses requests without the server's token with 401 (API calls)
/// or sends the console to its login page.
pub async fn require_token(
    State((auth, public)): State<(Auth, PublicRoutes)>,
    request: Request,
    next: Next,
) -> Response {
    let matched = request.extensions().get::<MatchedPath>();
    if public.admit(request.method(), matched.map(MatchedPath::as_str)) {
        return next.run(request).await;
    }
    let presented = Auth::presented(request.headers());
    if let Some(token) = presented.as_deref().filter(|t| access::is_scoped(t)) {
        return match auth.admit_scoped(token, request).await {
            Ok((request, claims)) => {
                let mut request = request;
                request.extensions_mut().insert(Scoped(claims));
                next.run(request).await
            }
            Err(refusal) => refusal.into_response(),
        };
    }
    if !auth.required() {
        return next.run(request).await;
    }
    match presented {
        Some(token) if auth.accepts(&token) => next.run(request).await,
        presented => {
            let wants_page = request.method() == axum::http::Method::GET
                && !request.uri().path().starts_with("/v1/")
                && request
                    .headers()
                    .get(header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.contains("text/html"));
            if wants_page {
                return axum::response::Redirect::to("/login").into_response();
            }
            let message = if presented.is_some() {
                "the API token is wrong; pass the server's token as `Authorization: Bearer TOKEN`"
            } else {
                "this server requires an API token; pass it as `Authorization: Bearer TOKEN`"
            };
            let mut response =
                ApiError::new(keel_core::ErrorKind::Unauthorized, message).into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            response
        }
    }
}

impl Auth {
    /// The request and its token's claims if `token` is valid now and its
    /// scope covers the request; otherwise the refusal.
    async fn admit_scoped(
        &self,
        token: &str,
        request: Request,
    ) -> Result<(Request, Claims), Response> {
        let unauthorized = |message: String| {
            let mut response =
                ApiError::new(keel_core::ErrorKind::Unauthorized, message).into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            response
        };
        let Some(secret) = self.secret.as_deref() else {
            return Err(unauthorized(
                "this server does not accept scoped tokens (it has no signing secret)".into(),
            ));
        };
        let claims = access::verify(secret, token, now_ms()).map_err(|e| {
            unauthorized(match e {
                TokenError::Expired { .. } => format!("{e}; mint a new one with POST /v1/tokens"),
                e => e.to_string(),
            })
        })?;
        let (mut parts, body) = request.into_parts();
        let matched = parts
            .extensions
            .get::<MatchedPath>()
            .map(|m| m.as_str().to_string());
        let params = RawPathParams::from_request_parts(&mut parts, &())
            .await
            .ok()
            .map(|p| {
                p.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        if !permits(&claims.scope, &parts.method, matched.as_deref(), param) {
            return Err(ApiError::new(
                keel_core::ErrorKind::Forbidden,
                format!(
                    "this token may only {}; {} {} is outside its scope",
                    claims.scope.describe(),
                    parts.method,
                    parts.uri.path()
                ),
            )
            .into_response());
        }
        Ok((Request::from_parts(parts, body), claims))
    }
}

/// Whether `scope` covers a `method` request to the route `matched`, whose
/// path parameters `param` gives.
fn permits<'a>(
    scope: &Scope,
    method: &Method,
    matched: Option<&str>,
    param: impl Fn(&str) -> Option<&'a str>,
) -> bool {
    let Some(route) = matched else {
        return false;
    };
    // The MCP endpoint checks each tool call and read against the scope.
    if route == crate::MCP_PATH {
        return true;
    }
    match scope {
        Scope::ResumeHook { token } => {
            let allowed = matches!(
                (method, route),
                (&Method::POST, "/v1/hooks/{token}/resume")
                    | (&Method::GET, "/v1/hooks/{token}")
                    | (&Method::GET, "/v1/hooks/{token}/replies/{payload_id}")
            );
            allowed && param("token") == Some(token.as_str())
        }
        Scope::ReadRun { run_id } => {
            let allowed = method == Method::GET
                && matches!(
                    route,
                    "/v1/runs/{run_id}"
                        | "/v1/runs/{run_id}/detail"
                        | "/v1/runs/{run_id}/journal"
                        | "/v1/runs/{run_id}/result"
                        | "/v1/runs/{run_id}/events"
                        | "/v1/runs/{run_id}/streams"
                        | "/v1/runs/{run_id}/streams/{name}"
                        | "/v1/runs/{run_id}/queries"
                        | "/v1/runs/{run_id}/queries/{name}"
                );
            allowed && param("run_id") == Some(run_id.as_str())
        }
        Scope::StartWorkflow { workflow, .. } => {
            method == Method::POST
                && route == "/v1/workflows/{workflow}/runs"
                && param("workflow") == Some(workflow.as_str())
        }
    }
}

/// The wall clock in ms since the epoch: tokens expire in real time.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_is_accepted() {
        let auth = Auth::new(Some("s3cret"));
        assert!(auth.required());
        assert!(auth.accepts("s3cret"));
        assert!(!auth.accepts("s3cre"));
        assert!(!auth.accepts("s3cret "));
        assert!(!auth.accepts(""));
        assert!(Auth::new(None).accepts("anything"));
    }
}
