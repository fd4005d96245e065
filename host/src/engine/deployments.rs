//! Deployments: a component registered once under a name with its steps'
//! grants and limits; starts that name a workflow (resolved to the latest
//! deployment exporting it, a name or a pinned hash); and the settings the
//! steps of a run get from the deployment of the component it is pinned to.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use keel_core::deployment::{self, Target};
use keel_core::manifest::WorkflowInfo;
use keel_core::{Deployment, GrantSpec, RunRecord, StepLimits};

use super::{Keel, StartOptions, lock};
use crate::component::Loaded;
use crate::sandbox::Grants;
use crate::steps::StepSettings;
use crate::{Error, Result};

/// What a deployment records besides its component.
#[derive(Clone, Debug, Default)]
pub struct DeploySpec {
    /// The name starts refer to; default: the file's stem.
    pub name: Option<String>,
    /// What its steps may reach; `None` keeps what the name's latest
    /// deployment grants (nothing for a new name).
    pub grants: Option<GrantSpec>,
    pub limits: StepLimits,
    /// How long its runs are kept once ended. Set, it becomes the
    /// retention of every deployment of the name; unset, the name's
    /// latest deployment's is kept.
    pub retention_ms: Option<u64>,
    /// Deploy a build the name had before another even so, moving the
    /// name back to it (refused with `OlderBuild` otherwise).
    pub force: bool,
}

impl Keel {
    /// Deploys a component: stores its bytes by hash, compiles it once,
    /// subscribes its workflows to their events and records the deployment
    /// (replacing an earlier deployment of the same bytes). Durable on
    /// return; every engine sharing the store sees it. A build the name had
    /// before a later one is refused (`OlderBuild`) unless `force`d. A
    /// refusal changes nothing: every check (grants, limits, name, the
    /// component, the schedules it declares) comes before the first write
    /// of a deployment or schedule.
    pub async fn deploy(
        &self,
        origin: &Path,
        bytes: &[u8],
        spec: DeploySpec,
    ) -> Result<(Deployment, Arc<Loaded>)> {
        if let Some(grants) = &spec.grants {
            check_grants(grants)?;
        }
        spec.limits.check()?;
        if let Some(name) = &spec.name {
            keel_core::ids::check_name("deployment name", name)?;
        }
        let loaded = self.store_component(origin, bytes).await?;
        let name = spec.name.unwrap_or_else(|| {
            origin
                .file_stem()
                .and_then(|s| keel_core::ids::safe_name(&s.to_string_lossy()))
                .unwrap_or_else(|| loaded.hash[..12].to_string())
        });
        let declared = self.declared_schedules(&name, &loaded.manifest)?;
        let named = self.named(&name).await?;
        if let Some(latest) = named.first()
            && latest.hash != loaded.hash
            && named.iter().any(|d| d.hash == loaded.hash)
            && !spec.force
        {
            return Err(Error::OlderBuild {
                name,
                hash: loaded.hash.to_string(),
                latest: latest.hash.to_string(),
            });
        }
        let grants = match spec.grants {
            Some(grants) => grants,
            None => named.first().map(|d| d.grants.clone()).unwrap_or_default(),
        };
        let deployment = Deployment {
            name,
            hash: loaded.hash.clone(),
            workflows: loaded
                .manifest
                .workflows
                .iter()
                .map(|w| w.name.clone())
                .collect(),
            steps: loaded
                .manifest
                .steps
                .iter()
                .map(|s| s.name.clone())
                .collect(),
            grants,
            limits: spec.limits,
            size_bytes: bytes.len() as u64,
            // Newer than every build of its name, even within one
            // millisecond (or under a stopped clock): the latest is the
            // last deployed.
            deployed_at_ms: self
                .now_ms()
                .max(named.first().map_or(0, |d| d.deployed_at_ms + 1)),
            retention_ms: None,
        };
        let deployment = self.set_retention(deployment, spec.retention_ms).await?;
        self.forget_deployments();
        tracing::info!(name = %deployment.name, hash = %deployment.hash, "component deployed");
        self.declare_schedules(&deployment.name, declared).await?;
        Ok((deployment, loaded))
    }

