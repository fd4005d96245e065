//! `keel simulate`: a workflow run under generated schedules of what the
//! world does to a run, each checked against the run's clean ending. A
//! schedule perturbs the test's script: a payload sent again without its
//! ID (as an at-least-once sender resends), the run paused and resumed
//! before a payload, a crash at a journal write (the write lost, or landed
//! unheard) recovered by a new engine. Whatever the schedule, a workflow
//! must end as its clean run did, with the same steps under the same step
//! IDs, each step with the same output, and a journal that replays (the
//! crash harness's checks, [`crate::crashtest`]). Schedules are generated
//! from a seed and a failing one is shrunk to the fewest perturbations
//! that still fail (proptest), so a failure names its seed, the schedule
//! and where the journal departs from the clean run's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_core::journal::Entry;
use keel_store::faulty::{Crash, CrashWhen};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngSeed, TestError, TestRunner};
use serde::Serialize;

use crate::crashtest::{CleanRun, CrashTest, Prepared, Trial, clean_run, crash_point};
use crate::script::Scripted;
use crate::{Keel, Result};

/// One thing a schedule does to the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Perturbation {
    /// The script's payload `payload` (from 0) is sent once more, without
    /// a payload ID, right after it: an at-least-once sender's resend.
    Resend { payload: usize },
    /// The run is paused and resumed before payload `payload` is sent.
    PauseBefore { payload: usize },
    /// The process dies at journal write `at_write` (counted from 1), the
    /// write lost or `landed`; a new engine recovers the run.
    Crash { at_write: u64, landed: bool },
}

/// What to simulate: the test (its workflow, input, grants and script)
/// and how many schedules, from which seed.
#[derive(Clone)]
pub struct Simulation {
    pub test: CrashTest,
    /// Schedules to try.
    pub schedules: u32,
    /// The seed they are generated from.
    pub seed: u64,
}

/// A schedule that broke the run, shrunk.
#[derive(Clone, Debug, Serialize)]
pub struct SimFailure {
    pub schedule: Vec<Perturbation>,
    /// What broke, each in words.
    pub violations: Vec<String>,
    /// Where its journal departs from the clean run's: the entries from
    /// the first that differs, `-` the clean run's and `+` this run's.
    pub journal_diff: Vec<String>,
}

/// What a simulation found.
#[derive(Clone, Debug)]
pub struct SimReport {
    pub clean: CleanRun,
    /// Why the clean run is not one the test asked for, if it is not (no
    /// schedule is tried then).
    pub clean_unexpected: Option<String>,
    pub seed: u64,
    /// Schedules tried (the shrinking's included).
    pub tried: usize,
    pub failure: Option<SimFailure>,
}

impl SimReport {
    /// The clean run was as asked and every schedule kept it.
    pub fn passed(&self) -> bool {
        self.clean_unexpected.is_none() && self.failure.is_none()
    }
}

/// The script of `test` with `schedule`'s resends and pauses: payload `n`
/// is the script's `n`-th resume.
pub fn perturbed(script: &[Scripted], schedule: &[Perturbation]) -> Vec<Scripted> {
    let mut steps = Vec::new();
    let mut payload = 0;
    for step in script {
        let resume = matches!(step, Scripted::Resume { .. });
        if resume && schedule.contains(&Perturbation::PauseBefore { payload }) {
            steps.extend([Scripted::Pause, Scripted::Unpause]);
        }
        steps.push(step.clone());
        if let Scripted::Resume {
            token, payload: p, ..
        } = step
        {
            for _ in schedule
                .iter()
                .filter(|x| **x == Perturbation::Resend { payload })
            {
                steps.push(Scripted::Resume {
                    token: token.clone(),
                    payload: p.clone(),
                    after: None,
                });
            }
        }
        payload += usize::from(resume);
    }
    steps
}

/// Schedules of up to four perturbations for a script of `payloads`
/// payloads and a clean run of `writes` journal writes.
fn schedules(payloads: usize, writes: u64) -> BoxedStrategy<Vec<Perturbation>> {
    let crash = (1..=writes.max(1), any::<bool>())
        .prop_map(|(at_write, landed)| Perturbation::Crash { at_write, landed })
        .boxed();
    let one = match payloads {
        0 => crash,
        n => prop_oneof![
            3 => (0..n).prop_map(|payload| Perturbation::Resend { payload }),
            2 => (0..n).prop_map(|payload| Perturbation::PauseBefore { payload }),
            2 => crash,
        ]
        .boxed(),
    };
    proptest::collection::vec(one, 0..=4).boxed()
}

