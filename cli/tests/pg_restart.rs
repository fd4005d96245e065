//! PostgreSQL restarted under load: starts are in flight (20 `keel start`
//! processes at once) when the database server is restarted, with a fast
//! and with an immediate shutdown, several times. Every answer a start gave
//! must stay true: a run acknowledged exists and completes, a definite
//! refusal left no run, an unknown outcome names a run that either exists
//! and completes or never existed, and no start made two runs.
//!
//! It restarts the server `KEEL_TEST_POSTGRES_RESTART_URL` points at with
//! `KEEL_TEST_POSTGRES_RESTART` (both set by `scripts/test.sh`, for a
//! server of this test's own, so that the other tests run beside it);
//! without them it fails, never skips.

use std::collections::HashMap;
use std::process::{Command, Stdio};

use serde_json::Value;

mod common;
use common::pg::{cli_on, json_of, schema};

/// `keel` on the database server this test restarts.
fn cli(schema: &str, args: &[&str]) -> Command {
    let url = std::env::var("KEEL_TEST_POSTGRES_RESTART_URL").unwrap_or_else(|_| {
        panic!(
            "KEEL_TEST_POSTGRES_RESTART_URL is not set: this test restarts a database server \
             of its own. Run scripts/test.sh, which starts one and sets it"
        )
    });
    cli_on(&url, schema, args)
}

const STARTS: usize = 20;
const ROUNDS_PER_MODE: usize = 3;

/// Restarts the database server with shutdown `mode`, waiting until it is
/// back (`pg_ctlcluster` returns once the server accepts connections).
fn restart(mode: &str) {
    let command = std::env::var("KEEL_TEST_POSTGRES_RESTART").unwrap_or_else(|_| {
        panic!(
            "KEEL_TEST_POSTGRES_RESTART is not set: this test restarts a database server \
             of its own. Run scripts/test.sh, which starts one and sets it"
        )
    });
    let status = Command::new("sh")
        .args(["-c", &format!("{command} {mode}")])
        .stdout(Stdio::null())
        .status()
        .expect("running the restart command");
    assert!(status.success(), "`{command} {mode}` failed: {status}");
}

/// What one start answered.
#[derive(Debug)]
enum Answer {
    /// Acknowledged: the run.
    Admitted(String),
    /// Acknowledged, then driving it stopped on the store: the run.
    Interrupted(String),
    /// Refused for sure: no run.
    Refused(String),
    /// Unknown: the run it may have made.
    Unknown(String),
}

fn answer(out: &std::process::Output) -> Answer {
    let value = json_of(out);
    if let Some(run_id) = value["run_id"].as_str() {
        return Answer::Admitted(run_id.to_string());
    }
    let error = &value["error"];
    let kind = error["kind"].as_str().unwrap_or("").to_string();
    let run_id = error["run_id"].as_str().map(str::to_string);
    match (kind.as_str(), run_id) {
        ("start_outcome_unknown", Some(run_id)) => Answer::Unknown(run_id),
        // Admitted, then driving it stopped: the run exists.
        ("drive_interrupted", Some(run_id)) => Answer::Interrupted(run_id),
        (_, Some(run_id)) => panic!("an answer naming run {run_id} of kind {kind}: {value}"),
        (_, None) => Answer::Refused(kind),
    }
}

