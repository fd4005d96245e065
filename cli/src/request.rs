//! The request each command makes of keel's API (sent by
//! [`crate::remote::Client`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use keel_host::core::{Clock, GrantSpec, RunFilter, StepLimits};

use crate::args::{
    Cli, Command, DeploymentsCommand, EventsCommand, HooksCommand, JobsCommand, LimitsCommand,
    RunFilterArgs, RunsCommand, ScheduleArgs, SchedulesCommand, StoreCommand, TokensCommand,
    WebhooksCommand,
};
use crate::control::{Request, StartSpec};
use keel_server::wire::{ScheduleRequest, TokenRequest, WebhookRequest};

/// The request a command makes of the store, for the commands a running
/// worker can answer too.
pub fn request_of(cli: &Cli) -> anyhow::Result<Request> {
    let grants = grants_of(cli)?;
    let implicit_grants = (!grants.is_empty()).then(|| grants.clone());
    let target = |component: &str| -> anyhow::Result<(Option<PathBuf>, Option<String>)> {
        let path = Path::new(component);
        if component.ends_with(".wasm") || path.is_file() {
            let absolute = std::path::absolute(path)
                .with_context(|| format!("resolving {}", path.display()))?;
            Ok((Some(absolute), None))
        } else {
            Ok((None, Some(component.to_string())))
        }
    };
    // A start with the options every start has; the caller adds the rest.
    // The CLI picks the run ID, so that it can name the run if a worker
    // dies before answering.
    let start = |component: &str, workflow: &str, input: &str| -> anyhow::Result<StartSpec> {
        let (component, deployment) = target(component)?;
        Ok(StartSpec {
            component,
            deployment,
            grants: implicit_grants.clone(),
            run_id: Some(uuid::Uuid::now_v7().to_string()),
            workflow: workflow.to_string(),
            input: text_arg("--input", input)?,
            token: None,
            retention_ms: None,
            metadata: None,
            additional_metadata: None,
            detach: false,
            start_at_ms: None,
            delay_ms: None,
            priority: None,
            timeout_ms: None,
            attributes: Default::default(),
        })
    };
    Ok(match &cli.command {
        Command::Run {
            component,
            workflow,
            input,
            metadata,
            priority,
            timeout,
            attr,
        } => {
            let base = start(component, workflow, input)?;
            Request::Start(StartSpec {
                additional_metadata: json_arg("--metadata", metadata)?,
                priority: *priority,
                timeout_ms: timeout.map(|t| t.as_millis() as u64),
                attributes: attr.iter().cloned().collect(),
                ..base
            })
        }
        Command::Start {
            component,
            workflow,
            input,
            run_id,
            token,
            retention,
            metadata,
            additional_metadata,
            detach,
            delay,
            start_at,
            priority,
            timeout,
            attr,
        } => {
            let base = start(component, workflow, input)?;
            Request::Start(StartSpec {
                start_at_ms: *start_at,
                delay_ms: delay.map(|d| d.as_millis() as u64),
                run_id: run_id.clone().or(base.run_id.clone()),
                token: token.clone(),
                retention_ms: retention.map(|r| r.as_millis() as u64),
                metadata: json_arg("--metadata", metadata)?,
                additional_metadata: json_arg("--additional-metadata", additional_metadata)?,
                detach: *detach,
                priority: *priority,
                timeout_ms: timeout.map(|t| t.as_millis() as u64),
                attributes: attr.iter().cloned().collect(),
                ..base
            })
        }
        Command::Hooks {
            command:
                HooksCommand::Resume {
                    token,
                    payload,
                    payload_id,
                    wait_reply,
                },
        } => Request::Resume {
            token: token.clone(),
            payload: text_arg("--payload", payload)?,
            payload_id: payload_id.clone(),
            wait_reply_ms: wait_reply.map(|d| d.as_millis() as u64),
        },
        Command::Hooks {
            command:
                HooksCommand::Reply {
                    token,
                    payload_id,
                    wait,
                },
        } => Request::HookReply {
            token: token.clone(),
            payload_id: payload_id.clone(),
            wait_ms: wait.map_or(0, |d| d.as_millis() as u64),
        },
        Command::Runs {
            command: RunsCommand::Streams { run_id },
        } => Request::Streams {
            run_id: run_id.clone(),
        },
        Command::Runs {
            command: RunsCommand::Stream { run_id, name, from },
        } => Request::Chunks {
            run_id: run_id.clone(),
            stream: name.clone(),
            from: *from,
        },
        Command::Hooks {
            command: HooksCommand::Get { token },
        } => Request::GetHook {
            token: token.clone(),
        },
        Command::Hooks {
            command: HooksCommand::List,
        } => Request::ListHooks,
        Command::Runs {
            command: RunsCommand::Get { run_id },
        } => Request::GetRun {
            run_id: run_id.clone(),
        },
        Command::Runs {
            command:
                RunsCommand::Cancel {
                    run_id,
                    reason,
                    force,
                    detach,
                },
        } => Request::Cancel {
            run_id: run_id.clone(),
            reason: reason.clone(),
            force: *force,
            wait: !*detach,
        },
        Command::Inspect { component } => Request::Inspect {
            target: component.clone(),
        },
        Command::Runs {
            command: RunsCommand::Retry { run_id, on },
        } => Request::Retry {
            run_id: run_id.clone(),
            on: on.clone(),
        },
        Command::Runs {
            command: RunsCommand::Delete { run_ids, cancel },
        } => Request::DeleteRuns {
            run_ids: run_ids.clone(),
            cancel: *cancel,
        },
        Command::Store {
            command: StoreCommand::Stats,
        } => Request::StoreStats,
        Command::Store {
            command: StoreCommand::Purge,
        } => Request::Purge,
        Command::Runs {
            command: RunsCommand::Result { run_id, wait },
        } => Request::Result {
            run_id: run_id.clone(),
            wait: *wait,
        },
        Command::Runs {
            command:
                RunsCommand::List {
                    filter,
                    limit,
                    before,
                    ..
                },
        } => Request::ListRuns {
            filter: run_filter(filter),
            limit: (*limit).min(keel_host::core::query::MAX_PAGE as u64) as usize,
            before: before.clone(),
        },
        Command::Runs {
            command:
                RunsCommand::Bulk {
                    action,
                    filter,
                    dry_run,
                    reason,
                    force,
                    detach,
                },
        } => Request::Bulk {
            action: (*action).into(),
            filter: run_filter(filter),
            reason: reason.clone(),
            force: *force,
            dry_run: *dry_run,
            wait: !*detach,
        },
        Command::Jobs {
            command: JobsCommand::List { limit },
        } => Request::ListJobs {
            limit: *limit as usize,
        },
        Command::Jobs {
            command: JobsCommand::Show { job_id },
        } => Request::ShowJob {
            job_id: job_id.clone(),
        },
        Command::Jobs {
            command: JobsCommand::Cancel { job_id },
        } => Request::CancelJob {
            job_id: job_id.clone(),
        },
        Command::Deploy {
            component,
            name,
            step_memory,
            attempt_timeout,
            retention,
            no_grants,
            force,
        } => Request::Deploy {
            component: std::path::absolute(component)
                .with_context(|| format!("resolving {}", component.display()))?,
            name: name.clone(),
            grants: match (*no_grants, grants.is_empty()) {
                (true, false) => anyhow::bail!(
                    "--no-grants and --allow-* ask for opposite things; give one or the other"
                ),
                (true, true) => Some(GrantSpec::default()),
                (false, true) => None,
                (false, false) => Some(grants),
            },
            force: *force,
            limits: StepLimits {
                max_memory_mib: *step_memory,
                step_timeout_ms: attempt_timeout.map(|d| d.as_millis() as u64),
            },
            retention_ms: retention.map(|d| d.as_millis() as u64),
        },
        Command::Deployments {
            command: DeploymentsCommand::List,
        } => Request::ListDeployments,
        Command::Deployments {
            command: DeploymentsCommand::Show { name },
        } => Request::ShowDeployment { name: name.clone() },
        Command::Deployments {
            command: DeploymentsCommand::Grant { name, replace },
        } => Request::Grant {
            target: name.clone(),
            grants,
            replace: *replace,
        },
        Command::Deployments {
            command: DeploymentsCommand::Prune { grace, dry_run },
        } => Request::PruneComponents {
            grace_ms: grace.as_millis() as u64,
            dry_run: *dry_run,
        },
        Command::Runs {
            command: RunsCommand::Show { run_id },
        } => Request::ShowRun {
            run_id: run_id.clone(),
        },
        Command::Events {
            command:
                EventsCommand::Push {
                    key,
                    payload,
                    metadata,
                },
        } => Request::PushEvent {
            key: key.clone(),
            payload: text_arg("--payload", payload)?,
            metadata: text_arg("--metadata", metadata)?,
        },
        Command::Events {
            command: EventsCommand::List,
        } => Request::ListEvents,
        Command::Schedules { command } => schedule_request(command)?,
        Command::Tokens { command } => token_request(command)?,
        Command::Webhooks { command } => webhook_request(command),
        Command::Limits { command } => match command {
            LimitsCommand::List => Request::ListLimits,
            LimitsCommand::Set {
                workflow,
                key,
                limit,
            } => Request::SetLimit {
                workflow: workflow.clone(),
                key: key.clone(),
                limit: *limit,
            },
            LimitsCommand::Reset { workflow, key } => Request::ResetLimit {
                workflow: workflow.clone(),
                key: key.clone(),
            },
        },
        Command::Completions { .. }
        | Command::New { .. }
        | Command::Test { .. }
        | Command::Crashtest { .. }
        | Command::Bench(_)
        | Command::Replay { .. }
        | Command::Demo { .. }
        | Command::Store { .. }
        | Command::Worker { .. }
        | Command::Serve { .. }
        | Command::Workers { .. }
        | Command::Journal { .. } => {
            anyhow::bail!("this command is not a request a worker or server answers")
        }
    })
}

