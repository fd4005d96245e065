//! When a live run next needs a worker: the key of every store's due index.
//!
//! A store keeps each live run in an index ordered by the time it is due
//! (its *due time*), so that a worker finds the runs it may drive by
//! reading the front of the index, never by reading every run. The due
//! time is derived from four things the store holds for the run:
//!
//! | the run | due at |
//! |---|---|
//! | ended | never (out of the index) |
//! | leased (an owner is set) | the lease's expiry: a dead worker's runs come due |
//! | woken (a payload, a cancel request, an awaited end) | at once (0) |
//! | otherwise | [`next_at`] of its record, or a retry the engine asked for |
//!
//! Taking a lease takes the run's wake with it: the run is due again at
//! the lease's expiry until the lease is released, and a release makes it
//! due at once if a wake came meanwhile. So a wake is never lost to a
//! worker that dies before its activation commits: the run comes due when
//! that worker's lease expires, and the next activation reads whatever the
//! wake asked for (the payload, the cancel, the end) from the store.
//!
//! PostgreSQL computes the same rule in a generated column
//! (`store/src/postgres/schema.rs`); sled computes it here.

use crate::{RunRecord, RunStatus};

/// When `run`'s record alone makes it due: at once for a run admitted or
/// interrupted (`pending`, `running`: from when it became so, so that due
/// work is taken oldest first), at its start time for a delayed start, at
/// its timer or deadline for a waiting run (never, for one that waits only
/// on a hook or another run: a wake moves it), never for a queued run (an
/// end promotes it), a paused one (its resume wakes it) or an ended one.
pub fn next_at(run: &RunRecord) -> Option<u64> {
    match run.status {
        RunStatus::Pending | RunStatus::Running => Some(run.updated_at_ms),
        RunStatus::Scheduled => Some(run.wake_at_ms.unwrap_or(run.updated_at_ms)),
        RunStatus::Waiting => run.wake_at_ms,
        RunStatus::Queued
        | RunStatus::Paused
        | RunStatus::Completed
        | RunStatus::Failed
        | RunStatus::Cancelled
        | RunStatus::Continued => None,
    }
}

/// What a store holds about a live run's driving, from which its due time
/// follows ([`DueState::due_at`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DueState {
    /// [`next_at`] of its record, or earlier if the engine asked for a
    /// retry of a drive that failed (`release_lease`).
    pub next_at_ms: Option<u64>,
    /// Something moved it on since its lease was last taken.
    pub woken: bool,
    /// The expiry of the lease held on it, if one is (expired or not).
    pub leased_until_ms: Option<u64>,
}

impl DueState {
    /// The run's due time; `None` keeps it out of the index.
    pub fn due_at(&self) -> Option<u64> {
        match (self.leased_until_ms, self.woken) {
            (Some(expiry), _) => Some(expiry),
            (None, true) => Some(0),
            (None, false) => self.next_at_ms,
        }
    }
}

/// A due time as the big-endian bytes an ordered index sorts by, followed
/// by the run ID: the index's key.
pub fn index_key(due_at_ms: u64, run_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + run_id.len());
    key.extend_from_slice(&due_at_ms.to_be_bytes());
    key.extend_from_slice(run_id.as_bytes());
    key
}

/// The due time and run ID of an [`index_key`]; `None` for a key too
/// short to be one.
pub fn parse_index_key(key: &[u8]) -> Option<(u64, String)> {
    let (at, id) = key.split_at_checked(8)?;
    let at = u64::from_be_bytes(at.try_into().ok()?);
    Some((at, String::from_utf8_lossy(id).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::run_record;

    fn with(status: RunStatus, wake_at_ms: Option<u64>) -> RunRecord {
        let mut run = run_record("r", status, 5);
        run.updated_at_ms = 7;
        run.wake_at_ms = wake_at_ms;
        run
    }

    #[test]
    fn a_record_is_due_by_its_status() {
        assert_eq!(next_at(&with(RunStatus::Pending, None)), Some(7));
        assert_eq!(next_at(&with(RunStatus::Running, Some(99))), Some(7));
        assert_eq!(next_at(&with(RunStatus::Scheduled, Some(50))), Some(50));
        assert_eq!(next_at(&with(RunStatus::Scheduled, None)), Some(7));
        assert_eq!(next_at(&with(RunStatus::Waiting, Some(50))), Some(50));
        assert_eq!(next_at(&with(RunStatus::Waiting, None)), None);
        assert_eq!(next_at(&with(RunStatus::Queued, Some(50))), None);
        assert_eq!(next_at(&with(RunStatus::Paused, Some(50))), None);
        for ended in [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ] {
            assert_eq!(next_at(&with(ended, Some(50))), None, "{ended:?}");
        }
    }

    #[test]
    fn a_lease_makes_a_run_due_at_its_expiry_whatever_else_holds() {
        let state = |next_at_ms, woken, leased_until_ms| DueState {
            next_at_ms,
            woken,
            leased_until_ms,
        };
        assert_eq!(state(Some(5), true, Some(90)).due_at(), Some(90));
        assert_eq!(state(None, false, Some(90)).due_at(), Some(90));
        assert_eq!(state(Some(5), true, None).due_at(), Some(0));
        assert_eq!(state(None, true, None).due_at(), Some(0));
        assert_eq!(state(Some(5), false, None).due_at(), Some(5));
        assert_eq!(state(None, false, None).due_at(), None);
    }

    #[test]
    fn index_keys_sort_by_due_time_then_run() {
        let mut keys = [
            index_key(300, "a"),
            index_key(2, "z"),
            index_key(2, "b"),
            index_key(1 << 40, "a"),
        ];
        keys.sort();
        let parsed: Vec<_> = keys.iter().map(|k| parse_index_key(k).unwrap()).collect();
        assert_eq!(
            parsed,
            [
                (2, "b".to_string()),
                (2, "z".into()),
                (300, "a".into()),
                (1 << 40, "a".into())
            ]
        );
        assert_eq!(parse_index_key(b"short"), None);
    }
}
