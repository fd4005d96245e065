//! Scoped tokens: the request and the token minted.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `POST /v1/tokens`: what the scoped token may do, and for how long.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// What the token may do.
    pub scope: keel_core::access::Scope,
    /// Its lifetime in milliseconds (1 h if left out, at most 7 days).
    #[serde(default)]
    #[schemars(range(min = 1, max = 604800000))]
    pub ttl_ms: Option<u64>,
}

/// A scoped token and what it grants.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct TokenView {
    /// The token, to send as `Authorization: Bearer TOKEN`.
    pub token: String,
    /// What it may do.
    pub scope: keel_core::access::Scope,
    pub issued_at_ms: u64,
    /// When it stops being accepted.
    pub expires_at_ms: u64,
}
