//! `keel schedules …`: workflows started on time, each a call of keel's
//! API.

use std::process::ExitCode;

use keel_server::wire::{
    BackfillRequest, FireList, FireView, PauseRequest, ScheduleList, ScheduleRequest, ScheduleView,
};

use crate::args::{Cli, ScheduleArgs, SchedulesCommand};
use crate::connect::connect;
use crate::print;
use crate::request::json_text_arg;

/// `keel schedules …`.
pub async fn schedules(cli: &Cli, command: &SchedulesCommand) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    let read = matches!(
        command,
        SchedulesCommand::List | SchedulesCommand::Show { .. }
    );
    let client = connect(cli, read).await?;
    let schedule: ScheduleView = match command {
        SchedulesCommand::Create(args) => {
            client
                .post(&["v1", "schedules"], &[], &schedule_body(args)?)
                .await?
        }
        SchedulesCommand::Update(args) => {
            client
                .put(&["v1", "schedules", &args.name], &schedule_body(args)?)
                .await?
        }
        SchedulesCommand::List => {
            let list: ScheduleList = client.get(&["v1", "schedules"], &[]).await?;
            print::print_schedules(&list.schedules, json);
            return Ok(ExitCode::SUCCESS);
        }
        SchedulesCommand::Show { name } => client.get(&["v1", "schedules", name], &[]).await?,
        SchedulesCommand::Pause { name, note } | SchedulesCommand::Resume { name, note } => {
            let verb = match command {
                SchedulesCommand::Pause { .. } => "pause",
                _ => "resume",
            };
            let body = PauseRequest { note: note.clone() };
            client
                .post(&["v1", "schedules", name, verb], &[], &body)
                .await?
        }
        SchedulesCommand::Trigger { name } => {
            let fire: FireView = client
                .post(
                    &["v1", "schedules", name, "trigger"],
                    &[],
                    &serde_json::json!({}),
                )
                .await?;
            print::print_fires(&[fire], json);
            return Ok(ExitCode::SUCCESS);
        }
        SchedulesCommand::Backfill { name, from, to } => {
            let body = BackfillRequest {
                from_ms: *from,
                to_ms: *to,
            };
            let fires: FireList = client
                .post(&["v1", "schedules", name, "backfill"], &[], &body)
                .await?;
            print::print_fires(&fires.fires, json);
            return Ok(ExitCode::SUCCESS);
        }
        SchedulesCommand::Delete { name } => client.delete(&["v1", "schedules", name], &[]).await?,
    };
    print::print_schedule(&schedule, &cli.command, json);
    Ok(ExitCode::SUCCESS)
}

/// The body of `schedules create` and `update`.
fn schedule_body(args: &ScheduleArgs) -> anyhow::Result<ScheduleRequest> {
    let input = json_text_arg("--input", &args.input)?;
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
