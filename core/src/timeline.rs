//! A run's timeline: its journal folded into one row per command (a step
//! with its attempts, a timer, a hook, a child run), with times and
//! durations, for people reading a run (the terminal and the console).

use serde::{Deserialize, Serialize};

use crate::journal::{Entry, Fact, StartOutcome};

/// What a timeline row is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    Step,
    Timer,
    Hook,
    Child,
    AwaitRun,
    Patch,
}

/// Where a row stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RowStatus {
    /// Scheduled or running, not ended.
    Open,
    /// A failed attempt waits for its retry.
    Retrying,
    Completed,
    Failed,
}

/// One command of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Row {
    /// The command's position in the run (the order the workflow issued it).
    pub command: u32,
    pub kind: RowKind,
    /// The step's, the child's workflow, the hook's token, the patch's ID.
    pub name: String,
    /// The step's ID (steps only).
    pub step_id: Option<String>,
    /// The child run's ID, or the awaited run's.
    pub run_id: Option<String>,
    pub status: RowStatus,
    /// Attempts started (steps only).
    pub attempts: u32,
    pub started_at_ms: u64,
    pub ended_at_ms: Option<u64>,
    /// The last error (a failed step's, or the last failed attempt's).
    pub error: Option<String>,
    /// When a failed attempt is retried, or a timer fires.
    pub due_at_ms: Option<u64>,
    /// The step's input, a hook's payloads.
    pub input: Option<String>,
    /// The step's output, the last hook payload, the awaited run's status.
    pub output: Option<String>,
    /// How long the step's attempts waited for its rate and concurrency
    /// limits, in all.
    #[serde(default)]
    pub throttled_ms: u64,
    /// The step's attempts, in order, with their times and errors (steps
    /// only).
    #[serde(default)]
    pub attempt_log: Vec<AttemptRow>,
}

/// One attempt of a step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AttemptRow {
    /// Its number, from 1.
    pub attempt: u32,
    pub started_at_ms: u64,
    /// When it ended; `None` while it runs (or if its end was lost with
    /// its worker, until a later attempt).
    pub ended_at_ms: Option<u64>,
    /// Why it failed; `None` if it succeeded or runs.
    pub error: Option<String>,
    /// The worker it was lost with: that worker died or lost touch while
    /// the attempt ran, and another took the run over (the attempt's end
    /// is then the takeover's time, its error says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_with: Option<String>,
}

impl Row {
    /// How long the row took (or has taken, until `now_ms`).
    pub fn duration_ms(&self, now_ms: u64) -> u64 {
        self.ended_at_ms
            .unwrap_or(now_ms)
            .saturating_sub(self.started_at_ms)
    }
}

/// Ends attempt `attempt` of a step's row at `at`, with `error` if it
/// failed (an attempt already ended keeps its end).
fn end_attempt(row: &mut Row, attempt: u32, at: u64, error: Option<&String>) {
    if let Some(a) = row
        .attempt_log
        .iter_mut()
        .rev()
        .find(|a| a.attempt == attempt && a.ended_at_ms.is_none())
    {
        a.ended_at_ms = Some(at);
        a.error = error.cloned();
    }
}

