//! The CLI as a client of keel's API, the only way its commands reach a
//! store: a server's over TCP (`--server URL`), the one a worker serves on
//! its private socket, or the router run in this process over a store no
//! worker holds. Each request goes through the same handlers whichever the
//! transport, and its answer is read back into the same replies, so every
//! command answers the same through every door.

use std::path::{Path, PathBuf};

use anyhow::Context;
use axum::body::Body;
use http_body_util::BodyExt;
use keel_host::core::{ErrorKind, ErrorReport};
use keel_server::wire::ErrorBody;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use tower::ServiceExt;

/// How long one call waits for a run on the server (its longest wait).
pub(crate) const WAIT_MS: u64 = 60_000;

/// Where the API is.
enum Transport {
    /// A keel server over TCP (`--server URL`).
    Http(reqwest::Client),
    /// The worker holding a sled store, on its private socket.
    Socket(PathBuf),
    /// This process's own router over a store it opened, when no worker
    /// holds the store.
    InProcess {
        router: axum::Router,
        /// The engine under it, when this process holds a sled store alone.
        alone: Option<keel_host::Keel>,
    },
}

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Nothing was sent: the API could not be reached.
    #[error("{0}")]
    Unreachable(String),
    /// The request was sent but no answer came back: it may have taken
    /// effect.
    #[error("{0}")]
    Unanswered(String),
}

/// keel's API, wherever it is served: every command that reads or changes
/// a store speaks to it, the same way through each transport.
pub struct Client {
    base: Url,
    transport: Transport,
    token: Option<String>,
    /// A directory to delete once the client is done (a store's copy).
    scratch: Option<PathBuf>,
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(dir) = self.scratch.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Client {
    /// A client of the server at `base` (`http://host:port`).
    pub fn new(base: &str, token: Option<&str>) -> anyhow::Result<Client> {
        let base = Url::parse(base).with_context(|| {
            format!("--server `{base}` is not a URL; write for example http://127.0.0.1:8080")
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            anyhow::bail!("--server `{base}` must be an http:// or https:// URL");
        }
        Ok(Client {
            base,
            transport: Transport::Http(
                reqwest::Client::builder()
                    .user_agent(user_agent())
                    .build()
                    .context("making an HTTP client")?,
            ),
            token: token.map(str::to_owned),
            scratch: None,
        })
    }

    /// A client of the worker that serves the API on `socket`.
    pub fn socket(socket: &Path) -> Client {
        Client::local(Transport::Socket(socket.to_path_buf()))
    }

    /// A client of the API served in this process over `keel`; `alone`
    /// when this process holds the store and no worker can move its runs.
    pub async fn in_process(keel: keel_host::Keel, alone: bool) -> anyhow::Result<Client> {
        let metrics = std::sync::Arc::new(keel_server::Metrics::default());
        let router = keel_server::private_router(keel.clone(), metrics).await?;
        Ok(Client::local(Transport::InProcess {
            router,
            alone: alone.then_some(keel),
        }))
    }

    fn local(transport: Transport) -> Client {
        Client {
            base: Url::parse("http://localhost/").expect("a URL"),
            transport,
            token: None,
            scratch: None,
        }
    }

    /// The client, deleting `dir` once it is done.
    pub fn deleting(mut self, dir: PathBuf) -> Client {
        self.scratch = Some(dir);
        self
    }

    /// The engine, when this process serves the API over a sled store it
    /// holds alone: no worker moves its runs on but this process.
    pub fn alone(&self) -> Option<&keel_host::Keel> {
        match &self.transport {
            Transport::InProcess { alone, .. } => alone.as_ref(),
            _ => None,
        }
    }

    /// The URL of the path made of `segments` (each percent-encoded), with
    /// `query`.
    pub(crate) fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("an http URL has a path")
            .pop_if_empty()
            .extend(segments);
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        url
    }

    /// Sends a request and returns the response, its body unread.
    pub(crate) async fn exchange(
        &self,
        method: Method,
        url: Url,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<(StatusCode, Body), CallError> {
        let (content_type, bytes) = body.unwrap_or(("application/json", Vec::new()));
        match &self.transport {
            Transport::Http(http) => {
                let mut request = http
                    .request(method, url)
                    .header(CONTENT_TYPE, content_type)
                    .body(bytes);
                if let Some(token) = &self.token {
                    request = request.bearer_auth(token);
                }
                let response = request.send().await.map_err(|e| {
                    let reason = format!(
                        "cannot reach the keel server at {}; is `keel serve` running there? ({e})",
                        self.base
                    );
                    match e.is_connect() || e.is_builder() {
                        true => CallError::Unreachable(reason),
                        false => CallError::Unanswered(reason),
                    }
                })?;
                let status = response.status();
                Ok((status, Body::from_stream(response.bytes_stream())))
            }
            Transport::Socket(path) => {
                let request = local_request(method, &url, content_type, bytes);
                let unanswered = |e: hyper::Error| {
                    CallError::Unanswered(format!(
                        "the worker holding the store at {} closed the connection without answering (it may have died: {e}); check with `keel runs list` whether the request took effect before repeating it",
                        path.display()
                    ))
                };
                let stream = tokio::net::UnixStream::connect(path).await.map_err(|e| {
                    CallError::Unreachable(format!(
                        "cannot reach the worker holding the store at {}: {e}",
                        path.display()
                    ))
                })?;
                let io = hyper_util::rt::TokioIo::new(stream);
                let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
                    .await
                    .map_err(unanswered)?;
                tokio::spawn(connection);
                let response = sender.send_request(request).await.map_err(unanswered)?;
                Ok((response.status(), Body::new(response.into_body())))
            }
            Transport::InProcess { router, .. } => {
                let request = local_request(method, &url, content_type, bytes);
                let response = match router.clone().oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                Ok((response.status(), response.into_body()))
            }
        }
    }

    /// Calls the API; a JSON error body becomes a [`RemoteError`].
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> anyhow::Result<(StatusCode, T)> {
        let (status, body) = self.exchange(method, url.clone(), body).await?;
        let bytes = body
            .collect()
            .await
            .map_err(|e| CallError::Unanswered(format!("the answer to {url} broke off: {e}")))?
            .to_bytes();
        if !status.is_success() {
            let error = serde_json::from_slice::<ErrorBody>(&bytes).map_err(|_| {
                anyhow::anyhow!(
                    "the server answered {status} to {url}: {}",
                    String::from_utf8_lossy(&bytes)
                )
            })?;
            return Err(RemoteError {
                kind: error.error.kind,
                message: error.error.message,
                ids: error.error.ids.into_iter().collect(),
            }
            .into());
        }
        let value = serde_json::from_slice(&bytes).with_context(|| {
            format!("the server's answer to {url} is not what this keel expects")
        })?;
        Ok((status, value))
    }

    /// `GET` of the path made of `segments`, with `query`.
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> anyhow::Result<T> {
        Ok(self
            .call(Method::GET, self.url(segments, query), None)
            .await?
            .1)
    }

    /// `POST` of `body` as JSON.
    pub(crate) async fn post<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
        body: &impl serde::Serialize,
    ) -> anyhow::Result<T> {
        self.send_json(Method::POST, segments, query, body).await
    }

    /// `PUT` of `body` as JSON.
    pub(crate) async fn put<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        body: &impl serde::Serialize,
    ) -> anyhow::Result<T> {
        self.send_json(Method::PUT, segments, &[], body).await
    }

