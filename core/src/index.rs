//! The index of a run's journal: where each command is, which completions
//! were recorded and in what order, how many attempts a step had, and
//! which completion an activation hands the workflow next.
//!
//! Pure: the activation keeps one per run in memory and appends to it as
//! it records; replay matching and completion delivery are decided here.

use std::collections::HashSet;

use crate::journal::{Entry, Fact};

/// A run's journal with its command and completion positions.
#[derive(Clone, Debug, Default)]
pub struct JournalIndex {
    entries: Vec<Entry>,
    /// Entry index of each command, by command ID.
    commands: Vec<usize>,
    /// Entry indices of completions, in journal order.
    completions: Vec<usize>,
    completed: HashSet<u32>,
}

/// Why an entry cannot be appended to a journal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("entry {seq} is out of sequence: the journal holds {len} entries")]
    OutOfSequence { seq: u64, len: usize },
    #[error("command {command} is out of order: the journal holds {len} commands")]
    CommandOutOfOrder { command: u32, len: usize },
}

impl JournalIndex {
    /// The index of `entries`, which must be in sequence.
    pub fn new(entries: Vec<Entry>) -> Result<Self, IndexError> {
        let mut index = JournalIndex::default();
        for entry in entries {
            index.push(entry)?;
        }
        Ok(index)
    }

    /// Appends an entry; its sequence number and command ID must follow.
    pub fn push(&mut self, entry: Entry) -> Result<(), IndexError> {
        let idx = self.entries.len();
        if entry.seq != idx as u64 {
            return Err(IndexError::OutOfSequence {
                seq: entry.seq,
                len: idx,
            });
        }
        if let Some(c) = entry.fact.command() {
            if c as usize != self.commands.len() {
                return Err(IndexError::CommandOutOfOrder {
                    command: c,
                    len: self.commands.len(),
                });
            }
            self.commands.push(idx);
        }
        if let Some(c) = entry.fact.completes() {
            self.completions.push(idx);
            self.completed.insert(c);
        }
        self.entries.push(entry);
        Ok(())
    }

    /// The entry that would be appended next for `fact` at `now_ms`: the
    /// next sequence number, and a time never before the last entry's.
    pub fn next_entry(&self, fact: Fact, now_ms: u64) -> Entry {
        let last = self.entries.last().map_or(0, |e| e.at_ms);
        Entry {
            seq: self.entries.len() as u64,
            at_ms: now_ms.max(last),
            fact,
        }
    }

    /// Every entry, in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// How many entries the journal holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The journal holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many commands the journal holds.
    pub fn command_count(&self) -> u32 {
        self.commands.len() as u32
    }

    /// The entry of command `command`, if recorded.
    pub fn command(&self, command: u32) -> Option<&Entry> {
        self.commands
            .get(command as usize)
            .map(|&i| &self.entries[i])
    }

    /// The commands recorded in `range`, as `(command, entry)`.
    pub fn commands_in(&self, range: std::ops::Range<u32>) -> Vec<(u32, &Entry)> {
        range
            .filter_map(|c| self.command(c).map(|e| (c, e)))
            .collect()
    }

    /// A completion of `command` is recorded.
    pub fn is_completed(&self, command: u32) -> bool {
        self.completed.contains(&command)
    }

    /// How many attempts of the step of `command` were started, and when
    /// the next may start (after a failed attempt).
    pub fn attempts(&self, command: u32) -> (u32, Option<u64>) {
        let mut started = 0;
        let mut retry_at = None;
        for e in &self.entries {
            match &e.fact {
                Fact::StepAttemptStarted {
                    command: c,
                    attempt,
                } if *c == command => started = started.max(*attempt),
                Fact::StepAttemptFailed {
                    command: c,
                    retry_at_ms,
                    ..
                } if *c == command => retry_at = Some(*retry_at_ms),
                _ => {}
            }
        }
        (started, retry_at)
    }