/// Folds a journal into its rows, in command order. Entries a retry voided
/// are left out, but for the failed step's own attempts, so its row shows
/// every attempt and the step ID it keeps.
pub fn timeline(journal: &[Entry]) -> Vec<Row> {
    let effective = crate::index::effective_entries(journal);
    let journal = effective.as_slice();
    let mut rows: Vec<Row> = Vec::new();
    // The hook each `HookNext` command waits on.
    let mut waits = std::collections::HashMap::new();
    // The hooks the run's end closed.
    let mut closed_by_end = Vec::new();
    for entry in journal {
        let at = entry.at_ms;
        let open = |command: u32, kind: RowKind, name: &str| Row {
            command,
            kind,
            name: name.into(),
            step_id: None,
            run_id: None,
            status: RowStatus::Open,
            attempts: 0,
            started_at_ms: at,
            ended_at_ms: None,
            error: None,
            due_at_ms: None,
            input: None,
            output: None,
            throttled_ms: 0,
            attempt_log: Vec::new(),
        };
        // Rows are made in command order, which is journal order.
        let row = |rows: &mut Vec<Row>, command: u32| -> Option<usize> {
            rows.binary_search_by_key(&command, |r| r.command).ok()
        };
        match &entry.fact {
            Fact::StepScheduled {
                command,
                name,
                input,
                step_id,
                ..
            } => rows.push(Row {
                step_id: Some(step_id.clone()),
                input: Some(input.clone()),
                ..open(*command, RowKind::Step, name)
            }),
            Fact::StepAttemptStarted { command, attempt } => {
                if let Some(i) = row(&mut rows, *command) {
                    rows[i].attempts = rows[i].attempts.max(*attempt);
                    rows[i].status = RowStatus::Open;
                    rows[i].due_at_ms = None;
                    rows[i].attempt_log.push(AttemptRow {
                        attempt: *attempt,
                        started_at_ms: at,
                        ended_at_ms: None,
                        error: None,
                        lost_with: None,
                    });
                }
            }
            Fact::StepThrottled {
                command, waited_ms, ..
            } => {
                if let Some(i) = row(&mut rows, *command) {
                    rows[i].throttled_ms += waited_ms;
                }
            }
            Fact::StepAttemptFailed {
                command,
                attempt,
                error,
                retry_at_ms,
            } => {
                if let Some(i) = row(&mut rows, *command) {
                    rows[i].status = RowStatus::Retrying;
                    rows[i].error = Some(error.clone());
                    rows[i].due_at_ms = Some(*retry_at_ms);
                    end_attempt(&mut rows[i], *attempt, at, Some(error));
                }
            }
            Fact::StepCompleted { command, output } => {
                if let Some(i) = row(&mut rows, *command) {
                    rows[i].status = RowStatus::Completed;
                    rows[i].output = Some(output.clone());
                    rows[i].ended_at_ms = Some(at);
                    rows[i].due_at_ms = None;
                    // Earlier attempts' errors stay in its attempt log; the
                    // step itself ended well.
                    rows[i].error = None;
                    let last = rows[i].attempts;
                    end_attempt(&mut rows[i], last, at, None);
                }
            }
            Fact::StepFailed {
                command,
                error,
                attempts,
                ..
            } => {
                if let Some(i) = row(&mut rows, *command) {
                    rows[i].status = RowStatus::Failed;
                    rows[i].error = Some(error.clone());
                    rows[i].attempts = rows[i].attempts.max(*attempts);
                    rows[i].ended_at_ms = Some(at);
                    rows[i].due_at_ms = None;
                    let last = rows[i].attempts;
                    end_attempt(&mut rows[i], last, at, Some(error));
                }
            }
            Fact::TimerScheduled {
                command,
                fire_at_ms,
            } => rows.push(Row {
                due_at_ms: Some(*fire_at_ms),
                ..open(*command, RowKind::Timer, "sleep")
            }),
            Fact::TimerFired { command } => end(&mut rows, *command, at, None),
            Fact::PatchMarker { command, change_id } => rows.push(Row {
                status: RowStatus::Completed,
                ended_at_ms: Some(at),
                ..open(*command, RowKind::Patch, change_id)
            }),
            Fact::HookCreated { command, token, .. } => {
                rows.push(open(*command, RowKind::Hook, token))
            }
            Fact::HookNext { command, hook, .. } => {
                waits.insert(*command, *hook);
                if let Some(i) = row(&mut rows, *hook) {
                    rows[i].status = RowStatus::Open;
                }
            }
            Fact::HookReceived { command, payload } => {
                // The payload answers the `HookNext` of `command`, whose
                // hook is the row.
                if let Some(i) = waits.get(command).and_then(|h| row(&mut rows, *h)) {
                    rows[i].output = Some(payload.clone());
                    rows[i].attempts += 1;
                }
            }
            Fact::HookForceClaimed {
                claimed_by_run_id, ..
            } => {
                if let Some(last) = rows.iter_mut().rev().find(|r| r.kind == RowKind::Hook) {
                    last.status = RowStatus::Failed;
                    last.error = Some(format!("taken over by run {claimed_by_run_id}"));
                    last.ended_at_ms = Some(at);
                }
            }
            Fact::HookRefused {
                request,
                index,
                reason,
                ..
            } => {
                if let Some(i) = waits.get(request).and_then(|h| row(&mut rows, *h)) {
                    rows[i].error = Some(format!("payload {index} refused: {reason}"));
                }
            }
            Fact::HookDisposed { hook, .. } => end(&mut rows, *hook, at, None),
            Fact::RunAwaited { command, run_id }
            | Fact::RunStatusRead {
                command, run_id, ..
            } => {
                rows.push(Row {
                    run_id: Some(run_id.clone()),
                    ..open(*command, RowKind::AwaitRun, run_id)
                });
                if let Fact::RunStatusRead { status, .. } = &entry.fact {
                    end(&mut rows, *command, at, Some(status.clone()));
                }
            }
            Fact::AwaitedRunEnded {
                command,
                status,
                error,
                ..
            } => {
                end(&mut rows, *command, at, Some(status.clone()));
                if let Some(i) = row(&mut rows, *command) {
                    rows[i].error = error.clone();
                }
            }
            Fact::WorkflowStarted {
                command,
                workflow,
                input,
                outcome,
                ..
            }
            | Fact::ChildStarted {
                command,
                workflow,
                input,
                outcome,
                ..
            } => {
                let mut child = Row {
                    input: Some(input.clone()),
                    status: RowStatus::Completed,
                    ended_at_ms: Some(at),
                    ..open(*command, RowKind::Child, workflow)
                };
                match outcome {
                    StartOutcome::Started { run_id } => child.run_id = Some(run_id.clone()),
                    StartOutcome::HookConflict { conflicting_run_id } => {
                        child.status = RowStatus::Failed;
                        child.run_id = Some(conflicting_run_id.clone());
                        child.error = Some("the start token is held by this run".into());
                    }
                    StartOutcome::Refused { reason } => {
                        child.status = RowStatus::Failed;
                        child.error = Some(reason.clone());
                    }
                }
                rows.push(child);
            }
            // A run's end closes its hooks (their tokens are released, or
            // only retained); a retry opens them again.
            Fact::RunCompleted { .. }
            | Fact::RunFailed { .. }
            | Fact::RunCancelled
            | Fact::RunEndedCancelled { .. }
            | Fact::RunContinued { .. } => {
                for r in rows
                    .iter_mut()
                    .filter(|r| r.kind == RowKind::Hook && r.status == RowStatus::Open)
                {
                    r.status = RowStatus::Completed;
                    r.ended_at_ms = Some(at);
                    closed_by_end.push(r.command);
                }
            }
            Fact::RunRetried { .. } | Fact::RunRestarted { .. } => {
                for command in closed_by_end.drain(..) {
                    if let Some(i) = row(&mut rows, command) {
                        rows[i].status = RowStatus::Open;
                        rows[i].ended_at_ms = None;
                    }
                }
            }
            Fact::TakenOver {
                from_worker,
                by_worker,
                ..
            } => {
                // What the lost worker had in flight ends here, lost.
                let error = format!(
                    "lost with worker {from_worker}, which stopped while the attempt ran; worker {by_worker} took the run over"
                );
                for attempt in rows
                    .iter_mut()
                    .flat_map(|r| r.attempt_log.iter_mut())
                    .filter(|a| a.ended_at_ms.is_none())
                {
                    attempt.ended_at_ms = Some(at);
                    attempt.error = Some(error.clone());
                    attempt.lost_with = Some(from_worker.clone());
                }
            }
            Fact::RunStarted { .. }
            | Fact::CancelRequested { .. }
            | Fact::DeadlineSet { .. }
            | Fact::AttributeSet { .. }
            // A run's streams are read as streams, not rows.
            | Fact::StreamWritten { .. }
            | Fact::StreamClosed { .. }
            | Fact::HookReplied { .. }
            | Fact::PayloadSkipped { .. }
            | Fact::Traced { .. }
            | Fact::RunPaused { .. }
            | Fact::RunResumed
            | Fact::RunMoved { .. } => {}
        }
    }
    rows.sort_by_key(|r| r.command);
    rows
}

