//! How each command's answer is printed: text for people, `--json` for
//! scripts. Journal entries use keel's one JSON shape.

use std::process::ExitCode;

use keel_host::SystemClock;
use keel_host::core::Clock;
use keel_host::core::{RunRecord, RunStatus};
use serde_json::{Value, json};

use crate::args::{Command, RunsCommand};
use crate::control::Reply;
use crate::report_error;

mod hooks;
mod operations;
mod runs;
mod schedules;

pub(crate) use hooks::print_chunk;
use hooks::{hook_json, print_event, print_hook, print_hook_reply, print_streams, print_webhooks};
pub(crate) use operations::{inspect, workers};
use operations::{
    print_deleted, print_deployment, print_deployments, print_job, print_jobs, print_limits,
    print_preview, print_pruned, print_stats,
};
use runs::{print_result, print_run, print_run_head, print_waits, run_json, show_run};
pub(crate) use runs::{print_run_page, stream_runs};
use schedules::{print_fires, print_schedule, print_schedules};

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
    }
}

pub(super) fn now_ms() -> u64 {
    SystemClock.now_ms()
}

pub(super) fn exit_for(run: &RunRecord) -> ExitCode {
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
