//! How each command's answer is printed: text for people, `--json` for
//! scripts. Journal entries use keel's one JSON shape.

use std::process::ExitCode;

use keel_host::SystemClock;
use keel_host::core::Clock;
use keel_host::core::journal::{Entry, Fact, entry_to_json, excerpt};
use keel_host::core::{EventRecord, HookRecord, RunRecord, RunStatus};
use serde_json::{Value, json};

use crate::args::{Command, RunsCommand};
use crate::control::Reply;
use crate::report_error;

pub fn print_reply(command: &Command, reply: Reply, json: bool) -> ExitCode {
    match reply {
        Reply::Run(run)
            if matches!(
                command,
                Command::Runs {
                    command: RunsCommand::Result { .. }
                }
            ) =>
        {
            print_result(&run, json);
            exit_for(&run)
        }
        Reply::Run(run) => {
            if let (false, Command::Hooks { .. }) = (json, command) {
                println!("delivered to the hook of run {}", run.run_id);
            }
            print_run(&run, json);
            match command {
                Command::Run { .. } | Command::Start { .. } => exit_for(&run),
                _ => ExitCode::SUCCESS,
            }
        }
        Reply::Hook(hook) => {
            print_hook(&hook, json);
            ExitCode::SUCCESS
        }
        Reply::Hooks(hooks) => {
            if json {
                println!("{}", Value::Array(hooks.iter().map(hook_json).collect()));
            } else {
                for hook in &hooks {
                    let state = if hook.active { "active" } else { "retained" };
                    println!("{:<32} {:<9} run {}", hook.token, state, hook.run_id);
                }
            }
            ExitCode::SUCCESS
        }
        Reply::Runs(runs) => {
            print_runs(&runs, json);
            ExitCode::SUCCESS
        }
        Reply::Journal { run, journal } => {
            show_run(&run, &journal, json);
            ExitCode::SUCCESS
        }
        Reply::Event(event) => {
            if json {
                println!("{}", json!(event));
            } else {
                print_event(&event);
            }
            ExitCode::SUCCESS
        }
        Reply::Events(events) => {
            if json {
                println!("{}", json!(events));
            } else {
                events.iter().for_each(print_event);
            }
            ExitCode::SUCCESS
        }
        Reply::Error(e) => {
            report_error(&e.into(), json);
            ExitCode::FAILURE
        }
    }
}

fn print_result(run: &RunRecord, json: bool) {
    if json {
        println!("{}", run_json(run));
        return;
    }
    match (&run.output, &run.error) {
        (Some(output), _) => println!("{output}"),
        (_, Some(error)) => println!("error [{}]: {}", error.kind, error.message),
        _ => println!("run {} is {}", run.run_id, run.status.as_str()),
    }
}

fn print_runs(runs: &[RunRecord], json: bool) {
    if json {
        println!("{}", Value::Array(runs.iter().map(run_json).collect()));
        return;
    }
    for run in runs {
        println!(
            "{}  {:<10} {}",
            run.run_id,
            run.status.as_str(),
            run.workflow
        );
    }
}

fn print_hook(hook: &HookRecord, json: bool) {
    let value = hook_json(hook);
    if json {
        println!("{value}");
        return;
    }
    let state = if hook.active {
        "active"
    } else {
        "kept after its run ended"
    };
    println!("hook `{}` of run {}: {state}", hook.token, hook.run_id);
    println!("metadata: {}", value["metadata"]);
    if let Some(until) = hook.retain_until_ms {
        println!("retained until {until} ms");
    }
}

fn now_ms() -> u64 {
    SystemClock.now_ms()
}

fn print_event(event: &EventRecord) {
    println!(
        "event {} `{}` at {} ms, payload {}",
        event.event_id, event.key, event.at_ms, event.payload
    );
    for o in &event.outcomes {
        match (&o.run_id, o.deduplicated, &o.error) {
            (Some(run), true, _) => println!("  {}: deduplicated against run {run}", o.workflow),
            (Some(run), false, _) => println!("  {}: started run {run}", o.workflow),
            (_, _, Some(error)) => println!("  {}: no run: {error}", o.workflow),
            _ => {}
        }
    }
}

fn hook_json(hook: &HookRecord) -> Value {
    json!({
        "token": hook.token,
        "run_id": hook.run_id,
        "active": hook.active,
        "start_hook": hook.is_start_hook(),
        "metadata": hook.metadata.as_deref().map(payload),
        "created_at_ms": hook.created_at_ms,
        "retain_until_ms": hook.retain_until_ms,
    })
}

fn exit_for(run: &RunRecord) -> ExitCode {
    if run.status == RunStatus::Failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A JSON payload as a value, or as a string when it does not parse.
fn payload(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string()))
}