/// Ends the row of `command` as completed at `at`.
/// Something a waiting run waits on: what moves it on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitingOn {
    /// A payload resumed into the hook of this token.
    Hook { token: String },
    /// A timer, due then.
    Timer { due_at_ms: u64 },
    /// Another run's end (a child, or a run it awaits).
    Run { run_id: String },
}

/// What the open rows of a run's timeline wait on: its open hooks (their
/// tokens), its timers not yet fired and the runs it awaits, in command
/// order. A step in flight is no wait: its run is running.
pub fn waiting_on(rows: &[Row]) -> Vec<WaitingOn> {
    rows.iter()
        .filter(|r| r.status == RowStatus::Open)
        .filter_map(|r| match r.kind {
            RowKind::Hook => Some(WaitingOn::Hook {
                token: r.name.clone(),
            }),
            RowKind::Timer => r.due_at_ms.map(|due_at_ms| WaitingOn::Timer { due_at_ms }),
            RowKind::Child | RowKind::AwaitRun => {
                r.run_id.clone().map(|run_id| WaitingOn::Run { run_id })
            }
            RowKind::Step | RowKind::Patch => None,
        })
        .collect()
}

fn end(rows: &mut [Row], command: u32, at: u64, output: Option<String>) {
    if let Some(r) = rows.iter_mut().find(|r| r.command == command) {
        r.status = RowStatus::Completed;
        r.ended_at_ms = Some(at);
        if output.is_some() {
            r.output = output;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::HookRegistration;

    /// Entry `seq` of a journal, at `10 + seq` ms.
    fn entry(seq: u64, fact: Fact) -> Entry {
        Entry {
            seq,
            at_ms: 10 + seq,
            fact,
        }
    }

    /// The workflow's command `command` created the hook of `token`.
    fn hook_created(command: u32, token: &str) -> Fact {
        Fact::HookCreated {
            command,
            token: token.into(),
            force: false,
            registration: HookRegistration::Registered,
        }
    }

    #[test]
    fn a_run_s_end_closes_its_open_hooks() {
        let journal = vec![
            entry(0, hook_created(0, "approve:1")),
            entry(1, Fact::RunCancelled),
        ];
        let rows = timeline(&journal);
        assert_eq!(rows[0].status, RowStatus::Completed, "{rows:?}");
        assert_eq!(rows[0].ended_at_ms, Some(11));
        assert!(waiting_on(&rows).is_empty());
    }

    #[test]
    fn a_run_waits_on_its_open_hooks_timers_and_awaited_runs() {
        let journal = vec![
            entry(0, hook_created(0, "approve:1")),
            entry(
                1,
                Fact::TimerScheduled {
                    command: 1,
                    fire_at_ms: 500,
                },
            ),
            entry(
                2,
                Fact::TimerScheduled {
                    command: 2,
                    fire_at_ms: 900,
                },
            ),
            entry(3, Fact::TimerFired { command: 2 }),
            entry(4, hook_created(3, "gone")),
            entry(
                5,
                Fact::HookDisposed {
                    command: 4,
                    hook: 3,
                },
            ),
            entry(
                6,
                Fact::RunAwaited {
                    command: 5,
                    run_id: "other".into(),
                },
            ),
        ];
        assert_eq!(
            waiting_on(&timeline(&journal)),
            [
                WaitingOn::Hook {
                    token: "approve:1".into()
                },
                WaitingOn::Timer { due_at_ms: 500 },
                WaitingOn::Run {
                    run_id: "other".into()
                },
            ]
        );
    }
    use crate::testing::JournalBuilder;

    /// A journal of `(time, fact)` pairs, in order.
    fn journal(timed: Vec<(u64, Fact)>) -> Vec<Entry> {
        timed
            .into_iter()
            .fold(JournalBuilder::at(0), |b, (at_ms, fact)| {
                b.then_at(at_ms, fact)
            })
            .entries()
    }

    /// Step `charge` scheduled as command 0.
    fn charge() -> Fact {
        Fact::StepScheduled {
            command: 0,
            name: "charge".into(),
            input: "{}".into(),
            step_id: "s-0".into(),
            digest: "d".into(),
        }
    }

    #[test]
    fn an_attempt_lost_with_its_worker_ends_at_the_takeover_saying_so() {
        let started = |attempt| Fact::StepAttemptStarted {
            command: 0,
            attempt,
        };
        let journal = journal(vec![
            (
                100,
                Fact::RunStarted {
                    workflow: "w".into(),
                    input: "1".into(),
                },
            ),
            (101, charge()),
            (102, started(1)),
            (
                30_500,
                Fact::TakenOver {
                    from_worker: "host-1".into(),
                    expired_at_ms: 30_102,
                    by_worker: "host-2".into(),
                },
            ),
            (30_501, started(2)),
            (
                30_600,
                Fact::StepCompleted {
                    command: 0,
                    output: "1".into(),
                },
            ),
        ]);
        let step = &timeline(&journal)[0];
        assert_eq!((step.attempts, &step.status), (2, &RowStatus::Completed));
        let lost = &step.attempt_log[0];
        assert_eq!(lost.ended_at_ms, Some(30_500));
        assert_eq!(lost.lost_with.as_deref(), Some("host-1"));
        assert!(
            lost.error
                .as_deref()
                .is_some_and(|e| e.contains("host-2 took the run over")),
            "{lost:?}"
        );
        let second = &step.attempt_log[1];
        assert_eq!(
            (second.ended_at_ms, &second.lost_with),
            (Some(30_600), &None)
        );
    }

    #[test]
    fn a_retried_step_is_one_row_with_its_attempts_error_and_duration() {
        let journal = journal(vec![
            (
                100,
                Fact::RunStarted {
                    workflow: "w".into(),
                    input: "1".into(),
                },
            ),
            (101, charge()),
            (
                102,
                Fact::StepAttemptStarted {
                    command: 0,
                    attempt: 1,
                },
            ),
            (
                110,
                Fact::StepAttemptFailed {
                    command: 0,
                    attempt: 1,
                    error: "reset".into(),
                    retry_at_ms: 1110,
                },
            ),
            (
                1110,
                Fact::StepAttemptStarted {
                    command: 0,
                    attempt: 2,
                },
            ),
            (
                1120,
                Fact::StepCompleted {
                    command: 0,
                    output: "\"ok\"".into(),
                },
            ),
            (
                1121,
                Fact::TimerScheduled {
                    command: 1,
                    fire_at_ms: 2000,
                },
            ),
        ]);
        let rows = timeline(&journal);
        assert_eq!(rows.len(), 2);
        let step = &rows[0];
        assert_eq!(step.name, "charge");
        assert_eq!(step.step_id.as_deref(), Some("s-0"));
        assert_eq!(step.attempts, 2);
        assert_eq!(step.status, RowStatus::Completed);
        assert_eq!(step.error, None, "the step itself ended well");
        assert_eq!(
            step.attempt_log,
            vec![
                AttemptRow {
                    attempt: 1,
                    started_at_ms: 102,
                    ended_at_ms: Some(110),
                    error: Some("reset".into()),
                    lost_with: None,
                },
                AttemptRow {
                    attempt: 2,
                    started_at_ms: 1110,
                    ended_at_ms: Some(1120),
                    error: None,
                    lost_with: None,
                },
            ],
            "each attempt with its times, the failed one with its error"
        );
        assert_eq!(step.duration_ms(0), 1019);
        assert_eq!(rows[1].kind, RowKind::Timer);
        assert_eq!(rows[1].status, RowStatus::Open);
        assert_eq!(rows[1].due_at_ms, Some(2000));
        assert_eq!(
            rows[1].duration_ms(1500),
            379,
            "an open row lasts until now"
        );
    }

    #[test]
    fn a_waiting_retry_shows_when_it_is_due() {
        let journal = journal(vec![
            (1, charge()),
            (
                2,
                Fact::StepAttemptStarted {
                    command: 0,
                    attempt: 1,
                },
            ),
            (
                3,
                Fact::StepAttemptFailed {
                    command: 0,
                    attempt: 1,
                    error: "503".into(),
                    retry_at_ms: 500,
                },
            ),
        ]);
        let rows = timeline(&journal);
        assert_eq!(rows[0].status, RowStatus::Retrying);
        assert_eq!(rows[0].due_at_ms, Some(500));
    }

    #[test]
    fn hooks_collect_their_payloads_and_children_their_run_ids() {
        let journal = journal(vec![
            (
                1,
                Fact::HookCreated {
                    command: 0,
                    token: "approve".into(),
                    force: false,
                    registration: crate::journal::HookRegistration::Registered,
                },
            ),
            (
                2,
                Fact::HookNext {
                    command: 1,
                    hook: 0,
                    token: "approve".into(),
                    index: 0,
                },
            ),
            (
                9,
                Fact::HookReceived {
                    command: 1,
                    payload: "true".into(),
                },
            ),
            (
                10,
                Fact::HookDisposed {
                    command: 2,
                    hook: 0,
                },
            ),
            (
                11,
                Fact::WorkflowStarted {
                    command: 3,
                    workflow: "child".into(),
                    input: "1".into(),
                    token: None,
                    outcome: StartOutcome::Started {
                        run_id: "r-1".into(),
                    },
                },
            ),
        ]);
        let rows = timeline(&journal);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].output.as_deref(), Some("true"));
        assert_eq!(rows[0].status, RowStatus::Completed);
        assert_eq!(rows[0].ended_at_ms, Some(10));
        assert_eq!(rows[1].run_id.as_deref(), Some("r-1"));
    }
}
