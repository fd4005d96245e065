//! Write durable keel workflows and steps in Rust.
//!
//! A crate using `keel-sdk` is compiled to `wasm32-wasip2` and handed to the
//! `keel` host. Workflows are plain `async fn`s that orchestrate; steps are
//! `async fn`s that do the side-effecting work. Calling a step from a
//! workflow reads like calling any `async fn`: the host schedules it, runs it
//! in its own sandbox, retries it and journals the result.
//!
//! ```ignore
//! use keel_sdk::{step, workflow, StepError};
//!
//! #[step(max_retries = 5, initial_backoff = "200ms")]
//! async fn greet(name: String) -> Result<String, StepError> {
//!     Ok(format!("hello {name} from {}", keel_sdk::step_metadata().step_id))
//! }
//!
//! #[workflow]
//! async fn hello(name: String) -> Result<String, keel_sdk::Error> {
//!     let (a, b) = keel_sdk::join!(greet(name.clone()), greet(name));
//!     Ok(format!("{} / {}", a?, b?))
//! }
//!
//! keel_sdk::component!(workflows = [hello], steps = [greet]);
//! ```
//!
//! A workflow can also wait for outside input on a hook, look at other
//! runs and start them; see [`create_hook`], [`RunHandle`] and [`start`].
//!
//! ```ignore
//! #[workflow]
//! async fn approval(order_id: String) -> Result<bool, keel_sdk::Error> {
//!     let mut decisions = keel_sdk::create_hook::<bool>(format!("approve:{order_id}"))?;
//!     if let Some(owner) = decisions.conflict().await {
//!         return owner.return_value().await; // another run decides this order
//!     }
//!     decisions.next().await
//! }
//! ```

#[doc(hidden)]
pub mod bindings;
mod error;
mod executor;
mod hooks;
mod metadata;
mod saga;
mod stream;

#[doc(hidden)]
pub mod __private;

pub use error::{Error, StepError, StepFailure};
pub use executor::{
    NonCancellable, StepFuture, Timer, cancelled, non_cancellable, sleep, sleep_until,
};
pub use futures::{self, future, join, select_biased, try_join};
pub use hooks::{
    ClosePolicy, Hook, HookOptions, Reply, ReturnValue, RunHandle, RunStatus, StartOptions,
    create_hook, resume_hook, start,
};
pub use keel_sdk_macros::{component, step, workflow};
pub use metadata::{
    LogLevel, StepMetadata, WorkflowMetadata, continue_as_new, log, patched, set_attribute,
    set_query, step_metadata, workflow_metadata,
};
pub use saga::Saga;
pub use stream::{StreamWriter, stream};

/// How a step is retried; set with `#[step(...)]` settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Delay before the first retry, in milliseconds.
    pub initial_backoff_ms: u64,
    /// Growth factor of each further delay.
    pub backoff_factor: f64,
    /// Upper bound of any delay, in milliseconds.
    pub max_backoff_ms: u64,
}

/// Asynchronous HTTP and I/O for steps (the `wstd` crate).
#[cfg(target_arch = "wasm32")]
pub use wstd;

/// JSON Schemas of workflow inputs and outputs: derive `JsonSchema` on a
/// workflow's input type and starts with input of another shape are
/// refused before a run exists.
pub use schemars::{self, JsonSchema};

#[cfg(target_arch = "wasm32")]
pub mod http;
