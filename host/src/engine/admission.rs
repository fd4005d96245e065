//! Admission: starting runs (with idempotency keys and start tokens, from
//! callers, events and workflows), importing them, and resuming hooks from
//! outside a run. Each admission is one atomic store operation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_core::file::JournalFile;
use keel_core::flow;
use keel_core::journal::{Fact, StartOutcome};
use keel_core::{Entry, EventOutcome, EventRecord, HookRecord, RunId, RunRecord, RunStatus};
use keel_store::{
    Admission, AdmissionLease, Admitted, FlowClaim, Handover, KeyClaim, Lease, StoreError,
};

use super::{Keel, lock};
use crate::activation::ChildStart;
use crate::component::Loaded;
use crate::{Error, Result};

/// Options of a start.
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// A JSON object given to key expressions as `additional_metadata`.
    pub additional_metadata: Option<serde_json::Value>,
    /// A start token: the run is admitted together with its start hook, or
    /// refused with `HookConflict` if another run holds the token.
    pub hook: Option<StartHook>,
    /// The run's ID, chosen by the caller (a UUIDv7, so that runs list in
    /// creation order), so that a caller who loses the answer knows which
    /// run to look for; a new one if `None`. An ID the store holds already
    /// is refused with `RunExists`.
    pub run_id: Option<RunId>,
    /// A delayed start: the run is admitted now (its token and key are
    /// decided now) and listed `scheduled`; its first activation is at
    /// this time (ms since the epoch, on the engine's clock). A time past
    /// starts it at once.
    pub start_at_ms: Option<u64>,
    /// A delayed start counted from the admission: it starts this long
    /// after the time recorded as its creation (with `start_at_ms`, the
    /// later of the two).
    pub delay: Option<Duration>,
    /// Where the run stands in its concurrency group's queue, if its
    /// workflow declares a limit and the limit is reached: 1 (highest) to
    /// 5; 3 if `None`.
    pub priority: Option<u8>,
    /// How long the run may take from its admission before it is
    /// cancelled with `deadline_exceeded`; the workflow's own timeout
    /// (`#[workflow(timeout = ...)]`) if `None`.
    pub timeout: Option<Duration>,
    /// The run's searchable attributes (`runs list --attr KEY=VALUE`).
    pub attributes: keel_core::Attributes,
    /// The caller's W3C `traceparent`: the run's spans join its trace.
    pub traceparent: Option<String>,
    /// The caller drives the run in this process right after its
    /// admission ([`Keel::drive_and_wait`]): a run due at once is admitted
    /// under this worker's lease, so no other worker claims it meanwhile
    /// (it is due when the lease expires, should this process die first).
    pub driven_here: bool,
    /// Entries the run's journal carries after its admission's: a fork's
    /// part of its source (`keel_core::restart::fork_prefix`), written in
    /// the admission's one store operation. Their positions are renumbered.
    pub carried: Vec<Entry>,
}

/// The start hook of a run (`start(..., { hook: { token, ... } })`).
///
/// ```
/// # use std::time::Duration;
/// let hook = keel_host::StartHook::new("order:42")
///     .min_retention(Duration::from_secs(30 * 24 * 3600))
///     .metadata(serde_json::json!({"order_id": 42}));
/// assert_eq!(hook.token, "order:42");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct StartHook {
    /// The token; exactly one run holds it.
    pub token: String,
    /// Keep the token unavailable for this long from the start, even after
    /// the run ends (not after it disposes of the hook).
    pub min_retention: Option<Duration>,
    /// JSON shown by `hooks get`.
    pub metadata: Option<serde_json::Value>,
}

impl StartHook {
    /// A start hook on `token`, with no retention and no metadata.
    pub fn new(token: impl Into<String>) -> Self {
        StartHook {
            token: token.into(),
            min_retention: None,
            metadata: None,
        }
    }

    /// Keeps the token for `retention` from the start.
    pub fn min_retention(mut self, retention: Duration) -> Self {
        self.min_retention = Some(retention);
        self
    }

