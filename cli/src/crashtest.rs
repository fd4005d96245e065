//! `keel crashtest`: the crash-point harness of [`keel_host::crashtest`],
//! printed as a table (or JSON), exiting non-zero on any violation.

use std::process::ExitCode;

use keel_host::crashtest::{CrashReport, CrashTest, PointReport, Scripted, crashtest};
use serde_json::json;

use crate::scaffold::Expected;

/// The script of a crash test's flags.
pub struct Script {
    /// `--resume TOKEN=PAYLOAD`, in order.
    pub resumes: Vec<String>,
    /// `--cancel-when-waiting`.
    pub cancel_when_waiting: Option<String>,
    /// `--pause-when-waiting`.
    pub pause_when_waiting: bool,
    /// `--upgrade-to BUILD`.
    pub upgrade_to: Option<std::path::PathBuf>,
}

impl Script {
    /// The steps the flags script: the upgrade, the resumes (each after a
    /// pause and its resume, with `--pause-when-waiting`), then the cancel.
    pub fn steps(&self) -> anyhow::Result<Vec<Scripted>> {
        let mut steps = Vec::new();
        if let Some(to) = &self.upgrade_to {
            steps.push(Scripted::Upgrade { to: to.clone() });
        }
        for r in &self.resumes {
            let Some((token, payload)) = r.split_once('=') else {
                anyhow::bail!("--resume {r}: expected TOKEN=PAYLOAD");
            };
            if self.pause_when_waiting {
                steps.extend([Scripted::Pause, Scripted::Unpause]);
            }
            steps.push(Scripted::Resume {
                token: token.into(),
                payload: payload.into(),
                after: None,
            });
        }
        if let Some(reason) = &self.cancel_when_waiting {
            steps.push(Scripted::Cancel {
                reason: reason.clone(),
            });
        }
        Ok(steps)
    }
}

/// Runs the harness on `test`; with `expected` (a scenario's), the clean
/// run must also end as it says.
pub async fn run(
    test: &CrashTest,
    expected: Option<&Expected>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if !json {
        println!(
            "{:>5}  {:<6}  {:<24}  result",
            "write", "crash", "journal ends with"
        );
    }
    let report = crashtest(test, |point| {
        if !json {
            println!("{}", row(point));
        }
    })
    .await?;
    let clean = &report.clean.ending;
    let unexpected = expected.and_then(|e| {
        e.check(
            clean.status,
            clean.output.as_deref(),
            report.clean.error.as_ref(),
        )
        .err()
    });
    if json {
        let mut value = as_json(&report);
        if let Some(why) = &report.clean_unexpected {
            value["clean_unexpected"] = why.as_str().into();
        }
        if let Some(e) = &unexpected {
            value["passed"] = false.into();
            value["unexpected"] = format!("{e:#}").into();
        }
        println!("{value}");
    } else {
        summary(&report);
        if let Some(why) = &report.clean_unexpected {
            println!("FAILED: {why}");
        }
        if let Some(e) = &unexpected {
            println!("the clean run is not what the scenario expects: {e:#}");
        }
    }
    Ok(if report.passed() && unexpected.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn row(point: &PointReport) -> String {
    let result = if !point.reached {
        // The run made fewer journal writes this time (steps racing, or
        // writes batched differently), so the crash never struck; its
        // recovery was still checked.
        "ok, not reached: this run wrote less than the clean run (steps raced or writes were batched), so it ended without crashing".to_string()
    } else if !point.violations.is_empty() {
        format!("VIOLATED: {}", point.violations.join("; "))
    } else if !point.repeated.is_empty() {
        format!("again: {}", point.repeated.join("; "))
    } else {
        "ok".to_string()
    };
    format!(
        "{:>5}  {:<6}  {:<24}  {result}",
        point.crash.at_write,
        point.crash.when.as_str(),
        point.durable_last
    )
}

fn summary(report: &CrashReport) {
    let violated = report
        .points
        .iter()
        .filter(|p| !p.violations.is_empty())
        .count();
    let clean = &report.clean;
    println!(
        "clean run: {} with {}; {} journal writes, {} crash points, {violated} violated",
        clean.ending.status.as_str(),
        clean
            .ending
            .output
            .as_deref()
            .or(clean.ending.error_kind.as_deref())
            .unwrap_or("nothing"),
        clean.journal_writes,
        report.points.len()
    );
    if violated > 0 {
        println!(
            "each violation is shown at the first crash point that breaks it (`again` marks later points that break the same thing); a step that repeats its effect after a crash is not idempotent: key the effect by its step ID (step_metadata().step_id)"
        );
    }
}

fn as_json(report: &CrashReport) -> serde_json::Value {
    let clean = &report.clean;
    json!({
        "passed": report.passed(),
        "clean": {
            "status": clean.ending.status.as_str(),
            "output": clean.ending.output,
            "build": clean.ending.build,
            "error": clean.error.as_ref().map(|e| json!({"kind": e.kind, "message": e.message})),
            "journal_writes": clean.journal_writes,
            "steps": clean.steps,
        },
        "points": report.points.iter().map(|p| json!({
            "write": p.crash.at_write,
            "crash": p.crash.when.as_str(),
            "journal_ends_with": p.durable_last,
            "reached": p.reached,
            "violations": p.violations,
            "repeated": p.repeated,
        })).collect::<Vec<_>>(),
    })
}
