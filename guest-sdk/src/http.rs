//! HTTP for steps: `wstd`'s client, sending `Content-Length` whenever the
//! body's length is known (a string, bytes, JSON), so servers that do not
//! take chunked bodies receive them.
//!
//! ```ignore
//! use keel_sdk::http::{Body, Client, Request};
//! let request = Request::post(url).body(Body::from(json.to_string()))?;
//! let response = Client::new().send(request).await?;
//! ```

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
