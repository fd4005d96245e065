//! The index of a run's journal: where each command is, which completions
//! were recorded and in what order, how many attempts a step had, and
//! which completion an activation hands the workflow next.
//!
//! Pure: the activation keeps one per run in memory and appends to it as
//! it records; replay matching and completion delivery are decided here.

use std::collections::{HashMap, HashSet};

use crate::ids::{RunId, StepId};
use crate::journal::{Entry, Fact, StartOutcome};
use crate::lifecycle::{Child, ClosePolicy};

/// A run's journal with its command and completion positions.
#[derive(Clone, Debug, Default)]
pub struct JournalIndex {
    entries: Vec<Entry>,
    /// Entry index of each command, by command ID.
    commands: Vec<usize>,
    /// Entry indices of completions, in journal order.
    completions: Vec<usize>,
    completed: HashSet<u32>,
    /// Entry ranges a retry voided: history that no longer counts.
    voided: Vec<std::ops::Range<usize>>,
    /// Entry index of the last retry, if any.
    last_retry: Option<usize>,
    /// Entry index of the first cancel request that counts, if any.
    cancel: Option<usize>,
    /// The run's deadline, if one was set.
    deadline_ms: Option<u64>,
    /// Entry index of the run's trace context, if admission recorded one.
    traced: Option<usize>,
    /// Entry index of the pause the run is under, if one holds it.
    paused: Option<usize>,
    /// How many steps of each name the run scheduled that count: the
    /// occurrence of the next one ([`JournalIndex::step_id_for`]).
    step_counts: HashMap<String, u32>,
    /// The ID each logical step (name, occurrence) was first issued under,
    /// voided schedulings included: a step that runs again keeps it.
    step_ids: HashMap<(String, u32), String>,
}

/// The attempts of a step, as the journal records them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attempts {
    /// The highest attempt number started.
    pub started: u32,
    /// When the next attempt may start (after a failed attempt).
    pub retry_at_ms: Option<u64>,
    /// Attempts started before the run's last retry: the step's retry
    /// budget counts from the attempt after them.
    pub before_retry: u32,
}