/// Runs `simulation`: the clean run, then schedules until one breaks the
/// run (shrunk, and run once more for its details) or all pass.
pub async fn simulate(simulation: &Simulation) -> Result<SimReport> {
    let Prepared {
        root,
        run_id,
        clock,
        test,
    } = Prepared::of(&simulation.test)?;
    let (clean, base) = clean_run(&test, root.path(), &run_id, &clock).await?;
    let mut report = SimReport {
        clean_unexpected: crate::crashtest::unexpected_ending(&test, &clean),
        clean,
        seed: simulation.seed,
        tried: 0,
        failure: None,
    };
    if report.clean_unexpected.is_some() {
        return Ok(report);
    }
    let payloads = test
        .script
        .iter()
        .filter(|s| matches!(s, Scripted::Resume { .. }))
        .count();
    let case = Case {
        test: &test,
        root: root.path(),
        run_id: &run_id,
        clock: &clock,
        base: &base,
        clean: &report.clean,
        tried: AtomicUsize::new(0),
    };
    let mut runner = TestRunner::new(RunnerConfig {
        cases: simulation.schedules,
        rng_seed: RngSeed::Fixed(simulation.seed),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..RunnerConfig::default()
    });
    let strategy = schedules(payloads, report.clean.journal_writes);
    let handle = tokio::runtime::Handle::current();
    let outcome = tokio::task::block_in_place(|| {
        runner.run(&strategy, |schedule| {
            let broken = handle
                .block_on(case.run(&schedule))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            match broken.0.is_empty() {
                true => Ok(()),
                false => Err(TestCaseError::fail(broken.0.join("; "))),
            }
        })
    });
    if let Err(TestError::Fail(_, schedule)) = outcome {
        let (violations, journal) = case.run(&schedule).await?;
        report.failure = Some(SimFailure {
            journal_diff: journal_diff(&report.clean.journal, &journal, &run_id),
            schedule,
            violations,
        });
    } else if let Err(TestError::Abort(why)) = outcome {
        return Err(crate::Error::InvalidInput {
            reason: format!("the simulation stopped: {why}"),
        });
    }
    report.tried = case.tried.load(Ordering::SeqCst);
    Ok(report)
}

/// What one schedule needs.
struct Case<'a> {
    test: &'a CrashTest,
    root: &'a std::path::Path,
    run_id: &'a str,
    clock: &'a Arc<keel_core::clock::ManualClock>,
    base: &'a Keel,
    clean: &'a CleanRun,
    tried: AtomicUsize,
}

impl Case<'_> {
    /// Runs the workflow under `schedule` in a store of its own; returns
    /// what broke (nothing, when it kept its clean ending) and its journal.
    async fn run(&self, schedule: &[Perturbation]) -> Result<(Vec<String>, Vec<Entry>)> {
        let n = self.tried.fetch_add(1, Ordering::SeqCst);
        let mut test = self.test.clone();
        test.script = perturbed(&test.script, schedule);
        let crash = schedule
            .iter()
            .find_map(|p| match p {
                Perturbation::Crash { at_write, landed } => Some(Crash {
                    at_write: *at_write,
                    when: match landed {
                        true => CrashWhen::After,
                        false => CrashWhen::Before,
                    },
                }),
                _ => None,
            })
            // None strikes: the run ends and is checked all the same.
            .unwrap_or(Crash {
                at_write: u64::MAX,
                when: CrashWhen::Before,
            });
        let trial = Trial::new(
            &test,
            self.root,
            &format!("schedule-{n}"),
            self.run_id,
            self.clock,
        );
        let (_, broken, journal) = crash_point(&test, &trial, self.base, self.clean, crash).await?;
        Ok((broken.into_iter().map(|v| v.message).collect(), journal))
    }
}

/// Where `got` departs from `clean`: the entries from the first whose fact
/// differs, a few of each side (`-` clean, `+` this run), the run's ID
/// written as `{run_id}`.
fn journal_diff(clean: &[Entry], got: &[Entry], run_id: &str) -> Vec<String> {
    let line = |e: &Entry| format!("{} {:?}", e.seq, e.fact).replace(run_id, "{run_id}");
    let first = clean
        .iter()
        .zip(got)
        .position(|(a, b)| a.fact != b.fact)
        .unwrap_or(clean.len().min(got.len()));
    let side = |entries: &[Entry], mark: &str| {
        entries
            .iter()
            .skip(first)
            .take(6)
            .map(|e| format!("{mark} {}", line(e)))
            .collect::<Vec<_>>()
    };
    let mut diff = side(clean, "-");
    diff.extend(side(got, "+"));
    diff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resume(token: &str) -> Scripted {
        Scripted::Resume {
            token: token.into(),
            payload: "1".into(),
            after: None,
        }
    }

    #[test]
    fn a_schedule_resends_and_pauses_around_the_payloads_it_names() {
        let script = vec![
            resume("a"),
            Scripted::Cancel { reason: "r".into() },
            resume("b"),
        ];
        let schedule = [
            Perturbation::Resend { payload: 1 },
            Perturbation::PauseBefore { payload: 0 },
            Perturbation::Crash {
                at_write: 3,
                landed: true,
            },
        ];
        assert_eq!(
            perturbed(&script, &schedule),
            vec![
                Scripted::Pause,
                Scripted::Unpause,
                resume("a"),
                Scripted::Cancel { reason: "r".into() },
                resume("b"),
                resume("b"),
            ]
        );
        assert_eq!(perturbed(&script, &[]), script);
    }
}
