//! The hook and run-handle commands of an activation: creating, awaiting
//! and disposing of hooks, reading and awaiting other runs, and starting
//! runs. Each is journaled; a command whose effect others can see (a hook
//! registered or released, a run started) flushes the journal first.

use keel_core::journal::{Fact, HookRegistration, StartOutcome};
use keel_core::lifecycle::{ChildOptions, ClosePolicy};
use keel_core::{HookRecord, RunStatus};
use keel_store::HookPayload;

use super::{Activation, ChildStart};
use crate::effects::Effect;
use crate::sandbox::wit;

/// What a command completed from outside the run waits for.
pub(super) enum External {
    Payload { token: String, index: u64 },
    RunEnd { run_id: String },
}

impl External {
    pub(super) fn describe(&self) -> String {
        match self {
            External::Payload { token, index } => format!("payload {index} of hook `{token}`"),
            External::RunEnd { run_id } => format!("the end of run {run_id}"),
        }
    }
}

/// The largest payload schema a hook keeps; a larger one is not kept (its
/// payloads are then checked by the workflow alone).
const MAX_PAYLOAD_SCHEMA_BYTES: usize = 64 * 1024;

/// A hook the workflow holds a handle to.
pub(super) struct OpenHook {
    pub(super) token: String,
    pub(super) next_index: u64,
}