pub fn run_json(run: &RunRecord) -> Value {
    json!({
        "run_id": run.run_id,
        "workflow": run.workflow,
        "status": run.status.as_str(),
        "input": payload(&run.input),
        "output": run.output.as_deref().map(payload),
        "error": run.error.as_ref().map(|e| json!({"kind": e.kind, "message": e.message})),
        "component_hash": run.component_hash,
        "created_at_ms": run.created_at_ms,
        "updated_at_ms": run.updated_at_ms,
        "wake_at_ms": run.wake_at_ms,
    })
}

fn print_run(run: &RunRecord, json: bool) {
    if json {
        println!("{}", run_json(run));
        return;
    }
    println!(
        "run {} ({}): {}",
        run.run_id,
        run.workflow,
        run.status.as_str()
    );
    if let Some(output) = &run.output {
        println!("output: {output}");
    }
    if let Some(error) = &run.error {
        println!("error [{}]: {}", error.kind, error.message);
    }
    match (run.status, run.wake_at_ms) {
        (RunStatus::Waiting, Some(at)) => println!(
            "waiting for a timer due in {} ms (or a hook's payload, another run's end); `keel worker` resumes it",
            at.saturating_sub(now_ms())
        ),
        (RunStatus::Waiting, None) => println!(
            "waiting for a hook's payload or another run's end; `keel hooks resume` or `keel worker` moves it on"
        ),
        _ => {}
    }
}

fn show_run(run: &RunRecord, journal: &[Entry], json: bool) {
    if json {
        let entries: Vec<Value> = journal.iter().map(entry_to_json).collect();
        println!("{}", json!({"run": run_json(run), "journal": entries}));
        return;
    }
    print_run(run, false);
    println!("input: {}", run.input);
    println!("journal:");
    for entry in journal {
        let v = entry_to_json(entry);
        let field = |k: &str| v.get(k).map(|x| x.to_string()).unwrap_or_default();
        let summary = match &entry.fact {
            Fact::StepCompleted { output, .. } | Fact::RunCompleted { output } => {
                excerpt(output, 60)
            }
            Fact::StepAttemptFailed { error, .. }
            | Fact::StepFailed { error, .. }
            | Fact::RunFailed { error, .. } => excerpt(error, 60),
            Fact::StepScheduled { input, .. } => format!("input {}", excerpt(input, 50)),
            Fact::HookReceived { payload, .. } => format!("payload {}", excerpt(payload, 50)),
            other if other.command().is_some() => other.describe(),
            _ => String::new(),
        };
        println!(
            "{:>4}  {:<20} {:<14} {:<40} {:<4} {}  {}",
            entry.seq,
            entry.fact.name(),
            field("step_name").trim_matches('"'),
            field("step_id").trim_matches('"'),
            field("attempt"),
            entry.at_ms,
            summary
        );
    }
}

pub fn inspect(loaded: &keel_host::Loaded, json: bool) {
    if json {
        println!(
            "{}",
            json!({
                "hash": loaded.hash,
                "sdk_version": loaded.manifest.sdk_version,
                "workflows": loaded.manifest.workflows,
                "steps": loaded.manifest.steps,
                "stubbed_in_workflows": loaded.stubbed_imports,
            })
        );
        return;
    }
    println!(
        "component {} (keel-sdk {})",
        loaded.hash, loaded.manifest.sdk_version
    );
    println!("workflows:");
    for w in &loaded.manifest.workflows {
        let mut line = format!("  {}", w.name);
        if let Some(i) = &w.idempotency {
            line += &format!("  idempotency key `{}` ttl={}ms", i.key, i.ttl_ms);
        }
        if !w.on_events.is_empty() {
            line += &format!("  on events {}", w.on_events.join(", "));
        }
        println!("{line}");
    }
    println!("steps:");
    for s in &loaded.manifest.steps {
        let r = &s.retry;
        println!(
            "  {:<20} max_retries={} initial_backoff={}ms backoff_factor={} max_backoff={}ms",
            s.name, r.max_retries, r.initial_backoff_ms, r.backoff_factor, r.max_backoff_ms
        );
    }
    println!(
        "non-deterministic imports, stubbed in workflows (steps may use them): {}",
        loaded.stubbed_imports.len()
    );
    for import in &loaded.stubbed_imports {
        println!("  {import}");
    }
}

/// `keel workers list`.
pub fn workers(workers: &[(keel_host::store::WorkerRecord, usize)], json: bool) {
    if json {
        let list: Vec<Value> = workers
            .iter()
            .map(|(w, runs)| {
                json!({
                    "worker_id": w.worker_id,
                    "host": w.host,
                    "pid": w.pid,
                    "started_at_ms": w.started_at_ms,
                    "heartbeat_at_ms": w.heartbeat_at_ms,
                    "runs_held": runs,
                })
            })
            .collect();
        println!("{}", Value::Array(list));
        return;
    }
    let now = now_ms();
    for (w, runs) in workers {
        println!(
            "{:<40} host {:<16} pid {:<8} heartbeat {:.1} s ago  runs held {runs}",
            w.worker_id,
            w.host,
            w.pid,
            now.saturating_sub(w.heartbeat_at_ms) as f64 / 1000.0
        );
    }
}
