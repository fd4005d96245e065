//! `patched(change_id)`: how a workflow's code changes without breaking
//! the runs in flight, decided from the journal alone.
//!
//! New code asks `patched("id")` where it departs from the old. A run that
//! reaches that point with the new code records a marker and takes the new
//! path; a run replaying history recorded by the old code finds another
//! command there (or nothing, in a finished or offline journal) and takes
//! the old path, consuming nothing, so its history still matches.
//!
//! | journal at this position      | journal can grow | answer | effect                 |
//! |-------------------------------|------------------|--------|------------------------|
//! | this change's marker          | any              | true   | the marker is consumed |
//! | another command               | any              | false  | nothing is consumed    |
//! | nothing                       | yes (live run)   | true   | a marker is recorded   |
//! | nothing                       | no (ended, offline replay) | false | nothing      |

use crate::journal::Fact;

/// What `patched()` answers at one position of the journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patch {
    /// The journal holds this change's marker: true, and the marker is
    /// consumed as a command.
    Marked,
    /// History from before the change: false, and nothing is consumed.
    Before,
    /// Past the journal's history in a live run: true, and a marker is
    /// recorded as a command.
    Record,
}

impl Patch {
    /// The answer the workflow gets.
    pub fn is_patched(self) -> bool {
        !matches!(self, Patch::Before)
    }
}

/// Decides `patched(change_id)` given the command the journal holds at the
/// workflow's next position (if any), and whether the journal can still
/// grow (a live run that has not ended).
pub fn decide(recorded: Option<&Fact>, change_id: &str, can_record: bool) -> Patch {
    match recorded {
        Some(Fact::PatchMarker { change_id: c, .. }) if c == change_id => Patch::Marked,
        Some(_) => Patch::Before,
        None if can_record => Patch::Record,
        None => Patch::Before,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(id: &str) -> Fact {
        Fact::PatchMarker {
            command: 0,
            change_id: id.into(),
        }
    }

    #[test]
    fn the_truth_table_holds() {
        let step = Fact::TimerScheduled {
            command: 0,
            fire_at_ms: 1,
        };
        let cases = [
            (Some(marker("a")), true, Patch::Marked),
            (Some(marker("a")), false, Patch::Marked),
            (Some(marker("b")), true, Patch::Before),
            (Some(step.clone()), true, Patch::Before),
            (Some(step), false, Patch::Before),
            (None, true, Patch::Record),
            (None, false, Patch::Before),
        ];
        for (recorded, can_record, expected) in cases {
            assert_eq!(
                decide(recorded.as_ref(), "a", can_record),
                expected,
                "{recorded:?} can_record={can_record}"
            );
        }
        assert!(Patch::Marked.is_patched() && Patch::Record.is_patched());
        assert!(!Patch::Before.is_patched());
    }
}
