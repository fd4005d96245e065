//! The errors of a store: the domain refusals callers branch on (with the
//! IDs they need), and the failures of the storage itself.

use keel_core::codec::CodecError;
use keel_core::{ErrorKind, HookToken, RunId};

/// Why a store operation failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no run `{run_id}` in this store")]
    RunNotFound { run_id: RunId },

    #[error("run {run_id} is already in this store")]
    RunExists { run_id: RunId },

    #[error("the store has no component with hash {hash}")]
    ComponentNotFound { hash: String },

    #[error(
        "no active hook holds the token `{token}`: no run registered it, or its run ended or disposed of it"
    )]
    HookNotFound { token: HookToken },

    #[error("run {conflicting_run_id} holds the token `{token}`")]
    HookConflict {
        token: HookToken,
        conflicting_run_id: RunId,
    },

    #[error(
        "a run of `{workflow}` with idempotency key `{key}` was already admitted: run {existing_run_id}"
    )]
    IdempotencyCollision {
        workflow: String,
        key: String,
        existing_run_id: RunId,
    },

    #[error("the store at `{location}` is locked by another process")]
    Locked { location: String },

    #[error("the store at `{location}` cannot be opened: {reason}")]
    Unavailable { location: String, reason: String },

    #[error("`{location}` is a file, not a store's directory")]
    NotADirectory { location: String },

    #[error(
        "the store at `{location}` has schema version {found}, newer than the {supported} this keel knows"
    )]
    SchemaTooNew {
        location: String,
        found: u32,
        supported: u32,
    },

    #[error(
        "run {run_id}: this worker's lease (epoch {epoch}) was taken over; the write was refused"
    )]
    LeaseLost { run_id: RunId, epoch: u64 },

    #[error("run {run_id}: the journal already holds entry {seq}; the write was refused")]
    JournalConflict { run_id: RunId, seq: u64 },

    #[error("no schedule `{name}` in this store")]
    ScheduleNotFound { name: String },

    #[error("a schedule named `{name}` exists already")]
    ScheduleExists { name: String },

    #[error("a webhook with ID `{id}` exists already")]
    WebhookExists { id: String },

    #[error(
        "schedule `{name}` was changed by another writer since it was read; the write was refused"
    )]
    ScheduleConflict { name: String },

    #[error("no job `{job_id}` in this store")]
    JobNotFound { job_id: String },

    #[error(
        "job `{job_id}` was changed by another writer since it was read; the write was refused"
    )]
    JobConflict { job_id: String },

    #[error("run {run_id}: {refusal}")]
    StreamRefused {
        run_id: RunId,
        refusal: keel_core::stream::StreamRefusal,
    },

    #[error("the store holds a record it cannot decode: {0}")]
    Corrupt(#[from] CodecError),

    #[error("the write was made but could not be confirmed durable: {reason}")]
    Unconfirmed { reason: String },

    #[error("storage failed: {reason}")]
    Backend { reason: String },

    /// A statement of a transaction lost a race with another transaction
    /// (a deadlock, a serialization failure): the transaction was rolled
    /// back, nothing of it committed. A store tries such a transaction
    /// again; callers see this only from a store that does not.
    #[error("the transaction lost a race with another and was rolled back ({reason})")]
    Race { reason: String },

    #[error(
        "the disk holding the store is full ({reason}); the write was refused, nothing committed is lost, and writes go on once space is freed"
    )]
    StorageFull { reason: String },
}

impl StoreError {
    /// The error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::RunNotFound { .. } => ErrorKind::RunNotFound,
            StoreError::RunExists { .. } => ErrorKind::RunExists,
            StoreError::ComponentNotFound { .. } => ErrorKind::ComponentNotFound,
            StoreError::HookNotFound { .. } => ErrorKind::HookNotFound,
            StoreError::HookConflict { .. } => ErrorKind::HookConflict,
            StoreError::IdempotencyCollision { .. } => ErrorKind::IdempotencyCollision,
            StoreError::Locked { .. } => ErrorKind::StoreLocked,
            StoreError::Unavailable { .. } => ErrorKind::StoreUnavailable,
            StoreError::NotADirectory { .. } => ErrorKind::StoreNotFound,
            StoreError::SchemaTooNew { .. } => ErrorKind::StoreSchemaTooNew,
            StoreError::LeaseLost { .. } => ErrorKind::LeaseLost,
            StoreError::JournalConflict { .. } => ErrorKind::JournalConflict,
            StoreError::ScheduleNotFound { .. } => ErrorKind::ScheduleNotFound,
            StoreError::ScheduleExists { .. } => ErrorKind::ScheduleExists,
            StoreError::WebhookExists { .. } => ErrorKind::WebhookExists,
            StoreError::ScheduleConflict { .. } => ErrorKind::ScheduleConflict,
            StoreError::JobNotFound { .. } => ErrorKind::JobNotFound,
            StoreError::JobConflict { .. } => ErrorKind::JobConflict,
            StoreError::StreamRefused { .. } => ErrorKind::StreamRefused,
            StoreError::Corrupt(_) => ErrorKind::CorruptRecord,
            StoreError::Unconfirmed { .. } => ErrorKind::StoreUnconfirmed,
            StoreError::Backend { .. } | StoreError::Race { .. } => ErrorKind::Storage,
            StoreError::StorageFull { .. } => ErrorKind::StorageFull,
        }
    }
}

/// A store's result.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
