//! Restarts and forks: a run again from a point of its journal. A restart
//! voids an ended run's journal from that point ([`Fact::RunRestarted`]),
//! so its commands from there run again under the same command and step
//! IDs while everything before keeps its result; a fork admits a new run
//! whose journal carries the source's up to that point (the workflow's own
//! entries, its step IDs its own). Pure: where the point is, what carries
//! over, and what a restart or a fork cannot take along.

use serde::{Deserialize, Serialize};

use crate::ids::RunId;
use crate::index::JournalIndex;
use crate::journal::{Entry, Fact};

/// Where a restart or a fork starts over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RestartPoint {
    /// The first scheduling of the step of this name that counts.
    Step(String),
    /// The journal entry at this position (one that counts, after the
    /// run's admission).
    Seq(u64),
}

/// The position from which `point` starts over in `index`, or why it
/// cannot (naming what to give instead).
pub fn start_over_at(index: &JournalIndex, point: &RestartPoint) -> Result<u64, String> {
    match point {
        RestartPoint::Step(name) => {
            let scheduled = || {
                index.effective().filter_map(|e| match &e.fact {
                    Fact::StepScheduled { name, .. } => Some((e.seq, name.as_str())),
                    _ => None,
                })
            };
            if let Some((seq, _)) = scheduled().find(|(_, n)| n == name) {
                return Ok(seq);
            }
            let mut names: Vec<&str> = scheduled().map(|(_, n)| n).collect();
            names.dedup();
            Err(match names.is_empty() {
                true => format!("it scheduled no step `{name}` (it scheduled none)"),
                false => format!(
                    "it scheduled no step `{name}` (it scheduled: {})",
                    names.join(", ")
                ),
            })
        }
        RestartPoint::Seq(seq) => {
            let len = index.len() as u64;
            let admission = index
                .effective()
                .take_while(|e| is_admission(&e.fact))
                .count() as u64;
            if *seq >= len {
                return Err(format!(
                    "position {seq} is past its journal's end (its positions are 0 to {})",
                    len.saturating_sub(1)
                ));
            }
            if *seq < admission {
                return Err(format!(
                    "position {seq} is the run's admission; start over from {admission} or later"
                ));
            }
            if !index.effective().any(|e| e.seq == *seq) {
                return Err(format!(
                    "position {seq} was voided by a retry or a restart; give a later position or a step"
                ));
            }
            Ok(*seq)
        }
    }
}

/// Entries an admission writes before the workflow's first command.
fn is_admission(fact: &Fact) -> bool {
    matches!(
        fact,
        Fact::RunStarted { .. } | Fact::DeadlineSet { .. } | Fact::Traced { .. }
    )
}

/// Why a restart that voids `index` from `from_seq` would take back what
/// was seen outside the run, if it would: a run it started (which goes on)
/// or a stream chunk (which readers may have read).
pub fn restart_refusal(index: &JournalIndex, from_seq: u64) -> Option<String> {
    index
        .effective()
        .filter(|e| e.seq >= from_seq)
        .find_map(|e| outside_effect(&e.fact))
        .map(|what| {
            format!(
                "{what}, which a restart cannot take back; restart from after it, or fork the run"
            )
        })
}

/// Why a retry or a restart that voids `index` from `from_seq` would run
/// again past work that was undone, if it would: a step (a saga's
/// compensation, a fallback) that ran after a step failed for good or a
/// cancel was asked for, in the part voided. What it did outside stands,
/// while the run would go on from before the failure as if it had not
/// happened (a retry that then succeeds would complete on a booking the
/// compensation released). So such a run is not run again in place;
/// fork it from before the undone work, whose steps then get the fork's
/// own IDs, or restart it from after the cleanup.
pub fn undone_work_refusal(index: &JournalIndex, from_seq: u64) -> Option<String> {
    let voided: Vec<&Entry> = index.effective().filter(|e| e.seq >= from_seq).collect();
    let failure = voided.iter().position(|e| {
        matches!(
            e.fact,
            Fact::StepFailed { .. } | Fact::CancelRequested { .. }
        )
    })?;
    let started: std::collections::HashSet<u32> = voided
        .iter()
        .filter_map(|e| match e.fact {
            Fact::StepAttemptStarted { command, .. } => Some(command),
            _ => None,
        })
        .collect();
    let cleanup = voided[failure + 1..].iter().find_map(|e| match &e.fact {
        Fact::StepScheduled {
            command,
            name,
            step_id,
            ..
        } if started.contains(command) => Some((name, step_id)),
        _ => None,
    })?;
    let cause = match &voided[failure].fact {
        Fact::StepFailed { command, .. } => format!("command {command} failed for good"),
        _ => "a cancel was asked for".to_string(),
    };
    Some(format!(
        "{cause} at position {} and then step `{}` ({}) ran to undo or work around it; running the run again from before that would build on work that was undone. Fork the run from before the work that was undone (the fork's steps get their own IDs), or restart it from a position after the cleanup",
        voided[failure].seq, cleanup.0, cleanup.1,
    ))
}