    /// The deployments of `name` as the store holds them, newest first.
    async fn named(&self, name: &str) -> Result<Vec<Deployment>> {
        let mut named = self.store().deployments().await?;
        named.retain(|d| d.name == name);
        named.sort_by_key(|d| std::cmp::Reverse(d.deployed_at_ms));
        Ok(named)
    }

    /// Adds `grants` to the deployments `target` names: every build of a
    /// deployment name, or the one build of a hash (or unique 12-character
    /// prefix); with `replace`, sets them instead. Runs pinned to those
    /// builds get them at their next activation, so a run that failed for
    /// want of a grant can be retried where it stands. Returns the
    /// deployments changed.
    pub async fn grant(
        &self,
        target: &str,
        grants: &GrantSpec,
        replace: bool,
    ) -> Result<Vec<Deployment>> {
        check_grants(grants)?;
        let mut changed = self.named(target).await?;
        if changed.is_empty() {
            changed.push(self.deployment(target).await?);
        }
        for deployment in &mut changed {
            deployment.grants = if replace {
                grants.clone()
            } else {
                deployment.grants.with(grants)
            };
            self.store().put_deployment(deployment).await?;
        }
        self.forget_deployments();
        tracing::info!(target, builds = changed.len(), "deployment grants changed");
        Ok(changed)
    }

    /// Stores `deployment` with the retention of its name: `retention_ms`
    /// if given (written to every other deployment of the name too), else
    /// the one its name's latest deployment has.
    async fn set_retention(
        &self,
        mut deployment: Deployment,
        retention_ms: Option<u64>,
    ) -> Result<Deployment> {
        let named = self.named(&deployment.name).await?;
        deployment.retention_ms = retention_ms.or(named.first().and_then(|d| d.retention_ms));
        if retention_ms.is_some() {
            let others = named.into_iter().filter(|d| d.hash != deployment.hash);
            for mut other in others.filter(|d| d.retention_ms != retention_ms) {
                other.retention_ms = retention_ms;
                self.store().put_deployment(&other).await?;
            }
        }
        self.store().put_deployment(&deployment).await?;
        Ok(deployment)
    }

    /// Deploys the component file at `path`. With `spec` `None`, a
    /// component deployed before keeps its deployment (name, grants and
    /// limits) and a new one is deployed with nothing granted.
    pub async fn deploy_file(
        &self,
        path: &Path,
        spec: Option<DeploySpec>,
    ) -> Result<(Deployment, Arc<Loaded>)> {
        let bytes = tokio::fs::read(path).await.map_err(|source| Error::Io {
            path: path.into(),
            source,
        })?;
        if spec.is_none() {
            let hash = crate::component::content_hash(&bytes);
            if let Some(existing) = self.store().deployment(&hash).await? {
                let loaded = self.component_by_hash(&hash).await?;
                return Ok((existing, loaded));
            }
        }
        self.deploy(path, &bytes, spec.unwrap_or_default()).await
    }

    /// Every deployment, newest first.
    pub async fn deployments(&self) -> Result<Arc<Vec<Deployment>>> {
        if let Some(cached) = lock(&self.inner.deployments).clone() {
            return Ok(cached);
        }
        let mut all = self.store().deployments().await?;
        all.sort_by_key(|d| std::cmp::Reverse(d.deployed_at_ms));
        let all = Arc::new(all);
        *lock(&self.inner.deployments) = Some(all.clone());
        Ok(all)
    }

    /// Drops the cached deployments (another process deployed).
    pub(super) fn forget_deployments(&self) {
        *lock(&self.inner.deployments) = None;
    }

    /// The component a deployment name (its current build) or a build's
    /// hash names, compiled: its manifest, schemas included.
    pub async fn deployed_component(&self, target: &str) -> Result<Arc<Loaded>> {
        let deployment = self.deployment(target).await?;
        self.component_by_hash(&deployment.hash).await
    }

    /// The deployment named `name` (its latest) or with hash (or unique
    /// 12-character prefix) `name`.
    pub async fn deployment(&self, name: &str) -> Result<Deployment> {
        let all = self.deployments().await?;
        deployment::find(&all, Target::Name(name))
            .or_else(|| deployment::find(&all, Target::Hash(name)))
            .cloned()
            .ok_or_else(|| {
                deployment::ResolveError::UnknownDeployment {
                    deployment: name.into(),
                }
                .into()
            })
    }

