//! Admission: starting runs (with idempotency keys and start tokens, from
//! callers, events and workflows), importing them, and resuming hooks from
//! outside a run.

use std::sync::Arc;
use std::time::Duration;

use crate::activation::RunJournal;
use crate::component::Loaded;
use crate::hooks::HookRecord;
use crate::journal::{Event, StartOutcome};
use crate::sandbox::{self};
use crate::store::{EventOutcome, EventRecord, RunRecord, RunStatus};
use crate::{Error, Result};

use super::{Inner, Keel};

/// Options of a start.
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// A JSON object given to key expressions as `additional_metadata`.
    pub additional_metadata: Option<serde_json::Value>,
    /// A start token: the run is admitted together with its start hook, or
    /// refused with `HookConflict` if another run holds the token.
    pub hook: Option<StartHook>,
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
    pub token: String,
    /// Keep the token unavailable for this long from the start, even after
    /// the run ends (not after it disposes of the hook).
    pub min_retention: Option<Duration>,
    /// JSON shown by `hooks get`.
    pub metadata: Option<serde_json::Value>,
}

impl StartHook {
    pub fn new(token: impl Into<String>) -> Self {
        StartHook {
            token: token.into(),
            min_retention: None,
            metadata: None,
        }
    }

    pub fn min_retention(mut self, retention: Duration) -> Self {
        self.min_retention = Some(retention);
        self
    }

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
        let run_id = uuid::Uuid::now_v7().to_string();
        self.admit(component, workflow, input, options, run_id)
            .await
    }

    async fn admit(
        &self,
        component: &Loaded,
        workflow: &str,
        input: &str,
        options: &StartOptions,
        run_id: String,
    ) -> Result<RunRecord> {
        component.check_workflow(workflow)?;
        self.check_capabilities(options)?;
        let value: serde_json::Value =
            serde_json::from_str(input).map_err(|e| Error::InvalidInput {
                reason: e.to_string(),
            })?;
        let input = value.to_string();
        let metadata = options
            .additional_metadata
            .clone()
            .unwrap_or_else(|| serde_json::json!({}));
        let key = component
            .key(workflow)
            .map(|k| Ok::<_, Error>((k.evaluate(&value, &metadata)?, k.ttl_ms)))
            .transpose()?;
        let now = self.inner.config.clock.now_ms();
        let run = RunRecord {
            run_id: run_id.clone(),
            workflow: workflow.into(),
            component_hash: component.hash.clone(),
            input: input.clone(),
            status: RunStatus::Pending,
            output: None,
            error: None,
            created_at_ms: now,
            updated_at_ms: now,
            wake_at_ms: None,
        };
        let start_hook = options.hook.as_ref().map(|h| HookRecord {
            token: h.token.clone(),
            run_id: run_id.clone(),
            command: None,
            metadata: h.metadata.as_ref().map(|m| m.to_string()),
            created_at_ms: now,
            retain_until_ms: h
                .min_retention
                .map(|r| now.saturating_add(r.as_millis() as u64)),
            active: true,
            next_payload: 0,
        });
        let key_ref = key.as_ref().map(|(k, ttl)| (k.as_str(), *ttl));
        self.inner
            .store
            .admit(&run, key_ref, start_hook.as_ref(), now)?;
        // Appending syncs, which makes the run record durable too.
        let journal = RunJournal::new(Some(self.inner.store.clone()), &run_id, Vec::new());
        let started = Event::RunStarted {
            workflow: workflow.into(),
            input,
        };
        if let Err(e) = journal.append(started).await {
            return Err(Error::StartOutcomeUnknown {
                run_id,
                reason: e.to_string(),
            });
        }
        tracing::info!(run_id = %run.run_id, workflow, "run admitted");
        self.inner.progress.notify_waiters();
        Ok(run)
    }

    /// Refuses, before anything is written, a start that needs what the
    /// store cannot do.
    fn check_capabilities(&self, options: &StartOptions) -> Result<()> {
        let caps = self.inner.store.capabilities();
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
    /// yet. Returns the owner's run ID (drive it, or let a worker), or
    /// `HookNotFound` when no active hook holds the token.
    pub async fn resume_hook(&self, token: &str, payload: &str) -> Result<String> {
        let value: serde_json::Value =
            serde_json::from_str(payload).map_err(|e| Error::InvalidInput {
                reason: e.to_string(),
            })?;
        let run_id = self.inner.store.resume_hook(token, &value.to_string())?;
        self.inner.store.sync().await?;
        tracing::info!(run_id, token, "hook resumed");
        self.inner.poke(&run_id);
        Ok(run_id)
    }

    /// Every token held now, by an active hook or for a retention.
    pub fn list_hooks(&self) -> Result<Vec<HookRecord>> {
        self.inner
            .store
            .list_hooks(self.inner.config.clock.now_ms())
    }

    /// The hook holding `token`: active, or kept after its run ended until
    /// its retention passes. `HookNotFound` otherwise.
    pub fn get_hook(&self, token: &str) -> Result<HookRecord> {
        self.inner
            .store
            .get_hook(token, self.inner.config.clock.now_ms())
    }

    /// Starts a run and drives it until it completes, fails or waits.
    pub async fn run(&self, component: &Loaded, workflow: &str, input: &str) -> Result<RunRecord> {
        let run = self.start(component, workflow, input).await?;
        self.drive(&run.run_id).await
    }

    /// Loads a journal file's run into the store. To drive it on, the store
    /// must also hold its component (load the same `.wasm` once).
    pub async fn import(&self, file: &crate::JournalFile) -> Result<RunRecord> {
        let run = file.run_record();
        if self.inner.store.get_run(&run.run_id).is_ok() {
            return Err(Error::RunExists { run_id: run.run_id });
        }
        for entry in &file.entries {
            self.inner.store.append(&run.run_id, entry)?;
        }
        self.inner.store.put_run(&run)?;
        self.inner.store.sync().await?;
        Ok(run)
    }

    /// Ingests an event: stores it and starts a run of every workflow
    /// subscribed to `key`, with the payload as input and the metadata as
    /// `additional_metadata`. A start that collides with an idempotency key
    /// is swallowed and recorded against the run that holds the key.
    pub async fn push_event(
        &self,
        key: &str,
        payload: &str,
        metadata: &str,
    ) -> Result<EventRecord> {
        let parse = |s: &str| {
            serde_json::from_str::<serde_json::Value>(s).map_err(|e| Error::InvalidInput {
                reason: e.to_string(),
            })
        };
        let (payload_value, metadata_value) = (parse(payload)?, parse(metadata)?);
        let options = StartOptions {
            additional_metadata: Some(metadata_value.clone()),
            hook: None,
        };
        let mut outcomes = Vec::new();
        for (workflow, hash) in self.inner.store.subscribers(key)? {
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
            at_ms: self.inner.config.clock.now_ms(),
            outcomes,
        };
        self.inner.store.put_event(&event)?;
        self.inner.store.sync().await?;
        Ok(event)
    }

    /// Every ingested event, oldest first.
    pub fn list_events(&self) -> Result<Vec<EventRecord>> {
        self.inner.store.list_events()
    }
}

