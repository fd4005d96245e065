//! Divergence reports and replay verdicts: how the code left the journal,
//! decided from the journal and how the activation ended.

use serde::{Deserialize, Serialize};

use crate::index::JournalIndex;
use crate::journal::{Entry, Fact, excerpt};

/// A command as a replay report shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandView {
    /// `step`, `timer` or `patch_marker`.
    pub kind: String,
    pub step_name: Option<String>,
    /// Digest of the step's name and input.
    pub input_digest: Option<String>,
    /// A readable excerpt of the input (or the timer's due time, the patch's ID).
    pub excerpt: String,
}

impl CommandView {
    /// The view of a recorded or requested command.
    pub fn of(fact: &Fact) -> CommandView {
        let (kind, step_name, input_digest, text) = match fact {
            Fact::StepScheduled {
                name,
                input,
                digest,
                ..
            } => (
                "step",
                Some(name.clone()),
                Some(digest.clone()),
                excerpt(input, 120),
            ),
            Fact::TimerScheduled { fire_at_ms, .. } => {
                let due = crate::clock::timestamp(*fire_at_ms);
                ("timer", None, None, format!("due at {due}"))
            }
            Fact::PatchMarker { change_id, .. } => ("patch_marker", None, None, change_id.clone()),
            other => (other.name(), None, None, other.describe()),
        };
        CommandView {
            kind: kind.into(),
            step_name,
            input_digest,
            excerpt: text,
        }
    }

    /// The command on one line.
    pub fn line(&self) -> String {
        match &self.step_name {
            Some(name) => format!(
                "step `{name}` input {} (digest {})",
                self.excerpt,
                self.input_digest.as_deref().unwrap_or("-")
            ),
            None => format!("{} {}", self.kind, self.excerpt),
        }
    }
}

/// Where and how the code left the journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The command's position: the n-th call the workflow made, from 0.
    pub position: u32,
    /// The sequence number of the journal entry at that position.
    pub journal_seq: u64,
    pub recorded: CommandView,
    pub requested: CommandView,
    /// Recorded commands around the position.
    pub journal_context: Vec<(u32, CommandView)>,
    /// The commands the code issued just before (they matched the journal).
    pub code_context: Vec<(u32, CommandView)>,
    /// Where the step's input differs, field by field, when the same step
    /// was asked for with another input.
    #[serde(default)]
    pub input_diff: Vec<crate::json_diff::FieldDiff>,
}

/// The outcome of replaying one journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// The code asked for exactly what the journal holds; `output` is its
    /// output when the journal reaches the run's end.
    Ok { output: Option<String> },
    /// At some position the code asked for something else.
    Diverged(Box<Divergence>),
    /// The workflow ended (or failed) where the journal goes on.
    EndedEarly {
        issued: u32,
        recorded: u32,
        outcome: String,
        next: Vec<(u32, CommandView)>,
    },
    /// The journal records the run's end, but the code asks for more.
    WentFurther { issued: u32, recorded: u32 },
    /// Same commands, another final output.
    OutputDiffers { recorded: String, replayed: String },
    /// The workflow failed in a way the journal does not record.
    Failed { kind: String, message: String },
}

impl Verdict {
    /// The code matched the journal.
    pub fn is_ok(&self) -> bool {
        matches!(self, Verdict::Ok { .. })
    }

    /// The verdict in one line.
    pub fn summary(&self) -> String {
        match self {
            Verdict::Ok { .. } => "the code matches the journal".into(),
            Verdict::Diverged(d) => format!(
                "at command {} the journal holds {}, but the code asks for {}",
                d.position,
                d.recorded.line(),
                d.requested.line()
            ),
            Verdict::EndedEarly {
                issued,
                recorded,
                outcome,
                ..
            } => format!(
                "the workflow {outcome} after {issued} command(s), but the journal holds {recorded}"
            ),
            Verdict::WentFurther { issued, recorded } => format!(
                "the journal records the run's end after {recorded} command(s), but the code issues more (at least {issued})"
            ),
            Verdict::OutputDiffers { recorded, replayed } => format!(
                "the code returns {}, where the journal records {}",
                crate::journal::excerpt(replayed, 80),
                crate::journal::excerpt(recorded, 80)
            ),
            Verdict::Failed { kind, message } => format!("the replay failed: [{kind}] {message}"),
        }
    }
}

/// How an activation ended, as a verdict needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The workflow returned this output.
    Completed(String),
    /// The workflow failed, with an error of this kind.
    Failed { kind: String, message: String },
    /// The activation could not go on (the journal ended, or it waits).
    Suspended,
    /// The workflow continued as new with this input.
    Continued(String),
}

/// What an activation did, beside how it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// The first divergence from the journal, if any.
    pub divergence: Option<Divergence>,
    /// Commands the code issued.
    pub issued: u32,
    /// Commands the journal held.
    pub recorded: u32,
    /// The queries the code had set when it stopped, by name
    /// ([`crate::run_query`]).
    pub queries: std::collections::BTreeMap<String, String>,
}