#[test]
fn every_answer_a_start_gave_holds_after_database_restarts() {
    let schema = schema("restart");
    let deployed = cli(
        &schema,
        &["deploy", keel_tests::TESTBED, "--name", "testbed"],
    )
    .output()
    .unwrap();
    assert!(deployed.status.success(), "{}", json_of(&deployed));
    let mut answers: Vec<(i64, Answer)> = Vec::new();
    let modes = ["fast", "immediate"];
    for (round, mode) in modes
        .iter()
        .flat_map(|m| std::iter::repeat_n(*m, ROUNDS_PER_MODE))
        .enumerate()
    {
        let starts: Vec<(i64, std::process::Child)> = (0..STARTS)
            .map(|i| {
                let input = (round * STARTS + i) as i64;
                // Half the runs are over in a few milliseconds; the others
                // wait on two steps of up to 150 ms, so that restarts also
                // strike runs halfway through.
                let (workflow, json) = if i % 2 == 0 {
                    ("two_steps", input.to_string())
                } else {
                    ("concurrent", format!("[{}, {input}]", 30 + input % 30))
                };
                let child = cli(&schema, &["start", "testbed", workflow, "--input", &json])
                    // The default logs: a failed command reports its error
                    // once, not the store's reconnections as well.
                    .env_remove("KEEL_LOG")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                (input, child)
            })
            .collect();
        restart(mode);
        for (input, child) in starts {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !stderr.contains("WARN"),
                "start {input} logged warnings beside its answer: {stderr}"
            );
            answers.push((input, answer(&out)));
        }
    }
    // Whatever was admitted and left unfinished is finished by a worker.
    // A run whose lease a start's process held when it lost the database
    // comes due when that lease expires, which may be after the worker
    // went idle: the worker is run again until no run is left live, a
    // bounded number of times.
    let mut listed = Value::Null;
    for _ in 0..20 {
        let worked = cli(&schema, &["worker", "--until-idle"]).output().unwrap();
        assert!(worked.status.success(), "{}", json_of(&worked));
        let list = cli(&schema, &["runs", "list", "--limit", "1000"])
            .output()
            .unwrap();
        listed = json_of(&list);
        let live = listed["runs"].as_array().is_some_and(|runs| {
            runs.iter().any(|r| {
                matches!(
                    r["status"].as_str(),
                    Some("pending" | "running" | "waiting" | "scheduled")
                )
            })
        });
        if !live {
            break;
        }
    }
    let mut runs_of: HashMap<i64, Vec<&Value>> = HashMap::new();
    for run in listed["runs"].as_array().expect("a list of runs") {
        // The testbed's hourly schedule fires when the test crosses the
        // turn of an hour (its input is not a start's number).
        if run["attributes"]["schedule"].is_string() {
            continue;
        }
        // two_steps takes the start's number; concurrent has it second.
        let input = run["input"]
            .as_i64()
            .or_else(|| run["input"][1].as_i64())
            .expect("a start's number in its input");
        runs_of.entry(input).or_default().push(run);
    }
    let (mut admitted, mut interrupted, mut refused, mut unknown) = (0, 0, 0, 0);
    for (input, answer) in &answers {
        let runs = runs_of.get(input).map_or(&[][..], Vec::as_slice);
        assert!(
            runs.len() <= 1,
            "start {input} made {} runs: {runs:?}",
            runs.len()
        );
        let completed = |run_id: &str| {
            runs.first().is_some_and(|r| {
                let output_fits = match r["workflow"].as_str() {
                    Some("two_steps") => r["output"] == serde_json::json!([input + 1, input * 2]),
                    _ => r["output"].as_array().is_some_and(|o| o.len() == 2),
                };
                r["run_id"] == run_id && r["status"] == "completed" && output_fits
            })
        };
        match answer {
            Answer::Admitted(run_id) | Answer::Interrupted(run_id) => {
                if matches!(answer, Answer::Admitted(_)) {
                    admitted += 1;
                } else {
                    interrupted += 1;
                }
                assert!(
                    completed(run_id),
                    "start {input} acknowledged {run_id}: {runs:?}"
                );
            }
            Answer::Refused(kind) => {
                refused += 1;
                assert!(
                    runs.is_empty(),
                    "start {input} refused ({kind}) but made {runs:?}"
                );
            }
            Answer::Unknown(run_id) => {
                unknown += 1;
                assert!(
                    runs.is_empty() || completed(run_id),
                    "start {input} said unknown naming {run_id}: {runs:?}"
                );
            }
        }
    }
    eprintln!(
        "{} starts across {} restarts: {admitted} acknowledged, {interrupted} acknowledged and then interrupted, {refused} refused, {unknown} unknown",
        answers.len(),
        modes.len() * ROUNDS_PER_MODE
    );
    assert_eq!(answers.len(), STARTS * modes.len() * ROUNDS_PER_MODE);
}
