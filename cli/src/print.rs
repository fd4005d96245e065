//! How each command's answer is printed: text for people, `--json` for
//! scripts. Journal entries use keel's one JSON shape.

use std::process::ExitCode;

use keel_host::SystemClock;
use keel_host::core::Clock;
use keel_host::core::flow::{LimitRow, RunSlot, SlotState};
use keel_host::core::journal::{Entry, entry_to_json, excerpt};
use keel_host::core::schedule::FireOutcome;
use keel_host::core::timeline::{RowKind, RowStatus, timeline};
use keel_host::core::{Deployment, EventRecord, HookRecord, RunRecord, RunStatus};
use keel_server::wire::{
    BulkPreviewView, ChildView, FireView, HookView, JobView, RunView, ScheduleView,
};
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
        Reply::Run(run)
            if matches!(
                command,
                Command::Runs {
                    command: RunsCommand::Cancel { .. }
                }
            ) && run.status.is_final()
                && run.status != RunStatus::Cancelled =>
        {
            // It had ended before: the cancel did nothing.
            let e = crate::control::RemoteError {
                kind: keel_host::core::ErrorKind::RunEnded.as_str().into(),
                message: format!(
                    "run {} had already ended ({}); nothing was cancelled",
                    run.run_id,
                    run.status.as_str()
                ),
                ids: vec![("run_id".into(), run.run_id.to_string())],
            };
            report_error(&e.into(), json);
            ExitCode::FAILURE
        }
        Reply::Run(run) => {
            if let (false, Command::Hooks { .. }) = (json, command) {
                println!("delivered to the hook of run {}", run.run_id);
            }
            print_run(&run, json);
            match command {
                Command::Run { .. }
                | Command::Start { .. }
                | Command::Runs {
                    command: RunsCommand::Retry { .. },
                } => exit_for(&run),
                _ => ExitCode::SUCCESS,
            }
        }
        Reply::Hook(hook) => {
            print_hook(&hook, json);
            ExitCode::SUCCESS
        }
        Reply::Deleted(deleted) => {
            print_deleted(&deleted, json);
            ExitCode::SUCCESS
        }
        Reply::RunWaiting { run, waiting_on } => {
            if let (false, Command::Hooks { .. }) = (json, command) {
                println!("delivered to the hook of run {}", run.run_id);
            }
            if json {
                let mut value = run_json(&run);
                value["waiting_on"] = json!(waiting_on);
                println!("{value}");
            } else {
                print_run_head(&run);
                print_waits(&waiting_on);
            }
            ExitCode::SUCCESS
        }
        Reply::WaitingOn(waiting_on) => {
            println!("{}", json!(waiting_on));
            ExitCode::SUCCESS
        }
        Reply::Streams(streams) => {
            print_streams(&streams, json);
            ExitCode::SUCCESS
        }
        Reply::Chunks { chunks, .. } => {
            for chunk in &chunks {
                print_chunk(chunk, json);
            }
            ExitCode::SUCCESS
        }
        Reply::Answer(reply) => {
            print_hook_reply(&reply, json);
            match reply.reply {
                Some(_) => ExitCode::SUCCESS,
                None => ExitCode::from(2),
            }
        }
        Reply::Replied {
            run,
            payload_id,
            reply,
        } => {
            let reply = reply.as_deref().map(|r| {
                serde_json::from_str::<Value>(r).unwrap_or_else(|_| Value::String(r.into()))
            });
            if json {
                let mut value = run_json(&run);
                value["payload_id"] = json!(payload_id);
                value["reply"] = json!(reply);
                println!("{value}");
            } else {
                print_run_head(&run);
                println!("payload ID: {payload_id}");
                match &reply {
                    Some(reply) => println!("reply: {reply}"),
                    None => println!(
                        "no reply yet; ask again with the same --payload-id {payload_id} (it is not delivered twice)"
                    ),
                }
            }
            if reply.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
        Reply::Pruned(pruned) => {
            print_pruned(&pruned, json);
            ExitCode::SUCCESS
        }
        Reply::Preview(preview) => {
            print_preview(command, &preview, json);
            ExitCode::SUCCESS
        }
        Reply::Job(job) => {
            print_job(&job, json);
            match job.counts.failed {
                0 => ExitCode::SUCCESS,
                _ => ExitCode::FAILURE,
            }
        }
        Reply::Jobs(jobs) => {
            print_jobs(&jobs, json);
            ExitCode::SUCCESS
        }
        Reply::Stats(stats) => {
            print_stats(&stats, json);
            ExitCode::SUCCESS
        }
        Reply::Purged(purge) => {
            if json {
                println!("{}", serde_json::to_value(&purge).expect("a purge encodes"));
            } else {
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
            ExitCode::SUCCESS
        }
        Reply::Workers(list) => {
            workers(&list, json);
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
        Reply::Runs { runs, next_cursor } => {
            print_run_page(&runs, next_cursor.as_deref(), json);
            ExitCode::SUCCESS
        }
        Reply::Journal {
            run,
            journal,
            slot,
            children,
        } => {
            show_run(&run, &journal, slot.as_ref(), &children, json);
            ExitCode::SUCCESS
        }
        Reply::Limits { limits, started } => {
            print_limits(&limits, &started, json);
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
        Reply::Deployment(d) => {
            print_deployment(&d, json);
            ExitCode::SUCCESS
        }
        Reply::Deployments(ds) => {
            print_deployments(&ds, json);
            ExitCode::SUCCESS
        }
        Reply::Component(component) => {
            inspect(&component, json);
            ExitCode::SUCCESS
        }
        Reply::Schedule(s) => {
            print_schedule(&s, command, json);
            ExitCode::SUCCESS
        }
        Reply::Schedules(list) => {
            print_schedules(&list, json);
            ExitCode::SUCCESS
        }
        Reply::Fires(fires) => {
            print_fires(&fires, json);
            ExitCode::SUCCESS
        }
        Reply::Token(token) => {
            if json {
                println!("{}", json!(token));
            } else {
                println!("{}", token.token);
                eprintln!(
                    "may {}, until {}",
                    token.scope.describe(),
                    when(token.expires_at_ms)
                );
            }
            ExitCode::SUCCESS
        }
        Reply::Webhook(webhook) => {
            print_webhooks(std::slice::from_ref(&webhook), json, true);
            ExitCode::SUCCESS
        }
        Reply::Webhooks(list) => {
            print_webhooks(&list, json, false);
            ExitCode::SUCCESS
        }
        Reply::Error(e) => {
            report_error(&e.into(), json);
            ExitCode::FAILURE
        }
    }
}

/// The concurrency groups and overrides, a line each, and the runs a
/// change started.
fn print_limits(limits: &[LimitRow], started: &[String], json: bool) {
    if json {
        println!("{}", json!({"limits": limits, "started": started}));
        return;
    }
    for run_id in started {
        println!("started {run_id}");
    }
    if limits.is_empty() {
        println!(
            "no concurrency groups; a workflow declares one with #[workflow(concurrency(key = ..., limit = N))]"
        );
        return;
    }
    println!(
        "{:<24} {:<24} {:>6} {:>9} {:>12} {:>7}",
        "workflow", "key", "limit", "declared", "in progress", "queued"
    );
    for row in limits {
        let limit = match row.overridden {
            Some(_) => format!("{}*", row.limit),
            None => row.limit.to_string(),
        };
        println!(
            "{:<24} {:<24} {:>6} {:>9} {:>12} {:>7}",
            row.workflow,
            row.key.as_deref().unwrap_or("(every key)"),
            limit,
            row.declared.map_or("-".into(), |d| d.to_string()),
            row.in_progress,
            row.queued
        );
    }
    if limits.iter().any(|r| r.overridden.is_some()) {
        println!("* set by an operator; `keel limits reset WORKFLOW [--key KEY]` removes it");
    }
}

/// Every schedule, a line each.
/// Webhooks, a line each: where deliveries go and how they are signed
/// (`one`: a single webhook, printed as an object in JSON).
fn print_webhooks(list: &[keel_server::wire::WebhookView], json: bool, one: bool) {
    if json {
        match list {
            [w] if one => println!("{}", json!(w)),
            list => println!("{}", json!(list)),
        }
        return;
    }
    if list.is_empty() {
        println!(
            "no webhooks; create one with `keel webhooks create ID --hook TOKEN --secret SECRET`"
        );
        return;
    }
    println!("{:<24} {:<40} {:<24} delivers to", "id", "path", "scheme");
    for w in list {
        let scheme = match (&w.header, w.tolerance_s) {
            (Some(h), _) => format!("hmac ({h})"),
            (None, Some(t)) => format!("stripe (±{t} s)"),
            (None, None) => "github".into(),
        };
        let target = match (&w.hook, &w.event) {
            (Some(h), _) => format!("hook {h}"),
            (_, Some(e)) => format!("event {e}"),
            _ => "-".into(),
        };
        println!("{:<24} {:<40} {:<24} {target}", w.id, w.path, scheme);
    }
}

fn print_schedules(list: &[ScheduleView], json: bool) {
    if json {
        println!("{}", json!(list));
        return;
    }
    if list.is_empty() {
        println!("no schedules; create one with `keel schedules create NAME WORKFLOW --cron EXPR`");
        return;
    }
    println!(
        "{:<24} {:<20} {:<36} {:<24} {:<10} state",
        "name", "workflow", "spec", "next fire", "overlap"
    );
    for s in list {
        println!(
            "{:<24} {:<20} {:<36} {:<24} {:<10} {}",
            s.name,
            s.workflow,
            s.description,
            s.next_fire_ms
                .filter(|_| !s.paused)
                .map_or("-".into(), when),
            s.overlap.as_str(),
            if s.paused { "paused" } else { "active" }
        );
    }
}

/// A schedule: its settings, next fire times and latest fires.
fn print_schedule(s: &ScheduleView, command: &Command, json: bool) {
    if json {
        println!("{}", json!(s));
        return;
    }
    use crate::args::SchedulesCommand as S;
    let verb = match command {
        Command::Schedules {
            command: S::Create(_),
        } => "created ",
        Command::Schedules {
            command: S::Delete { .. },
        } => "deleted ",
        Command::Schedules {
            command: S::Update(_),
        } => "updated ",
        Command::Schedules {
            command: S::Pause { .. },
        } => "paused ",
        Command::Schedules {
            command: S::Resume { .. },
        } => "resumed ",
        _ => "",
    };
    println!(
        "{verb}schedule {}: {} of {}",
        s.name, s.description, s.workflow
    );
    println!(
        "  overlap {}, catch-up window {}",
        s.overlap.as_str(),
        took(s.catchup_window_ms)
    );
    if s.paused {
        let note = s
            .note
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        println!("  paused{note}");
    }
    for at in &s.upcoming_ms {
        println!("  next  {}", when(*at));
    }
    if s.missed > 0 {
        println!("  {} fire(s) missed in all", s.missed);
    }
    for f in &s.recent {
        print_fire(f);
    }
}

fn print_fire(f: &FireView) {
    let run = f.run_id.as_deref().unwrap_or("-");
    let status = f.run_status.map(|s| s.as_str()).unwrap_or("");
    let error = f
        .error
        .as_deref()
        .map(|e| format!(" ({e})"))
        .unwrap_or_default();
    println!(
        "  fire  {}  {:<13} {run} {status}{error}",
        when(f.nominal_ms),
        f.outcome.as_str()
    );
}

/// Fires a trigger or backfill decided.
fn print_fires(fires: &[FireView], json: bool) {
    if json {
        println!("{}", json!(fires));
        return;
    }
    for f in fires {
        print_fire(f);
    }
    let started = fires
        .iter()
        .filter(|f| f.outcome == FireOutcome::Started)
        .count();
    println!("{started} of {} fire(s) started", fires.len());
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

/// A page of runs: a table and, if more runs match, how to list them; as
/// JSON `{"runs": [...], "next_cursor": ...}`.
pub fn print_run_page(runs: &[RunRecord], next_cursor: Option<&str>, json: bool) {
    if json {
        let runs: Vec<Value> = runs.iter().map(run_json).collect();
        println!("{}", json!({"runs": runs, "next_cursor": next_cursor}));
        return;
    }
    if runs.is_empty() {
        println!("no runs");
    } else {
        let mut header = true;
        stream_runs(runs, false, &mut header);
    }
    if let Some(cursor) = next_cursor {
        println!("more runs match: list them with `--before {cursor}` (or every one with `--all`)");
    }
}

/// Runs as the rows of one table printed page by page (the header before
/// the first row, while `header` is true), or as JSON lines.
pub fn stream_runs(runs: &[RunRecord], json: bool, header: &mut bool) {
    if json {
        for run in runs {
            println!("{}", run_json(run));
        }
        return;
    }
    if runs.is_empty() {
        return;
    }
    if std::mem::take(header) {
        println!(
            "{:<36}  {:<10} {:<24} {:<24} {:>12}",
            "RUN", "STATUS", "WORKFLOW", "STARTED", "DURATION"
        );
    }
    let now = now_ms();
    for run in runs {
        let end = if run.status.is_final() {
            run.updated_at_ms
        } else {
            now
        };
        println!(
            "{:<36}  {:<10} {:<24} {:<24} {:>12}",
            run.run_id,
            run.status.as_str(),
            excerpt(&run.workflow, 24),
            when(run.created_at_ms),
            took(end.saturating_sub(run.created_at_ms))
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
    if let Some(schema) = value.get("payload_schema") {
        println!("payloads must fit: {schema}");
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

/// A hook as the API spells it.
fn hook_json(hook: &HookRecord) -> Value {
    json!(HookView::from(hook))
}

fn exit_for(run: &RunRecord) -> ExitCode {
    if run.status == RunStatus::Failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A run as the API spells it, with the CLI's hint beside a failure.
pub fn run_json(run: &RunRecord) -> Value {
    let mut value = json!(RunView::from(run));
    if let Some(e) = &run.error
        && let Some(hint) = crate::hints::hint(&crate::hints::run_failure(&run.run_id, e))
    {
        value["error"]["hint"] = json!(hint);
    }
    value
}

fn print_run(run: &RunRecord, json: bool) {
    if json {
        println!("{}", run_json(run));
        return;
    }
    print_run_head(run);
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

/// What a waiting run waits on, a line each, with the command that moves
/// it on.
fn print_waits(waiting_on: &[keel_host::core::timeline::WaitingOn]) {
    use keel_host::core::timeline::WaitingOn;
    if waiting_on.is_empty() {
        println!("waiting; `keel worker` moves it on when something is due");
    }
    for wait in waiting_on {
        match wait {
            WaitingOn::Hook { token } => println!(
                "waiting on hook {token}: `keel hooks resume {token} --payload JSON` moves it on"
            ),
            WaitingOn::Timer { due_at_ms } => println!(
                "waiting on a timer due {} (in {}); `keel worker` resumes it then",
                when(*due_at_ms),
                took(due_at_ms.saturating_sub(now_ms()))
            ),
            WaitingOn::Run { run_id } => {
                println!("waiting on run {run_id}'s end (`keel runs get {run_id}`)")
            }
        }
    }
}

/// A run's first lines: ID, workflow, status, output or error.
fn print_run_head(run: &RunRecord) {
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
        if let Some(hint) = crate::hints::hint(&crate::hints::run_failure(&run.run_id, error)) {
            println!("hint: {hint}");
        }
    }
}

fn show_run(
    run: &RunRecord,
    journal: &[Entry],
    slot: Option<&RunSlot>,
    children: &[ChildView],
    json: bool,
) {
    if json {
        let entries: Vec<Value> = journal.iter().map(entry_to_json).collect();
        let mut run_value = run_json(run);
        if let Some(object) = run_value.as_object_mut() {
            if let Some(slot) = slot {
                object.insert("concurrency".into(), json!(slot));
            }
            if !children.is_empty() {
                object.insert("children".into(), json!(children));
            }
        }
        let run = run_value;
        println!("{}", json!({"run": run, "journal": entries}));
        return;
    }
    print_run(run, false);
    println!("input: {}", excerpt(&run.input, 200));
    if let Some(slot) = slot {
        println!("concurrency: {}", slot_line(slot));
    }
    if !run.attributes.is_empty() {
        let pairs: Vec<String> = run
            .attributes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!("attributes: {}", pairs.join(" "));
    }
    if let Some(parent) = &run.parent_run_id {
        println!("parent: {parent} (`keel runs show {parent}`)");
    }
    for child in children {
        let on = child
            .deployment
            .as_ref()
            .map(|d| format!(" of deployment {d}"))
            .unwrap_or_default();
        let status = child.status.map_or("gone", RunStatus::as_str);
        println!(
            "child: {} ({}{on}): {status}; {} when this run ends",
            child.run_id,
            child.workflow,
            child.close.as_str()
        );
    }
    let now = now_ms();
    let end = if run.status.is_final() {
        run.updated_at_ms
    } else {
        now
    };
    println!(
        "started {}, {} {}",
        when(run.created_at_ms),
        if run.status.is_final() {
            "took"
        } else {
            "running for"
        },
        took(end.saturating_sub(run.created_at_ms))
    );
    let rows = timeline(journal);
    if rows.is_empty() {
        println!("timeline: nothing scheduled yet");
        return;
    }
    println!(
        "\n{:>3}  {:<6} {:<20} {:<10} {:>8}  {:>10}  {:>10}  step ID / detail",
        "#", "kind", "name", "status", "attempts", "start", "took"
    );
    for row in &rows {
        let kind = match row.kind {
            RowKind::Step => "step",
            RowKind::Timer => "timer",
            RowKind::Hook => "hook",
            RowKind::Child => "child",
            RowKind::AwaitRun => "await",
            RowKind::Patch => "patch",
        };
        let status = match row.status {
            RowStatus::Open => "open",
            RowStatus::Retrying => "retrying",
            RowStatus::Completed => "completed",
            RowStatus::Failed => "failed",
        };
        let attempts = if row.kind == RowKind::Step || row.kind == RowKind::Hook {
            row.attempts.to_string()
        } else {
            String::new()
        };
        let detail = row
            .step_id
            .clone()
            .or_else(|| row.run_id.as_ref().map(|r| format!("run {r}")))
            .unwrap_or_default();
        println!(
            "{:>3}  {:<6} {:<20} {:<10} {:>8}  {:>10}  {:>10}  {}",
            row.command,
            kind,
            excerpt(&row.name, 20),
            status,
            attempts,
            format!(
                "+{}",
                took(row.started_at_ms.saturating_sub(run.created_at_ms))
            ),
            took(row.duration_ms(end)),
            detail
        );
        if row.throttled_ms > 0 {
            println!(
                "{:>5}waited {} for its step limits",
                "",
                took(row.throttled_ms)
            );
        }
        // A step's failed attempts, each labelled; a step that failed for
        // good ends with its error.
        let failed_for_good = row.status == RowStatus::Failed;
        let attempts_failed: Vec<_> = row
            .attempt_log
            .iter()
            .filter(|a| a.error.is_some())
            .collect();
        let shown =
            attempts_failed.len() - usize::from(failed_for_good && !attempts_failed.is_empty());
        for a in &attempts_failed[..shown] {
            println!(
                "{:>5}attempt {} failed after {}: {}",
                "",
                a.attempt,
                took(a.ended_at_ms.unwrap_or(end).saturating_sub(a.started_at_ms)),
                excerpt(a.error.as_deref().unwrap_or_default(), 160)
            );
        }
        if let Some(error) = &row.error
            && (row.kind != RowKind::Step || failed_for_good)
        {
            println!("{:>5}error: {}", "", excerpt(error, 160));
        }
        if let (Some(due), None) = (row.due_at_ms, row.ended_at_ms) {
            let what = if row.kind == RowKind::Timer {
                "fires"
            } else {
                "retry"
            };
            println!(
                "{:>5}{what} at {} (in {})",
                "",
                when(due),
                took(due.saturating_sub(now))
            );
        }
    }
}

/// A time as people read it: UTC, to the millisecond.
fn when(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// A duration as people read it (`1s 250ms`, `3m 2s`).
fn took(ms: u64) -> String {
    if ms == 0 {
        return "0ms".into();
    }
    // Milliseconds matter only under a minute.
    let ms = if ms >= 60_000 { ms / 1000 * 1000 } else { ms };
    humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
}

/// Deployments, newest first.
fn print_deployments(deployments: &[Deployment], json: bool) {
    if json {
        println!("{}", json!(deployments));
        return;
    }
    if deployments.is_empty() {
        println!("nothing is deployed; deploy a component with `keel deploy COMPONENT.wasm`");
    }
    for d in deployments {
        println!(
            "{:<20} {}  {}  {}",
            d.name,
            &d.hash[..16],
            when(d.deployed_at_ms),
            d.workflows.join(", ")
        );
    }
}

fn print_deployment(d: &Deployment, json: bool) {
    if json {
        println!("{}", json!(d));
        return;
    }
    println!("deployment {} ({})", d.name, d.hash);
    println!("deployed:  {}", when(d.deployed_at_ms));
    println!("workflows: {}", d.workflows.join(", "));
    println!("steps:     {}", d.steps.join(", "));
    let grants: Vec<String> = d
        .grants
        .http
        .iter()
        .map(|h| format!("http {h}"))
        .chain(d.grants.dirs.iter().map(|x| format!("dir {x}")))
        .chain(d.grants.env.iter().map(|x| format!("env {x}")))
        .collect();
    println!(
        "grants:    {}",
        if grants.is_empty() {
            "none".to_string()
        } else {
            grants.join(", ")
        }
    );
    if let Some(mib) = d.limits.max_memory_mib {
        println!("step memory: {mib} MiB");
    }
    if let Some(ms) = d.limits.step_timeout_ms {
        println!("attempt timeout: {}", took(ms));
    }
}

/// `keel inspect`: what a component exports, with its schemas.
pub fn inspect(component: &keel_server::wire::ComponentView, json: bool) {
    if json {
        println!("{}", json!(component));
        return;
    }
    println!(
        "component {} (keel-sdk {})",
        component.hash, component.sdk_version
    );
    println!("workflows:");
    for w in &component.workflows {
        let mut line = format!("  {}", w.name);
        if let Some(i) = &w.idempotency {
            line += &format!("  idempotency key `{}` ttl={}ms", i.key, i.ttl_ms);
        }
        if !w.on_events.is_empty() {
            line += &format!("  on events {}", w.on_events.join(", "));
        }
        if w.durability == keel_host::core::manifest::Durability::Relaxed {
            line += "  durability relaxed (steps journaled at the run's next wait or end)";
        }
        println!("{line}");
        for (which, schema) in [("input", &w.input_schema), ("output", &w.output_schema)] {
            match schema {
                Some(schema) => println!("    {which}: {schema}"),
                None => println!("    {which}: any JSON (its type derives no JsonSchema)"),
            }
        }
    }
    println!("steps:");
    for s in &component.steps {
        let r = &s.retry;
        println!(
            "  {:<20} max_retries={} initial_backoff={}ms backoff_factor={} max_backoff={}ms",
            s.name, r.max_retries, r.initial_backoff_ms, r.backoff_factor, r.max_backoff_ms
        );
    }
    println!(
        "non-deterministic imports, stubbed in workflows (steps may use them): {}",
        component.stubbed_in_workflows.len()
    );
    for import in &component.stubbed_in_workflows {
        println!("  {import}");
    }
}

/// `keel workers list`.
pub fn workers(workers: &[keel_server::wire::WorkerView], json: bool) {
    if json {
        let list: Vec<Value> = workers
            .iter()
            .map(|r| {
                json!({
                    "worker_id": r.worker_id,
                    "host": r.host,
                    "pid": r.pid,
                    "started_at_ms": r.started_at_ms,
                    "heartbeat_at_ms": r.heartbeat_at_ms,
                    "runs_held": r.runs,
                    "gone": r.gone,
                })
            })
            .collect();
        println!("{}", Value::Array(list));
        return;
    }
    let now = now_ms();
    for r in workers {
        let w = r;
        println!(
            "{:<40} host {:<16} pid {:<8} heartbeat {:.1} s ago  runs held {}{}",
            r.worker_id,
            r.host,
            r.pid,
            now.saturating_sub(r.heartbeat_at_ms) as f64 / 1000.0,
            w.runs,
            if w.gone {
                "  GONE (no heartbeat for 3 lease times: killed or cut off; forgotten after an hour)"
            } else {
                ""
            }
        );
    }
}

/// A run's place in its concurrency group, in words.
fn slot_line(slot: &RunSlot) -> String {
    let state = match (slot.state, slot.position) {
        (SlotState::Queued, Some(p)) => format!("queued, {p} in line"),
        (SlotState::Queued, None) => "queued".into(),
        (SlotState::Holding, _) => "holds a slot".into(),
        (SlotState::Evicting, _) => "holds a slot, being cancelled for a newer run".into(),
        (SlotState::Deferred, _) => "asks for a slot when it comes due".into(),
    };
    format!(
        "key `{}` (limit {}, priority {}): {state}",
        slot.key, slot.limit, slot.priority
    )
}

/// What a deletion deleted.
fn print_deleted(deleted: &keel_host::core::retention::Deleted, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_value(deleted).expect("a deletion encodes")
        );
        return;
    }
    println!(
        "deleted {} run{} ({} journal entries, {} bytes)",
        deleted.runs.len(),
        if deleted.runs.len() == 1 { "" } else { "s" },
        deleted.journal_entries,
        deleted.bytes
    );
}

/// The store's figures, one per line.
fn print_stats(stats: &keel_host::core::retention::StoreStats, json: bool) {
    if json {
        println!("{}", serde_json::to_value(stats).expect("figures encode"));
        return;
    }
    let runs: u64 = stats.runs_by_status.values().sum();
    let by_status: Vec<String> = stats
        .runs_by_status
        .iter()
        .map(|(status, n)| format!("{n} {status}"))
        .collect();
    println!("runs             {runs} ({})", by_status.join(", "));
    println!(
        "journal entries  {} ({} bytes)",
        stats.journal_entries, stats.journal_bytes
    );
    println!("hooks            {}", stats.hooks);
    println!(
        "payloads         {} ({} bytes)",
        stats.payloads, stats.payload_bytes
    );
    println!("events           {}", stats.events);
    println!(
        "components       {} ({} bytes)",
        stats.components, stats.component_bytes
    );
    println!("size on disk     {} bytes", stats.size_bytes);
}

/// What a bulk action would act on (`runs bulk --dry-run`).
fn print_preview(command: &Command, preview: &BulkPreviewView, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_value(preview).expect("a preview encodes")
        );
        return;
    }
    let action = match command {
        Command::Runs {
            command: RunsCommand::Bulk { action, .. },
        } => keel_host::core::bulk::BulkAction::from(*action).as_str(),
        _ => "act on",
    };
    println!(
        "would {action} {} run{}{}",
        preview.acted_on,
        if preview.acted_on == 1 { "" } else { "s" },
        match preview.passed_over {
            0 => String::new(),
            n => format!(" ({n} more match, but their status does not take it)"),
        }
    );
    let sample: Vec<RunRecord> = preview
        .sample
        .iter()
        .cloned()
        .map(RunRecord::from)
        .collect();
    let mut header = true;
    stream_runs(&sample, false, &mut header);
    if (sample.len() as u64) < preview.acted_on {
        println!("... and {} more", preview.acted_on - sample.len() as u64);
    }
}

/// A bulk job and its progress.
fn print_job(job: &JobView, json: bool) {
    if json {
        println!("{}", serde_json::to_value(job).expect("a job encodes"));
        return;
    }
    let c = job.counts;
    println!("job       {}", job.job_id);
    println!("action    {}", job.action.as_str());
    println!("state     {}", job.state.as_str());
    println!(
        "runs      {} matched: {} done, {} skipped, {} failed",
        c.matched, c.done, c.skipped, c.failed
    );
    println!("submitted {}", when(job.created_at_ms));
    if let Some(at) = job.finished_at_ms {
        println!("ended     {}", when(at));
    }
    if let Some(worker) = &job.worker {
        println!("worker    {worker}");
    }
    for failure in &job.errors {
        println!("failed    {}: {}", failure.run_id, failure.error);
    }
    if job.state == keel_host::core::bulk::JobState::Running {
        println!("`keel jobs show {}` shows its progress", job.job_id);
    } else if job.action == keel_host::core::bulk::BulkAction::Retry && c.done > 0 {
        println!("the retried runs are driven by the workers (`keel worker` if none runs)");
    }
}

/// Bulk jobs, newest first.
fn print_jobs(jobs: &[JobView], json: bool) {
    if json {
        println!("{}", serde_json::to_value(jobs).expect("jobs encode"));
        return;
    }
    if jobs.is_empty() {
        println!("no jobs");
        return;
    }
    println!(
        "{:<36}  {:<7} {:<10} {:>8} {:>8} {:>8} {:>8}  SUBMITTED",
        "JOB", "ACTION", "STATE", "MATCHED", "DONE", "SKIPPED", "FAILED"
    );
    for job in jobs {
        let c = job.counts;
        println!(
            "{:<36}  {:<7} {:<10} {:>8} {:>8} {:>8} {:>8}  {}",
            job.job_id,
            job.action.as_str(),
            job.state.as_str(),
            c.matched,
            c.done,
            c.skipped,
            c.failed,
            when(job.created_at_ms)
        );
    }
}

/// What a prune of unreferenced components did.
fn print_pruned(pruned: &keel_host::core::retention::Pruned, json: bool) {
    if json {
        println!("{}", serde_json::to_value(pruned).expect("a prune encodes"));
        return;
    }
    let verb = if pruned.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    println!(
        "{verb} {} component{} ({} bytes); kept {} that a deployment or a run names, {} stored within the grace",
        pruned.components.len(),
        if pruned.components.len() == 1 {
            ""
        } else {
            "s"
        },
        pruned.bytes,
        pruned.referenced,
        pruned.recent
    );
    for hash in &pruned.components {
        println!("  {hash}");
    }
}

/// A run's streams: one line each.
fn print_streams(streams: &[keel_server::wire::StreamView], json: bool) {
    if json {
        println!("{}", json!(streams));
        return;
    }
    if streams.is_empty() {
        println!("no streams");
        return;
    }
    println!("{:<32} {:>8} {:>10}  STATE", "STREAM", "CHUNKS", "BYTES");
    for s in streams {
        let state = if s.closed { "closed" } else { "open" };
        println!("{:<32} {:>8} {:>10}  {state}", s.name, s.chunks, s.bytes);
    }
}

/// A reply to a payload delivered with an ID, or that there is none yet.
fn print_hook_reply(reply: &keel_server::wire::ReplyView, json: bool) {
    if json {
        println!("{}", json!(reply));
        return;
    }
    println!("run: {}", reply.run_id);
    println!(
        "payload ID: {} (payload {} of hook {})",
        reply.payload_id, reply.index, reply.token
    );
    match &reply.reply {
        Some(value) => println!("reply: {value}"),
        None => {
            println!("reply: none yet (the workflow has not replied; wait with --wait DURATION)")
        }
    }
}

/// One chunk of a stream: its JSON line, or its value (a string as is) and
/// a line for a restart.
pub fn print_chunk(chunk: &keel_server::wire::ChunkView, json: bool) {
    if json {
        println!("{}", json!(chunk));
        return;
    }
    match (chunk.kind.as_str(), &chunk.value) {
        ("data", Some(Value::String(text))) => println!("{text}"),
        ("data", Some(value)) => println!("{value}"),
        ("restart", _) => println!(
            "-- step {} restarts (attempt {}): drop what its earlier attempts wrote above --",
            chunk.step_id.as_deref().unwrap_or("?"),
            chunk.attempt.unwrap_or_default()
        ),
        _ => {}
    }
}
