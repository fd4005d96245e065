//! `keel simulate`: [`keel_host::simulate`] on a scenario's workflow,
//! printed (or as JSON), exiting non-zero when a schedule broke the run.

use std::path::Path;
use std::process::ExitCode;

use keel_host::simulate::{SimReport, Simulation, simulate};
use serde_json::json;

use crate::args::Cli;
use crate::scaffold;

/// Simulates the workflow of the scenario at `scenario` in `component` (a
/// `.wasm`, or a crate built first): `seeds` schedules from `seed`.
pub async fn run(
    cli: &Cli,
    component: &Path,
    scenario: &Path,
    seeds: u32,
    seed: Option<u64>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let scenario = scaffold::Scenario::read(scenario)?;
    let mut config = crate::config(cli)?;
    let grants = crate::request::grants_of(cli)?.with(&scenario.grants);
    config.grants = keel_host::Grants::of(&grants);
    config.step_stubs = scenario.stubs();
    let component = match component.is_dir() {
        true => scaffold::build(component)?,
        false => component.to_path_buf(),
    };
    let expected = scenario.expected();
    let test = keel_host::crashtest::CrashTest {
        component,
        workflow: scenario.workflow.clone(),
        input: scenario.input.to_string(),
        config,
        cancel_at_start: None,
        script: scenario.script(),
        start_at_ms: scenario.start_at,
        restart_from: None,
        fork_from: None,
        expected_failure: expected.failure_kind().map(str::to_string),
    };
    let seed = seed.unwrap_or_else(new_seed);
    if !json {
        eprintln!(
            "simulating `{}`: {seeds} schedules from seed {seed}",
            test.workflow
        );
    }
    let report = simulate(&Simulation {
        test,
        schedules: seeds,
        seed,
    })
    .await?;
    let clean = &report.clean;
    let unexpected = expected
        .check(
            clean.ending.status,
            clean.ending.output.as_deref(),
            clean.error.as_ref(),
        )
        .err()
        .map(|e| format!("{e:#}"));
    let passed = report.passed() && unexpected.is_none();
    if json {
        println!("{}", as_json(&report, unexpected.as_deref(), passed));
    } else {
        print(&report, unexpected.as_deref(), seeds);
    }
    Ok(match passed {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// A seed from the time.
fn new_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn print(report: &SimReport, unexpected: Option<&str>, seeds: u32) {
    let clean = &report.clean.ending;
    println!(
        "clean run: {} with {}",
        clean.status.as_str(),
        clean
            .output
            .as_deref()
            .or(clean.error_kind.as_deref())
            .unwrap_or("nothing")
    );
    if let Some(why) = report.clean_unexpected.as_deref().or(unexpected) {
        println!("FAILED: the clean run is not what the scenario expects: {why}");
        return;
    }
    let Some(failure) = &report.failure else {
        println!(
            "{seeds} schedules from seed {} (resends, pauses, crashes): every one ended as the clean run did, under the same step IDs",
            report.seed
        );
        return;
    };
    println!(
        "FAILED at seed {} (`keel simulate ... --seed {}` runs it again); shrunk schedule:",
        report.seed, report.seed
    );
    for p in &failure.schedule {
        println!("  {}", serde_json::to_string(p).unwrap_or_default());
    }
    println!("what broke:");
    for v in &failure.violations {
        println!("  {v}");
    }
    println!("where its journal departs from the clean run's (- clean, + this run):");
    for line in &failure.journal_diff {
        println!("  {line}");
    }
    println!(
        "a step that acts twice when a payload comes twice is not idempotent: key the effect by the payload's ID or step_metadata().step_id"
    );
}

fn as_json(report: &SimReport, unexpected: Option<&str>, passed: bool) -> serde_json::Value {
    let clean = &report.clean;
    json!({
        "passed": passed,
        "seed": report.seed,
        "tried": report.tried,
        "clean": {
            "status": clean.ending.status.as_str(),
            "output": clean.ending.output,
            "error": clean.error.as_ref().map(|e| json!({"kind": e.kind, "message": e.message})),
            "steps": clean.steps,
        },
        "clean_unexpected": report.clean_unexpected.as_deref().or(unexpected),
        "failure": report.failure,
    })
}
