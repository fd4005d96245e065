//! API errors: every failure answers with a JSON body naming its kind,
//! message and IDs, under the HTTP status its kind has. The status of each
//! [`ErrorKind`] is decided once, in [`status_of`].

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use keel_core::{ErrorKind, ErrorReport};

use crate::wire::{ErrorBody, ErrorDetail};

/// An error the API answers with.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: ErrorDetail,
}

impl ApiError {
    /// An error of `kind` with `message` and no IDs.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError::from(ErrorReport::new(kind, message))
    }

    /// A request that is malformed: 400 `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(ErrorKind::InvalidRequest, message)
    }
}

/// The status an error of `kind` answers with.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    use ErrorKind as K;
    match kind {
        K::InvalidComponent
        | K::MissingExports
        | K::UnsupportedImport
        | K::InvalidInput
        | K::KeyExpression
        | K::InvalidGrant
        | K::InvalidLimit
        | K::InvalidName
        | K::InvalidSchedule
        | K::JournalFile
        | K::InvalidRequest
        | K::Usage => StatusCode::BAD_REQUEST,
        K::Unauthorized => StatusCode::UNAUTHORIZED,
        K::Forbidden => StatusCode::FORBIDDEN,
        K::SignatureRefused => StatusCode::UNAUTHORIZED,
        K::WebhookNotFound => StatusCode::NOT_FOUND,
        K::WebhookExists => StatusCode::CONFLICT,
        K::CrossOrigin => StatusCode::FORBIDDEN,
        K::RunNotFound
        | K::HookNotFound
        | K::QueryNotFound
        | K::UnknownWorkflow
        | K::DeploymentNotFound
        | K::ComponentNotFound
        | K::StoreNotFound
        | K::ScheduleNotFound
        | K::JobNotFound
        | K::PayloadNotFound
        | K::NotFound => StatusCode::NOT_FOUND,
        K::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        K::HookConflict
        | K::IdempotencyCollision
        | K::RunExists
        | K::ScheduleExists
        | K::ScheduleConflict
        | K::JobConflict
        | K::NotRetryable
        | K::RunEnded
        | K::RunLive
        | K::StreamRefused
        | K::OlderBuild
        | K::NotCrashTestable => StatusCode::CONFLICT,
        K::PayloadTooLarge | K::BoundExceeded => StatusCode::PAYLOAD_TOO_LARGE,
        K::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        K::HostNotAllowed => StatusCode::MISDIRECTED_REQUEST,
        K::StoreCapability => StatusCode::UNPROCESSABLE_ENTITY,
        K::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
        K::StoreLocked
        | K::StoreUnavailable
        | K::Storage
        | K::StoreUnconfirmed
        | K::LeaseLost
        | K::JournalConflict
        | K::StartOutcomeUnknown
        | K::DriveInterrupted
        | K::ResumeOutcomeUnknown
        | K::OutcomeUnknown
        | K::EventUnrecorded
        | K::JournalWrite
        | K::NeedsWorker
        | K::StillRunning => StatusCode::SERVICE_UNAVAILABLE,
        // A run's own failure, reported as a call's error, and the
        // server's: the request was fine, keel was not.
        K::NonDeterminism
        | K::SandboxViolation
        | K::FuelExhausted
        | K::ActivationTimeout
        | K::MemoryExhausted
        | K::GuestTrap
        | K::WorkflowFailed
        | K::Cancelled
        | K::DeadlineExceeded
        | K::Wasm
        | K::CorruptRecord
        | K::StoreSchemaTooNew
        | K::UnsafeCache
        | K::Io
        | K::Internal
        | K::Other => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<ErrorReport> for ApiError {
    fn from(report: ErrorReport) -> Self {
        ApiError {
            status: status_of(report.kind),
            detail: ErrorDetail {
                kind: report.kind.as_str().into(),
                message: report.message,
                ids: report.ids.into_iter().collect(),
                problems: Vec::new(),
            },
        }
    }
}

impl From<keel_host::Error> for ApiError {
    fn from(e: keel_host::Error) -> Self {
        let mut error = ApiError::from(e.report());
        error.detail.problems = e
            .problems()
            .into_iter()
            .map(|(path, message)| crate::wire::Problem { path, message })
            .collect();
        if error.status.is_server_error() {
            tracing::warn!(kind = %e.kind().as_str(), "request failed: {e}");
        }
        error
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(ErrorBody { error: self.detail })).into_response()
    }
}

/// A handler's result.
pub type ApiResult<T> = Result<T, ApiError>;
