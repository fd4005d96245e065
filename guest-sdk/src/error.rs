//! Errors seen by authors: a step attempt's error and a workflow's error.

use std::fmt;
use std::time::Duration;

/// The error a step attempt returns.
///
/// Any `std::error::Error` converts into a retryable `StepError` with `?`.
/// Use [`StepError::fatal`] for an error that no retry can fix.
#[derive(Clone, Debug, PartialEq)]
pub struct StepError {
    pub(crate) message: String,
    pub(crate) fatal: bool,
    pub(crate) retry_after: Option<Duration>,
}

impl StepError {
    /// An error that fails the step at once, without retries.
    pub fn fatal(message: impl fmt::Display) -> Self {
        StepError {
            message: message.to_string(),
            fatal: true,
            retry_after: None,
        }
    }

    /// An error retried under the step's retry policy.
    pub fn retryable(message: impl fmt::Display) -> Self {
        StepError {
            message: message.to_string(),
            fatal: false,
            retry_after: None,
        }
    }

    /// Asks for the next attempt no sooner than `delay` from now.
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error> From<E> for StepError {
    fn from(e: E) -> Self {
        StepError::retryable(e)
    }
}

/// A step that failed for good: its error was fatal or its retries ran out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepFailure {
    pub step_name: String,
    pub step_id: String,
    pub message: String,
    /// The last error was fatal (rather than retries exhausted).
    pub fatal: bool,
    pub attempts: u32,
}

/// The error type of workflows: a failed step, a payload that did not
/// (de)serialize, or the author's own message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    StepFailed(StepFailure),
    Payload(String),
    Custom(String),
    /// Another run holds the hook's token (or the start token).
    HookConflict {
        token: String,
        conflicting_run_id: String,
    },
    /// Another run took the hook's token over with `force`.
    HookForceClaimed {
        token: String,
        claimed_by_run_id: String,
    },
    /// No active hook holds the token.
    HookNotFound {
        token: String,
    },
    /// Options `create_hook` cannot take here (start-only options on the
    /// run's start hook).
    HookOptions(String),
    /// The run was cancelled (`reason` is `deadline_exceeded` when it
    /// passed its deadline): the workflow's keel futures fail with it from
    /// the cancel on, except inside [`crate::non_cancellable`]. Returning
    /// it (or any result) ends the run `cancelled`.
    Cancelled {
        reason: String,
        by: String,
    },
    /// An awaited run failed or was cancelled.
    RunFailed {
        run_id: String,
        cancelled: bool,
        message: String,
    },
}

impl Error {
    /// An error of the author's own.
    pub fn msg(message: impl fmt::Display) -> Self {
        Error::Custom(message.to_string())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::StepFailed(s) => {
                let why = if s.fatal {
                    "fatal error"
                } else {
                    "retries exhausted"
                };
                write!(
                    f,
                    "step `{}` ({}) failed after {} attempt(s), {why}: {}",
                    s.step_name, s.step_id, s.attempts, s.message
                )
            }
            Error::Payload(m) => write!(f, "payload error: {m}"),
            Error::Custom(m) => f.write_str(m),
            Error::HookConflict {
                token,
                conflicting_run_id,
            } => write!(f, "run {conflicting_run_id} holds the token `{token}`"),
            Error::HookForceClaimed {
                token,
                claimed_by_run_id,
            } => write!(f, "run {claimed_by_run_id} took the token `{token}` over"),
            Error::HookNotFound { token } => write!(f, "no active hook holds the token `{token}`"),
            Error::HookOptions(m) => f.write_str(m),
            // The host's words for the cancel, so that the run's error
            // reads the same whichever ended it.
            Error::Cancelled { reason, .. } if reason == "deadline_exceeded" => {
                f.write_str("the run passed its deadline")
            }
            Error::Cancelled { reason, by } if reason.is_empty() => write!(f, "cancelled by {by}"),
            Error::Cancelled { reason, by } => write!(f, "cancelled by {by}: {reason}"),
            Error::RunFailed {
                run_id,
                cancelled: true,
                ..
            } => write!(f, "run {run_id} was cancelled"),
            Error::RunFailed {
                run_id, message, ..
            } => write!(f, "run {run_id} failed: {message}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Payload(e.to_string())
    }
}
