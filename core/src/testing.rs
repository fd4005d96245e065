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

/// One fact of every kind, with every field set (options `Some`), for the
/// tests that send every kind of entry through each of keel's doors: the
/// binary and JSON files, the API and the remote CLI.
pub fn every_fact() -> Vec<Fact> {
    let s = |v: &str| v.to_string();
    vec![
        Fact::RunStarted {
            workflow: s("order"),
            input: s(r#"{"id":1}"#),
        },
        Fact::StepScheduled {
            command: 1,
            name: s("charge"),
            input: s("[1,2]"),
            step_id: s("run-1"),
            digest: s("d1"),
        },
        Fact::StepAttemptStarted {
            command: 1,
            attempt: 2,
        },
        Fact::StepAttemptFailed {
            command: 1,
            attempt: 1,
            error: s("boom"),
            retry_at_ms: 7,
        },
        Fact::StepCompleted {
            command: 1,
            output: s(r#""ok""#),
        },
        Fact::StepFailed {
            command: 1,
            error: s("gave up"),
            fatal: true,
            attempts: 3,
        },
        Fact::TimerScheduled {
            command: 2,
            fire_at_ms: 9,
        },
        Fact::PatchMarker {
            command: 3,
            change_id: s("v2"),
        },
        Fact::TimerFired { command: 2 },
        Fact::RunCompleted { output: s("null") },
        Fact::RunFailed {
            kind: s("step_failed"),
            error: s("no"),
        },
        Fact::HookCreated {
            command: 4,
            token: s("t"),
            force: true,
            registration: crate::journal::HookRegistration::Conflict {
                owner_run_id: s("other"),
            },
        },
        Fact::HookNext {
            command: 5,
            hook: 4,
            token: s("t"),
            index: 6,
        },
        Fact::HookReceived {
            command: 5,
            payload: s("{}"),
        },
        Fact::HookForceClaimed {
            command: 5,
            claimed_by_run_id: s("other"),
        },
        Fact::HookDisposed {
            command: 6,
            hook: 4,
        },
        Fact::RunStatusRead {
            command: 7,
            run_id: s("other"),
            status: s("running"),
        },
        Fact::RunAwaited {
            command: 8,
            run_id: s("other"),
        },
        Fact::AwaitedRunEnded {
            command: 8,
            status: s("failed"),
            output: Some(s("1")),
            error: Some(s("why")),
        },
        Fact::WorkflowStarted {
            command: 9,
            workflow: s("child"),
            input: s("2"),
            token: Some(s("tok")),
            outcome: crate::journal::StartOutcome::HookConflict {
                conflicting_run_id: s("other"),
            },
        },
        Fact::RunCancelled,
        Fact::RunRetried { from_seq: 4 },
        Fact::StepThrottled {
            command: 1,
            attempt: 1,
            key: s("api"),
            waited_ms: 250,
        },
        Fact::CancelRequested {
            reason: s("operator"),
            by: s("cli"),
        },
        Fact::DeadlineSet {
            deadline_ms: 60_000,
        },
        Fact::RunEndedCancelled {
            kind: s("deadline_exceeded"),
            error: s("cleanup completed"),
            output: Some(s("3")),
        },
        Fact::ChildStarted {
            command: 10,
            workflow: s("child"),
            deployment: Some(s("billing")),
            input: s("4"),
            token: Some(s("tok2")),
            close: crate::lifecycle::ClosePolicy::Wait,
            timeout_ms: Some(1_000),
            outcome: crate::journal::StartOutcome::Refused { reason: s("full") },
        },
        Fact::AttributeSet {
            command: 11,
            key: s("tenant"),
            value: s("acme"),
        },
        Fact::StreamWritten {
            command: 12,
            stream: s("out"),
            value: s(r#""chunk""#),
        },
        Fact::StreamClosed {
            command: 13,
            stream: s("out"),
        },
        Fact::HookReplied {
            command: 14,
            request: 5,
            token: s("t"),
            index: 6,
            reply: s("true"),
        },
        Fact::HookRefused {
            command: 15,
            request: 5,
            token: s("t"),
            index: 7,
            reason: s("bad"),
        },
        Fact::PayloadSkipped {
            token: s("t"),
            index: 7,
        },
        Fact::Traced {
            trace_id: s("0af7651916cd43dd8448eb211c80319c"),
            span_id: s("b7ad6b7169203331"),
            parent_span_id: Some(s("00f067aa0ba902b7")),
        },
        Fact::TakenOver {
            from_worker: s("host-1:41:a1b2"),
            expired_at_ms: 30_102,
            by_worker: s("host-2:77:c3d4"),
        },
        Fact::RunPaused {
            by: s("cli"),
            status: s("scheduled"),
            wake_at_ms: Some(90_000),
        },
        Fact::RunResumed,
        Fact::RunRestarted {
            from_seq: 3,
            by: s("cli"),
        },
        Fact::RunMoved {
            from: s("a1b2"),
            to: s("c3d4"),
            by: s("job j-1"),
        },
        Fact::RunContinued {
            next_run_id: s("0190a5b8-7c2e-8d41-9f3a-5b6c7d8e9f01"),
            input: s("{\"seen\":3}"),
        },
    ]
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