    /// `DELETE` of the path made of `segments`, with `query`.
    pub(crate) async fn delete<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> anyhow::Result<T> {
        Ok(self
            .call(Method::DELETE, self.url(segments, query), None)
            .await?
            .1)
    }

    async fn send_json<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: &impl serde::Serialize,
    ) -> anyhow::Result<T> {
        let body = ("application/json", serde_json::to_vec(body)?);
        Ok(self
            .call(method, self.url(segments, query), Some(body))
            .await?
            .1)
    }

    /// Uploads a component file as a deployment, with `query`'s options.
    pub(crate) async fn upload(
        &self,
        path: &Path,
        query: &[(&str, String)],
    ) -> anyhow::Result<keel_host::core::Deployment> {
        let bytes = tokio::fs::read(path)
            .await
            .with_context(|| format!("reading {}", path.display()))?;
        let mut query = query.to_vec();
        if !query.iter().any(|(k, _)| *k == "name")
            && let Some(stem) = path.file_stem()
        {
            query.push(("name", stem.to_string_lossy().into_owned()));
        }
        let url = self.url(&["v1", "deployments"], &query);
        Ok(self
            .call(Method::POST, url, Some(("application/wasm", bytes)))
            .await?
            .1)
    }
}

/// An error the API answered with.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    pub kind: String,
    pub message: String,
    /// The IDs the error carries, as `(field, value)`.
    pub ids: Vec<(String, String)>,
}

impl RemoteError {
    /// An error of `kind` this CLI reports itself, as the API would.
    pub fn new(kind: ErrorKind, message: String, ids: Vec<(String, String)>) -> Self {
        RemoteError {
            kind: kind.as_str().into(),
            message,
            ids,
        }
    }

    /// The error as the CLI reports it: kind, message and IDs.
    pub fn from_error(e: &keel_host::Error) -> Self {
        RemoteError::from(e.report())
    }

    /// The error as a report, its kind parsed (a kind this keel does not
    /// know, from a newer one, is `Other`).
    pub fn report(&self) -> ErrorReport {
        ErrorReport {
            kind: ErrorKind::parse(&self.kind).unwrap_or(ErrorKind::Other),
            message: self.message.clone(),
            ids: self.ids.clone(),
        }
    }

    /// Whether `e` is an answer of the API of `kind`.
    pub fn is(e: &anyhow::Error, kind: ErrorKind) -> bool {
        e.downcast_ref::<RemoteError>()
            .is_some_and(|r| r.report().kind == kind)
    }
}

impl From<ErrorReport> for RemoteError {
    fn from(report: ErrorReport) -> Self {
        RemoteError {
            kind: report.kind.as_str().into(),
            message: report.message,
            ids: report.ids,
        }
    }
}

/// A request to a local transport (a worker's socket, this process): the
/// path and query, addressed to `localhost`, as the router's guard expects.
fn local_request(
    method: Method,
    url: &Url,
    content_type: &str,
    bytes: Vec<u8>,
) -> axum::http::Request<Body> {
    let target = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    };
    let mut request = axum::http::Request::new(Body::from(bytes));
    *request.method_mut() = method;
    *request.uri_mut() = target.parse().expect("a URL's path and query form a URI");
    let headers = request.headers_mut();
    headers.insert(reqwest::header::HOST, HeaderValue::from_static("localhost"));
    if let Ok(agent) = HeaderValue::from_str(&user_agent()) {
        headers.insert(reqwest::header::USER_AGENT, agent);
    }
    if let Ok(value) = HeaderValue::from_str(content_type) {
        headers.insert(CONTENT_TYPE, value);
    }
    request
}

/// The `User-Agent` this CLI sends, by which the API names it as the door
/// a request came through.
fn user_agent() -> String {
    format!("{}{}", keel_server::CLI_AGENT, env!("CARGO_PKG_VERSION"))
}
