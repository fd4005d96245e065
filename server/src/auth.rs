//! Who may use the API: with a token configured, every request but the
//! health check and the console's login must carry it, as
//! `Authorization: Bearer TOKEN` or as the `keel_token` cookie the login
//! sets (so the console's pages and calls are protected too). Tokens are
//! compared in constant time.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The cookie the console's login sets.
pub const COOKIE: &str = "keel_token";

/// The configured token, if any.
#[derive(Clone, Default)]
pub struct Auth {
    token: Option<Arc<[u8; 32]>>,
}

impl Auth {
    /// Requires `token` (if given) on every protected request.
    pub fn new(token: Option<&str>) -> Self {
        Auth {
            token: token.map(|t| Arc::new(Sha256::digest(t.as_bytes()).into())),
        }
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

/// Paths anyone may reach: the health check and the console's login.
fn is_public(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/login" | "/console/login.js" | "/console/style.css"
    )
}

/// The middleware: refuses requests without the token with 401 (API
/// calls) or sends the console to its login page.
pub async fn require_token(State(auth): State<Auth>, request: Request, next: Next) -> Response {
    if !auth.required() || is_public(request.uri().path()) {
        return next.run(request).await;
    }
    match Auth::presented(request.headers()) {
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
