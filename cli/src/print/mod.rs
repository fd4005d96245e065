//! How each command's answer is printed: text for people, `--json` for
//! scripts. Journal entries use keel's one JSON shape.

use std::process::ExitCode;

use keel_host::SystemClock;
use keel_host::core::Clock;
use keel_host::core::timeline::WaitingOn;
use keel_host::core::{HookRecord, RunRecord, RunStatus};
use serde_json::{Value, json};

mod hooks;
mod operations;
mod runs;
mod schedules;
mod table;

pub(crate) use hooks::{
    print_chunk, print_event, print_hook, print_hook_reply, print_streams, print_webhooks,
};
pub(crate) use operations::{
    inspect, print_deleted, print_deployment, print_deployments, print_job, print_jobs,
    print_limits, print_preview, print_pruned, print_stats, workers,
};
pub(crate) use runs::{
    print_queries, print_query, print_result, print_run_page, show_run, stream_runs,
};
use runs::{print_run, print_run_head, print_waits, run_json};
pub(crate) use schedules::{print_fires, print_schedule, print_schedules};

/// A run as a command that started, resumed, retried or read it answers:
/// with what it waits on while it waits (above all its hooks' tokens: what
/// resumes it); `delivered` when it answers a payload given to its hook.
pub(crate) fn print_run_answer(
    run: &RunRecord,
    waiting_on: &[WaitingOn],
    delivered: bool,
    json: bool,
) {
    if delivered && !json {
        println!("delivered to the hook of run {}", run.run_id);
    }
    match (waiting_on.is_empty(), json) {
        (true, _) => print_run(run, json),
        (false, true) => {
            let mut value = run_json(run);
            value["waiting_on"] = json!(waiting_on);
            println!("{value}");
        }
        (false, false) => {
            print_run_head(run);
            print_waits(waiting_on);
        }
    }
}

/// The answer to a pause: the run, and whether its driver has stopped it
/// yet.
pub(crate) fn print_paused(view: &keel_server::wire::RunView, json: bool) {
    if json {
        println!("{}", json!(view));
        return;
    }
    let run = RunRecord::from(view.clone());
    print_run_head(&run);
    let by = view.paused.as_ref().map_or("", |p| p.by.as_str());
    match run.status {
        RunStatus::Paused => println!(
            "paused by {by}: no code of it runs until `keel runs resume {}`",
            run.run_id
        ),
        _ => println!(
            "pause recorded (by {by}): the run stops at its next wait, once a step attempt it has running ends; `keel runs show {}` says when",
            run.run_id
        ),
    }
}

/// A resume that waited for the workflow's reply to `payload_id`: exit
/// code 2 when none came within the wait.
pub(crate) fn print_replied(
    run: &RunRecord,
    payload_id: &str,
    reply: Option<&Value>,
    json: bool,
) -> ExitCode {
    if json {
        let mut value = run_json(run);
        value["payload_id"] = json!(payload_id);
        value["reply"] = json!(reply);
        println!("{value}");
    } else {
        print_run_head(run);
        println!("payload ID: {payload_id}");
        match &reply {
            Some(reply) => println!("reply: {reply}"),
            None => println!(
                "no reply yet; ask again with the same --payload-id {payload_id} (it is not delivered twice)"
            ),
        }
    }
    match reply {
        Some(_) => ExitCode::SUCCESS,
        None => ExitCode::from(2),
    }
}

/// What a purge deleted and archived.
pub(crate) fn print_purged(purge: &keel_server::wire::PurgeView, json: bool) {
    if json {
        println!("{}", serde_json::to_value(purge).expect("a purge encodes"));
        return;
    }
    print_deleted(&purge.deleted, false);
    println!(
        "{} ended runs examined, {} archived{}",
        purge.examined,
        purge.archived,
        if purge.complete {
            ""
        } else {
            "; more remain for the next purge"
        }
    );
}

/// The hooks runs hold (and those kept after their runs).
pub(crate) fn print_hooks(hooks: &[HookRecord], json: bool) {
    if json {
        println!(
            "{}",
            Value::Array(hooks.iter().map(hooks::hook_json).collect())
        );
        return;
    }
    if hooks.is_empty() {
        println!("no hooks");
        return;
    }
    let rows = hooks.iter().map(|hook| {
        let state = if hook.active { "active" } else { "retained" };
        vec![
            hook.token.to_string(),
            state.into(),
            hook.run_id.to_string(),
        ]
    });
    table::print_table(&["token", "state", "run"], &[], rows.collect());
}

/// A token: on standard output alone, what it may do on standard error.
pub(crate) fn print_token(token: &keel_server::wire::TokenView, json: bool) {
    if json {
        println!("{}", json!(token));
        return;
    }
    println!("{}", token.token);
    eprintln!(
        "may {}, until {}",
        token.scope.describe(),
        when(token.expires_at_ms)
    );
}

/// Something the API answered, as JSON (for `--json` views that are the
/// API's own).
pub(crate) fn print_value(value: &impl serde::Serialize) {
    println!("{}", json!(value));
}

pub(super) fn now_ms() -> u64 {
    SystemClock.now_ms()
}

/// A run's exit code: failure when it failed.
pub(crate) fn exit_for(run: &RunRecord) -> ExitCode {
    if run.status == RunStatus::Failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A time as people read it: UTC, to the millisecond.
pub(super) fn when(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// A duration as people read it (`1s 250ms`, `3m 2s`).
pub(super) fn took(ms: u64) -> String {
    if ms == 0 {
        return "0ms".into();
    }
    // Milliseconds matter only under a minute.
    let ms = if ms >= 60_000 { ms / 1000 * 1000 } else { ms };
    humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
}
