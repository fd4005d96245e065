//! A run's lifecycle past its own code: cancel requests, the grace a
//! cancelled run's cleanup has, deadlines, how a cancelled run's end is
//! recorded, what becomes of a run's children when it ends (their close
//! policies), and pauses. Pure: the engine asks, the store keeps the
//! requests.

use serde::{Deserialize, Serialize};

use crate::ErrorKind;
pub use crate::journal::ClosePolicy;
use crate::journal::Fact;

/// The reason of the cancel a passed deadline makes.
pub const DEADLINE_EXCEEDED: &str = "deadline_exceeded";

/// Who made a deadline's cancel.
pub const BY_DEADLINE: &str = "deadline";

/// Someone's request that a run be cancelled, as the store keeps it until
/// the run's driver journals it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRequest {
    /// Why, in the requester's words (or [`DEADLINE_EXCEEDED`]).
    pub reason: String,
    /// Who asked: `api`, `cli`, `parent RUN_ID`, [`BY_DEADLINE`].
    pub by: String,
    /// When it was asked, on the engine's clock.
    pub at_ms: u64,
}

impl crate::codec::Stored for CancelRequest {}

impl CancelRequest {
    /// The journal entry the run's driver records for it.
    pub fn fact(&self) -> Fact {
        Fact::CancelRequested {
            reason: self.reason.clone(),
            by: self.by.clone(),
        }
    }

    /// The cancel of a run whose deadline passed.
    pub fn deadline(at_ms: u64) -> Self {
        CancelRequest {
            reason: DEADLINE_EXCEEDED.into(),
            by: BY_DEADLINE.into(),
            at_ms,
        }
    }
}

/// Someone's hold on a live run (`keel runs pause`), as the store keeps it
/// until it is lifted: while it is held, no code of the run runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PauseRequest {
    /// Who paused it: `api`, `cli`, `job JOB_ID`.
    pub by: String,
    /// When, on the engine's clock.
    pub at_ms: u64,
}

impl crate::codec::Stored for PauseRequest {}

impl PauseRequest {
    /// The journal entry a driver records when the pause takes hold of a
    /// run whose record is `run`.
    pub fn fact(&self, run: &crate::RunRecord) -> Fact {
        Fact::RunPaused {
            by: self.by.clone(),
            status: run.status.as_str().into(),
            wake_at_ms: run.wake_at_ms,
        }
    }
}

/// How long, and for how many steps, a cancelled run's cleanup may go on
/// before the run is ended without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grace {
    /// From the cancel's journal entry, in milliseconds.
    pub ms: u64,
    /// Steps scheduled after the cancel.
    pub steps: u32,
}

impl Default for Grace {
    /// One minute and 100 steps.
    fn default() -> Self {
        Grace {
            ms: 60_000,
            steps: 100,
        }
    }
}

impl Grace {
    /// When the cleanup of a cancel journaled at `cancel_at_ms` must end.
    pub fn ends_at(&self, cancel_at_ms: u64) -> u64 {
        cancel_at_ms.saturating_add(self.ms)
    }

    /// Why scheduling one more step, with `scheduled` after the cancel
    /// already, is past the grace, if it is.
    pub fn refuses_step(&self, scheduled: usize) -> Option<String> {
        (scheduled >= self.steps as usize).then(|| {
            format!(
                "its cleanup asked for more than {} step(s), the cancel grace",
                self.steps
            )
        })
    }

    /// Why the cleanup is past the grace at `now_ms`, if it is.
    pub fn expired(&self, cancel_at_ms: u64, now_ms: u64) -> Option<String> {
        (now_ms >= self.ends_at(cancel_at_ms)).then(|| {
            format!(
                "its cleanup did not end within the cancel grace of {} ms",
                self.ms
            )
        })
    }
}

/// How a cancelled workflow's code ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// It returned this output.
    Returned(String),
    /// It returned this error (a workflow that ends with `Cancelled`
    /// returns the cancel's own message).
    Failed(String),
    /// It was ended at the grace bound, for this reason.
    OverGrace(String),
    /// None of it had run (a queued run, a delayed start not yet due):
    /// there was nothing to clean up.
    NotStarted,
}

/// The error kind a cancel with `reason` ends the run with.
pub fn cancel_kind(reason: &str) -> ErrorKind {
    match reason {
        DEADLINE_EXCEEDED => ErrorKind::DeadlineExceeded,
        _ => ErrorKind::Cancelled,
    }
}