/// The verdict of an offline activation over `entries`.
pub fn verdict(entries: &[Entry], outcome: Outcome, trace: Trace) -> Verdict {
    if let Some(divergence) = trace.divergence {
        return Verdict::Diverged(Box::new(divergence));
    }
    let Trace {
        issued, recorded, ..
    } = trace;
    let recorded_end = crate::journal::recorded_end(entries);
    let ended_early = |outcome: String| Verdict::EndedEarly {
        issued,
        recorded,
        outcome,
        next: command_views(entries, issued..issued + 3),
    };
    match outcome {
        Outcome::Completed(_) if issued < recorded => ended_early("completed".into()),
        Outcome::Completed(output) => match recorded_end {
            Some(Fact::RunCompleted { output: r })
            | Some(Fact::RunEndedCancelled {
                output: Some(r), ..
            }) if *r != output => Verdict::OutputDiffers {
                recorded: r.clone(),
                replayed: output,
            },
            _ => Verdict::Ok {
                output: Some(output),
            },
        },
        Outcome::Continued(_) if issued < recorded => ended_early("continued as new".into()),
        Outcome::Continued(input) => match recorded_end {
            Some(Fact::RunContinued { input: r, .. }) if *r != input => Verdict::OutputDiffers {
                recorded: r.clone(),
                replayed: input,
            },
            _ => Verdict::Ok { output: None },
        },
        // The host ended the run where its code stood: a hard stop, or a
        // cleanup cut off at its cancel grace (time or steps). What the code
        // would do after that was never done.
        Outcome::Suspended
            if matches!(
                recorded_end,
                Some(Fact::RunCancelled | Fact::RunEndedCancelled { .. })
            ) =>
        {
            Verdict::Ok { output: None }
        }
        Outcome::Suspended if recorded_end.is_some() => Verdict::WentFurther { issued, recorded },
        Outcome::Suspended => Verdict::Ok { output: None },
        Outcome::Failed { message, .. } if issued < recorded => {
            ended_early(format!("failed: {message}"))
        }
        Outcome::Failed { kind, message } => match recorded_end {
            Some(Fact::RunFailed { kind: k, .. }) if *k == kind => Verdict::Ok { output: None },
            // A cancelled workflow's code ends with its error; a run whose
            // cancel was asked for and whose end is not journaled yet (a
            // step attempt that was running still ends first) ends so too.
            Some(Fact::RunEndedCancelled { output: None, .. }) => Verdict::Ok { output: None },
            None if cancel_requested(entries) => Verdict::Ok { output: None },
            _ => Verdict::Failed { kind, message },
        },
    }
}

/// The journal holds a cancel request that counts.
fn cancel_requested(entries: &[Entry]) -> bool {
    crate::index::effective_entries(entries)
        .iter()
        .any(|e| matches!(e.fact, Fact::CancelRequested { .. }))
}

/// Views of the commands of `entries` in `range`.
pub fn command_views(entries: &[Entry], range: std::ops::Range<u32>) -> Vec<(u32, CommandView)> {
    entries
        .iter()
        .filter_map(|e| e.fact.command().map(|c| (c, e)))
        .filter(|(c, _)| range.contains(c))
        .map(|(c, e)| (c, CommandView::of(&e.fact)))
        .collect()
}