/// What a command of the workflow left outside its journal, in words.
fn outside_effect(fact: &Fact) -> Option<String> {
    match fact {
        Fact::ChildStarted {
            command, workflow, ..
        }
        | Fact::WorkflowStarted {
            command, workflow, ..
        } => Some(format!("command {command} started a run of `{workflow}`")),
        Fact::StreamWritten {
            command, stream, ..
        }
        | Fact::StreamClosed { command, stream } => {
            Some(format!("command {command} wrote to stream `{stream}`"))
        }
        _ => None,
    }
}

/// What a fork of `index` cut at `from_seq` carries into run `fork`: the
/// workflow's commands and completions that count before the cut, with the
/// attempts of the steps that completed there, each step ID made `fork`'s
/// (no lifecycle entry: no cancel, retry, pause or end). Refused, naming
/// the command, when the part carried holds something a new run cannot
/// take over: a hook (its token belongs to the source), a run it started,
/// a stream chunk.
pub fn fork_prefix(
    index: &JournalIndex,
    from_seq: u64,
    fork: &RunId,
) -> Result<Vec<Entry>, String> {
    let before: Vec<&Entry> = index.effective().filter(|e| e.seq < from_seq).collect();
    let completed: std::collections::HashSet<u32> =
        before.iter().filter_map(|e| e.fact.completes()).collect();
    let mut carried = Vec::new();
    // The fork's own IDs, by the rule of its own schedulings.
    let mut occurrences: std::collections::HashMap<&str, u32> = Default::default();
    for entry in before {
        if let Some(what) = outside_effect(&entry.fact).or_else(|| hook_of(&entry.fact)) {
            return Err(format!(
                "{what}, which a new run cannot take over; fork from before it"
            ));
        }
        let fact = match &entry.fact {
            Fact::StepScheduled {
                command,
                name,
                input,
                digest,
                ..
            } => Fact::StepScheduled {
                command: *command,
                step_id: {
                    let k = occurrences.entry(name.as_str()).or_default();
                    *k += 1;
                    fork.step_id(name, *k - 1).into_string()
                },
                name: name.clone(),
                input: input.clone(),
                digest: digest.clone(),
            },
            Fact::StepAttemptStarted { command, .. }
            | Fact::StepAttemptFailed { command, .. }
            | Fact::StepThrottled { command, .. }
                if completed.contains(command) =>
            {
                entry.fact.clone()
            }
            fact if fact.command().is_some() || fact.completes().is_some() => fact.clone(),
            _ => continue,
        };
        carried.push(Entry {
            seq: 0,
            at_ms: entry.at_ms,
            fact,
        });
    }
    Ok(carried)
}

