//! API errors: every failure answers with a JSON body naming its kind,
//! message and IDs, under the HTTP status that fits it.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::wire::{ErrorBody, ErrorDetail};

/// An error the API answers with.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: ErrorDetail,
}

impl ApiError {
    /// An error of `kind` with `message` and no IDs.
    pub fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            detail: ErrorDetail {
                kind: kind.into(),
                message: message.into(),
                ids: Default::default(),
            },
        }
    }

    /// A request that is malformed: 400 `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
}

/// The status an engine error answers with.
pub fn status_of(kind: &str) -> StatusCode {
    match kind {
        "invalid_input" | "invalid_component" | "missing_exports" | "unsupported_import"
        | "key_expression" | "invalid_grant" | "journal_file" | "invalid_name"
        | "invalid_limit" => StatusCode::BAD_REQUEST,
        "run_not_found"
        | "hook_not_found"
        | "unknown_workflow"
        | "deployment_not_found"
        | "component_not_found" => StatusCode::NOT_FOUND,
        "hook_conflict" | "idempotency_collision" | "run_exists" | "not_retryable" => {
            StatusCode::CONFLICT
        }
        "store_capability" => StatusCode::UNPROCESSABLE_ENTITY,
        "bound_exceeded" => StatusCode::PAYLOAD_TOO_LARGE,
        "storage_full" => StatusCode::INSUFFICIENT_STORAGE,
        "store_locked"
        | "store_unavailable"
        | "storage"
        | "store_unconfirmed"
        | "lease_lost"
        | "journal_conflict"
        | "start_outcome_unknown"
        | "resume_outcome_unknown"
        | "outcome_unknown"
        | "event_unrecorded"
        | "drive_interrupted"
        | "journal_write" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<keel_host::Error> for ApiError {
    fn from(e: keel_host::Error) -> Self {
        let kind = e.kind();
        let status = status_of(kind);
        if status.is_server_error() {
            tracing::warn!(kind, "request failed: {e}");
        }
        ApiError {
            status,
            detail: ErrorDetail {
                kind: kind.into(),
                message: e.to_string(),
                ids: e
                    .ids()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(ErrorBody { error: self.detail })).into_response()
    }
}

/// A handler's result.
pub type ApiResult<T> = Result<T, ApiError>;
