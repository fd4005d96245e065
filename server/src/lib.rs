//! keel-server: the HTTP/JSON API and the web console a keel worker
//! serves. The router ([`router`]) maps endpoints to handlers over a
//! [`Keel`]; [`serve`] binds it, refusing an address beyond loopback
//! without a token, and accepts connections within bounds ([`listen`]).
//! Layers: the browser guard ([`guard`]: hosts, origins, body types), auth
//! ([`auth`]), timeouts, compression and request tracing from tower-http;
//! handlers read bodies under a limit ([`body`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use keel_host::Keel;
use tower_http::compression::CompressionLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

pub mod auth;
mod body;
mod console;
mod deployments;
pub mod error;
mod events;
mod extract;
pub mod guard;
mod hooks;
pub mod jobs;
pub mod limits;
pub mod listen;
pub mod mcp;
pub mod metrics;
pub mod openapi;
mod operations;
mod queries;
mod routes;
mod runs;
pub mod schedules;
mod state;
mod streams;
pub mod tokens;
mod webhooks;
pub mod wire;

pub use auth::Auth;
pub use extract::{CLI_AGENT, MAX_WAIT};
pub use guard::Guard;
pub use listen::ConnectionLimits;
pub use metrics::Metrics;

/// The largest JSON body (inputs, payloads) a request may carry.
pub const MAX_BODY: usize = 1 << 20;
/// The path the MCP endpoint is served at ([`mcp`]).
pub const MCP_PATH: &str = "/mcp";
/// The largest component a deployment may upload.
pub const MAX_COMPONENT: usize = 64 << 20;

/// How the server listens.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub addr: SocketAddr,
    /// The API token; required unless `addr` is a loopback address.
    pub token: Option<String>,
    /// Host names requests may address the server by, besides IP
    /// addresses and `localhost` (see [`guard`]).
    pub allowed_hosts: Vec<String>,
    /// Origins (`https://app.example.com`) whose pages may change things,
    /// besides the server's own console.
    pub allowed_origins: Vec<String>,
    /// How many connections, and how long each may take to send headers.
    pub limits: ConnectionLimits,
    /// The secret scoped tokens are signed with; the store's own (made
    /// once, shared by every server on the store) when `None`.
    pub signing_secret: Option<Vec<u8>>,
}

impl ServerConfig {
    /// Serving on `addr` with `token`, no other hosts or origins, and the
    /// default connection limits.
    pub fn new(addr: SocketAddr, token: Option<String>) -> Self {
        ServerConfig {
            addr,
            token,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            limits: ConnectionLimits::default(),
            signing_secret: None,
        }
    }

    /// The request guard this configuration asks for.
    pub fn guard(&self) -> Guard {
        Guard::new(&self.allowed_hosts, &self.allowed_origins)
    }
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Binding beyond loopback without a token.
    #[error(
        "refusing to serve on {addr} without an API token: anyone who can reach it could start and cancel runs. Set a token, or bind a loopback address"
    )]
    TokenRequired { addr: SocketAddr },
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The store's signing secret could not be read or made.
    #[error("cannot read the store's signing secret for scoped tokens: {0}")]
    SigningSecret(keel_host::Error),
    #[error("the server stopped: {0}")]
    Io(#[from] std::io::Error),
}

/// The API and console over `keel`, reporting to `metrics` (which should
/// also be the engine's observer), behind `guard` and `auth`.
pub fn router(keel: Keel, metrics: Arc<Metrics>, guard: Guard, auth: Auth) -> Router {
    let state = state::AppState {
        keel,
        metrics,
        auth: auth.clone(),
    };
    let mcp = mcp::service(state.clone());
    let table = routes::table();
    let public = auth::PublicRoutes::new(
        table
            .iter()
            .filter(|r| r.public)
            .map(|r| (Some(r.method.clone()), r.path))
            .chain(console::PUBLIC.map(|path| (None, path))),
    );
    let api = table
        .into_iter()
        .fold(Router::new(), |api, route| {
            api.route(route.path, route.handler)
        })
        .route_service(MCP_PATH, mcp)
        .merge(console::routes())
        .fallback(routes::not_found)
        .method_not_allowed_fallback(console::method_not_allowed)
        .with_state(state);
    api.layer(axum::middleware::from_fn_with_state(
        (auth, public),
        auth::require_token,
    ))
    .layer(axum::middleware::from_fn_with_state(guard, guard::check))
    .layer(CompressionLayer::new())
    .layer(TimeoutLayer::with_status_code(
        axum::http::StatusCode::REQUEST_TIMEOUT,
        MAX_WAIT + Duration::from_secs(15),
    ))
    .layer(TraceLayer::new_for_http())
}

/// Checks that `config` may be served: beyond loopback, a token is needed.
pub fn check(config: &ServerConfig) -> Result<(), ServeError> {
    if !config.addr.ip().is_loopback() && config.token.as_deref().is_none_or(str::is_empty) {
        return Err(ServeError::TokenRequired { addr: config.addr });
    }
    Ok(())
}

/// Binds `config.addr`; the listener and the address it got (port 0
/// picks a free port).
pub async fn bind(
    config: &ServerConfig,
) -> Result<(tokio::net::TcpListener, SocketAddr), ServeError> {
    check(config)?;
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.addr,
            source,
        })?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Serves the API on `listener`, as `config` says, until `shutdown`
/// resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    keel: Keel,
    metrics: Arc<Metrics>,
    config: &ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let secret = match &config.signing_secret {
        Some(secret) => secret.clone(),
        None => keel
            .signing_secret()
            .await
            .map_err(ServeError::SigningSecret)?,
    };
    let auth = Auth::new(config.token.as_deref()).with_secret(&secret);
    let app = router(keel, metrics, config.guard(), auth);
    listen::serve(listener, app, config.limits, shutdown).await?;
    Ok(())
}

/// The API over `keel` for the store's own user: what a worker serves on
/// its private socket and the CLI runs in process when no worker holds
/// the store. No token is asked (only that user reaches either); scoped
/// tokens are signed with the store's secret.
pub async fn private_router(keel: Keel, metrics: Arc<Metrics>) -> Result<Router, keel_host::Error> {
    let secret = keel.signing_secret().await?;
    let auth = Auth::new(None).with_secret(&secret);
    Ok(router(keel, metrics, Guard::new(&[], &[]), auth))
}

/// Serves `app` on a Unix socket until the task is dropped.
pub async fn serve_socket(
    listener: tokio::net::UnixListener,
    app: Router,
) -> Result<(), ServeError> {
    axum::serve(listener, app).await?;
    Ok(())
}
