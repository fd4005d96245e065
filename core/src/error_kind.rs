//! The one vocabulary of error kinds: every kind the engine, the store, the
//! HTTP API and the CLI report, declared once with its wire name. Callers
//! branch on these; front ends decide per kind, in exhaustive matches, what
//! status or hint each gets, so a new kind is a compile error wherever a
//! decision is needed. [`ErrorReport`] is the one shape an error travels
//! in: kind, message and the IDs a caller needs.

use std::fmt;

macro_rules! kinds {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// What kind of error a caller got.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorKind {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorKind {
            /// Every kind.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$variant,)*];

            /// The kind's wire name, in snake case.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorKind::$variant => $name,)*
                }
            }
        }
    };
}

kinds! {
    // The component and its manifest.
    /// Not a WebAssembly component.
    InvalidComponent = "invalid_component",
    /// Not a keel component: the exports are missing.
    MissingExports = "missing_exports",
    /// It imports what the host cannot provide.
    UnsupportedImport = "unsupported_import",
    /// No such workflow (in a component or a deployment).
    UnknownWorkflow = "unknown_workflow",
    /// No such deployment.
    DeploymentNotFound = "deployment_not_found",
    /// A component hash the store does not hold.
    ComponentNotFound = "component_not_found",
    /// A malformed grant.
    InvalidGrant = "invalid_grant",
    /// A deployment limit out of its range.
    InvalidLimit = "invalid_limit",
    /// A deploy of a build its name had before, which would move the name
    /// back to older code.
    OlderBuild = "older_build",
    /// A run ID or a name outside the safe set.
    InvalidName = "invalid_name",
    /// The compiled-component cache is unsafe to load from.
    UnsafeCache = "unsafe_cache",

    // Starts and their idempotency.
    /// Input that is not JSON, or not of the workflow's type.
    InvalidInput = "invalid_input",
    /// A key expression that failed.
    KeyExpression = "key_expression",
    /// Another run holds the idempotency key.
    IdempotencyCollision = "idempotency_collision",
    /// Another run holds the token.
    HookConflict = "hook_conflict",
    /// The store holds a run of that ID.
    RunExists = "run_exists",
    /// The store cannot do what the start asks.
    StoreCapability = "store_capability",
    /// The start may or may not have been admitted.
    StartOutcomeUnknown = "start_outcome_unknown",
    /// What was asked of a run was recorded; driving it then stopped.
    DriveInterrupted = "drive_interrupted",
    /// A payload may or may not have been delivered.
    ResumeOutcomeUnknown = "resume_outcome_unknown",
    /// A cancel or retry may or may not have happened.
    OutcomeUnknown = "outcome_unknown",
    /// An event started runs but its record was not stored.
    EventUnrecorded = "event_unrecorded",

    // Runs.
    /// No such run.
    RunNotFound = "run_not_found",
    /// No active hook holds the token.
    HookNotFound = "hook_not_found",
    /// The run cannot be retried.
    NotRetryable = "not_retryable",
    /// The run did not end within the wait.
    StillRunning = "still_running",
    /// The run has not ended, and only ended runs are deleted.
    RunLive = "run_live",
    /// The run was cancelled.
    Cancelled = "cancelled",
    /// The run passed its deadline and was cancelled.
    DeadlineExceeded = "deadline_exceeded",
    /// The run's journal could not be written.
    JournalWrite = "journal_write",
    /// A journal file that cannot be read.
    JournalFile = "journal_file",
    /// The run cannot be crash-tested.
    NotCrashTestable = "not_crash_testable",
    /// A write to a run's stream was refused (closed, over the bound).
    StreamRefused = "stream_refused",
    /// No payload of that ID was delivered to the hook.
    PayloadNotFound = "payload_not_found",
    /// The run's workflow set no query of that name.
    QueryNotFound = "query_not_found",

    // Schedules.
    /// No such schedule.
    ScheduleNotFound = "schedule_not_found",
    /// A schedule of that name exists.
    ScheduleExists = "schedule_exists",
    /// Another writer changed the schedule first.
    ScheduleConflict = "schedule_conflict",
    /// A cron expression, zone, interval or bound that cannot fire.
    InvalidSchedule = "invalid_schedule",

    // Webhooks.
    /// No such webhook.
    WebhookNotFound = "webhook_not_found",
    /// A webhook of that ID exists.
    WebhookExists = "webhook_exists",
    /// A delivery whose signature is missing, wrong, stale or replayed.
    SignatureRefused = "signature_refused",

    // Bulk operations.
    /// No such job.
    JobNotFound = "job_not_found",
    /// Another worker changed the job first (it carries the job out).
    JobConflict = "job_conflict",

    // A run's own failures.
    /// The code no longer matches the journal.
    NonDeterminism = "non_determinism",
    /// The workflow did what its sandbox forbids.
    SandboxViolation = "sandbox_violation",
    /// Over the workflow's fuel bound.
    FuelExhausted = "fuel_exhausted",
    /// Over the activation's wall-clock bound.
    ActivationTimeout = "activation_timeout",
    /// Over the memory bound.
    MemoryExhausted = "memory_exhausted",
    /// Over another bound (payload, journal, steps in flight).
    BoundExceeded = "bound_exceeded",
    /// The guest trapped.
    GuestTrap = "guest_trap",
    /// The workflow returned an error.
    WorkflowFailed = "workflow_failed",
    /// wasmtime failed otherwise.
    Wasm = "wasm",

    // The store.
    /// Another process holds the store.
    StoreLocked = "store_locked",
    /// The store cannot be opened or reached.
    StoreUnavailable = "store_unavailable",
    /// A newer keel wrote the store.
    StoreSchemaTooNew = "store_schema_too_new",
    /// No store at the path given.
    StoreNotFound = "store_not_found",
    /// Another worker took the run's lease.
    LeaseLost = "lease_lost",
    /// The journal already holds that position.
    JournalConflict = "journal_conflict",
    /// A record that cannot be decoded.
    CorruptRecord = "corrupt_record",
    /// A write that could not be confirmed durable.
    StoreUnconfirmed = "store_unconfirmed",
    /// The storage failed.
    Storage = "storage",
    /// The store's disk is full.
    StorageFull = "storage_full",
    /// A file could not be read or written.
    Io = "io",

    // The HTTP API's own.
    /// A malformed request.
    InvalidRequest = "invalid_request",
    /// A missing or wrong token.
    Unauthorized = "unauthorized",
    /// A scoped token used outside its scope.
    Forbidden = "forbidden",
    /// A changing request from another origin.
    CrossOrigin = "cross_origin",
    /// A `Host` the server does not answer to.
    HostNotAllowed = "host_not_allowed",
    /// A body of a type the route does not take.
    UnsupportedMediaType = "unsupported_media_type",
    /// A body over its limit.
    PayloadTooLarge = "payload_too_large",
    /// No endpoint at the path.
    NotFound = "not_found",
    /// The endpoint does not take the method.
    MethodNotAllowed = "method_not_allowed",
    /// The server failed.
    Internal = "internal",

    // The CLI's own.
    /// Arguments the CLI does not take.
    Usage = "usage",
    /// The run waits for something only a worker delivers.
    NeedsWorker = "needs_worker",
    /// The run has ended.
    RunEnded = "run_ended",
    /// Any other failure.
    Other = "error",
}

impl ErrorKind {
    /// The kind of wire name `name`, if keel knows it.
    pub fn parse(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.iter().copied().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error as it travels to a caller: its kind, its message and the IDs
/// (`run_id`, `token`, ...) a caller needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorReport {
    pub kind: ErrorKind,
    pub message: String,
    pub ids: Vec<(String, String)>,
}

impl ErrorReport {
    /// An error of `kind` with `message` and no IDs.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorReport {
            kind,
            message: message.into(),
            ids: Vec::new(),
        }
    }

    /// The value of ID `field`, if the error carries it.
    pub fn id(&self, field: &str) -> Option<&str> {
        self.ids
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_name_that_parses_back() {
        let mut names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        for kind in ErrorKind::ALL {
            assert_eq!(ErrorKind::parse(kind.as_str()), Some(*kind));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorKind::ALL.len(), "a name is used twice");
        assert_eq!(ErrorKind::parse("no_such_kind"), None);
    }
}
