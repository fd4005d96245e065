//! Journals for tests, written one way: the unit tests of core (the index,
//! divergence and the timeline) and the store's conformance suite and
//! tests build journals with [`JournalBuilder`] and the fact helpers here
//! (and run records with [`run_record`]) instead of spelling them out.

use crate::index::JournalIndex;
use crate::journal::{Entry, Fact};
use crate::{RunRecord, RunStatus};

/// A journal under construction: each fact becomes the entry at the next
/// position, at the builder's current time.
#[derive(Clone, Debug, Default)]
pub struct JournalBuilder {
    entries: Vec<Entry>,
    at_ms: u64,
    /// The position of the first entry (0, or where a stored journal ends).
    first_seq: u64,
}

impl JournalBuilder {
    /// An empty journal whose entries are at `at_ms` until told otherwise.
    pub fn at(at_ms: u64) -> Self {
        JournalBuilder::continuing(0, at_ms)
    }

    /// Entries that continue a journal whose next position is `seq`, at
    /// `at_ms`.
    pub fn continuing(seq: u64, at_ms: u64) -> Self {
        JournalBuilder {
            entries: Vec::new(),
            at_ms,
            first_seq: seq,
        }
    }

    /// A journal that starts with the run's start, at time 0.
    pub fn started(workflow: &str, input: &str) -> Self {
        JournalBuilder::at(0).then(Fact::RunStarted {
            workflow: workflow.into(),
            input: input.into(),
        })
    }

    /// Appends `fact` at the current time.
    pub fn then(mut self, fact: Fact) -> Self {
        self.entries.push(Entry {
            seq: self.first_seq + self.entries.len() as u64,
            at_ms: self.at_ms,
            fact,
        });
        self
    }

    /// Appends `fact` at `at_ms`, which becomes the current time.
    pub fn then_at(mut self, at_ms: u64, fact: Fact) -> Self {
        self.at_ms = at_ms;
        self.then(fact)
    }

    /// Appends every fact, in order.
    pub fn facts(self, facts: impl IntoIterator<Item = Fact>) -> Self {
        facts.into_iter().fold(self, JournalBuilder::then)
    }

    /// The entries.
    pub fn entries(self) -> Vec<Entry> {
        self.entries
    }

    /// The entries as an index; panics if they do not form a journal.
    pub fn index(self) -> JournalIndex {
        JournalIndex::new(self.entries).expect("the builder's entries form a journal")
    }
}

/// The record of run `id` of workflow `w` (component `h`, input `null`)
/// with `status`, admitted and updated at `at_ms`.
pub fn run_record(id: &str, status: RunStatus, at_ms: u64) -> RunRecord {
    RunRecord {
        run_id: id.into(),
        workflow: "w".into(),
        component_hash: "h".into(),
        input: "null".into(),
        status,
        output: None,
        error: None,
        created_at_ms: at_ms,
        updated_at_ms: at_ms,
        wake_at_ms: None,
        parent_run_id: None,
        attributes: Default::default(),
    }
}

/// The entry at position `seq` (and time `seq`) recording that timer
/// `command` fired: a filler entry for store tests.
pub fn timer_entry(seq: u64, command: u32) -> Entry {
    Entry {
        seq,
        at_ms: seq,
        fact: Fact::TimerFired { command },
    }
}

/// Step `name` scheduled as `command` with `input`; its step ID is
/// `r-COMMAND`.
pub fn step(command: u32, name: &str, input: &str) -> Fact {
    Fact::StepScheduled {
        command,
        name: name.into(),
        input: input.into(),
        step_id: format!("r-{command}"),
        digest: String::new(),
    }
}

/// Step `command` completed with `output`.
pub fn completed(command: u32, output: &str) -> Fact {
    Fact::StepCompleted {
        command,
        output: output.into(),
    }
}

/// The bytes a keel of run record layout 1 (before `parent_run_id`) stored
/// for `run`: what a store written before that layout holds.
pub fn run_record_layout_1(run: &RunRecord) -> Vec<u8> {
    postcard::to_stdvec(&(1u16, crate::records::RunRecordV1::of(run))).expect("records encode")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_take_their_positions_and_the_current_time() {
        let journal = JournalBuilder::started("w", "null")
            .then_at(5, step(0, "a", "1"))
            .then(completed(0, "2"))
            .entries();
        let placed: Vec<(u64, u64)> = journal.iter().map(|e| (e.seq, e.at_ms)).collect();
        assert_eq!(placed, [(0, 0), (1, 5), (2, 5)]);
        assert_eq!(journal[2].fact, completed(0, "2"));
    }
}