    /// Attaches JSON metadata.
    pub fn metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

impl StartOptions {
    /// Options with a start token.
    pub fn token(token: impl Into<String>) -> Self {
        StartOptions::from(StartHook::new(token))
    }
}

/// Options with this start hook (token, retention, metadata).
impl From<StartHook> for StartOptions {
    fn from(hook: StartHook) -> Self {
        StartOptions {
            hook: Some(hook),
            ..StartOptions::default()
        }
    }
}

/// The leases this process's admissions took for the runs it drives at
/// once ([`StartOptions::driven_here`]): a run's first drive here starts
/// under the lease its admission took instead of taking it again, which
/// saves a store write per run started by a caller that waits for it.
#[derive(Default)]
pub(super) struct AdmittedLeases(Mutex<HashMap<String, Lease>>);

impl AdmittedLeases {
    /// Leases held before expired ones are dropped (those of runs admitted
    /// to be driven here that no drive took up).
    const PRUNE_AT: usize = 1024;

    /// Keeps the lease an admission took.
    fn insert(&self, lease: Lease, now_ms: u64) {
        let mut leases = lock(&self.0);
        if leases.len() >= Self::PRUNE_AT {
            leases.retain(|_, l| l.expires_at_ms > now_ms);
        }
        leases.insert(lease.run_id.to_string(), lease);
    }

    /// Voids the lease `run_id`'s admission took here: the run's lease is
    /// being taken again, which makes it stale.
    pub(super) fn forget(&self, run_id: &str) {
        lock(&self.0).remove(run_id);
    }

    /// The lease `run_id`'s admission took here, if it has at least
    /// `margin_ms` left at `now_ms` (else the drive takes the lease anew).
    /// Taken once: a later drive takes the lease from the store.
    pub(super) fn take(&self, run_id: &str, now_ms: u64, margin_ms: u64) -> Option<Lease> {
        lock(&self.0)
            .remove(run_id)
            .filter(|l| l.expires_at_ms > now_ms.saturating_add(margin_ms))
    }
}

impl Keel {
    /// Admits a run of `workflow` with a JSON `input`; durable on return.
    pub async fn start(
        &self,
        component: &Loaded,
        workflow: &str,
        input: &str,
    ) -> Result<RunRecord> {
        self.start_with(component, workflow, input, &StartOptions::default())
            .await
    }

    /// Admits a run with options, durable on return. A workflow with an
    /// idempotency key admits one run per key within its TTL; a collision
    /// fails with `IdempotencyCollision` naming the run that holds the key.
    /// With a start token the run and its start hook are admitted in one
    /// transaction; a token another run holds fails with `HookConflict`
    /// naming it, and nothing is written. If the admission cannot be
    /// confirmed durable the call fails with `StartOutcomeUnknown`: retrying
    /// with the same token is safe.
    pub async fn start_with(
        &self,
        component: &Loaded,
        workflow: &str,
        input: &str,
        options: &StartOptions,
    ) -> Result<RunRecord> {
        let run_id = match &options.run_id {
            Some(id) => RunId::parse(id)?,
            None => RunId::from(uuid::Uuid::now_v7().to_string()),
        };
        self.admit(component, workflow, input, options, run_id, None, None)
            .await
    }

