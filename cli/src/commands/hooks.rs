//! `keel hooks …`, `keel events …`, `keel tokens …` and `keel webhooks …`:
//! what moves a waiting run on from outside (a payload to its hook, an
//! event, a delivery) and the tokens that let others do it, each a call of
//! keel's API.

use std::process::ExitCode;

use keel_host::core::EventRecord;
use keel_host::core::access::Scope;
use keel_server::wire::{
    EventList, EventView, HookList, HookView, ReplyView, RunView, TokenRequest, TokenView,
    WebhookList, WebhookRequest, WebhookView,
};

use crate::args::{Cli, EventsCommand, HooksCommand, TokensCommand, WebhooksCommand};
use crate::connect::connect;
use crate::print;
use crate::remote::WAIT_MS;
use crate::request::json_text_arg;

/// `keel hooks …`.
pub async fn hooks(cli: &Cli, command: &HooksCommand) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    let read = matches!(command, HooksCommand::Get { .. } | HooksCommand::List);
    let client = connect(cli, read).await?;
    match command {
        HooksCommand::Resume {
            token,
            payload,
            payload_id,
            wait_reply,
        } => {
            let payload = json_text_arg("--payload", payload)?;
            let mut query = vec![
                ("wait_ms", WAIT_MS.to_string()),
                ("return_on_wait", "true".into()),
            ];
            query.extend(payload_id.clone().map(|id| ("payload_id", id)));
            let wait_reply_ms = wait_reply.map(|d| d.as_millis() as u64);
            if let Some(ms) = wait_reply_ms {
                query.push(("wait_reply_ms", ms.min(WAIT_MS).to_string()));
            }
            let resumed: RunView = client
                .post(&["v1", "hooks", token, "resume"], &query, &payload)
                .await?;
            if wait_reply_ms.is_some() {
                let payload_id = resumed.payload_id.clone().unwrap_or_default();
                let reply = resumed.reply.clone();
                let run = resumed.into();
                return Ok(print::print_replied(
                    &run,
                    &payload_id,
                    reply.as_ref(),
                    json,
                ));
            }
            let answer = client.until_it_waits(resumed).await?;
            print::print_run_answer(&answer.run, &answer.waiting_on, true, json);
            Ok(ExitCode::SUCCESS)
        }
        HooksCommand::Reply {
            token,
            payload_id,
            wait,
        } => {
            let wait_ms = wait.map_or(0, |d| d.as_millis() as u64);
            let query = [("wait_ms", wait_ms.min(WAIT_MS).to_string())];
            let path = ["v1", "hooks", token, "replies", payload_id];
            let reply: ReplyView = client.get(&path, &query).await?;
            print::print_hook_reply(&reply, json);
            Ok(match reply.reply {
                Some(_) => ExitCode::SUCCESS,
                None => ExitCode::from(2),
            })
        }
        HooksCommand::Get { token } => {
            let hook: HookView = client.get(&["v1", "hooks", token], &[]).await?;
            print::print_hook(&hook.into(), json);
            Ok(ExitCode::SUCCESS)
        }
        HooksCommand::List => {
            let list: HookList = client.get(&["v1", "hooks"], &[]).await?;
            let hooks: Vec<_> = list.hooks.into_iter().map(Into::into).collect();
            print::print_hooks(&hooks, json);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `keel events …`.
pub async fn events(cli: &Cli, command: &EventsCommand) -> anyhow::Result<ExitCode> {
    let client = connect(cli, matches!(command, EventsCommand::List)).await?;
    match command {
        EventsCommand::Push {
            key,
            payload,
            metadata,
        } => {
            let body = serde_json::json!({
                "payload": json_text_arg("--payload", payload)?,
                "metadata": json_text_arg("--metadata", metadata)?,
            });
            let event: EventView = client.post(&["v1", "events", key], &[], &body).await?;
            print_events(&[event.into()], cli.json, true);
        }
        EventsCommand::List => {
            let list: EventList = client.get(&["v1", "events"], &[]).await?;
            // The API lists newest first; the CLI oldest first.
            let events: Vec<EventRecord> = list.events.into_iter().rev().map(Into::into).collect();
            print_events(&events, cli.json, false);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Events, one per line; with `--json` the one pushed as an object, a
/// listing as an array.
fn print_events(events: &[EventRecord], json: bool, one: bool) {
    match (json, one) {
        (true, true) => print::print_value(&events[0]),
        (true, false) => print::print_value(&events),
        (false, _) => events.iter().for_each(print::print_event),
    }
}

/// `keel tokens create`.
pub async fn tokens(cli: &Cli, command: &TokensCommand) -> anyhow::Result<ExitCode> {
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
    let request = TokenRequest {
        scope,
        ttl_ms: Some(ttl.as_millis() as u64),
    };
    let client = connect(cli, false).await?;
    let token: TokenView = client.post(&["v1", "tokens"], &[], &request).await?;
    print::print_token(&token, cli.json);
    Ok(ExitCode::SUCCESS)
}

/// `keel webhooks …`.
pub async fn webhooks(cli: &Cli, command: &WebhooksCommand) -> anyhow::Result<ExitCode> {
    let read = matches!(
        command,
        WebhooksCommand::List | WebhooksCommand::Show { .. }
    );
    let client = connect(cli, read).await?;
    let one: WebhookView = match command {
        WebhooksCommand::Create {
            id,
            hook,
            event,
            unheld_event,
            scheme,
            header,
            tolerance,
            secret,
        } => {
            let request = WebhookRequest {
                id: id.clone(),
                hook: hook.clone(),
                event: event.clone(),
                unheld_event: unheld_event.clone(),
                scheme: *scheme,
                header: header.clone(),
                tolerance_s: tolerance.map(|t| t.as_secs()),
                secret: secret.clone(),
            };
            client.post(&["v1", "webhooks"], &[], &request).await?
        }
        WebhooksCommand::List => {
            let list: WebhookList = client.get(&["v1", "webhooks"], &[]).await?;
            print::print_webhooks(&list.webhooks, cli.json, false);
            return Ok(ExitCode::SUCCESS);
        }
        WebhooksCommand::Show { id } => client.get(&["v1", "webhooks", id], &[]).await?,
        WebhooksCommand::Delete { id } => client.delete(&["v1", "webhooks", id], &[]).await?,
    };
    print::print_webhooks(std::slice::from_ref(&one), cli.json, true);
    Ok(ExitCode::SUCCESS)
}
