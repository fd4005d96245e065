//! What handlers take from a request: path parameters, the query string,
//! JSON bodies and waits, each refused as a JSON error naming the problem.

use std::time::Duration;

use axum::extract::{FromRequestParts, Path};
use axum::response::sse::Event;
use keel_core::RunId;
use serde::de::DeserializeOwned;

use crate::MAX_BODY;
use crate::body::Body;
use crate::error::{ApiError, ApiResult};

/// The longest a request waits for a run's end.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// A path parameter; one that is not valid (invalid UTF-8 in its
/// escapes, say) is a JSON error like every other refusal.
pub struct Param(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Param {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Param(value)),
            Err(e) => Err(ApiError::invalid(format!(
                "the path `{}` is not valid: {}",
                parts.uri.path(),
                e.body_text()
            ))),
        }
    }
}

/// Two path parameters, refused as [`Param`] refuses one.
pub struct Params(pub String, pub String);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match Path::<(String, String)>::from_request_parts(parts, state).await {
            Ok(Path((a, b))) => Ok(Params(a, b)),
            Err(e) => Err(ApiError::invalid(format!(
                "the path `{}` is not valid: {}",
                parts.uri.path(),
                e.body_text()
            ))),
        }
    }
}

/// A run ID from the path, parsed (a run ID outside the safe set is 400).
pub struct RunIdParam(pub RunId);

impl<S: Send + Sync> FromRequestParts<S> for RunIdParam {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        let Param(raw) = Param::from_request_parts(parts, state).await?;
        RunId::parse(&raw)
            .map(RunIdParam)
            .map_err(|e| ApiError::invalid(e.to_string()))
    }
}

/// The door a request came through, as journals name who asked: `cli`
/// for keel's own command line (its `User-Agent` starts with
/// [`CLI_AGENT`]), `api` for every other client.
pub struct Door(pub &'static str);

/// The start of the `User-Agent` keel's command line sends.
pub const CLI_AGENT: &str = "keel-cli/";

impl<S: Send + Sync> FromRequestParts<S> for Door {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        let agent = parts.headers.get(axum::http::header::USER_AGENT);
        let cli = agent
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(CLI_AGENT));
        Ok(Door(if cli { "cli" } else { "api" }))
    }
}

/// A query string's pairs.
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    pub(crate) fn parse(raw: Option<String>) -> Query {
        Query(
            form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }

    pub(crate) fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub(crate) fn one(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    pub(crate) fn flag(&self, name: &str) -> ApiResult<bool> {
        match self.one(name).as_deref() {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(ApiError::invalid(format!(
                "query parameter `{name}` is true or false, not `{other}`"
            ))),
        }
    }

    /// The attribute filters: `attr=KEY=VALUE` (repeated) and
    /// `attr.KEY=VALUE`, all of which a run must have.
    pub(crate) fn attributes(&self) -> ApiResult<keel_core::Attributes> {
        let mut wanted = keel_core::Attributes::new();
        for (name, value) in &self.0 {
            let (key, value) = match name.strip_prefix("attr.") {
                Some(key) => (key, value.as_str()),
                None if name == "attr" => value.split_once('=').ok_or_else(|| {
                    ApiError::invalid(format!(
                        "`attr` `{value}` is not KEY=VALUE; pass `attr=tenant=acme`"
                    ))
                })?,
                None => continue,
            };
            keel_core::records::check_attribute_filter(key, value).map_err(ApiError::invalid)?;
            wanted.insert(key.to_string(), value.to_string());
        }
        Ok(wanted)
    }

    pub(crate) fn number(&self, name: &str) -> ApiResult<Option<u64>> {
        self.one(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::invalid(format!(
                        "query parameter `{name}` must be a non-negative integer, not `{v}`"
                    ))
                })
            })
            .transpose()
    }
}

/// A JSON body; an empty body is `None`.
pub(crate) fn json_body(Body(body): Body<MAX_BODY>) -> ApiResult<Option<serde_json::Value>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| ApiError::invalid(format!("the request body is not JSON: {e}")))
}

/// A JSON object body as `T`; an empty body is `T::default()`. Numbers
/// written with a zero fraction (`5.0`) count as integers, as in JSON
/// Schema.
pub(crate) fn json_object<T: DeserializeOwned + Default>(body: Body<MAX_BODY>) -> ApiResult<T> {
    match json_body(body)? {
        None => Ok(T::default()),
        Some(mut value @ serde_json::Value::Object(_)) => {
            integral(&mut value, INTEGRAL_FIELDS);
            if let Some(hook) = value.get_mut("hook") {
                integral(hook, &["retention_ms"]);
            }
            serde_json::from_value(value).map_err(|e| {
                ApiError::invalid(format!("the request body is not the object expected: {e}"))
            })
        }
        Some(_) => Err(ApiError::invalid(
            "the request body must be a JSON object; see /openapi.json",
        )),
    }
}

/// The whole-number fields of the request bodies (times and durations in
/// milliseconds, priorities, limits, journal positions, shares).
pub(crate) const INTEGRAL_FIELDS: &[&str] = &[
    "wait_ms",
    "ttl_ms",
    "grace_ms",
    "delay_ms",
    "start_at_ms",
    "end_at_ms",
    "every_ms",
    "offset_ms",
    "catchup_window_ms",
    "from_ms",
    "to_ms",
    "priority",
    "limit",
    "at",
    "ramp",
];

/// Turns `fields` of `object` holding whole numbers written as floats
/// into integers.
pub(crate) fn integral(object: &mut serde_json::Value, fields: &[&str]) {
    for field in fields {
        if let Some(n) = object.get_mut(*field)
            && let Some(f) = n.as_f64()
            && n.is_f64()
            && f.fract() == 0.0
            && (0.0..=u64::MAX as f64).contains(&f)
        {
            *n = serde_json::Value::from(f as u64);
        }
    }
}

/// A wait in milliseconds, at most [`MAX_WAIT`].
pub(crate) fn wait_ms(ms: Option<u64>) -> ApiResult<u64> {
    let ms = ms.unwrap_or(0);
    if ms > MAX_WAIT.as_millis() as u64 {
        return Err(ApiError::invalid(format!(
            "`wait_ms` is at most {} (a longer wait is a loop of calls)",
            MAX_WAIT.as_millis()
        )));
    }
    Ok(ms)
}

pub(crate) fn sse_json(name: &str, value: &impl serde::Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(value).expect("views serialize"))
}
