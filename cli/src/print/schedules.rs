//! How schedules and their fires print.

use keel_host::core::schedule::FireOutcome;
use keel_server::wire::{FireView, ScheduleView};
use serde_json::json;

use crate::args::Command;

use super::table::print_table;
use super::{took, when};

pub(crate) fn print_schedules(list: &[ScheduleView], json: bool) {
    if json {
        println!("{}", json!(list));
        return;
    }
    if list.is_empty() {
        println!("no schedules; create one with `keel schedules create NAME WORKFLOW --cron EXPR`");
        return;
    }
    let rows = list.iter().map(|s| {
        vec![
            s.name.clone(),
            s.workflow.clone(),
            s.description.clone(),
            s.next_fire_ms
                .filter(|_| !s.paused)
                .map_or("-".into(), when),
            s.overlap.as_str().into(),
            if s.paused { "paused" } else { "active" }.into(),
        ]
    });
    print_table(
        &["name", "workflow", "spec", "next fire", "overlap", "state"],
        &[],
        rows.collect(),
    );
}

/// A schedule: its settings, next fire times and latest fires.
pub(crate) fn print_schedule(s: &ScheduleView, command: &Command, json: bool) {
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

pub(crate) fn print_fire(f: &FireView) {
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
pub(crate) fn print_fires(fires: &[FireView], json: bool) {
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