/// The end of a run cancelled by `by` for `reason`, whose code ended as
/// `cleanup`.
pub fn cancelled_end(reason: &str, by: &str, cleanup: Cleanup) -> Fact {
    let cause = match reason {
        DEADLINE_EXCEEDED => "the run passed its deadline".to_string(),
        _ if reason.is_empty() => format!("cancelled by {by}"),
        _ => format!("cancelled by {by}: {reason}"),
    };
    let (error, output) = match cleanup {
        Cleanup::Returned(output) => (cause, Some(output)),
        // The workflow ended with the cancel's own error (and more).
        Cleanup::Failed(e) if e.starts_with(&cause) => (e, None),
        Cleanup::Failed(e) => (format!("{cause}; the workflow then failed: {e}"), None),
        Cleanup::OverGrace(why) => (format!("{cause}; {why}"), None),
        Cleanup::NotStarted => (format!("{cause}, before it started"), None),
    };
    Fact::RunEndedCancelled {
        kind: cancel_kind(reason).as_str().into(),
        error,
        output,
    }
}

/// A run a workflow started, as its parent's journal records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Child {
    pub run_id: crate::RunId,
    pub workflow: String,
    /// The deployment it was started on, if not its parent's component.
    pub deployment: Option<String>,
    pub close: ClosePolicy,
}

/// How a workflow starts a child run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChildOptions {
    /// A start token: the child is admitted only if no run holds it.
    pub token: Option<String>,
    /// JSON metadata of the start hook.
    pub metadata: Option<String>,
    pub min_retention_ms: Option<u64>,
    /// The deployment whose latest component runs the child; `None`: the
    /// parent's own component.
    pub deployment: Option<String>,
    pub close: ClosePolicy,
    /// The child's deadline from its start; `None`: its workflow's own.
    pub timeout_ms: Option<u64>,
}

/// The cancel request the end of `parent` sends to a child whose policy
/// is [`ClosePolicy::Cancel`], saying how the parent ended (a deadline is
/// not a cancel).
pub fn parent_closed(parent: &crate::RunRecord, at_ms: u64) -> CancelRequest {
    let deadline = parent
        .error
        .as_ref()
        .is_some_and(|e| e.kind == DEADLINE_EXCEEDED);
    let how = match parent.status {
        crate::RunStatus::Cancelled if deadline => "passed its deadline",
        crate::RunStatus::Cancelled => "was cancelled",
        crate::RunStatus::Failed => "failed",
        _ => "completed",
    };
    let parent = &parent.run_id;
    CancelRequest {
        reason: format!("its parent {parent} {how}"),
        by: format!("parent {parent}"),
        at_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_told_how_its_parent_ended() {
        let mut parent = crate::testing::run_record("parent", crate::RunStatus::Cancelled, 1);
        parent.error = Some(crate::RunError {
            kind: DEADLINE_EXCEEDED.into(),
            message: "the run passed its deadline".into(),
        });
        let told = parent_closed(&parent, 5);
        assert_eq!(told.reason, "its parent parent passed its deadline");
        assert_eq!(told.by, "parent parent");
        parent.error = Some(crate::RunError {
            kind: "cancelled".into(),
            message: "cancelled by cli".into(),
        });
        assert_eq!(
            parent_closed(&parent, 5).reason,
            "its parent parent was cancelled"
        );
        parent.status = crate::RunStatus::Failed;
        assert_eq!(parent_closed(&parent, 5).reason, "its parent parent failed");
    }

    #[test]
    fn a_deadline_is_a_distinct_outcome() {
        let Fact::RunEndedCancelled { kind, error, .. } =
            cancelled_end(DEADLINE_EXCEEDED, BY_DEADLINE, Cleanup::Failed("x".into()))
        else {
            unreachable!()
        };
        assert_eq!(kind, "deadline_exceeded");
        assert!(error.starts_with("the run passed its deadline; the workflow then failed: x"));
        let Fact::RunEndedCancelled {
            kind,
            error,
            output,
        } = cancelled_end("customer asked", "api", Cleanup::Returned("1".into()))
        else {
            unreachable!()
        };
        assert_eq!(
            (kind.as_str(), error.as_str()),
            ("cancelled", "cancelled by api: customer asked")
        );
        assert_eq!(output.as_deref(), Some("1"));
    }

    #[test]
    fn the_grace_bounds_time_and_steps() {
        let grace = Grace { ms: 100, steps: 2 };
        assert!(grace.expired(1000, 1099).is_none());
        assert!(grace.expired(1000, 1100).unwrap().contains("100 ms"));
        assert!(grace.refuses_step(1).is_none());
        assert!(grace.refuses_step(2).unwrap().contains("2 step(s)"));
    }
}
