//! `keel store stats|purge`, `keel jobs …`, `keel limits …` and `keel
//! workers list`: what an operator reads and changes about a store as a
//! whole, each a call of keel's API.

use std::process::ExitCode;

use keel_server::wire::{
    JobList, JobView, LimitChange, LimitList, LimitRequest, LimitResetRequest, PurgeView,
    WorkerList,
};

use crate::args::{Cli, JobsCommand, LimitsCommand, StoreCommand};
use crate::connect::connect;
use crate::print;

/// `keel store stats` and `keel store purge`.
pub async fn store(cli: &Cli, command: &StoreCommand) -> anyhow::Result<ExitCode> {
    match command {
        // A migration runs where the store is, never through the API.
        StoreCommand::Migrate => return crate::migrate(cli).await,
        StoreCommand::Stats => {
            let client = connect(cli, true).await?;
            let stats = client.get(&["v1", "store", "stats"], &[]).await?;
            print::print_stats(&stats, cli.json);
        }
        StoreCommand::Purge => {
            let client = connect(cli, false).await?;
            let purged: PurgeView = client.post(&["v1", "store", "purge"], &[], &()).await?;
            print::print_purged(&purged, cli.json);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `keel jobs …`.
pub async fn jobs(cli: &Cli, command: &JobsCommand) -> anyhow::Result<ExitCode> {
    let read = matches!(command, JobsCommand::List { .. } | JobsCommand::Show { .. });
    let client = connect(cli, read).await?;
    let job: JobView = match command {
        JobsCommand::List { limit } => {
            let query = [("limit", limit.to_string())];
            let list: JobList = client.get(&["v1", "jobs"], &query).await?;
            print::print_jobs(&list.jobs, cli.json);
            return Ok(ExitCode::SUCCESS);
        }
        JobsCommand::Show { job_id } => client.get(&["v1", "jobs", job_id], &[]).await?,
        JobsCommand::Cancel { job_id } => {
            client
                .post(&["v1", "jobs", job_id, "cancel"], &[], &())
                .await?
        }
    };
    Ok(job_answer(&job, cli.json))
}

/// A bulk job: failure when it failed on any run.
pub fn job_answer(job: &JobView, json: bool) -> ExitCode {
    print::print_job(job, json);
    match job.counts.failed {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// `keel limits …`: the concurrency groups, and the runs a change started.
pub async fn limits(cli: &Cli, command: &LimitsCommand) -> anyhow::Result<ExitCode> {
    let client = connect(cli, matches!(command, LimitsCommand::List)).await?;
    let change = match command {
        LimitsCommand::List => {
            let list: LimitList = client.get(&["v1", "limits"], &[]).await?;
            LimitChange {
                limits: list.limits,
                started: Vec::new(),
            }
        }
        LimitsCommand::Set {
            workflow,
            key,
            limit,
        } => {
            let body = LimitRequest {
                key: key.clone(),
                limit: *limit,
            };
            client.post(&["v1", "limits", workflow], &[], &body).await?
        }
        LimitsCommand::Reset { workflow, key } => {
            let body = LimitResetRequest { key: key.clone() };
            client
                .post(&["v1", "limits", workflow, "reset"], &[], &body)
                .await?
        }
    };
    print::print_limits(&change.limits, &change.started, cli.json);
    Ok(ExitCode::SUCCESS)
}

/// `keel workers list`.
pub async fn workers(cli: &Cli) -> anyhow::Result<ExitCode> {
    let client = connect(cli, true).await?;
    let list: WorkerList = client.get(&["v1", "workers"], &[]).await?;
    print::workers(&list.workers, cli.json);
    Ok(ExitCode::SUCCESS)
}