    /// The first completion among `ids` not yet delivered, in journal
    /// order; marks it delivered. The same live and on replay, so the
    /// workflow sees completions in the order they first happened.
    pub fn take_completion(&self, ids: &[u32], delivered: &mut Delivered) -> Option<&Entry> {
        let completes = |i: usize| {
            self.entries[i]
                .fact
                .completes()
                .expect("indexed as a completion")
        };
        let pos = self
            .completions
            .iter()
            .skip(delivered.prefix)
            .position(|&i| {
                let c = completes(i);
                ids.contains(&c) && !delivered.commands.contains(&c)
            })?
            + delivered.prefix;
        let idx = self.completions[pos];
        delivered.commands.insert(completes(idx));
        while delivered.prefix < self.completions.len()
            && delivered
                .commands
                .contains(&completes(self.completions[delivered.prefix]))
        {
            delivered.prefix += 1;
        }
        Some(&self.entries[idx])
    }

    /// The journal records the run's end: everything in it is history.
    pub fn has_ended(&self) -> bool {
        self.entries.last().is_some_and(|e| e.fact.is_end())
    }
}

/// The completions an activation has handed to the workflow.
#[derive(Clone, Debug, Default)]
pub struct Delivered {
    commands: HashSet<u32>,
    /// Every completion before this index (in journal order) is delivered.
    prefix: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(facts: Vec<Fact>) -> JournalIndex {
        let mut index = JournalIndex::default();
        for fact in facts {
            let entry = index.next_entry(fact, 10);
            index.push(entry).unwrap();
        }
        index
    }

    fn step(command: u32) -> Fact {
        Fact::StepScheduled {
            command,
            name: "s".into(),
            input: "null".into(),
            step_id: format!("r-{command}"),
            digest: String::new(),
        }
    }

    fn done(command: u32) -> Fact {
        Fact::StepCompleted {
            command,
            output: command.to_string(),
        }
    }

    #[test]
    fn completions_are_delivered_in_journal_order_not_request_order() {
        let index = journal(vec![step(0), step(1), done(1), done(0)]);
        let mut delivered = Delivered::default();
        let first = index.take_completion(&[0, 1], &mut delivered).unwrap();
        assert_eq!(first.fact.completes(), Some(1));
        let second = index.take_completion(&[0, 1], &mut delivered).unwrap();
        assert_eq!(second.fact.completes(), Some(0));
        assert!(index.take_completion(&[0, 1], &mut delivered).is_none());
    }

    #[test]
    fn a_completion_not_awaited_waits_for_its_turn() {
        let index = journal(vec![step(0), step(1), done(0), done(1)]);
        let mut delivered = Delivered::default();
        let got = index.take_completion(&[1], &mut delivered).unwrap();
        assert_eq!(got.fact.completes(), Some(1));
        let got = index.take_completion(&[0], &mut delivered).unwrap();
        assert_eq!(got.fact.completes(), Some(0));
    }

    #[test]
    fn attempts_count_started_attempts_and_the_last_retry_time() {
        let index = journal(vec![
            step(0),
            Fact::StepAttemptStarted {
                command: 0,
                attempt: 1,
            },
            Fact::StepAttemptFailed {
                command: 0,
                attempt: 1,
                error: "e".into(),
                retry_at_ms: 500,
            },
            Fact::StepAttemptStarted {
                command: 0,
                attempt: 2,
            },
        ]);
        assert_eq!(index.attempts(0), (2, Some(500)));
        assert_eq!(index.attempts(1), (0, None));
    }

    #[test]
    fn out_of_sequence_entries_and_commands_are_refused() {
        let mut index = journal(vec![step(0)]);
        let mut entry = index.next_entry(step(1), 0);
        entry.seq = 5;
        assert!(matches!(
            index.push(entry),
            Err(IndexError::OutOfSequence { seq: 5, len: 1 })
        ));
        let entry = index.next_entry(step(3), 0);
        assert!(matches!(
            index.push(entry),
            Err(IndexError::CommandOutOfOrder { command: 3, len: 1 })
        ));
    }

    #[test]
    fn entry_times_never_go_backwards_and_the_end_is_detected() {
        let mut index = journal(vec![step(0)]);
        let entry = index.next_entry(Fact::RunCancelled, 3);
        assert_eq!(entry.at_ms, 10);
        assert!(!index.has_ended());
        index.push(entry).unwrap();
        assert!(index.has_ended());
        assert!(!index.is_completed(0) && index.command_count() == 1);
    }
}
