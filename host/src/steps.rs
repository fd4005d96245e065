//! Step execution: each attempt in a fresh instance of the step sandbox,
//! retried under the step's policy, every attempt journaled before it runs.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::activation::{RunJournal, now_ms};
use crate::component::{Loaded, RetryPolicy};
use crate::engine::Inner;
use crate::journal::Event;
use crate::sandbox::{GuestLog, HostState, StepContext, wit};

/// One step of one run, from its next attempt until it completes or fails.
pub(crate) struct StepTask {
    pub inner: Arc<Inner>,
    pub loaded: Arc<Loaded>,
    pub journal: Arc<RunJournal>,
    pub run_id: String,
    pub command: u32,
    pub name: String,
    pub input: String,
    pub step_id: String,
    pub retry: RetryPolicy,
    pub next_attempt: u32,
    pub not_before_ms: Option<u64>,
}

/// Fuel between two yields of a step guest to tokio (about 10 ms of work).
const STEP_YIELD_FUEL: u64 = 10_000_000;

/// How one attempt ended.
enum Attempt {
    Ok(String),
    Fatal(String),
    Retryable {
        message: String,
        after: Option<Duration>,
    },
}

impl StepTask {
    pub async fn run(self) {
        let span = tracing::info_span!("step", run_id = %self.run_id, step_id = %self.step_id, step = %self.name);
        let journal = self.journal.clone();
        if let Err(e) = self.attempts().instrument(span).await {
            journal.fail(e.to_string());
        }
    }

    async fn attempts(self) -> crate::Result<()> {
        if let Some(at) = self.not_before_ms {
            tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()))).await;
        }
        let mut attempt = self.next_attempt;
        loop {
            let started = self
                .journal
                .append(Event::StepAttemptStarted {
                    command: self.command,
                    attempt,
                })
                .await?;
            let outcome = self.execute(attempt, started.at_ms).await;
            let command = self.command;
            let event = match outcome {
                Attempt::Ok(output) => Event::StepCompleted { command, output },
                Attempt::Fatal(error) => Event::StepFailed {
                    command,
                    error,
                    fatal: true,
                    attempts: attempt,
                },
                Attempt::Retryable { message, .. } if attempt > self.retry.max_retries => {
                    Event::StepFailed {
                        command,
                        error: message,
                        fatal: false,
                        attempts: attempt,
                    }
                }
                Attempt::Retryable { message, after } => {
                    let delay = self.retry.backoff(attempt).max(after.unwrap_or_default());
                    tracing::info!(attempt, ?delay, "step attempt failed, retrying: {message}");
                    let retry_at_ms = now_ms() + delay.as_millis() as u64;
                    self.journal
                        .append(Event::StepAttemptFailed {
                            command,
                            attempt,
                            error: message,
                            retry_at_ms,
                        })
                        .await?;
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                    continue;
                }
            };
            // The run's next flush (before its next step attempt, or its
            // end) makes the result durable before anything depends on it.
            self.journal.record(event)?;
            return Ok(());
        }
    }

    async fn execute(&self, attempt: u32, started_at_ms: u64) -> Attempt {
        let ctx = StepContext {
            metadata: wit::StepMetadata {
                step_id: self.step_id.clone(),
                attempt,
                step_name: self.name.clone(),
                run_id: self.run_id.clone(),
                attempt_started_at_ms: started_at_ms,
            },
            keel: crate::Keel::from_inner(self.inner.clone()),
        };
        let log = GuestLog::new(&self.run_id);
        let config = &self.inner.config;
        let state = match HostState::step(ctx, &config.grants, log.clone(), config.max_memory) {
            Ok(state) => state,
            Err(e) => return Attempt::Fatal(e.to_string()),
        };
        let mut store = wasmtime::Store::new(&self.inner.engine, state);
        store.limiter(|s| &mut s.limits);
        // Fuel is not a bound for steps, only a way to make a busy guest
        // yield to tokio, so that the attempt's timeout can stop it.
        let fueled = store
            .set_fuel(u64::MAX)
            .and_then(|()| store.fuel_async_yield_interval(Some(STEP_YIELD_FUEL)));
        if let Err(e) = fueled {
            return Attempt::Fatal(e.to_string());
        }
        let call = async {
            let instance = self.loaded.step_pre.instantiate_async(&mut store).await?;
            instance
                .keel_workflow_guest()
                .call_run_step(&mut store, &self.name, &self.input)
                .await
        };
        let timeout = config.step_timeout;
        let Ok(result) = tokio::time::timeout(timeout, call).await else {
            return Attempt::Retryable {
                message: format!(
                    "the attempt timed out after {timeout:?}; if the step needs longer, raise --step-timeout"
                ),
                after: None,
            };
        };
        match result {
            Ok(Ok(output)) => Attempt::Ok(output),
            Ok(Err(wit::StepError::Fatal(message))) => Attempt::Fatal(message),
            Ok(Err(wit::StepError::Retryable(e))) => Attempt::Retryable {
                message: e.message,
                after: e.retry_after_ms.map(Duration::from_millis),
            },
            Err(trap) => {
                let tail = log.tail();
                let message = crate::engine::describe_trap(&trap, &tail);
                Attempt::Retryable {
                    message: format!("the step trapped: {message}"),
                    after: None,
                }
            }
        }
    }
}
