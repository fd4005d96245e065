//! The API's JSON bodies: what clients send and what they get back. Run,
//! hook and event views carry inputs, outputs and payloads as JSON values
//! (the store keeps them as JSON text); the CLI's client reads the same
//! types back into records.

use serde_json::Value;

mod deployments;
mod events;
mod hooks;
mod jobs;
mod limits;
mod mcp;
mod operations;
mod queries;
mod runs;
mod schedules;
mod streams;
mod tokens;
mod webhooks;

pub use deployments::*;
pub use events::*;
pub use hooks::*;
pub use jobs::*;
pub use limits::*;
pub use mcp::*;
pub use operations::*;
pub use queries::*;
pub use runs::*;
pub use schedules::*;
pub use streams::*;
pub use tokens::*;
pub use webhooks::*;

/// JSON text as a value; text that is not JSON stays a string.
pub(crate) fn value_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.into()))
}