impl Activation {
    /// `create_hook(options)`: registers the hook in the store (or binds
    /// to the run's start hook) and journals the store's answer. Options
    /// that belong to `start()` are refused on the start hook.
    pub(super) async fn create_hook(
        &mut self,
        options: wit::HookOptions,
    ) -> wasmtime::Result<Result<wit::Hook, String>> {
        let token = options.token.clone().unwrap_or_else(|| {
            self.run_id
                .default_hook_token(self.next_command)
                .into_string()
        });
        let force = options.force;
        let (command, recorded) = self.match_command(
            |e| match e {
                Fact::HookCreated {
                    token: t,
                    force: f,
                    registration,
                    ..
                } if *t == token && *f == force => Some(registration.clone()),
                _ => None,
            },
            |command| Fact::HookCreated {
                command,
                token: token.clone(),
                force,
                registration: HookRegistration::Registered,
            },
        )?;
        let registration = match recorded {
            Some(HookRegistration::Registered)
                if !self.offline && self.journal.retried_after(command) =>
            {
                // The run's end released the token and a retry brought the
                // run back: hold it again, its inbox going on after the
                // payloads the journal took.
                let next_payload = self.journal.payloads_taken(&token);
                match self
                    .register(&token, command, &options, next_payload)
                    .await?
                {
                    HookRegistration::Registered => {}
                    other => {
                        tracing::warn!(run_id = %self.run_id, token, ?other, "a retried run's hook could not hold its token again: payloads go to the run that holds it")
                    }
                }
                HookRegistration::Registered
            }
            Some(registration) => registration,
            None => {
                // Tokens are unique among active hooks, within a run too.
                let registration = if self.hooks.values().any(|h| h.token == token) {
                    HookRegistration::Conflict {
                        owner_run_id: self.run_id.to_string(),
                    }
                } else {
                    self.register(&token, command, &options, 0).await?
                };
                self.record_command(Fact::HookCreated {
                    command,
                    token: token.clone(),
                    force,
                    registration: registration.clone(),
                })?;
                registration
            }
        };
        let start_only: Vec<&str> = [
            ("metadata", options.metadata.is_some()),
            ("min_retention", options.min_retention_ms.is_some()),
            ("force", force),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect();
        let registration = match registration {
            HookRegistration::BoundToStart if !start_only.is_empty() => {
                return Ok(Err(format!(
                    "hook `{token}` is this run's start hook, which takes no {}: those options belong to start()",
                    start_only.join(", ")
                )));
            }
            HookRegistration::BoundToStart => wit::HookRegistration::BoundToStart,
            HookRegistration::Registered => wit::HookRegistration::Registered,
            HookRegistration::Conflict { owner_run_id } => {
                wit::HookRegistration::Conflict(owner_run_id)
            }
        };
        if !matches!(registration, wit::HookRegistration::Conflict(_)) {
            let hook = OpenHook {
                token: token.clone(),
                next_index: 0,
            };
            self.hooks.insert(command, hook);
        }
        Ok(Ok(wit::Hook {
            handle: command,
            token,
            registration,
        }))
    }

    /// Registers the hook of `command` in the store, its inbox starting at
    /// `next_payload`, waking the run it takes the token from, if any.
    async fn register(
        &mut self,
        token: &str,
        command: u32,
        options: &wit::HookOptions,
        next_payload: u64,
    ) -> wasmtime::Result<HookRegistration> {
        let now = self.now_ms();
        let payload_schema = options
            .payload_schema
            .clone()
            .filter(|schema| schema.len() <= MAX_PAYLOAD_SCHEMA_BYTES);
        if payload_schema.is_none() && options.payload_schema.is_some() {
            tracing::warn!(run_id = %self.run_id, token, "the hook's payload schema is over {MAX_PAYLOAD_SCHEMA_BYTES} bytes: its payloads are not checked at resume");
        }
        let hook = HookRecord {
            token: token.into(),
            run_id: self.run_id.clone(),
            command: Some(command),
            metadata: options.metadata.clone(),
            created_at_ms: now,
            retain_until_ms: options.min_retention_ms.map(|ms| now.saturating_add(ms)),
            active: true,
            next_payload,
            payload_schema,
        };
        self.journal.gate(Effect::Hook).await?;
        let registered = self
            .store()?
            .register_hook(&hook, options.force, now)
            .await
            .map_err(crate::Error::from)?;
        if let Some(old_owner) = registered.claimed_from {
            tracing::info!(run_id = %self.run_id, %old_owner, token, "token taken over");
            self.outside.wake(&old_owner);
        }
        Ok(registered.registration)
    }

    /// Asks for the next payload of the hook `handle`.
    pub(super) async fn hook_next(&mut self, handle: u32) -> wasmtime::Result<u32> {
        let Some(hook) = self.hooks.get_mut(&handle) else {
            return Err(self.failed(format!(
                "it awaits hook {handle}, which it does not hold (it was disposed of, or its token is held by another run)"
            )));
        };
        // A payload a retry skipped is never handed out again.
        while self
            .skipped
            .contains(&(hook.token.clone(), hook.next_index))
        {
            hook.next_index += 1;
        }
        let (token, index) = (hook.token.clone(), hook.next_index);
        hook.next_index += 1;
        let (command, _) = self.command(
            |f| match f {
                Fact::HookNext { hook, index: i, .. } => {
                    (*hook == handle && *i == index).then_some(())
                }
                _ => None,
            },
            |command| Fact::HookNext {
                command,
                hook: handle,
                token: token.clone(),
                index,
            },
        )?;
        if !self.offline && !self.journal.is_completed(command) {
            self.external
                .insert(command, External::Payload { token, index });
        }
        Ok(command)
    }

    /// Disposes of the hook `handle`: its token is released at once.
    pub(super) async fn dispose_hook(&mut self, handle: u32) -> wasmtime::Result<()> {
        let Some(hook) = self.hooks.remove(&handle) else {
            return Ok(());
        };
        let event = |command| Fact::HookDisposed {
            command,
            hook: handle,
        };
        let (command, recorded) = self.match_command(
            |e| matches!(e, Fact::HookDisposed { hook, .. } if *hook == handle).then_some(()),
            event,
        )?;
        if recorded.is_none() {
            self.journal.gate(Effect::Hook).await?;
            self.store()?
                .dispose_hook(&self.run_id, &hook.token)
                .await
                .map_err(crate::Error::from)?;
            self.record_command(event(command))?;
        }
        Ok(())
    }

    /// Another run's status, read once and journaled.
    pub(super) async fn run_status(&mut self, run_id: String) -> wasmtime::Result<wit::RunStatus> {
        let (command, recorded) = self.match_command(
            |e| match e {
                Fact::RunStatusRead {
                    run_id: r, status, ..
                } if *r == run_id => Some(status.clone()),
                _ => None,
            },
            |command| Fact::RunStatusRead {
                command,
                run_id: run_id.clone(),
                status: String::new(),
            },
        )?;
        let status = match recorded {
            Some(status) => status,
            None => {
                // A run that continued as new stands for the run that
                // continues it.
                let run = keel_store::latest_run(self.store()?.as_ref(), &run_id).await;
                let status = run.map_err(crate::Error::from)?.status.as_str().to_string();
                self.record_command(Fact::RunStatusRead {
                    command,
                    run_id,
                    status: status.clone(),
                })?;
                status
            }
        };
        Ok(wit_status(&status))
    }

    /// Waits for another run to end; the run is woken when it does.
    pub(super) async fn await_run(&mut self, run_id: String) -> wasmtime::Result<u32> {
        let (command, _) = self.command(
            |f| matches!(f, Fact::RunAwaited { run_id: r, .. } if *r == run_id).then_some(()),
            |command| Fact::RunAwaited {
                command,
                run_id: run_id.clone(),
            },
        )?;
        if !self.offline && !self.journal.is_completed(command) {
            let store = self.store()?;
            store.get_run(&run_id).await.map_err(crate::Error::from)?;
            store
                .watch(&run_id, &self.run_id)
                .await
                .map_err(crate::Error::from)?;
            self.external.insert(command, External::RunEnd { run_id });
        }
        Ok(command)
    }

    /// Starts a child run of `workflow` (of this component, or of the
    /// deployment `options` names). Its run ID derives from this command,
    /// so a recovered run finds the run it started.
    pub(super) async fn start_child(
        &mut self,
        workflow: String,
        input: String,
        options: ChildOptions,
    ) -> wasmtime::Result<Result<String, wit::StartError>> {
        let recorded_as = |e: &Fact| match e {
            // Recorded by the first start import: a child of this component
            // closed by cancel.
            Fact::WorkflowStarted {
                workflow: w,
                input: i,
                token,
                outcome,
                ..
            } if *w == workflow
                && *i == input
                && *token == options.token
                && options.deployment.is_none()
                && options.close == ClosePolicy::Cancel
                && options.timeout_ms.is_none() =>
            {
                Some(outcome.clone())
            }
            Fact::ChildStarted {
                workflow: w,
                deployment,
                input: i,
                token,
                close,
                timeout_ms,
                outcome,
                ..
            } if *w == workflow
                && *i == input
                && *token == options.token
                && *deployment == options.deployment
                && *close == options.close
                && *timeout_ms == options.timeout_ms =>
            {
                Some(outcome.clone())
            }
            _ => None,
        };
        let fact = |command, outcome| Fact::ChildStarted {
            command,
            workflow: workflow.clone(),
            deployment: options.deployment.clone(),
            input: input.clone(),
            token: options.token.clone(),
            close: options.close,
            timeout_ms: options.timeout_ms,
            outcome,
        };
        let refused = StartOutcome::Refused {
            reason: String::new(),
        };
        let (command, recorded) =
            self.match_command(recorded_as, |command| fact(command, refused.clone()))?;
        let outcome = match recorded {
            Some(outcome) => outcome,
            None => {
                self.journal.gate(Effect::ChildStart).await?;
                let outcome = self
                    .outside
                    .start_child(ChildStart {
                        component: self.loaded.clone(),
                        parent: self.run_id.clone(),
                        run_id: self.run_id.child(command),
                        workflow: workflow.clone(),
                        input: input.clone(),
                        options: options.clone(),
                        traceparent: self
                            .journal
                            .trace()
                            .map(|(trace, span, _)| format!("00-{trace}-{span}-01")),
                    })
                    .await?;
                self.record_command(fact(command, outcome.clone()))?;
                outcome
            }
        };
        Ok(match outcome {
            StartOutcome::Started { run_id } => Ok(run_id),
            StartOutcome::HookConflict { conflicting_run_id } => {
                Err(wit::StartError::HookConflict(conflicting_run_id))
            }
            StartOutcome::Refused { reason } => Err(wit::StartError::Refused(reason)),
        })
    }

    /// Sets the run's attribute `key` (journaled; the run's record gets it
    /// with the next flush). Refused, without a command, over the bounds:
    /// a name or value over theirs, or more than
    /// [`keel_core::records::MAX_ATTRIBUTES`] keys set by the workflow.
    pub(super) fn set_attribute(
        &mut self,
        key: String,
        value: String,
    ) -> wasmtime::Result<Result<(), String>> {
        use keel_core::records::{MAX_ATTRIBUTES, check_attribute};
        if let Err(e) = check_attribute(&key, &value) {
            return Ok(Err(e));
        }
        let set = self.journal.attributes();
        if !set.contains_key(&key) && set.len() >= MAX_ATTRIBUTES {
            return Ok(Err(format!(
                "the workflow has set {MAX_ATTRIBUTES} attributes, the most it may"
            )));
        }
        let fact = |command| Fact::AttributeSet {
            command,
            key: key.clone(),
            value: value.clone(),
        };
        let (command, recorded) = self.match_command(
            |e| {
                matches!(e, Fact::AttributeSet { key: k, value: v, .. } if *k == key && *v == value)
                    .then_some(())
            },
            fact,
        )?;
        if recorded.is_none() {
            self.record_command(fact(command))?;
            self.journal.set_attribute(key, value);
        }
        Ok(Ok(()))
    }

    /// `hook-refuse(request, reason)`: journals the refusal of the payload
    /// that the `hook-next` command `request` received, which a retry of a
    /// run failed by it skips.
    pub(super) fn hook_refuse(
        &mut self,
        request: u32,
        reason: String,
    ) -> wasmtime::Result<Result<(), String>> {
        let Some(Fact::HookNext { token, index, .. }) =
            self.journal.command(request).map(|e| e.fact)
        else {
            return Ok(Err(format!("command {request} is not a hook's request")));
        };
        if !self.journal.is_completed(request) {
            return Ok(Err(format!(
                "payload {index} of hook `{token}` has not been received"
            )));
        }
        let reason = keel_core::journal::excerpt(&reason, 1024);
        self.command(
            |f| matches!(f, Fact::HookRefused { request: r, .. } if *r == request).then_some(()),
            |command| Fact::HookRefused {
                command,
                request,
                token: token.clone(),
                index,
                reason: reason.clone(),
            },
        )?;
        tracing::warn!(run_id = %self.run_id, token, index, reason, "the workflow refused a payload");
        Ok(Ok(()))
    }

    /// Journals the completion of every awaited external command the store
    /// can complete now; true if it completed any.
    pub(super) async fn complete_external(&mut self, ids: &[u32]) -> wasmtime::Result<bool> {
        let store = self.store()?.clone();
        let mut done = Vec::new();
        for &id in ids {
            let event = match self.external.get(&id) {
                Some(External::Payload { token, index }) => {
                    let payload = store.payload(&self.run_id, token, *index).await;
                    match payload.map_err(crate::Error::from)? {
                        HookPayload::Ready(payload) => Fact::HookReceived {
                            command: id,
                            payload,
                        },
                        HookPayload::ForceClaimed(by) => Fact::HookForceClaimed {
                            command: id,
                            claimed_by_run_id: by.into_string(),
                        },
                        HookPayload::Pending => continue,
                    }
                }
                Some(External::RunEnd { run_id }) => {
                    // A run that continued as new ends when the last run
                    // of its chain does: that one is watched instead.
                    let run = keel_store::latest_run(store.as_ref(), run_id).await;
                    let run = run.map_err(crate::Error::from)?;
                    if run.run_id != *run_id && !run.status.is_final() {
                        store
                            .watch(&run.run_id, &self.run_id)
                            .await
                            .map_err(crate::Error::from)?;
                        self.external.insert(
                            id,
                            External::RunEnd {
                                run_id: run.run_id.into_string(),
                            },
                        );
                        continue;
                    }
                    if !run.status.is_final() {
                        continue;
                    }
                    Fact::AwaitedRunEnded {
                        command: id,
                        status: run.status.as_str().into(),
                        output: run.output,
                        error: run.error.map(|e| e.message),
                    }
                }
                None => continue,
            };
            self.journal.record(event)?;
            done.push(id);
        }
        for id in &done {
            self.external.remove(id);
        }
        Ok(!done.is_empty())
    }
}

/// A status as the journal records it, for the guest.
pub(super) fn wit_status(status: &str) -> wit::RunStatus {
    match RunStatus::parse(status) {
        // A run that starts later, or waits for a concurrency slot, has not
        // started: pending, to the guest.
        Some(RunStatus::Pending | RunStatus::Scheduled | RunStatus::Queued) => {
            wit::RunStatus::Pending
        }
        Some(RunStatus::Running) | None => wit::RunStatus::Running,
        // A paused run waits for its resume.
        Some(RunStatus::Waiting | RunStatus::Paused) => wit::RunStatus::Waiting,
        Some(RunStatus::Completed) => wit::RunStatus::Completed,
        Some(RunStatus::Failed) => wit::RunStatus::Failed,
        Some(RunStatus::Cancelled) => wit::RunStatus::Cancelled,
        // Read through to the run that continues it; as recorded by no
        // keel, the chain goes on.
        Some(RunStatus::Continued) => wit::RunStatus::Running,
    }
}
