//! `keel deploy`, `keel deployments …` and `keel inspect NAME`: components
//! registered under names with their grants and limits, each a call of
//! keel's API.

use std::path::Path;
use std::process::ExitCode;

use keel_host::core::{Deployment, ErrorKind, GrantSpec};
use keel_server::wire::{ComponentView, DeploymentList, GrantRequest, PruneRequest};

use crate::args::{Cli, DeployArgs, DeploymentsCommand};
use crate::connect::connect;
use crate::print;
use crate::remote::{Client, RemoteError};
use crate::request::grants_of;

impl Client {
    /// The API's deployment of the component at `path`: uploaded unless
    /// the API has it and no grants are given.
    pub(crate) async fn ensure_deployed(
        &self,
        path: &Path,
        grants: Option<GrantSpec>,
    ) -> anyhow::Result<Deployment> {
        if grants.is_none() {
            let bytes = tokio::fs::read(path)
                .await
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
            let hash = keel_host::component::content_hash(&bytes);
            match self.get(&["v1", "deployments", &hash], &[]).await {
                Ok(deployment) => return Ok(deployment),
                Err(e) if RemoteError::is(&e, ErrorKind::DeploymentNotFound) => {}
                Err(e) => return Err(e),
            }
        }
        self.upload(path, &grant_query(grants.unwrap_or_default()))
            .await
    }
}

/// `keel deploy`.
pub async fn deploy(cli: &Cli, args: &DeployArgs) -> anyhow::Result<ExitCode> {
    let DeployArgs {
        component,
        name,
        step_memory,
        attempt_timeout,
        retention,
        no_grants,
        force,
    } = args;
    let grants = grants_of(cli)?;
    let mut query: Vec<(&str, String)> = Vec::new();
    query.extend(name.clone().map(|name| ("name", name)));
    match (*no_grants, grants.is_empty()) {
        (true, false) => anyhow::bail!(
            "--no-grants and --allow-* ask for opposite things; give one or the other"
        ),
        (true, true) => query.push(("no_grants", "true".into())),
        // No grants given: the name's are kept.
        (false, true) => {}
        (false, false) => query.extend(grant_query(grants)),
    }
    if *force {
        query.push(("force", "true".into()));
    }
    query.extend(step_memory.map(|mib| ("max_memory_mib", mib.to_string())));
    query.extend(attempt_timeout.map(|d| ("step_timeout_ms", d.as_millis().to_string())));
    query.extend(retention.map(|d| ("retention_ms", d.as_millis().to_string())));
    let component = std::path::absolute(component)
        .map_err(|e| anyhow::anyhow!("resolving {}: {e}", component.display()))?;
    let deployment = connect(cli, false)
        .await?
        .upload(&component, &query)
        .await?;
    print::print_deployment(&deployment, cli.json);
    Ok(ExitCode::SUCCESS)
}

/// `keel deployments …`.
pub async fn deployments(cli: &Cli, command: &DeploymentsCommand) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    let read = matches!(
        command,
        DeploymentsCommand::List | DeploymentsCommand::Show { .. }
    );
    let client = connect(cli, read).await?;
    match command {
        DeploymentsCommand::List => {
            let list: DeploymentList = client.get(&["v1", "deployments"], &[]).await?;
            print::print_deployments(&list.deployments, json);
        }
        DeploymentsCommand::Show { name } => {
            let deployment: Deployment = client.get(&["v1", "deployments", name], &[]).await?;
            print::print_deployment(&deployment, json);
        }
        DeploymentsCommand::Grant { name, replace } => {
            let grants = grants_of(cli)?;
            let body = GrantRequest {
                http: grants.http,
                dirs: grants.dirs,
                env: grants.env,
                replace: *replace,
            };
            let changed: DeploymentList = client
                .post(&["v1", "deployments", name, "grants"], &[], &body)
                .await?;
            print::print_deployments(&changed.deployments, json);
        }
        DeploymentsCommand::Upgrade {
            name,
            to,
            dry_run,
            ramp,
            detach,
        } => {
            let body = keel_server::wire::UpgradeRequest {
                to: to.clone(),
                dry_run: *dry_run,
                ramp: *ramp,
            };
            let job: keel_server::wire::JobView = client
                .post(&["v1", "deployments", name, "upgrade"], &[], &body)
                .await?;
            let job = match detach {
                true => job,
                false => client.job_ended(&job.job_id).await?,
            };
            return Ok(super::operations::job_answer(&job, json));
        }
        DeploymentsCommand::Prune { grace, dry_run } => {
            let body = PruneRequest {
                grace_ms: Some(grace.as_millis() as u64),
                dry_run: *dry_run,
            };
            let pruned = client
                .post(&["v1", "components", "prune"], &[], &body)
                .await?;
            print::print_pruned(&pruned, json);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What the build a deployment name or hash stands for exports (`keel
/// inspect NAME`).
pub async fn inspect(cli: &Cli, target: &str) -> anyhow::Result<ComponentView> {
    connect(cli, true)
        .await?
        .get(&["v1", "deployments", target, "component"], &[])
        .await
}

/// Grants as the deploy endpoint's query takes them.
fn grant_query(grants: GrantSpec) -> Vec<(&'static str, String)> {
    let http = grants.http.into_iter().map(|h| ("allow_http", h));
    let dirs = grants.dirs.into_iter().map(|d| ("allow_dir", d));
    let env = grants.env.into_iter().map(|e| ("allow_env", e));
    http.chain(dirs).chain(env).collect()
}
