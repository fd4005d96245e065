//! How runs print: one run, a page of them, a run's result, and `runs show`'s
//! detail with its timeline.

use keel_host::core::flow::{RunSlot, SlotState};
use keel_host::core::journal::{Entry, entry_to_json, excerpt};
use keel_host::core::timeline::{RowKind, RowStatus, timeline};
use keel_host::core::{RunRecord, RunStatus};
use keel_server::wire::{ChildView, RunView};
use serde_json::{Value, json};

use super::{now_ms, took, when};

pub(crate) fn print_result(run: &RunRecord, json: bool) {
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
pub(crate) fn print_run_page(runs: &[RunRecord], next_cursor: Option<&str>, json: bool) {
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
pub(crate) fn stream_runs(runs: &[RunRecord], json: bool, header: &mut bool) {
    if json {
        for run in runs {
            println!("{}", run_json(run));
        }
        return;
    }
    if runs.is_empty() {
        return;
    }
    // Schedule fires' IDs are longer than a UUID's 36 characters.
    let width = runs
        .iter()
        .map(|r| r.run_id.len())
        .max()
        .unwrap_or(0)
        .max(36);
    if std::mem::take(header) {
        println!(
            "{:<width$}  {:<10} {:<24} {:<24} {:>12}",
            "RUN", "STATUS", "WORKFLOW", "STARTED", "DURATION"
        );
    }
    let now = now_ms();
    for run in runs {
        let duration = match (run.status, run.wake_at_ms) {
            // Not started: how long until it starts.
            (RunStatus::Scheduled, Some(at)) => format!("in {}", took(at.saturating_sub(now))),
            (status, _) if status.is_final() => {
                took(run.updated_at_ms.saturating_sub(run.created_at_ms))
            }
            _ => took(now.saturating_sub(run.created_at_ms)),
        };
        println!(
            "{:<width$}  {:<10} {:<24} {:<24} {:>12}",
            run.run_id,
            run.status.as_str(),
            excerpt(&run.workflow, 24),
            when(run.created_at_ms),
            duration
        );
    }
}

/// A run as the API spells it, with the CLI's hint beside a failure.
pub(crate) fn run_json(run: &RunRecord) -> Value {
    let mut value = json!(RunView::from(run));
    if let Some(e) = &run.error
        && let Some(hint) = crate::hints::hint(&crate::hints::run_failure(&run.run_id, e))
    {
        value["error"]["hint"] = json!(hint);
    }
    value
}

pub(crate) fn print_run(run: &RunRecord, json: bool) {
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
        (RunStatus::Paused, _) => println!(
            "paused: no code of it runs (payloads queue) until `keel runs resume {}`",
            run.run_id
        ),
        (RunStatus::Continued, _) => {
            let next = run.run_id.continued();
            println!("continued as new: run {next} goes on (`keel runs show {next}`)");
        }
        _ => {}
    }
}

/// What a waiting run waits on, a line each, with the command that moves
/// it on.
pub(crate) fn print_waits(waiting_on: &[keel_host::core::timeline::WaitingOn]) {
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
pub(crate) fn print_run_head(run: &RunRecord) {
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

pub(crate) fn show_run(
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
    println!("{}", since_admission(run, now));
    let rows = timeline(journal);
    if rows.is_empty() {
        println!(
            "timeline: {}",
            match run.status {
                RunStatus::Queued => "empty: the run waits for a slot of its concurrency group",
                RunStatus::Scheduled => "empty: the run has not started",
                _ => "nothing scheduled yet",
            }
        );
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
        // A child's row is its start; what it has come to is its own run's.
        let child = children
            .iter()
            .find(|c| row.kind == RowKind::Child && Some(&c.run_id) == row.run_id.as_ref());
        let status = match (&row.status, child) {
            (RowStatus::Completed, Some(c)) => c.status.map_or("gone", RunStatus::as_str),
            (RowStatus::Open, _) => "open",
            (RowStatus::Retrying, _) => "retrying",
            (RowStatus::Completed, None) if row.kind == RowKind::Child => "started",
            (RowStatus::Completed, None) => "completed",
            (RowStatus::Failed, _) => "failed",
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
            let ended = match a.lost_with {
                Some(_) => "was lost",
                None => "failed",
            };
            println!(
                "{:>5}attempt {} {ended} after {}: {}",
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

/// A run's place in its concurrency group, in words.
pub(crate) fn slot_line(slot: &RunSlot) -> String {
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

/// When the run was admitted and how long it has taken, or what it waits
/// for before it starts.
fn since_admission(run: &RunRecord, now: u64) -> String {
    let admitted = when(run.created_at_ms);
    match run.status {
        RunStatus::Scheduled => match run.wake_at_ms {
            Some(at) => format!(
                "admitted {admitted}, starts {} (in {})",
                when(at),
                took(at.saturating_sub(now))
            ),
            None => format!("admitted {admitted}, not started"),
        },
        RunStatus::Queued => format!(
            "admitted {admitted}, queued for {}",
            took(now.saturating_sub(run.created_at_ms))
        ),
        RunStatus::Paused => format!(
            "started {admitted}, paused for {} (`keel runs resume {}` goes on)",
            took(now.saturating_sub(run.updated_at_ms)),
            run.run_id
        ),
        status if status.is_final() => format!(
            "started {admitted}, took {}",
            took(run.updated_at_ms.saturating_sub(run.created_at_ms))
        ),
        _ => format!(
            "started {admitted}, running for {}",
            took(now.saturating_sub(run.created_at_ms))
        ),
    }
}

/// A run's queries: one line a query, `NAME  VALUE` (compact JSON), and
/// the journal position they hold at.
pub(crate) fn print_queries(view: &keel_server::wire::QueriesView, json: bool) {
    if json {
        println!("{}", serde_json::json!(view));
        return;
    }
    if view.queries.is_empty() {
        println!(
            "run {} sets no query (its workflow calls set_query to set one)",
            view.run_id
        );
        return;
    }
    let rows = view
        .queries
        .iter()
        .map(|(name, value)| vec![name.clone(), value.to_string()])
        .collect();
    super::table::print_table(&["query", "value"], &[], rows);
    println!("as of journal position {}", view.position);
}

/// One query's value: its JSON alone, for scripts.
pub(crate) fn print_query(view: &keel_server::wire::QueryView, json: bool) {
    match json {
        true => println!("{}", serde_json::json!(view)),
        false => println!("{}", view.value),
    }
}