impl Divergence {
    /// The divergence of `requested` from the recorded command `command`
    /// of `index`, with context on both sides.
    pub fn at(index: &JournalIndex, command: u32, recorded: &Entry, requested: &Fact) -> Self {
        let views = |range: std::ops::Range<u32>| {
            index
                .commands_in(range)
                .into_iter()
                .map(|(c, e)| (c, CommandView::of(&e.fact)))
                .collect()
        };
        let input_diff = match (&recorded.fact, requested) {
            (
                Fact::StepScheduled {
                    name: a, input: x, ..
                },
                Fact::StepScheduled {
                    name: b, input: y, ..
                },
            ) if a == b => crate::json_diff::diff_texts(x, y).unwrap_or_default(),
            _ => Vec::new(),
        };
        Divergence {
            position: command,
            journal_seq: recorded.seq,
            input_diff,
            recorded: CommandView::of(&recorded.fact),
            requested: CommandView::of(requested),
            journal_context: views(command.saturating_sub(2)..command + 3),
            code_context: views(command.saturating_sub(2)..command),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::{self, JournalBuilder};

    fn entries(facts: Vec<Fact>) -> Vec<Entry> {
        JournalBuilder::at(0).facts(facts).entries()
    }

    #[test]
    fn a_timer_reads_with_its_due_time_as_a_time() {
        let timer = Fact::TimerScheduled {
            command: 0,
            fire_at_ms: 1_796_230_555_394,
        };
        assert_eq!(
            CommandView::of(&timer).excerpt,
            "due at 2026-12-02T16:55:55.394Z"
        );
        assert_eq!(timer.describe(), "a timer due at 2026-12-02T16:55:55.394Z");
    }

    fn step(command: u32, name: &str) -> Fact {
        testing::step(command, name, "1")
    }

    fn trace(issued: u32, recorded: u32) -> Trace {
        Trace {
            divergence: None,
            issued,
            recorded,
            ..Trace::default()
        }
    }

    #[test]
    fn same_commands_and_output_is_ok() {
        let e = entries(vec![
            step(0, "a"),
            Fact::RunCompleted { output: "1".into() },
        ]);
        let v = verdict(&e, Outcome::Completed("1".into()), trace(1, 1));
        assert_eq!(
            v,
            Verdict::Ok {
                output: Some("1".into())
            }
        );
    }

    #[test]
    fn another_output_is_reported_with_both() {
        let e = entries(vec![Fact::RunCompleted { output: "1".into() }]);
        let v = verdict(&e, Outcome::Completed("2".into()), trace(0, 0));
        assert!(
            matches!(v, Verdict::OutputDiffers { recorded, replayed } if recorded == "1" && replayed == "2")
        );
    }

    #[test]
    fn ending_before_the_journal_does_names_what_comes_next() {
        let e = entries(vec![step(0, "a"), step(1, "b")]);
        let v = verdict(&e, Outcome::Completed("x".into()), trace(1, 2));
        let Verdict::EndedEarly { next, .. } = v else {
            panic!("{v:?}")
        };
        assert_eq!(next[0].1.step_name.as_deref(), Some("b"));
    }

    #[test]
    fn asking_for_more_after_a_recorded_end_went_further() {
        let e = entries(vec![Fact::RunCompleted { output: "1".into() }]);
        let v = verdict(&e, Outcome::Suspended, trace(1, 0));
        assert_eq!(
            v,
            Verdict::WentFurther {
                issued: 1,
                recorded: 0
            }
        );
        let open = entries(vec![step(0, "a")]);
        assert!(verdict(&open, Outcome::Suspended, trace(1, 1)).is_ok());
    }

    #[test]
    fn code_cut_off_by_a_hard_stop_or_its_cancel_grace_replays() {
        // The cleanup would dispose of its hook; the grace had passed when
        // the run was next driven, so the host ended it first.
        let over_grace = entries(vec![
            step(0, "a"),
            Fact::CancelRequested {
                reason: "r".into(),
                by: "b".into(),
            },
            Fact::RunEndedCancelled {
                kind: "cancelled".into(),
                error: "its cleanup did not end within the cancel grace of 60000 ms".into(),
                output: None,
            },
        ]);
        assert!(verdict(&over_grace, Outcome::Suspended, trace(2, 1)).is_ok());
        let stopped = entries(vec![step(0, "a"), Fact::RunCancelled]);
        assert!(verdict(&stopped, Outcome::Suspended, trace(2, 1)).is_ok());
        // Its code ended with the cancel while a step attempt it had
        // running goes on: the end is not journaled yet.
        let ending = entries(vec![
            step(0, "a"),
            Fact::CancelRequested {
                reason: "r".into(),
                by: "b".into(),
            },
        ]);
        let cancelled = Outcome::Failed {
            kind: "workflow_failed".into(),
            message: "cancelled by b: r".into(),
        };
        assert!(verdict(&ending, cancelled.clone(), trace(1, 1)).is_ok());
        // Without the cancel, the same failure is the replay's.
        let open = entries(vec![step(0, "a")]);
        assert!(!verdict(&open, cancelled, trace(1, 1)).is_ok());
    }

    #[test]
    fn a_recorded_failure_of_the_same_kind_is_ok_and_another_is_not() {
        let e = entries(vec![Fact::RunFailed {
            kind: "guest_trap".into(),
            error: "x".into(),
        }]);
        let failed = |kind: &str| Outcome::Failed {
            kind: kind.into(),
            message: "m".into(),
        };
        assert!(verdict(&e, failed("guest_trap"), trace(0, 0)).is_ok());
        assert!(matches!(
            verdict(&e, failed("fuel_exhausted"), trace(0, 0)),
            Verdict::Failed { .. }
        ));
    }

    #[test]
    fn a_divergence_carries_context_from_the_index() {
        let index =
            JournalIndex::new(entries(vec![step(0, "a"), step(1, "b"), step(2, "c")])).unwrap();
        let recorded = index.command(1).unwrap().clone();
        let d = Divergence::at(&index, 1, &recorded, &step(1, "z"));
        assert_eq!(d.recorded.step_name.as_deref(), Some("b"));
        assert_eq!(d.requested.step_name.as_deref(), Some("z"));
        assert_eq!(d.code_context.len(), 1);
        assert_eq!(d.journal_context.len(), 3);
        let v = verdict(
            &[],
            Outcome::Suspended,
            Trace {
                divergence: Some(d),
                issued: 2,
                recorded: 3,
                ..Trace::default()
            },
        );
        assert!(matches!(v, Verdict::Diverged(_)));
    }
}
