//! How the operator's answers print: deployments, components, workers,
//! limits, the store's figures, deletions, prunes and bulk jobs.

use keel_host::core::flow::LimitRow;
use keel_host::core::manifest::Durability;
use keel_host::core::{Deployment, RunRecord};
use keel_server::wire::{BulkPreviewView, JobView};
use serde_json::{Value, json};

use crate::args::{Command, RunsCommand};

use super::runs::stream_runs;
use super::table::print_table;
use super::{now_ms, took, when};

/// The concurrency groups and overrides, a line each, and the runs a
/// change started.
pub(crate) fn print_limits(limits: &[LimitRow], started: &[String], json: bool) {
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
    let rows = limits.iter().map(|row| {
        let limit = match row.overridden {
            Some(_) => format!("{}*", row.limit),
            None => row.limit.to_string(),
        };
        vec![
            row.workflow.clone(),
            row.key.as_deref().unwrap_or("(every key)").into(),
            limit,
            row.declared.map_or("-".into(), |d| d.to_string()),
            row.in_progress.to_string(),
            row.queued.to_string(),
        ]
    });
    print_table(
        &[
            "workflow",
            "key",
            "limit",
            "declared",
            "in progress",
            "queued",
        ],
        &[2, 3, 4, 5],
        rows.collect(),
    );
    if limits.iter().any(|r| r.overridden.is_some()) {
        println!("* set by an operator; `keel limits reset WORKFLOW [--key KEY]` removes it");
    }
}

/// Deployments, newest first.
pub(crate) fn print_deployments(deployments: &[Deployment], json: bool) {
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

pub(crate) fn print_deployment(d: &Deployment, json: bool) {
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
    println!(
        "retention: {}",
        match d.retention_ms {
            Some(ms) => format!("ended runs are kept {}", took(ms)),
            None => "the worker's (--run-retention; by default kept)".into(),
        }
    );
}

/// `keel inspect`: what a component exports, with its schemas.
pub(crate) fn inspect(component: &keel_server::wire::ComponentView, json: bool) {
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
        match w.durability {
            None => {}
            Some(Durability::EffectGated) => line += "  durability effect_gated",
            Some(Durability::Strict) => {
                line += "  durability strict (every step attempt's start durable)"
            }
            Some(Durability::Relaxed) => {
                line += "  durability relaxed (steps journaled at the run's next wait or end)"
            }
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
pub(crate) fn workers(workers: &[keel_server::wire::WorkerView], json: bool) {
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

/// What a deletion deleted.
pub(crate) fn print_deleted(deleted: &keel_host::core::retention::Deleted, json: bool) {
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
pub(crate) fn print_stats(stats: &keel_host::core::retention::StoreStats, json: bool) {
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
pub(crate) fn print_preview(command: &Command, preview: &BulkPreviewView, json: bool) {
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
pub(crate) fn print_job(job: &JobView, json: bool) {
    if json {
        println!("{}", serde_json::to_value(job).expect("a job encodes"));
        return;
    }
    let c = job.counts;
    println!("job       {}", job.job_id);
    println!("action    {}", job.action.as_str());
    println!("state     {}", job.state.as_str());
    let (done, failed) = match &job.upgrade {
        Some(upgrade) => {
            let share = upgrade
                .ramp
                .map_or(String::new(), |r| format!(", {r}% of them"));
            println!(
                "upgrade   the live runs of `{}` to build {}{share}{}",
                upgrade.name,
                &upgrade.to[..12.min(upgrade.to.len())],
                if upgrade.dry_run {
                    " (dry run: none moved)"
                } else {
                    ""
                }
            );
            (
                if upgrade.dry_run {
                    "would move"
                } else {
                    "moved"
                },
                "left pinned",
            )
        }
        None => ("done", "failed"),
    };
    println!(
        "runs      {} matched: {} {done}, {} skipped, {} {failed}",
        c.matched, c.done, c.skipped, c.failed
    );
    println!("submitted {}", when(job.created_at_ms));
    if let Some(at) = job.finished_at_ms {
        println!("ended     {}", when(at));
    }
    if let Some(worker) = &job.worker {
        println!("worker    {worker}");
    }
    let label = if job.upgrade.is_some() {
        "pinned"
    } else {
        "failed"
    };
    for failure in &job.errors {
        println!("{label:<9} {}: {}", failure.run_id, failure.error);
    }
    if job.state == keel_host::core::bulk::JobState::Running {
        println!("`keel jobs show {}` shows its progress", job.job_id);
    } else if job.action == keel_host::core::bulk::BulkAction::Retry && c.done > 0 {
        println!("the retried runs are driven by the workers (`keel worker` if none runs)");
    }
}

/// Bulk jobs, newest first.
pub(crate) fn print_jobs(jobs: &[JobView], json: bool) {
    if json {
        println!("{}", serde_json::to_value(jobs).expect("jobs encode"));
        return;
    }
    if jobs.is_empty() {
        println!("no jobs");
        return;
    }
    let rows = jobs.iter().map(|job| {
        let c = job.counts;
        vec![
            job.job_id.to_string(),
            job.action.as_str().into(),
            job.state.as_str().into(),
            c.matched.to_string(),
            c.done.to_string(),
            c.skipped.to_string(),
            c.failed.to_string(),
            when(job.created_at_ms),
        ]
    });
    print_table(
        &[
            "job",
            "action",
            "state",
            "matched",
            "done",
            "skipped",
            "failed",
            "submitted",
        ],
        &[3, 4, 5, 6],
        rows.collect(),
    );
}

/// What a prune of unreferenced components did.
pub(crate) fn print_pruned(pruned: &keel_host::core::retention::Pruned, json: bool) {
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