/// A hook command, in words.
fn hook_of(fact: &Fact) -> Option<String> {
    match fact {
        Fact::HookCreated { command, token, .. } => {
            Some(format!("command {command} created hook `{token}`"))
        }
        Fact::HookNext { command, token, .. } => Some(format!(
            "command {command} took a payload of hook `{token}`"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{JournalBuilder, completed, step};

    fn run() -> JournalIndex {
        JournalBuilder::started("w", "1")
            .then(step(0, "reserve", "1"))
            .then(Fact::StepAttemptStarted {
                command: 0,
                attempt: 1,
            })
            .then(completed(0, "10"))
            .then(step(1, "charge", "10"))
            .then(Fact::StepAttemptStarted {
                command: 1,
                attempt: 1,
            })
            .then(completed(1, "20"))
            .then(Fact::RunCompleted {
                output: "20".into(),
            })
            .index()
    }

    #[test]
    fn a_step_point_is_its_first_scheduling_and_a_position_must_count() {
        let index = run();
        assert_eq!(
            start_over_at(&index, &RestartPoint::Step("charge".into())),
            Ok(4)
        );
        let none = start_over_at(&index, &RestartPoint::Step("ship".into())).unwrap_err();
        assert!(none.contains("it scheduled: reserve, charge"), "{none}");
        assert_eq!(start_over_at(&index, &RestartPoint::Seq(2)), Ok(2));
        let admission = start_over_at(&index, &RestartPoint::Seq(0)).unwrap_err();
        assert!(admission.contains("from 1 or later"), "{admission}");
        let past = start_over_at(&index, &RestartPoint::Seq(99)).unwrap_err();
        assert!(past.contains("0 to 7"), "{past}");
        // Once restarted from 4, positions 4 to 7 no longer count.
        let mut restarted = index.entries().to_vec();
        restarted.push(index.next_entry(
            Fact::RunRestarted {
                from_seq: 4,
                by: "cli".into(),
            },
            9,
        ));
        let index = JournalIndex::new(restarted).unwrap();
        let voided = start_over_at(&index, &RestartPoint::Seq(5)).unwrap_err();
        assert!(voided.contains("voided"), "{voided}");
        let again = start_over_at(&index, &RestartPoint::Step("charge".into()));
        assert!(again.is_err(), "charge's scheduling was voided: {again:?}");
    }

    #[test]
    fn a_fork_carries_the_completed_steps_with_its_own_step_ids() {
        let fork = RunId::from("fork-1");
        let carried = fork_prefix(&run(), 4, &fork).unwrap();
        let facts: Vec<&Fact> = carried.iter().map(|e| &e.fact).collect();
        assert_eq!(facts.len(), 3, "{facts:?}");
        assert!(
            matches!(facts[0], Fact::StepScheduled { step_id, .. } if step_id == "fork-1-reserve-0"),
            "{facts:?}"
        );
        assert_eq!(facts[2], &completed(0, "10"));
        // A step scheduled but not completed before the cut starts fresh.
        let carried = fork_prefix(&run(), 6, &fork).unwrap();
        assert_eq!(carried.len(), 4, "no attempt of charge: {carried:?}");
        assert!(carried.iter().all(|e| !e.fact.is_end()));
    }

    #[test]
    fn running_again_past_a_compensation_is_refused_naming_it() {
        // reserve, then publish fails for good, then the saga releases.
        let index = JournalBuilder::started("w", "1")
            .then(step(0, "reserve", "1"))
            .then(Fact::StepAttemptStarted {
                command: 0,
                attempt: 1,
            })
            .then(completed(0, "10"))
            .then(step(1, "publish", "10"))
            .then(Fact::StepAttemptStarted {
                command: 1,
                attempt: 1,
            })
            .then(Fact::StepFailed {
                command: 1,
                error: "refused".into(),
                fatal: true,
                attempts: 1,
            })
            .then(step(2, "release", "10"))
            .then(Fact::StepAttemptStarted {
                command: 2,
                attempt: 1,
            })
            .then(completed(2, "null"))
            .then(Fact::RunFailed {
                kind: "step_failed".into(),
                error: "refused".into(),
            })
            .index();
        let retry = index.retry_plan().unwrap().from_seq;
        assert_eq!(retry, 6);
        let refused = undone_work_refusal(&index, retry).unwrap();
        assert!(refused.contains("step `release`"), "{refused}");
        assert!(refused.contains("Fork the run"), "{refused}");
        // From the failure's scheduling, the same.
        assert!(undone_work_refusal(&index, 4).is_some());
        // From after the cleanup nothing undone is voided; nor in a run
        // whose failure had no cleanup after it.
        assert_eq!(undone_work_refusal(&index, 10), None);
        assert_eq!(undone_work_refusal(&run(), 4), None);
    }

    #[test]
    fn a_fork_or_restart_refuses_what_it_cannot_take_along() {
        let index = JournalBuilder::started("w", "1")
            .then(step(0, "a", "1"))
            .then(completed(0, "1"))
            .then(Fact::StreamWritten {
                command: 1,
                stream: "progress".into(),
                value: "1".into(),
            })
            .then(Fact::RunCompleted { output: "1".into() })
            .index();
        let refused = fork_prefix(&index, 4, &RunId::from("f")).unwrap_err();
        assert!(refused.contains("stream `progress`"), "{refused}");
        assert!(fork_prefix(&index, 3, &RunId::from("f")).is_ok());
        let refused = restart_refusal(&index, 1).unwrap();
        assert!(refused.contains("command 1 wrote to stream"), "{refused}");
        assert_eq!(restart_refusal(&index, 4), None);
    }
}
