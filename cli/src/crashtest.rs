//! `keel crashtest`: the crash-point harness of [`keel_host::crashtest`],
//! printed as a table (or JSON), exiting non-zero on any violation.

use std::path::Path;
use std::process::ExitCode;

use keel_host::Config;
use keel_host::crashtest::{CrashReport, CrashTest, PointReport, Scripted, crashtest};
use serde_json::json;

/// What a crash test does to its run besides driving it.
pub struct Script {
    /// `--cancel`.
    pub cancel_at_start: Option<String>,
    /// `--resume TOKEN=PAYLOAD`, in order.
    pub resumes: Vec<String>,
    /// `--cancel-when-waiting`.
    pub cancel_when_waiting: Option<String>,
}

impl Script {
    fn steps(&self) -> anyhow::Result<Vec<Scripted>> {
        let mut steps = self
            .resumes
            .iter()
            .map(|r| match r.split_once('=') {
                Some((token, payload)) => Ok(Scripted::Resume {
                    token: token.into(),
                    payload: payload.into(),
                }),
                None => anyhow::bail!("--resume {r}: expected TOKEN=PAYLOAD"),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if let Some(reason) = &self.cancel_when_waiting {
            steps.push(Scripted::Cancel {
                reason: reason.clone(),
            });
        }
        Ok(steps)
    }
}

/// Runs the harness on `workflow` of `component` with `input`.
pub async fn run(
    component: &Path,
    workflow: &str,
    input: String,
    config: Config,
    script: Script,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let test = CrashTest {
        component: component.to_path_buf(),
        workflow: workflow.to_string(),
        input,
        config,
        script: script.steps()?,
        cancel_at_start: script.cancel_at_start,
    };
    if !json {
        println!(
            "{:>5}  {:<6}  {:<24}  result",
            "write", "crash", "journal ends with"
        );
    }
    let report = crashtest(&test, |point| {
        if !json {
            println!("{}", row(point));
        }
    })
    .await?;
    if json {
        println!("{}", as_json(&report));
    } else {
        summary(&report);
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn row(point: &PointReport) -> String {
    let result = if !point.reached {
        "not reached".to_string()
    } else if point.violations.is_empty() {
        "ok".to_string()
    } else {
        format!("VIOLATED: {}", point.violations.join("; "))
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
            "a step that repeats its effect after a crash is not idempotent: key the effect by its step ID (step_metadata().step_id)"
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
        })).collect::<Vec<_>>(),
    })
}