/// Starts a run on behalf of a workflow (`start_workflow`), with the run ID
/// the workflow's command derives, so a recovered workflow that starts it
/// again finds it instead of starting another.
pub(crate) async fn start_child(
    inner: &Arc<Inner>,
    loaded: &Loaded,
    run_id: String,
    workflow: &str,
    input: &str,
    options: &sandbox::wit::StartOptions,
) -> Result<StartOutcome> {
    if inner.store.get_run(&run_id).is_ok() {
        return Ok(StartOutcome::Started { run_id });
    }
    let metadata = match options.metadata.as_deref().map(serde_json::from_str) {
        Some(Ok(value)) => Some(value),
        Some(Err(e)) => {
            return Ok(StartOutcome::Refused {
                reason: format!("the start hook's metadata is not valid JSON: {e}"),
            });
        }
        None => None,
    };
    let options = StartOptions {
        additional_metadata: None,
        hook: options.token.as_ref().map(|token| StartHook {
            token: token.clone(),
            min_retention: options.min_retention_ms.map(Duration::from_millis),
            metadata,
        }),
    };
    let keel = Keel::from_inner(inner.clone());
    match keel.admit(loaded, workflow, input, &options, run_id).await {
        Ok(run) => Ok(StartOutcome::Started { run_id: run.run_id }),
        Err(Error::HookConflict {
            conflicting_run_id, ..
        }) => Ok(StartOutcome::HookConflict { conflicting_run_id }),
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
