//! HTTP for steps: `wstd`'s client, sending `Content-Length` whenever the
//! body's length is known (a string, bytes, JSON), so servers that do not
//! take chunked bodies receive them; and, for the common case, a JSON
//! request in a line or two, with the step's ID as its idempotency key.
//!
//! ```ignore
//! // JSON in, JSON out; a 5xx or 429 is retried, another error is fatal.
//! let charge: Charge = keel_sdk::http::post(&url).send(&order).await?.ok()?.json()?;
//!
//! // Or any request, through the client.
//! use keel_sdk::http::{Body, Client, Request};
//! let request = Request::post(url).body(Body::from(json.to_string()))?;
//! let response = Client::new().send(request).await?;
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::StepError;

pub use wstd::http::{
    Body, Error, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode,
};

/// The header that carries a body's length.
const CONTENT_LENGTH: &str = "content-length";

/// An HTTP client for steps.
#[derive(Clone, Debug, Default)]
pub struct Client {
    inner: wstd::http::Client,
}

impl Client {
    /// A client with no timeouts set.
    pub fn new() -> Self {
        Client::default()
    }

    /// Sends `request`; its body goes with `Content-Length` when its length
    /// is known and the request does not set the header itself.
    pub async fn send<B: Into<Body>>(&self, request: Request<B>) -> Result<Response<Body>, Error> {
        let (mut parts, body) = request.into_parts();
        let body: Body = body.into();
        if let Some(length) = body.content_length()
            && !parts.headers.contains_key(CONTENT_LENGTH)
            && (length > 0 || parts.method != Method::GET)
        {
            parts
                .headers
                .insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
        self.inner.send(Request::from_parts(parts, body)).await
    }

    /// Sets the timeout for connecting to the server.
    pub fn set_connect_timeout(&mut self, d: impl Into<wstd::time::Duration>) {
        self.inner.set_connect_timeout(d);
    }

    /// Sets the timeout for the first byte of the response.
    pub fn set_first_byte_timeout(&mut self, d: impl Into<wstd::time::Duration>) {
        self.inner.set_first_byte_timeout(d);
    }

    /// Sets the timeout between bytes of the response.
    pub fn set_between_bytes_timeout(&mut self, d: impl Into<wstd::time::Duration>) {
        self.inner.set_between_bytes_timeout(d);
    }
}

/// A JSON request of a step: `POST` with [`post`], any method with
/// [`json`]. Its body goes as JSON with its length, and the step's ID as
/// its `Idempotency-Key` (the same for every attempt, so a server that
/// honours the header does what a retried attempt asks once).
#[derive(Debug)]
#[must_use = "a request does nothing until it is sent"]
pub struct JsonRequest {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    idempotency_key: bool,
}

/// A `POST` of JSON to `url` from a step.
pub fn post(url: &str) -> JsonRequest {
    json(Method::POST, url)
}

/// A JSON request of `method` to `url` from a step.
pub fn json(method: Method, url: &str) -> JsonRequest {
    JsonRequest {
        method,
        url: url.to_string(),
        headers: Vec::new(),
        idempotency_key: true,
    }
}

impl JsonRequest {
    /// Adds a header (one the request sets itself, such as
    /// `Idempotency-Key`, is replaced).
    pub fn header(mut self, name: &str, value: impl std::fmt::Display) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sends no `Idempotency-Key`.
    pub fn without_idempotency_key(mut self) -> Self {
        self.idempotency_key = false;
        self
    }

    /// Sends `body` as JSON and reads the whole answer. A request that
    /// gets no answer is a retryable step error.
    pub async fn send(self, body: &impl Serialize) -> Result<JsonResponse, StepError> {
        let text = serde_json::to_string(body).map_err(StepError::fatal)?;
        self.send_body(Body::from(text)).await
    }

    /// Sends the request with no body and reads the whole answer.
    pub async fn send_empty(self) -> Result<JsonResponse, StepError> {
        self.send_body(Body::empty()).await
    }

    async fn send_body(self, body: Body) -> Result<JsonResponse, StepError> {
        let mut request = Request::builder()
            .method(self.method.clone())
            .uri(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json");
        if self.idempotency_key
            && !self
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("idempotency-key"))
        {
            request = request.header("Idempotency-Key", crate::step_metadata().step_id);
        }
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request = request.body(body).map_err(StepError::fatal)?;
        let response = Client::new()
            .send(request)
            .await
            .map_err(|e| StepError::retryable(format!("{} {}: {e}", self.method, self.url)))?;
        let status = response.status();
        let mut body = response.into_body();
        let text = body
            .str_contents()
            .await
            .map_err(|e| {
                StepError::retryable(format!(
                    "{} {}: reading the answer: {e}",
                    self.method, self.url
                ))
            })?
            .to_string();
        Ok(JsonResponse {
            status,
            body: text,
            what: format!("{} {}", self.method, self.url),
        })
    }
}

/// The answer to a [`JsonRequest`], read whole.
#[derive(Clone, Debug)]
pub struct JsonResponse {
    pub status: StatusCode,
    /// The body, as text.
    pub body: String,
    /// The request, for errors: `POST https://...`.
    what: String,
}

impl JsonResponse {
    /// The answer if its status is a success; else a step error naming the
    /// status and the body: retryable for a 5xx, 408 or 429 (the server
    /// may do it later), fatal for another.
    pub fn ok(self) -> Result<Self, StepError> {
        let status = self.status;
        if status.is_success() {
            return Ok(self);
        }
        let message = format!("{} answered {status}: {}", self.what, self.body);
        let later = status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT;
        Err(match later {
            true => StepError::retryable(message),
            false => StepError::fatal(message),
        })
    }

    /// The body as `T`; a fatal step error naming what it was otherwise.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, StepError> {
        serde_json::from_str(&self.body).map_err(|e| {
            StepError::fatal(format!(
                "{} answered what is not the JSON expected ({e}): {}",
                self.what, self.body
            ))
        })
    }
}
