//! The web console, served from the binary: one page of plain HTML, CSS
//! and JavaScript (no build step) that reads the API; the login page that
//! sets the token cookie; the page of a run shared by a link with a
//! scoped token; and the OpenAPI document.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::auth::COOKIE;
use crate::error::ApiError;
use crate::state::AppState;

const INDEX: &str = include_str!("../console/index.html");
const APP: &str = include_str!("../console/app.js");
const STYLE: &str = include_str!("../console/style.css");
const LOGIN: &str = include_str!("../console/login.html");
const LOGIN_JS: &str = include_str!("../console/login.js");
const SHARE: &str = include_str!("../console/share.html");
const SHARE_JS: &str = include_str!("../console/share.js");

/// The console's pages anyone may load: the login and the shared-run
/// page, which hold nothing until a token is given.
pub const PUBLIC: [&str; 5] = [
    "/login",
    "/console/login.js",
    "/console/style.css",
    "/share",
    "/console/share.js",
];

/// The console's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Html(INDEX) }))
        .route(
            "/console/app.js",
            get(|| async { asset("text/javascript", APP) }),
        )
        .route(
            "/console/style.css",
            get(|| async { asset("text/css", STYLE) }),
        )
        .route(
            "/console/login.js",
            get(|| async { asset("text/javascript", LOGIN_JS) }),
        )
        .route("/login", get(|| async { Html(LOGIN) }).post(login))
        // A run shared with a scoped token (in the link's fragment).
        .route("/share", get(|| async { Html(SHARE) }))
        .route(
            "/console/share.js",
            get(|| async { asset("text/javascript", SHARE_JS) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `POST /login` with the form field `token`: sets the token cookie
/// (HttpOnly, SameSite=Strict) and goes to the console, or back to the
/// login page if the token is wrong.
async fn login(State(s): State<AppState>, body: Bytes) -> Response {
    let token = form_urlencoded::parse(&body)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    if !s.auth.accepts(&token) {
        return Redirect::to("/login?wrong=1").into_response();
    }
    let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
    let mut response = Redirect::to("/").into_response();
    if let Ok(value) = header::HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `GET /openapi.json`.
pub async fn openapi() -> Json<serde_json::Value> {
    Json(crate::openapi::document())
}

/// A known path with a method it does not take.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        keel_core::ErrorKind::MethodNotAllowed,
        format!("`{}` does not take {method}; see /openapi.json", uri.path()),
    )
}
