//! The request each command makes of a store, for the commands a running
//! worker can answer too.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::args::{Command, EventsCommand, HooksCommand, RunsCommand};
use crate::control::Request;

/// The request a command makes of the store, for the commands a running
/// worker can answer too.
pub fn request_of(command: &Command) -> anyhow::Result<Option<Request>> {
    let absolute =
        |p: &Path| std::path::absolute(p).with_context(|| format!("resolving {}", p.display()));
    Ok(Some(match command {
        Command::Run {
            component,
            workflow,
            input,
            metadata,
        } => Request::Start {
            component: absolute(component)?,
            workflow: workflow.clone(),
            input: input.clone(),
            token: None,
            retention_ms: None,
            metadata: None,
            additional_metadata: json_arg("--metadata", metadata)?,
            detach: false,
        },
        Command::Start {
            component,
            workflow,
            input,
            token,
            retention,
            metadata,
            additional_metadata,
            detach,
        } => Request::Start {
            component: absolute(component)?,
            workflow: workflow.clone(),
            input: input.clone(),
            token: token.clone(),
            retention_ms: retention.map(|r| r.as_millis() as u64),
            metadata: json_arg("--metadata", metadata)?,
            additional_metadata: json_arg("--additional-metadata", additional_metadata)?,
            detach: *detach,
        },
        Command::Hooks {
            command: HooksCommand::Resume { token, payload },
        } => Request::Resume {
            token: token.clone(),
            payload: payload.clone(),
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
            command: RunsCommand::Cancel { run_id },
        } => Request::Cancel {
            run_id: run_id.clone(),
        },
        Command::Runs {
            command: RunsCommand::Result { run_id, wait },
        } => Request::Result {
            run_id: run_id.clone(),
            wait: *wait,
        },
        Command::Runs {
            command: RunsCommand::List,
        } => Request::ListRuns,
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
            payload: payload.clone(),
            metadata: metadata.clone(),
        },
        Command::Events {
            command: EventsCommand::List,
        } => Request::ListEvents,
        _ => return Ok(None),
    }))
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