/// Where a retry of a failed run starts over, and the payload it skips.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPlan {
    /// The journal's entries from this one on no longer count.
    pub from_seq: u64,
    /// The refused payload the retry skips, as `(token, index)`.
    pub skip: Option<(String, u64)>,
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
        if let Fact::StepScheduled { name, step_id, .. } = &entry.fact {
            let count = self.step_counts.entry(name.clone()).or_default();
            self.step_ids
                .entry((name.clone(), *count))
                .or_insert_with(|| step_id.clone());
            *count += 1;
        }
        if let Some(c) = entry.fact.completes() {
            self.completions.push(idx);
            self.completed.insert(c);
        }
        match entry.fact {
            Fact::RunRetried { from_seq } | Fact::RunRestarted { from_seq, .. } => {
                self.void((from_seq as usize).min(idx)..idx);
                self.last_retry = Some(idx);
            }
            Fact::CancelRequested { .. } if self.cancel.is_none() => self.cancel = Some(idx),
            Fact::DeadlineSet { deadline_ms } => self.deadline_ms = Some(deadline_ms),
            Fact::Traced { .. } => self.traced = Some(idx),
            Fact::RunPaused { .. } => self.paused = Some(idx),
            Fact::RunResumed => self.paused = None,
            _ => {}
        }
        self.entries.push(entry);
        Ok(())
    }

    /// Forgets the commands and completions recorded in `range`, as a
    /// retry does: the journal goes on as if they were never recorded
    /// (they stay in it, as history).
    fn void(&mut self, range: std::ops::Range<usize>) {
        self.commands.retain(|&i| i < range.start);
        self.completions.retain(|&i| i < range.start);
        self.completed = self
            .completions
            .iter()
            .filter_map(|&i| self.entries[i].fact.completes())
            .collect();
        if self.cancel.is_some_and(|c| range.contains(&c)) {
            self.cancel = None;
        }
        self.step_counts.clear();
        for &i in &self.commands {
            if let Fact::StepScheduled { name, .. } = &self.entries[i].fact {
                *self.step_counts.entry(name.clone()).or_default() += 1;
            }
        }
        self.voided.push(range);
    }

    /// The ID of the step named `name` that run `run` schedules next: the
    /// ID its logical step (the name and how many steps of that name count
    /// before it) was issued under if the journal holds one (a retry or a
    /// restart voided it, or the run predates named IDs and kept its
    /// positional one), else [`RunId::step_id`]. So a step that runs again
    /// is issued under one ID for the life of the run, whatever a new
    /// build adds before it.
    pub fn step_id_for(&self, run: &RunId, name: &str) -> StepId {
        let occurrence = self.step_counts.get(name).copied().unwrap_or(0);
        match self.step_ids.get(&(name.to_string(), occurrence)) {
            Some(id) => StepId::from(id.as_str()),
            None => run.step_id(name, occurrence),
        }
    }

    /// Whether the entry at `idx` counts (a retry did not void it).
    fn counts(&self, idx: usize) -> bool {
        !self.voided.iter().any(|r| r.contains(&idx))
    }

    /// The entries that count, in order: every entry but those a retry
    /// voided.
    pub fn effective(&self) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(i, _)| self.counts(*i))
            .map(|(_, e)| e)
    }

    /// Where a retry of this failed run starts over: its first step failed
    /// for good, or a payload it refused and never asked past (the hook
    /// asked for no payload after it), whichever came first; else its end.
    /// A retry from a refused payload skips that payload.
    pub fn retry_plan(&self) -> Option<RetryPlan> {
        let effective: Vec<&Entry> = self.effective().collect();
        let step_failed = effective
            .iter()
            .find(|e| matches!(e.fact, Fact::StepFailed { .. }))
            .map(|e| RetryPlan {
                from_seq: e.seq,
                skip: None,
            });
        let refused = effective.iter().enumerate().find_map(|(pos, e)| {
            let Fact::HookRefused {
                request,
                token,
                index,
                ..
            } = &e.fact
            else {
                return None;
            };
            let asked_again = effective[pos..]
                .iter()
                .any(|later| matches!(&later.fact, Fact::HookNext { token: t, .. } if t == token));
            let asked = self.command(*request)?;
            (!asked_again).then(|| RetryPlan {
                from_seq: asked.seq,
                skip: Some((token.clone(), *index)),
            })
        });
        match (step_failed, refused) {
            (Some(s), Some(r)) => Some(if r.from_seq < s.from_seq { r } else { s }),
            (first, None) | (None, first) => first.or_else(|| {
                self.entries
                    .last()
                    .filter(|e| e.fact.is_end())
                    .map(|e| RetryPlan {
                        from_seq: e.seq,
                        skip: None,
                    })
            }),
        }
    }

    /// A retry was recorded after `command` (the run ended and was retried
    /// since the workflow issued it).
    pub fn retried_after(&self, command: u32) -> bool {
        match (self.commands.get(command as usize), self.last_retry) {
            (Some(&at), Some(retry)) => retry > at,
            _ => false,
        }
    }

    /// The index after the last payload of hook `token` the journal took
    /// (received or skipped): where the hook's inbox goes on from when it
    /// is registered again after a retry.
    pub fn payloads_taken(&self, token: &str) -> u64 {
        self.effective()
            .filter_map(|e| match &e.fact {
                Fact::HookNext {
                    command,
                    token: t,
                    index,
                    ..
                } if t == token && self.is_completed(*command) => Some(index + 1),
                Fact::PayloadSkipped { token: t, index } if t == token => Some(index + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// How many payloads of its start token the run took: those of the
    /// hook its workflow bound to its start token (`BoundToStart`), none
    /// if it never bound one. A continuation takes over the rest.
    pub fn start_payloads_taken(&self) -> u64 {
        self.effective()
            .find_map(|e| match &e.fact {
                Fact::HookCreated {
                    token,
                    registration: crate::journal::HookRegistration::BoundToStart,
                    ..
                } => Some(self.payloads_taken(token)),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// The payloads a retry skipped, as `(token, index)`: a hook's
    /// `hook-next` is given the first payload after them.
    pub fn skipped_payloads(&self) -> HashSet<(String, u64)> {
        self.effective()
            .filter_map(|e| match &e.fact {
                Fact::PayloadSkipped { token, index } => Some((token.clone(), *index)),
                _ => None,
            })
            .collect()
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

    /// The attempts of the step of `command` that count.
    pub fn attempts(&self, command: u32) -> Attempts {
        let mut attempts = Attempts::default();
        for (idx, e) in self.entries.iter().enumerate() {
            if !self.counts(idx) {
                continue;
            }
            match &e.fact {
                Fact::StepAttemptStarted {
                    command: c,
                    attempt,
                } if *c == command => {
                    attempts.started = attempts.started.max(*attempt);
                    if self.last_retry.is_some_and(|r| idx < r) {
                        attempts.before_retry = attempts.before_retry.max(*attempt);
                    }
                }
                Fact::StepAttemptFailed {
                    command: c,
                    retry_at_ms,
                    ..
                } if *c == command => attempts.retry_at_ms = Some(*retry_at_ms),
                _ => {}
            }
        }
        attempts
    }

    /// The first completion among `ids` not yet delivered, in journal
    /// order; marks it delivered. The same live and on replay, so the
    /// workflow sees completions in the order they first happened.
    pub fn take_completion(&self, ids: &[u32], delivered: &mut Delivered) -> Option<&Entry> {
        let pos = self.next_completion(ids, delivered)?;
        Some(self.deliver(pos, delivered))
    }

    /// What a wait on `ids` that also hears of a cancel receives next:
    /// the first, in journal order, of the undelivered completions among
    /// `ids` and the run's cancel request (delivered once).
    pub fn take_wake(&self, ids: &[u32], delivered: &mut Delivered) -> Option<Wake<'_>> {
        let next = self.next_completion(ids, delivered);
        match self.cancel.filter(|_| !delivered.cancel) {
            Some(cancel) if next.is_none_or(|pos| self.completions[pos] > cancel) => {
                delivered.cancel = true;
                Some(Wake::Cancel(&self.entries[cancel]))
            }
            _ => next.map(|pos| Wake::Completion(self.deliver(pos, delivered))),
        }
    }

    /// The position in `completions` of the first completion among `ids`
    /// not yet delivered.
    fn next_completion(&self, ids: &[u32], delivered: &Delivered) -> Option<usize> {
        let pos = self
            .completions
            .iter()
            .skip(delivered.prefix)
            .position(|&i| {
                let c = self.completes(i);
                ids.contains(&c) && !delivered.commands.contains(&c)
            })?;
        Some(pos + delivered.prefix)
    }

    /// Marks the completion at `pos` delivered and returns its entry.
    fn deliver(&self, pos: usize, delivered: &mut Delivered) -> &Entry {
        let idx = self.completions[pos];
        delivered.commands.insert(self.completes(idx));
        while delivered.prefix < self.completions.len()
            && delivered
                .commands
                .contains(&self.completes(self.completions[delivered.prefix]))
        {
            delivered.prefix += 1;
        }
        &self.entries[idx]
    }

    fn completes(&self, idx: usize) -> u32 {
        self.entries[idx]
            .fact
            .completes()
            .expect("indexed as a completion")
    }

    /// When the first attempt of the step of `command` that counts since
    /// the run's last retry started.
    pub fn first_attempt_at(&self, command: u32) -> Option<u64> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(i, _)| self.counts(*i) && self.last_retry.is_none_or(|r| *i > r))
            .find_map(|(_, e)| match &e.fact {
                Fact::StepAttemptStarted { command: c, .. } if *c == command => Some(e.at_ms),
                _ => None,
            })
    }

    /// An attempt of the step of `command` has started and not ended.
    pub fn attempt_running(&self, command: u32) -> bool {
        if self.is_completed(command) {
            return false;
        }
        let last = self
            .entries
            .iter()
            .enumerate()
            .filter(|(i, _)| self.counts(*i))
            .rev()
            .find_map(|(_, e)| match &e.fact {
                Fact::StepAttemptStarted { command: c, .. } if *c == command => Some(true),
                Fact::StepAttemptFailed { command: c, .. } if *c == command => Some(false),
                _ => None,
            });
        last.unwrap_or(false)
    }

    /// The run's cancel request, if one counts.
    pub fn cancel_request(&self) -> Option<&Entry> {
        self.cancel.map(|i| &self.entries[i])
    }

    /// The steps the workflow scheduled after its cancel request: its
    /// cleanup so far.
    pub fn steps_after_cancel(&self) -> usize {
        let Some(cancel) = self.cancel else {
            return 0;
        };
        self.commands
            .iter()
            .filter(|&&i| i > cancel && matches!(self.entries[i].fact, Fact::StepScheduled { .. }))
            .count()
    }

    /// How often the run was taken over from a worker that stopped while
    /// driving it ([`Fact::TakenOver`]) since its last progress: a
    /// completion, a failed attempt or a retry of the run. A run that
    /// kills its worker before anything durable happens counts up here,
    /// however its steps' attempts are journaled. Reads back from the end
    /// to the last progress only.
    pub fn takeovers_since_progress(&self) -> usize {
        let mut takeovers = 0;
        for entry in self.entries.iter().rev() {
            match &entry.fact {
                Fact::TakenOver { .. } => takeovers += 1,
                Fact::StepAttemptFailed { .. }
                | Fact::RunRetried { .. }
                | Fact::RunRestarted { .. } => break,
                fact if fact.completes().is_some() => break,
                _ => {}
            }
        }
        takeovers
    }

    /// The [`Fact::RunPaused`] entry of the pause the run is under, if
    /// no [`Fact::RunResumed`] followed it.
    pub fn paused(&self) -> Option<&Entry> {
        self.paused.map(|i| &self.entries[i])
    }

    /// The run's deadline, if one was set.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.deadline_ms
    }

    /// The run's trace, if its admission recorded one: `(trace_id,
    /// span_id, parent_span_id)`.
    pub fn trace(&self) -> Option<(&str, &str, Option<&str>)> {
        match &self.entries[self.traced?].fact {
            Fact::Traced {
                trace_id,
                span_id,
                parent_span_id,
            } => Some((trace_id, span_id, parent_span_id.as_deref())),
            _ => None,
        }
    }

    /// The attributes the workflow set, the last value of each key.
    pub fn attributes(&self) -> crate::records::Attributes {
        self.effective()
            .filter_map(|e| match &e.fact {
                Fact::AttributeSet { key, value, .. } => Some((key.clone(), value.clone())),
                _ => None,
            })
            .collect()
    }

    /// The runs the workflow started, in order, with their close policies
    /// (a run started with the first start import has [`ClosePolicy::Cancel`]).
    pub fn children(&self) -> Vec<Child> {
        self.effective()
            .filter_map(|e| match &e.fact {
                Fact::WorkflowStarted {
                    workflow,
                    outcome: StartOutcome::Started { run_id },
                    ..
                } => Some(Child {
                    run_id: run_id.as_str().into(),
                    workflow: workflow.clone(),
                    deployment: None,
                    close: ClosePolicy::Cancel,
                }),
                Fact::ChildStarted {
                    workflow,
                    deployment,
                    close,
                    outcome: StartOutcome::Started { run_id },
                    ..
                } => Some(Child {
                    run_id: run_id.as_str().into(),
                    workflow: workflow.clone(),
                    deployment: deployment.clone(),
                    close: *close,
                }),
                _ => None,
            })
            .collect()
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
    /// The workflow has received the run's cancel request.
    cancel: bool,
}

/// What a wait receives next.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Wake<'a> {
    /// A completion of an awaited command.
    Completion(&'a Entry),
    /// The run's cancel request.
    Cancel(&'a Entry),
}

impl Delivered {
    /// The workflow has received the completion of `command`.
    pub fn contains(&self, command: u32) -> bool {
        self.commands.contains(&command)
    }

    /// The workflow has received the run's cancel request.
    pub fn cancel(&self) -> bool {
        self.cancel
    }
}

/// The entries of `journal` that count (every one but those a retry
/// voided); a journal the index cannot read is taken as it is.
pub fn effective_entries(journal: &[Entry]) -> Vec<Entry> {
    match JournalIndex::new(journal.to_vec()) {
        Ok(index) => index.effective().cloned().collect(),
        Err(_) => journal.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::{self, JournalBuilder};

    fn journal(facts: Vec<Fact>) -> JournalIndex {
        JournalBuilder::at(10).facts(facts).index()
    }

    fn step(command: u32) -> Fact {
        testing::step(command, "s", "null")
    }

    /// Step `command` named `name`, scheduled under `id`.
    fn named(command: u32, name: &str, id: &str) -> Fact {
        Fact::StepScheduled {
            command,
            name: name.into(),
            input: "null".into(),
            step_id: id.into(),
            digest: String::new(),
        }
    }

    #[test]
    fn a_step_id_names_the_step_and_survives_what_a_new_build_adds_before_it() {
        let run = RunId::from("r");
        let index = journal(vec![named(0, "prepare", "r-prepare-0")]);
        assert_eq!(index.step_id_for(&run, "charge"), "r-charge-0");
        assert_eq!(index.step_id_for(&run, "prepare"), "r-prepare-1");
        // charge ran, then the run was restarted from it (position 2) and
        // a patched build put a marker and another step before it: charge
        // is issued again under the ID it had.
        let mut facts = vec![
            named(0, "prepare", "r-prepare-0"),
            testing::completed(0, "1"),
            named(1, "charge", "r-charge-0"),
            testing::completed(1, "1"),
            Fact::RunCompleted { output: "1".into() },
            Fact::RunRestarted {
                from_seq: 2,
                by: "t".into(),
            },
            Fact::PatchMarker {
                command: 1,
                change_id: "verify".into(),
            },
        ];
        let index = journal(facts.clone());
        assert_eq!(index.step_id_for(&run, "verify"), "r-verify-0");
        assert_eq!(index.step_id_for(&run, "charge"), "r-charge-0");
        // A run from before named IDs keeps its positional one for the
        // step that runs again; a new logical step gets a named one.
        facts[2] = named(1, "charge", "r-1");
        let index = journal(facts);
        assert_eq!(index.step_id_for(&run, "charge"), "r-1");
        assert_eq!(index.step_id_for(&run, "verify"), "r-verify-0");
    }

    fn done(command: u32) -> Fact {
        testing::completed(command, &command.to_string())
    }

    #[test]
    fn takeovers_count_back_to_the_last_progress() {
        let taken = || Fact::TakenOver {
            from_worker: "a".into(),
            expired_at_ms: 1,
            by_worker: "b".into(),
        };
        let attempt = |command| Fact::StepAttemptStarted {
            command,
            attempt: 1,
        };
        assert_eq!(journal(vec![]).takeovers_since_progress(), 0);
        let looping = journal(vec![step(0), attempt(0), taken(), attempt(0), taken()]);
        assert_eq!(looping.takeovers_since_progress(), 2);
        let progressed = journal(vec![
            step(0),
            taken(),
            attempt(0),
            done(0),
            step(1),
            taken(),
            attempt(1),
        ]);
        assert_eq!(
            progressed.takeovers_since_progress(),
            1,
            "a completion resets the count"
        );
    }

    #[test]
    fn a_run_is_paused_from_its_last_pause_until_a_resume() {
        let paused = |status: &str| Fact::RunPaused {
            by: "cli".into(),
            status: status.into(),
            wake_at_ms: None,
        };
        assert!(journal(vec![step(0)]).paused().is_none());
        let held = journal(vec![step(0), paused("running"), paused("pending")]);
        let entry = held.paused().expect("paused");
        assert_eq!(entry.fact, paused("pending"), "the latest pause holds");
        let resumed = journal(vec![step(0), paused("running"), Fact::RunResumed, done(0)]);
        assert!(resumed.paused().is_none());
        let again = journal(vec![paused("waiting"), Fact::RunResumed, paused("running")]);
        assert_eq!(again.paused().map(|e| e.seq), Some(2));
    }

    #[test]
    fn the_attributes_set_are_the_last_value_of_each_key() {
        let set = |command, key: &str, value: &str| Fact::AttributeSet {
            command,
            key: key.into(),
            value: value.into(),
        };
        let index = journal(vec![
            set(0, "stage", "charged"),
            set(1, "tenant", "acme"),
            set(2, "stage", "shipped"),
        ]);
        let got: Vec<_> = index.attributes().into_iter().collect();
        assert_eq!(
            got,
            [
                ("stage".to_string(), "shipped".to_string()),
                ("tenant".to_string(), "acme".to_string())
            ]
        );
    }

    #[test]
    fn children_are_the_runs_started_with_their_close_policies() {
        let started = |run_id: &str| StartOutcome::Started {
            run_id: run_id.into(),
        };
        let index = journal(vec![
            Fact::WorkflowStarted {
                command: 0,
                workflow: "old".into(),
                input: "1".into(),
                token: None,
                outcome: started("r.0"),
            },
            Fact::ChildStarted {
                command: 1,
                workflow: "w".into(),
                deployment: Some("billing".into()),
                input: "2".into(),
                token: Some("t".into()),
                close: ClosePolicy::Wait,
                timeout_ms: None,
                outcome: started("r.1"),
            },
            Fact::ChildStarted {
                command: 2,
                workflow: "w".into(),
                deployment: None,
                input: "3".into(),
                token: Some("t".into()),
                close: ClosePolicy::Abandon,
                timeout_ms: None,
                outcome: StartOutcome::HookConflict {
                    conflicting_run_id: "x".into(),
                },
            },
        ]);
        let children = index.children();
        let got: Vec<_> = children
            .iter()
            .map(|c| (c.run_id.as_str(), c.close, c.deployment.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("r.0", ClosePolicy::Cancel, None),
                ("r.1", ClosePolicy::Wait, Some("billing"))
            ]
        );
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
        let a = index.attempts(0);
        assert_eq!(
            (a.started, a.retry_at_ms, a.before_retry),
            (2, Some(500), 0)
        );
        assert_eq!(index.attempts(1), Attempts::default());
    }

    #[test]
    fn a_retry_voids_the_failure_and_what_followed_it() {
        let failed_for_good = Fact::StepFailed {
            command: 1,
            error: "503".into(),
            fatal: false,
            attempts: 2,
        };
        let mut index = journal(vec![
            step(0),
            Fact::StepAttemptStarted {
                command: 0,
                attempt: 1,
            },
            done(0),
            step(1),
            Fact::StepAttemptStarted {
                command: 1,
                attempt: 1,
            },
            Fact::StepAttemptStarted {
                command: 1,
                attempt: 2,
            },
            failed_for_good,
            step(2),
            Fact::RunFailed {
                kind: "workflow_failed".into(),
                error: "503".into(),
            },
        ]);
        assert!(index.has_ended());
        assert_eq!(
            index.retry_plan().map(|p| p.from_seq),
            Some(6),
            "the step's failure for good"
        );
        let retry = index.next_entry(Fact::RunRetried { from_seq: 6 }, 10);
        index.push(retry).unwrap();
        assert!(!index.has_ended());
        assert!(index.is_completed(0), "completed steps keep their results");
        assert!(!index.is_completed(1), "the failed step runs again");
        assert_eq!(index.command_count(), 2, "command 2 is forgotten");
        let a = index.attempts(1);
        assert_eq!(
            (a.started, a.before_retry),
            (2, 2),
            "fresh attempts from 3 on"
        );
        // The workflow schedules command 2 again, from scratch.
        let again = index.next_entry(step(2), 11);
        index.push(again).unwrap();
        assert_eq!(index.command(2).unwrap().seq, 10);
        assert_eq!(index.effective().count(), 8);
    }

    fn next(command: u32, index: u64) -> Fact {
        Fact::HookNext {
            command,
            hook: 0,
            token: "t".into(),
            index,
        }
    }

    fn received(command: u32) -> Fact {
        Fact::HookReceived {
            command,
            payload: "1".into(),
        }
    }

    fn refused(command: u32, request: u32, index: u64) -> Fact {
        Fact::HookRefused {
            command,
            request,
            token: "t".into(),
            index,
            reason: "does not decode".into(),
        }
    }

    fn hook() -> Fact {
        Fact::HookCreated {
            command: 0,
            token: "t".into(),
            force: false,
            registration: crate::journal::HookRegistration::Registered,
        }
    }

    fn failed() -> Fact {
        Fact::RunFailed {
            kind: "workflow_failed".into(),
            error: "payload error".into(),
        }
    }

    #[test]
    fn a_retry_of_a_run_failed_by_a_payload_it_refused_skips_the_payload() {
        // Payload 0 is taken, payload 1 refused and the run fails on it.
        let mut index = journal(vec![
            hook(),
            next(1, 0),
            received(1),
            next(2, 1),
            received(2),
            refused(3, 2, 1),
            failed(),
        ]);
        let plan = index.retry_plan().unwrap();
        assert_eq!(plan.from_seq, 3, "from the request of the refused payload");
        assert_eq!(plan.skip, Some(("t".to_string(), 1)));
        let retried = index.next_entry(Fact::RunRetried { from_seq: 3 }, 10);
        index.push(retried).unwrap();
        let skipped = index.next_entry(
            Fact::PayloadSkipped {
                token: "t".into(),
                index: 1,
            },
            10,
        );
        index.push(skipped).unwrap();
        assert_eq!(index.command_count(), 2, "the request is asked again");
        assert!(index.is_completed(1), "payload 0 stays taken");
        assert_eq!(
            index.skipped_payloads(),
            [("t".to_string(), 1)].into_iter().collect()
        );
    }

    #[test]
    fn a_refused_payload_the_workflow_asked_past_is_not_where_a_retry_starts() {
        let index = journal(vec![
            hook(),
            next(1, 0),
            received(1),
            refused(2, 1, 0),
            next(3, 1),
            received(3),
            step(4),
            Fact::StepFailed {
                command: 4,
                error: "503".into(),
                fatal: true,
                attempts: 1,
            },
            failed(),
        ]);
        let plan = index.retry_plan().unwrap();
        assert_eq!((plan.from_seq, plan.skip), (7, None), "the step's failure");
    }

    fn cancel() -> Fact {
        Fact::CancelRequested {
            reason: "user".into(),
            by: "api".into(),
        }
    }

    #[test]
    fn a_cancel_is_delivered_once_in_journal_order() {
        let index = journal(vec![step(0), step(1), done(0), cancel(), done(1)]);
        let mut delivered = Delivered::default();
        let wake = |d: &mut Delivered, ids: &[u32]| match index.take_wake(ids, d) {
            Some(Wake::Completion(e)) => format!("done {}", e.fact.completes().unwrap()),
            Some(Wake::Cancel(_)) => "cancel".to_string(),
            None => "none".to_string(),
        };
        assert_eq!(
            wake(&mut delivered, &[1]),
            "cancel",
            "before the later completion"
        );
        assert_eq!(wake(&mut delivered, &[0, 1]), "done 0");
        assert_eq!(wake(&mut delivered, &[1]), "done 1");
        assert_eq!(wake(&mut delivered, &[1]), "none");
        assert!(delivered.cancel());
        let mut fresh = Delivered::default();
        assert_eq!(
            wake(&mut fresh, &[0]),
            "done 0",
            "an earlier completion first"
        );
        assert_eq!(wake(&mut fresh, &[1]), "cancel");
    }

    #[test]
    fn cleanup_steps_are_counted_after_the_cancel() {
        let index = journal(vec![
            step(0),
            cancel(),
            step(1),
            step(2),
            Fact::DeadlineSet { deadline_ms: 99 },
        ]);
        assert_eq!(index.steps_after_cancel(), 2);
        assert_eq!(index.cancel_request().unwrap().seq, 1);
        assert_eq!(index.deadline_ms(), Some(99));
        assert_eq!(journal(vec![step(0)]).steps_after_cancel(), 0);
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
