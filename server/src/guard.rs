//! What keeps web pages the user opens from driving a keel they can reach:
//! every request must name this server in its `Host` (an IP literal,
//! `localhost`, or a name the server was told to answer to), which defeats
//! DNS rebinding; a request that changes something must come from the
//! server's own origin (or one it was told to trust) and not be marked
//! `cross-site` or `same-site` by the browser; and its body must be of the
//! type the route takes (`application/json`; a component upload
//! `application/wasm` or `application/octet-stream`), which no HTML form
//! can send. This holds whether or not a token is configured: a
//! `SameSite=Strict` cookie still travels between two ports of one host.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use keel_core::ErrorKind;

use crate::error::ApiError;

/// The hosts and origins a server accepts beyond its own.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    inner: Arc<Allowed>,
}

#[derive(Debug, Default)]
struct Allowed {
    /// Host names (lowercase, without a port) besides IP literals and
    /// `localhost`.
    hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`, lowercase) trusted besides the
    /// server's own.
    origins: Vec<String>,
}

impl Guard {
    /// Accepts requests naming `hosts` (besides IP literals and
    /// `localhost`) and changes coming from `origins` (besides the
    /// server's own).
    pub fn new(hosts: &[String], origins: &[String]) -> Self {
        let lower = |v: &[String]| -> Vec<String> {
            v.iter()
                .map(|s| s.trim().trim_end_matches('/').to_ascii_lowercase())
                .collect()
        };
        Guard {
            inner: Arc::new(Allowed {
                hosts: lower(hosts),
                origins: lower(origins),
            }),
        }
    }

    /// Whether a `Host` header value names this server.
    fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host).to_ascii_lowercase();
        name == "localhost"
            || name.parse::<std::net::IpAddr>().is_ok()
            || self.inner.hosts.contains(&name)
    }

    /// Whether a changing request with these headers may proceed: the
    /// refusal if not.
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let origin = headers
            .get(header::ORIGIN)
            .map(|v| v.to_str().unwrap_or("").to_ascii_lowercase());
        let trusted = origin
            .as_deref()
            .is_some_and(|o| self.inner.origins.iter().any(|t| t == o));
        if trusted {
            return Ok(());
        }
        if let Some(origin) = &origin {
            // The server's own pages, served directly or behind a proxy
            // that terminates TLS for the same host.
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_ascii_lowercase);
            let own = host.is_some_and(|h| {
                origin.strip_prefix("http://") == Some(h.as_str())
                    || origin.strip_prefix("https://") == Some(h.as_str())
            });
            if !own {
                return Err(forbidden(format!(
                    "a request from the web page at origin `{origin}` may not change anything here; only the server's own console, or an origin the server is configured to trust, may"
                )));
            }
        }
        let site = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if matches!(site, "cross-site" | "same-site") {
            return Err(forbidden(format!(
                "the browser marked this request `Sec-Fetch-Site: {site}`: a web page of another origin may not change anything here"
            )));
        }
        Ok(())
    }
}

/// The host part of a `Host` header value: without its port, an IPv6
/// literal without its brackets.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

fn forbidden(message: String) -> ApiError {
    ApiError::new(ErrorKind::CrossOrigin, message)
}

/// Whether a request changes something (anything but a read).
fn changes(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The body types `path` takes with `method`.
fn body_types(method: &Method, path: &str) -> &'static [&'static str] {
    match (method, path) {
        (&Method::POST, "/v1/deployments") => &["application/wasm", "application/octet-stream"],
        (&Method::POST, "/login") => &["application/x-www-form-urlencoded"],
        // Signed by the sender, so no page can forge one; senders may be
        // set to send forms.
        (method, path) if crate::webhooks::is_delivery(method, path) => &[
            "application/json",
            "application/x-www-form-urlencoded",
            "text/plain",
        ],
        _ => &["application/json"],
    }
}

/// Whether the request carries body bytes (or says it will).
fn has_body(headers: &HeaderMap) -> bool {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    length.is_some_and(|n| n > 0) || headers.contains_key(header::TRANSFER_ENCODING)
}

/// Refuses a changing request whose body is not of a type `path` takes; a
/// request without a body needs no type.
fn check_content_type(method: &Method, path: &str, headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("").to_ascii_lowercase());
    let essence = given
        .as_deref()
        .map(|t| t.split(';').next().unwrap_or("").trim().to_string());
    let expected = body_types(method, path);
    match essence {
        None if !has_body(headers) => Ok(()),
        Some(t) if expected.contains(&t.as_str()) => Ok(()),
        found => Err(ApiError::new(
            ErrorKind::UnsupportedMediaType,
            format!(
                "`{method} {path}` takes a body of type {}, not {}",
                expected.join(" or "),
                found.map_or("an untyped body".to_string(), |t| format!("`{t}`"))
            ),
        )),
    }
}

/// The middleware: a foreign `Host` is 421, a changing request from
/// another origin 403, a body of the wrong type 415.
pub async fn check(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or(""))
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    match host {
        Some(host) if guard.host_allowed(host) => {}
        other => {
            let named = other.map_or("no host".to_string(), |h| format!("`{h}`"));
            let refusal = ApiError::new(
                ErrorKind::HostNotAllowed,
                format!(
                    "this request names {named} as its host; this server answers to IP addresses, `localhost` and the host names it is configured to allow (a web page must not reach it through a name it does not know)"
                ),
            );
            crate::body::drain(request.into_body().into_data_stream()).await;
            return refusal.into_response();
        }
    }
    if changes(request.method()) {
        let checked = guard
            .check_origin(headers)
            .and_then(|()| check_content_type(request.method(), request.uri().path(), headers));
        if let Err(refusal) = checked {
            // Heard before the connection closes, not lost to a reset.
            crate::body::drain(request.into_body().into_data_stream()).await;
            return refusal.into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, StatusCode};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn hosts_are_ip_literals_localhost_or_allowed_names() {
        let guard = Guard::new(&["keel.example.com".into()], &[]);
        for ok in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "[::1]:8080",
            "localhost:1",
            "LOCALHOST",
            "10.1.2.3:80",
            "Keel.Example.com:443",
        ] {
            assert!(guard.host_allowed(ok), "{ok}");
        }
        for bad in [
            "rebind.evil.example:8080",
            "localhost.evil.example",
            "",
            "keel.example.com.evil",
        ] {
            assert!(!guard.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn changes_come_from_the_servers_own_origin_or_a_trusted_one() {
        let guard = Guard::new(&[], &["https://app.example.com".into()]);
        let own = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ]);
        assert!(guard.check_origin(&own).is_ok());
        let other_port = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:9999"),
        ]);
        assert!(guard.check_origin(&other_port).is_err());
        let null = headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]);
        assert!(guard.check_origin(&null).is_err());
        let proxied = headers(&[
            ("host", "keel.example.com"),
            ("origin", "https://keel.example.com"),
        ]);
        assert!(guard.check_origin(&proxied).is_ok());
        let trusted = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://app.example.com"),
        ]);
        assert!(guard.check_origin(&trusted).is_ok());
        let same_site = headers(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "same-site")]);
        assert!(guard.check_origin(&same_site).is_err());
        let cli = headers(&[("host", "127.0.0.1:8080")]);
        assert!(guard.check_origin(&cli).is_ok());
    }

    #[test]
    fn bodies_must_be_of_the_routes_type() {
        let post = Method::POST;
        let json = headers(&[
            ("content-type", "application/json; charset=utf-8"),
            ("content-length", "2"),
        ]);
        assert!(check_content_type(&post, "/v1/workflows/w/runs", &json).is_ok());
        let text = headers(&[("content-type", "text/plain"), ("content-length", "2")]);
        let e = check_content_type(&post, "/v1/workflows/w/runs", &text).unwrap_err();
        assert_eq!(e.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let untyped = headers(&[("content-length", "2")]);
        assert!(check_content_type(&post, "/v1/runs/r/cancel", &untyped).is_err());
        let empty = headers(&[("content-length", "0")]);
        assert!(check_content_type(&post, "/v1/runs/r/cancel", &empty).is_ok());
        let wasm = headers(&[
            ("content-type", "application/wasm"),
            ("content-length", "9"),
        ]);
        assert!(check_content_type(&post, "/v1/deployments", &wasm).is_ok());
        assert!(check_content_type(&post, "/v1/workflows/w/runs", &wasm).is_err());
    }
}