    /// The workflows a start that names no deployment reaches: for each
    /// workflow some deployment exports, what the latest deployment
    /// exporting it declares of it (its schemas, its description), with
    /// that deployment's name; by workflow name. Reads each deployment's
    /// component once (compiled on first use, as a start would).
    pub async fn workflows(&self) -> Result<Vec<(String, WorkflowInfo)>> {
        let all = self.deployments().await?;
        let names: BTreeSet<&str> = all
            .iter()
            .flat_map(|d| d.workflows.iter().map(String::as_str))
            .collect();
        let mut found = Vec::with_capacity(names.len());
        for name in names {
            found.extend(self.declared(&all, name).await?);
        }
        Ok(found)
    }

    /// What a start of `workflow` that names no deployment reaches, as
    /// [`Keel::workflows`] gives it; `None` if no deployment exports it.
    pub async fn workflow(&self, workflow: &str) -> Result<Option<(String, WorkflowInfo)>> {
        let all = self.deployments().await?;
        self.declared(&all, workflow).await
    }

    /// What the latest of `all` exporting `workflow` declares of it.
    async fn declared(
        &self,
        all: &[Deployment],
        workflow: &str,
    ) -> Result<Option<(String, WorkflowInfo)>> {
        let Ok(latest) = deployment::resolve(all, workflow, Target::Latest) else {
            return Ok(None);
        };
        let loaded = self.component_by_hash(&latest.hash).await?;
        Ok(loaded
            .manifest
            .workflow(workflow)
            .map(|info| (latest.name.clone(), info.clone())))
    }

    /// Admits a run of `workflow` on the deployment `target` names;
    /// durable on return.
    pub async fn start_workflow(
        &self,
        workflow: &str,
        target: Target<'_>,
        input: &str,
        options: &StartOptions,
    ) -> Result<RunRecord> {
        let all = self.deployments().await?;
        let resolved = match target {
            // A name that is a hash pins the component.
            Target::Name(name) if deployment::find(&all, Target::Name(name)).is_none() => {
                deployment::resolve(&all, workflow, Target::Hash(name))
            }
            target => deployment::resolve(&all, workflow, target),
        }?;
        let loaded = self.component_by_hash(&resolved.hash).await?;
        self.start_with(&loaded, workflow, input, options).await
    }

    /// What the steps of runs pinned to `hash` run with: their deployment's
    /// grants and limits, read from the store (so a redeploy reaches the
    /// next activation), or the engine's own for a component never deployed.
    pub(super) async fn refresh_step_settings(&self, hash: &str) -> Result<Arc<StepSettings>> {
        let config = &self.inner.config;
        let settings = match self.store().deployment(hash).await? {
            None => StepSettings {
                grants: config.grants.clone(),
                max_memory: config.max_memory,
                timeout: config.step_timeout,
                max_output: config.limits.max_payload_bytes,
                deployment: None,
            },
            Some(d) => StepSettings {
                max_output: config.limits.max_payload_bytes,
                deployment: Some((d.name.clone(), d.hash.to_string())),
                grants: Grants::of(&d.grants),
                max_memory: d.limits.max_memory_bytes().unwrap_or(config.max_memory),
                timeout: d
                    .limits
                    .step_timeout_ms
                    .map(|ms| ms.min(StepLimits::MAX_STEP_TIMEOUT_MS))
                    .map_or(config.step_timeout, Duration::from_millis),
            },
        };
        let settings = Arc::new(settings);
        lock(&self.inner.step_settings).insert(hash.into(), settings.clone());
        Ok(settings)
    }

    /// The step settings last read for `hash` (the engine's own if none).
    pub(super) fn step_settings(&self, hash: &str) -> Arc<StepSettings> {
        if let Some(settings) = lock(&self.inner.step_settings).get(hash) {
            return settings.clone();
        }
        let config = &self.inner.config;
        Arc::new(StepSettings {
            grants: config.grants.clone(),
            max_memory: config.max_memory,
            timeout: config.step_timeout,
            max_output: config.limits.max_payload_bytes,
            deployment: None,
        })
    }
}

/// Refuses a malformed grant.
fn check_grants(grants: &GrantSpec) -> Result<()> {
    grants
        .check()
        .map_err(|reason| Error::InvalidGrant { reason })
}