    /// Admits run `run_id`, the child of `parent` if given, continuing the
    /// run `handover` names if given (which claims no idempotency key: the
    /// run it continues claimed it).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn admit(
        &self,
        component: &Loaded,
        workflow: &str,
        input: &str,
        options: &StartOptions,
        run_id: RunId,
        parent: Option<RunId>,
        handover: Option<Handover<'_>>,
    ) -> Result<RunRecord> {
        component.check_workflow(workflow)?;
        self.check_capabilities(options)?;
        keel_core::records::check_attributes(&options.attributes).map_err(|reason| {
            Error::InvalidInput {
                reason: format!("the run's attributes: {reason}"),
            }
        })?;
        self.inner
            .config
            .limits
            .payload(input.len(), || "the run's input".into(), None)?;
        let value = parse_json(input, "the input")?;
        component.check_input(workflow, &value)?;
        let input = value.to_string();
        let metadata = options
            .additional_metadata
            .clone()
            .unwrap_or_else(|| serde_json::json!({}));
        let key = component
            .key(workflow)
            .filter(|_| handover.is_none())
            .map(|k| Ok::<_, Error>((k.evaluate(&value, &metadata)?, k.ttl_ms)))
            .transpose()?;
        let priority = match options.priority {
            Some(p) => flow::check_priority(p).map_err(|reason| Error::InvalidInput { reason })?,
            None => flow::DEFAULT_PRIORITY,
        };
        let group = component
            .concurrency(workflow)
            .map(|(k, c)| {
                let key = k.evaluate(&value, &metadata)?;
                flow::check_key(&key).map_err(|reason| Error::KeyExpression {
                    workflow: workflow.into(),
                    expression: c.key.clone(),
                    reason,
                })?;
                Ok::<_, Error>((key, c))
            })
            .transpose()?;
        let now = self.now_ms();
        let after_delay = options
            .delay
            .map(|d| now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)));
        let delayed = options.start_at_ms.max(after_delay).filter(|at| *at > now);
        let run = RunRecord {
            run_id: run_id.clone(),
            workflow: workflow.into(),
            component_hash: component.hash.clone(),
            input: input.clone(),
            status: if delayed.is_some() {
                RunStatus::Scheduled
            } else {
                RunStatus::Pending
            },
            output: None,
            error: None,
            created_at_ms: now,
            updated_at_ms: now,
            wake_at_ms: delayed,
            parent_run_id: parent,
            attributes: options.attributes.clone(),
        };
        let start_hook = options.hook.as_ref().map(|h| HookRecord {
            token: h.token.as_str().into(),
            run_id: run_id.clone(),
            command: None,
            metadata: h.metadata.as_ref().map(|m| m.to_string()),
            created_at_ms: now,
            retain_until_ms: h
                .min_retention
                .map(|r| now.saturating_add(r.as_millis() as u64)),
            active: true,
            next_payload: 0,
            payload_schema: None,
        });
        let timeout_ms = options.timeout.map(|t| t.as_millis() as u64).or_else(|| {
            component
                .manifest
                .workflow(workflow)
                .and_then(|w| w.timeout_ms)
        });
        let mut journal = vec![Entry {
            seq: 0,
            at_ms: now,
            fact: Fact::RunStarted {
                workflow: workflow.into(),
                input,
            },
        }];
        if let Some(timeout_ms) = timeout_ms {
            journal.push(Entry {
                seq: 1,
                at_ms: now,
                fact: Fact::DeadlineSet {
                    deadline_ms: now.saturating_add(timeout_ms),
                },
            });
        }
        if let Some(traced) =
            crate::trace::admission(options.traceparent.as_deref(), self.inner.config.trace_runs)
        {
            journal.push(Entry {
                seq: journal.len() as u64,
                at_ms: now,
                fact: traced,
            });
        }
        for carried in &options.carried {
            journal.push(Entry {
                seq: journal.len() as u64,
                ..carried.clone()
            });
        }
        let lease =
            (options.driven_here && run.status == RunStatus::Pending).then(|| AdmissionLease {
                owner: &self.inner.config.worker_id,
                expires_at_ms: now.saturating_add(self.inner.config.lease_ttl.as_millis() as u64),
            });
        let admission = Admission {
            run: &run,
            key: key.as_ref().map(|(key, ttl_ms)| KeyClaim {
                key,
                ttl_ms: *ttl_ms,
            }),
            start_hook: start_hook.as_ref(),
            journal: &journal,
            flow: group.as_ref().map(|(key, c)| FlowClaim {
                key,
                limit: c.limit,
                on_limit: c.on_limit,
                priority,
            }),
            now_ms: now,
            lease,
            handover,
        };
        let admitted = match self.store().admit(admission).await {
            Ok(admitted) => admitted,
            Err(
                e @ (StoreError::HookConflict { .. }
                | StoreError::IdempotencyCollision { .. }
                | StoreError::RunExists { .. }
                // Refused before anything was written.
                | StoreError::StorageFull { .. }),
            ) => {
                return Err(e.into());
            }
            // The store may have written the run: only a retry can tell.
            Err(e) => {
                if let Some(lease) = lease {
                    self.release_unconfirmed(lease.lease(&run_id)).await;
                }
                return Err(Error::StartOutcomeUnknown {
                    run_id,
                    reason: e.to_string(),
                });
            }
        };
        if let Some(lease) = lease {
            self.inner.admitted_leases.insert(lease.lease(&run_id), now);
        }
        let run = self.admitted(
            run,
            &journal,
            group.as_ref().map(|g| g.0.as_str()),
            admitted,
        );
        tracing::info!(run_id = %run.run_id, workflow, status = run.status.as_str(), "run admitted");
        self.inner.config.observer.run_started(workflow);
        self.inner.progress.notify_waiters();
        self.due_changed();
        Ok(run)
    }

    /// Lets go of the lease an unconfirmed admission may have taken, so
    /// that if the run was admitted any worker drives it now rather than
    /// when the lease expires. The store failed a moment ago, so this tries
    /// for a few seconds; if it cannot, the lease's expiry frees the run
    /// (the caller's answer already says the outcome is unknown).
    async fn release_unconfirmed(&self, lease: Lease) {
        const BACKOFF: [Duration; 4] = [
            Duration::ZERO,
            Duration::from_millis(250),
            Duration::from_millis(750),
            Duration::from_secs(2),
        ];
        for delay in BACKOFF {
            tokio::time::sleep(delay).await;
            match self.store().release_lease(&lease, None).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!(run_id = %lease.run_id, "releasing an unconfirmed admission's lease failed: {e}")
                }
            }
        }
        tracing::info!(
            run_id = %lease.run_id,
            expires_at_ms = lease.expires_at_ms,
            "an unconfirmed admission's lease could not be released; the run, if admitted, is driven when it expires"
        );
    }

    /// The run as admission stored it (queued, or cancelled by
    /// `cancel_newest`); a `cancel_in_progress` victim is cancelled in the
    /// background, and its end hands its slot to this run.
    fn admitted(
        &self,
        mut run: RunRecord,
        journal: &[Entry],
        key: Option<&str>,
        admitted: Admitted,
    ) -> RunRecord {
        match admitted {
            Admitted::AsGiven => {}
            Admitted::Queued => run.status = RunStatus::Queued,
            Admitted::Rejected { holder } => {
                run = flow::rejected(
                    &run,
                    journal,
                    key.unwrap_or_default(),
                    &holder,
                    run.created_at_ms,
                )
                .0;
            }
            Admitted::Evicting { victim } => {
                run.status = RunStatus::Queued;
                if let Some(victim) = victim {
                    tracing::info!(run_id = %run.run_id, %victim, "cancelling the oldest run of the key (cancel_in_progress)");
                    let keel = self.clone();
                    tokio::spawn(async move {
                        let reason =
                            "a newer run of its concurrency key replaces it (cancel_in_progress)";
                        if let Err(e) = keel.cancel(&victim, reason, "concurrency").await {
                            tracing::warn!(%victim, "cancelling the run in progress failed: {e}");
                        }
                        // Its cleanup runs here unless another worker drives it.
                        if let Err(e) = keel.drive(&victim).await {
                            tracing::warn!(%victim, "driving the cancelled run failed: {e}");
                        }
                    });
                }
            }
        }
        run
    }

    /// Refuses, before anything is written, a start that needs what the
    /// store cannot do.
    fn check_capabilities(&self, options: &StartOptions) -> Result<()> {
        let caps = self.store().capabilities();
        let missing = match &options.hook {
            Some(_) if !caps.atomic_start_hook => Some("atomic start hooks"),
            Some(h) if h.min_retention.is_some() && !caps.hook_retention => Some("hook retention"),
            _ => None,
        };
        match missing {
            Some(capability) => Err(Error::StoreCapability {
                capability: capability.into(),
            }),
            None => Ok(()),
        }
    }

    /// Delivers a JSON payload to the active hook holding `token`, in order
    /// after the payloads before it, even if its run has not opened the hook
    /// yet; durable on return. Returns the owner's run ID (drive it, or let
    /// a worker), or `HookNotFound` when no active hook holds the token.
    pub async fn resume_hook(&self, token: &str, payload: &str) -> Result<RunId> {
        Ok(self.deliver(token, payload, None).await?.run_id)
    }

    /// Every token held now, by an active hook or for a retention.
    pub async fn list_hooks(&self) -> Result<Vec<HookRecord>> {
        Ok(self.store().list_hooks(self.now_ms()).await?)
    }

    /// The hook holding `token`: active, or kept after its run ended until
    /// its retention passes. `HookNotFound` otherwise.
    pub async fn get_hook(&self, token: &str) -> Result<HookRecord> {
        Ok(self.store().get_hook(token, self.now_ms()).await?)
    }

    /// Starts a run and drives it until it completes, fails or waits.
    pub async fn run(&self, component: &Loaded, workflow: &str, input: &str) -> Result<RunRecord> {
        let run = self.start(component, workflow, input).await?;
        self.drive(&run.run_id).await
    }

    /// Loads a journal file's run into the store. To drive it on, the store
    /// must also hold its component (load the same `.wasm` once).
    pub async fn import(&self, file: &JournalFile) -> Result<RunRecord> {
        let run = file.run_record();
        self.store().import(&run, &file.entries).await?;
        Ok(run)
    }

    /// Ingests an event: starts a run of every workflow subscribed to `key`,
    /// with the payload as input and the metadata as `additional_metadata`,
    /// then stores the event. A start that collides with an idempotency key
    /// is swallowed and recorded against the run that holds the key.
    pub async fn push_event(
        &self,
        key: &str,
        payload: &str,
        metadata: &str,
    ) -> Result<EventRecord> {
        let (payload_value, metadata_value) = (
            parse_json(payload, "the event's payload")?,
            parse_json(metadata, "the event's metadata")?,
        );
        let options = StartOptions {
            additional_metadata: Some(metadata_value.clone()),
            ..StartOptions::default()
        };
        let mut outcomes = Vec::new();
        for (workflow, hash) in self.store().subscribers(key).await? {
            let component = self.component_by_hash(&hash).await?;
            let started = self
                .start_with(&component, &workflow, &payload_value.to_string(), &options)
                .await;
            outcomes.push(match started {
                Ok(run) => EventOutcome {
                    workflow,
                    run_id: Some(run.run_id),
                    deduplicated: false,
                    error: None,
                },
                Err(Error::IdempotencyCollision {
                    existing_run_id, ..
                }) => EventOutcome {
                    workflow,
                    run_id: Some(existing_run_id),
                    deduplicated: true,
                    error: None,
                },
                Err(e) => EventOutcome {
                    workflow,
                    run_id: None,
                    deduplicated: false,
                    error: Some(e.to_string()),
                },
            });
        }
        let event = EventRecord {
            event_id: uuid::Uuid::now_v7().to_string(),
            key: key.into(),
            payload: payload_value.to_string(),
            metadata: metadata_value.to_string(),
            at_ms: self.now_ms(),
            outcomes,
        };
        if let Err(e) = self.store().put_event(&event).await {
            // The runs it started are admitted whatever became of the record.
            let started: Vec<RunId> = event
                .outcomes
                .iter()
                .filter(|o| !o.deduplicated)
                .filter_map(|o| o.run_id.clone())
                .collect();
            return Err(Error::EventUnrecorded {
                key: key.into(),
                started,
                reason: Error::from(e).to_string(),
            });
        }
        Ok(event)
    }

    /// Every ingested event, oldest first.
    pub async fn list_events(&self) -> Result<Vec<EventRecord>> {
        Ok(self.store().list_events().await?)
    }

    /// Starts a run on behalf of a workflow (`start_workflow`), with the run
    /// ID the workflow's command derives, so a recovered workflow that
    /// starts it again finds it instead of starting another.
    pub(super) async fn start_child_run(&self, child: ChildStart) -> Result<StartOutcome> {
        let run_id = child.run_id;
        if self.store().get_run(&run_id).await.is_ok() {
            return Ok(StartOutcome::Started {
                run_id: run_id.into_string(),
            });
        }
        let options = &child.options;
        let metadata = match options.metadata.as_deref().map(serde_json::from_str) {
            Some(Ok(value)) => Some(value),
            Some(Err(e)) => {
                return Ok(StartOutcome::Refused {
                    reason: format!("the start hook's metadata is not valid JSON: {e}"),
                });
            }
            None => None,
        };
        let component = match &options.deployment {
            None => child.component.clone(),
            Some(name) => match self.child_component(name, &child.workflow).await? {
                Ok(component) => component,
                Err(refused) => return Ok(refused),
            },
        };
        let start = StartOptions {
            driven_here: false,
            additional_metadata: None,
            run_id: None,
            start_at_ms: None,
            delay: None,
            priority: None,
            timeout: options.timeout_ms.map(Duration::from_millis),
            hook: options.token.as_ref().map(|token| StartHook {
                token: token.clone(),
                min_retention: options.min_retention_ms.map(Duration::from_millis),
                metadata,
            }),
            attributes: Default::default(),
            traceparent: child.traceparent.clone(),
            carried: Vec::new(),
        };
        let admitted = self
            .admit(
                &component,
                &child.workflow,
                &child.input,
                &start,
                run_id,
                Some(child.parent),
                None,
            )
            .await;
        match admitted {
            Ok(run) => Ok(StartOutcome::Started {
                run_id: run.run_id.into_string(),
            }),
            Err(Error::HookConflict {
                conflicting_run_id, ..
            }) => Ok(StartOutcome::HookConflict {
                conflicting_run_id: conflicting_run_id.into_string(),
            }),
            Err(
                e @ (Error::InvalidInput { .. }
                | Error::UnknownWorkflow { .. }
                | Error::KeyExpression { .. }
                | Error::IdempotencyCollision { .. }
                | Error::StoreCapability { .. }),
            ) => Ok(StartOutcome::Refused {
                reason: e.to_string(),
            }),
            Err(e) => Err(e),
        }
    }
}