/// The request of a `keel tokens` command.
fn token_request(command: &TokensCommand) -> anyhow::Result<Request> {
    use keel_host::core::access::Scope;
    let TokensCommand::Create {
        resume_hook,
        read_run,
        start,
        hook_token,
        run_id,
        ttl,
    } = command;
    let scope = match (resume_hook, read_run, start) {
        (Some(token), None, None) => Scope::ResumeHook {
            token: token.clone(),
        },
        (None, Some(run_id), None) => Scope::ReadRun {
            run_id: run_id.clone(),
        },
        (None, None, Some(workflow)) => Scope::StartWorkflow {
            workflow: workflow.clone(),
            hook_token: hook_token.clone(),
            run_id: run_id.clone(),
        },
        _ => anyhow::bail!(
            "a token grants exactly one thing: give one of --resume-hook, --read-run or --start"
        ),
    };
    Ok(Request::CreateToken(TokenRequest {
        scope,
        ttl_ms: Some(ttl.as_millis() as u64),
    }))
}

/// The request of a `keel webhooks` command.
fn webhook_request(command: &WebhooksCommand) -> Request {
    match command {
        WebhooksCommand::Create {
            id,
            hook,
            event,
            scheme,
            header,
            tolerance,
            secret,
        } => Request::CreateWebhook(WebhookRequest {
            id: id.clone(),
            hook: hook.clone(),
            event: event.clone(),
            scheme: *scheme,
            header: header.clone(),
            tolerance_s: tolerance.map(|t| t.as_secs()),
            secret: secret.clone(),
        }),
        WebhooksCommand::List => Request::ListWebhooks,
        WebhooksCommand::Show { id } => Request::ShowWebhook { id: id.clone() },
        WebhooksCommand::Delete { id } => Request::DeleteWebhook { id: id.clone() },
    }
}

