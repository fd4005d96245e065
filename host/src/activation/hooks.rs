//! The hook and run-handle commands of an activation: creating, awaiting
//! and disposing of hooks, reading and awaiting other runs, and starting
//! runs. Each is journaled; a command whose effect others can see (a hook
//! registered or released, a run started) flushes the journal first.

use crate::Error;
use crate::hooks::{HookRecord, Payload};
use crate::journal::{Event, HookRegistration, StartOutcome};
use crate::sandbox::wit;
use crate::store::RunStatus;

use super::Activation;

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

/// A hook the workflow holds a handle to.
pub(super) struct OpenHook {
    pub(super) token: String,
    pub(super) next_index: u64,
}

impl Activation {
    /// `create_hook(options)`: registers the hook in the store (or binds
    /// to the run's start hook) and journals the store's answer. Options
    /// that belong to `start()` are refused on the start hook.
    pub async fn create_hook(
        &mut self,
        options: wit::HookOptions,
    ) -> wasmtime::Result<Result<wit::Hook, String>> {
        let token = options
            .token
            .clone()
            .unwrap_or_else(|| format!("{}:hook:{}", self.run_id, self.next_command));
        let force = options.force;
        let (command, recorded) = self.match_command(
            |e| match e {
                Event::HookCreated {
                    token: t,
                    force: f,
                    registration,
                    ..
                } if *t == token && *f == force => Some(registration.clone()),
                _ => None,
            },
            |command| Event::HookCreated {
                command,
                token: token.clone(),
                force,
                registration: HookRegistration::Registered,
            },
        )?;
        let registration = match recorded {
            Some(registration) => registration,
            None => {
                // Tokens are unique among active hooks, within a run too.
                let registration = if self.hooks.values().any(|h| h.token == token) {
                    HookRegistration::Conflict {
                        owner_run_id: self.run_id.clone(),
                    }
                } else {
                    self.register(&token, command, &options).await?
                };
                self.append_command(Event::HookCreated {
                    command,
                    token: token.clone(),
                    force,
                    registration: registration.clone(),
                })
                .await?;
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

    /// Registers the hook of `command` in the store, waking the run it
    /// takes the token from, if any.
    async fn register(
        &mut self,
        token: &str,
        command: u32,
        options: &wit::HookOptions,
    ) -> wasmtime::Result<HookRegistration> {
        let now = self.inner.config.clock.now_ms();
        let hook = HookRecord {
            token: token.to_string(),
            run_id: self.run_id.clone(),
            command: Some(command),
            metadata: options.metadata.clone(),
            created_at_ms: now,
            retain_until_ms: options.min_retention_ms.map(|ms| now.saturating_add(ms)),
            active: true,
            next_payload: 0,
        };
        self.flush_before_effect().await?;
        let (registration, claimed_from) =
            self.inner.store.register_hook(&hook, options.force, now)?;
        if let Some(old_owner) = claimed_from {
            tracing::info!(run_id = %self.run_id, old_owner, token, "token taken over");
            self.inner.poke(&old_owner);
        }
        Ok(registration)
    }

    /// Asks for the next payload of the hook `handle`.
    pub async fn hook_next(&mut self, handle: u32) -> wasmtime::Result<u32> {
        let Some(hook) = self.hooks.get_mut(&handle) else {
            return Err(wasmtime::Error::new(Error::WorkflowFailed {
                run_id: self.run_id.clone(),
                message: format!(
                    "it awaits hook {handle}, which it does not hold (it was disposed of, or its token is held by another run)"
                ),
            }));
        };
        let (token, index) = (hook.token.clone(), hook.next_index);
        hook.next_index += 1;
        let (command, _) = self
            .command(
                |e| match e {
                    Event::HookNext { hook, index: i, .. } => {
                        (*hook == handle && *i == index).then_some(())
                    }
                    _ => None,
                },
                |command| Event::HookNext {
                    command,
                    hook: handle,
                    token: token.clone(),
                    index,
                },
            )
            .await?;
        if !self.offline && !self.journal.is_completed(command) {
            self.external
                .insert(command, External::Payload { token, index });
        }
        Ok(command)
    }

    /// Disposes of the hook `handle`: its token is released at once.
    pub async fn dispose_hook(&mut self, handle: u32) -> wasmtime::Result<()> {
        let Some(hook) = self.hooks.remove(&handle) else {
            return Ok(());
        };
        let event = |command| Event::HookDisposed {
            command,
            hook: handle,
        };
        let (command, recorded) = self.match_command(
            |e| matches!(e, Event::HookDisposed { hook, .. } if *hook == handle).then_some(()),
            event,
        )?;
        if recorded.is_none() {
            self.flush_before_effect().await?;
            self.inner.store.dispose_hook(&self.run_id, &hook.token)?;
            self.append_command(event(command)).await?;
        }
        Ok(())
    }

    /// Another run's status, read once and journaled.
    pub async fn run_status(&mut self, run_id: String) -> wasmtime::Result<wit::RunStatus> {
        let (command, recorded) = self.match_command(
            |e| match e {
                Event::RunStatusRead {
                    run_id: r, status, ..
                } if *r == run_id => Some(status.clone()),
                _ => None,
            },
            |command| Event::RunStatusRead {
                command,
                run_id: run_id.clone(),
                status: String::new(),
            },
        )?;
        let status = match recorded {
            Some(status) => status,
            None => {
                let status = self
                    .inner
                    .store
                    .get_run(&run_id)?
                    .status
                    .as_str()
                    .to_string();
                self.append_command(Event::RunStatusRead {
                    command,
                    run_id,
                    status: status.clone(),
                })
                .await?;
                status
            }
        };
        Ok(wit_status(&status))
    }

    /// Waits for another run to end; the run is woken when it does.
    pub async fn await_run(&mut self, run_id: String) -> wasmtime::Result<u32> {
        let (command, _) = self
            .command(
                |e| matches!(e, Event::RunAwaited { run_id: r, .. } if *r == run_id).then_some(()),
                |command| Event::RunAwaited {
                    command,
                    run_id: run_id.clone(),
                },
            )
            .await?;
        if !self.offline && !self.journal.is_completed(command) {
            self.inner.store.get_run(&run_id)?;
            self.inner.store.watch(&run_id, &self.run_id)?;
            self.external.insert(command, External::RunEnd { run_id });
        }
        Ok(command)
    }

    /// Starts a run of `workflow` of this component. Its run ID derives
    /// from this command, so a recovered run finds the run it started.
    pub async fn start_workflow(
        &mut self,
        workflow: String,
        input: String,
        options: wit::StartOptions,
    ) -> wasmtime::Result<Result<String, wit::StartError>> {
        let (command, recorded) = self.match_command(
            |e| match e {
                Event::WorkflowStarted {
                    workflow: w,
                    input: i,
                    token,
                    outcome,
                    ..
                } if *w == workflow && *i == input && *token == options.token => {
                    Some(outcome.clone())
                }
                _ => None,
            },
            |command| Event::WorkflowStarted {
                command,
                workflow: workflow.clone(),
                input: input.clone(),
                token: options.token.clone(),
                outcome: StartOutcome::Refused {
                    reason: String::new(),
                },
            },
        )?;
        let outcome = match recorded {
            Some(outcome) => outcome,
            None => {
                self.flush_before_effect().await?;
                let child_id = format!("{}.{command}", self.run_id);
                let outcome = crate::engine::start_child(
                    &self.inner,
                    &self.loaded,
                    child_id,
                    &workflow,
                    &input,
                    &options,
                )
                .await?;
                self.append_command(Event::WorkflowStarted {
                    command,
                    workflow,
                    input,
                    token: options.token,
                    outcome: outcome.clone(),
                })
                .await?;
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

    /// Journals the completion of every awaited external command the store
    /// can complete now; true if it completed any.
    pub(super) async fn complete_external(&mut self, ids: &[u32]) -> wasmtime::Result<bool> {
        let store = self.inner.store.clone();
        let mut done = Vec::new();
        for &id in ids {
            let event = match self.external.get(&id) {
                Some(External::Payload { token, index }) => {
                    match store.payload(&self.run_id, token, *index)? {
                        Payload::Ready(payload) => Event::HookReceived {
                            command: id,
                            payload,
                        },
                        Payload::ForceClaimed(by) => Event::HookForceClaimed {
                            command: id,
                            claimed_by_run_id: by,
                        },
                        Payload::Pending => continue,
                    }
                }
                Some(External::RunEnd { run_id }) => {
                    let run = store.get_run(run_id)?;
                    if !run.status.is_final() {
                        continue;
                    }
                    Event::AwaitedRunEnded {
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
        Some(RunStatus::Pending) => wit::RunStatus::Pending,
        Some(RunStatus::Running) | None => wit::RunStatus::Running,
        Some(RunStatus::Waiting) => wit::RunStatus::Waiting,
        Some(RunStatus::Completed) => wit::RunStatus::Completed,
        Some(RunStatus::Failed) => wit::RunStatus::Failed,
        Some(RunStatus::Cancelled) => wit::RunStatus::Cancelled,
    }
}