impl Keel {
    /// The latest component of the deployment `name` that exports
    /// `workflow`, or (inside) why a child start naming it is refused.
    /// Deployments are read again before a refusal, in case another
    /// process deployed since they were cached.
    async fn child_component(
        &self,
        name: &str,
        workflow: &str,
    ) -> Result<std::result::Result<Arc<Loaded>, StartOutcome>> {
        use keel_core::deployment::{Target, resolve};
        let hash_of = |all: &[keel_core::Deployment]| {
            resolve(all, workflow, Target::Name(name)).map(|d| d.hash.clone())
        };
        let mut resolved = hash_of(&self.deployments().await?);
        if resolved.is_err() {
            self.forget_deployments();
            resolved = hash_of(&self.deployments().await?);
        }
        match resolved {
            Ok(hash) => Ok(Ok(self.component_by_hash(&hash).await?)),
            Err(e) => Ok(Err(StartOutcome::Refused {
                reason: Error::from(e).to_string(),
            })),
        }
    }
}

/// Parses `what` (a run's input, a payload), or fails with `InvalidInput`
/// naming it.
pub(super) fn parse_json(s: &str, what: &str) -> Result<serde_json::Value> {
    serde_json::from_str(s).map_err(|e| Error::InvalidInput {
        reason: format!("{what} is not valid JSON: {e}. Pass a JSON value"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(run_id: &str, expires_at_ms: u64) -> Lease {
        AdmissionLease {
            owner: "worker",
            expires_at_ms,
        }
        .lease(run_id)
    }

    #[test]
    fn an_admitted_lease_is_taken_once_while_enough_of_it_is_left() {
        let leases = AdmittedLeases::default();
        leases.insert(lease("a", 10_000), 0);
        assert_eq!(leases.take("a", 4_000, 5_000).map(|l| l.epoch), Some(1));
        assert!(leases.take("a", 4_000, 5_000).is_none(), "taken once");

        leases.insert(lease("b", 10_000), 0);
        assert!(
            leases.take("b", 6_000, 5_000).is_none(),
            "less than the margin left: the drive takes the lease anew"
        );
        assert!(leases.take("b", 0, 0).is_none(), "and it is gone");
    }

    #[test]
    fn taking_the_lease_again_voids_the_admitted_one() {
        let leases = AdmittedLeases::default();
        leases.insert(lease("a", 10_000), 0);
        leases.forget("a");
        assert!(leases.take("a", 0, 0).is_none());
    }

    #[test]
    fn leases_no_drive_took_up_are_dropped_once_expired() {
        let leases = AdmittedLeases::default();
        for i in 0..AdmittedLeases::PRUNE_AT {
            leases.insert(lease(&format!("old-{i}"), 1_000), 0);
        }
        leases.insert(lease("live", 60_000), 1_000);
        leases.insert(lease("newer", 60_000), 2_000);
        assert_eq!(lock(&leases.0).len(), 2, "the expired ones are gone");
        assert!(leases.take("live", 2_000, 0).is_some());
    }
}