/// The request of a `keel schedules` command.
fn schedule_request(command: &SchedulesCommand) -> anyhow::Result<Request> {
    let name = |n: &String| n.clone();
    Ok(match command {
        SchedulesCommand::Create(args) => Request::CreateSchedule(schedule_body(args)?),
        SchedulesCommand::Update(args) => Request::UpdateSchedule(schedule_body(args)?),
        SchedulesCommand::List => Request::ListSchedules,
        SchedulesCommand::Show { name: n } => Request::ShowSchedule { name: name(n) },
        SchedulesCommand::Pause { name: n, note } => Request::PauseSchedule {
            name: name(n),
            note: note.clone(),
        },
        SchedulesCommand::Resume { name: n, note } => Request::ResumeSchedule {
            name: name(n),
            note: note.clone(),
        },
        SchedulesCommand::Trigger { name: n } => Request::TriggerSchedule { name: name(n) },
        SchedulesCommand::Backfill { name: n, from, to } => Request::BackfillSchedule {
            name: name(n),
            from_ms: *from,
            to_ms: *to,
        },
        SchedulesCommand::Delete { name: n } => Request::DeleteSchedule { name: name(n) },
    })
}

/// The body of `schedules create` and `update`.
fn schedule_body(args: &ScheduleArgs) -> anyhow::Result<ScheduleRequest> {
    let input = text_arg("--input", &args.input)?;
    let input = serde_json::from_str(&input).map_err(|e| keel_host::Error::InvalidInput {
        reason: format!("--input: {e}"),
    })?;
    Ok(ScheduleRequest {
        name: Some(args.name.clone()),
        workflow: args.workflow.clone(),
        deployment: args.deployment.clone(),
        input,
        additional_metadata: None,
        cron: args.cron.clone(),
        tz: args.tz.clone(),
        every_ms: args.every.map(|d| d.as_millis() as u64),
        offset_ms: args.offset.map(|d| d.as_millis() as u64),
        overlap: Some(
            args.overlap
                .parse()
                .map_err(|e: String| anyhow::anyhow!(e))?,
        ),
        catchup_window_ms: Some(args.catchup_window.as_millis() as u64),
        paused: args.paused,
        note: None,
        start_at_ms: args.start_at,
        end_at_ms: args.end_at,
    })
}

/// The grants given on the command line, as a deployment records them.
pub(crate) fn grants_of(cli: &Cli) -> Result<GrantSpec, keel_host::Error> {
    for grant in &cli.allow_http {
        GrantSpec::check_http(grant).map_err(|reason| keel_host::Error::InvalidGrant { reason })?;
    }
    Ok(GrantSpec {
        http: cli.allow_http.clone(),
        dirs: cli
            .allow_dir
            .iter()
            .map(|d| {
                std::path::absolute(d)
                    .unwrap_or_else(|_| d.clone())
                    .display()
                    .to_string()
            })
            .collect(),
        env: cli.allow_env.clone(),
    })
}

/// A JSON argument as given: the text itself, `@FILE` for a file's
/// contents, or `-` for standard input (for inputs too large for a command
/// line).
pub fn text_arg(flag: &str, value: &str) -> anyhow::Result<String> {
    if value == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .with_context(|| format!("{flag} -: reading standard input"))?;
        return Ok(text);
    }
    match value.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("{flag} @{path}: reading the file")),
        None => Ok(value.to_string()),
    }
}

/// An optional JSON argument, parsed.
fn json_arg(flag: &str, value: &Option<String>) -> Result<Option<Value>, keel_host::Error> {
    value
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| keel_host::Error::InvalidInput {
            reason: format!("{flag}: {e}"),
        })
}

/// The filter the listing flags select; `--since` counts back from now.
fn run_filter(args: &RunFilterArgs) -> RunFilter {
    RunFilter {
        statuses: args.status.clone(),
        workflow: args.workflow.clone(),
        schedule: args.schedule.clone(),
        attributes: args.attr.iter().cloned().collect(),
        since_ms: args.since.map(|d| {
            keel_host::SystemClock
                .now_ms()
                .saturating_sub(d.as_millis() as u64)
        }),
        ..RunFilter::default()
    }
}
