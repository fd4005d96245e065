//! Streams out of a run: named sequences of JSON values that clients read
//! while the run goes on (`GET /v1/runs/{id}/streams/{name}`, `keel runs
//! stream`), such as a model's tokens or progress.
//!
//! [`stream`] gives a writer usable in workflows and in steps:
//!
//! - **In a workflow** a write is journaled: it happens exactly once, and
//!   replay writes nothing new. Readers get it when the workflow next waits
//!   (on a step, a timer, a hook) or ends.
//! - **In a step** a write goes out at once, tagged with the attempt, and
//!   is not journaled. When a later attempt of the step begins (a retry, or
//!   the step run again after a crash), readers see a `restart` marker in
//!   each stream an earlier attempt wrote: the chunks of that step before
//!   the marker no longer count.
//!
//! ```ignore
//! #[step]
//! async fn answer(prompt: String) -> Result<String, StepError> {
//!     let tokens = keel_sdk::stream::<String>("tokens");
//!     let mut text = String::new();
//!     for token in model(&prompt).await? {
//!         tokens.write(&token)?;
//!         text.push_str(&token);
//!     }
//!     Ok(text)
//! }
//! ```

use std::cell::Cell;
use std::marker::PhantomData;

use serde::Serialize;

use crate::bindings::keel::workflow::{step_context, workflow_context};
use crate::error::Error;

thread_local! {
    /// A step is running (rather than a workflow).
    static IN_STEP: Cell<bool> = const { Cell::new(false) };
}

/// Marks the guest as running a step while `f` runs.
pub(crate) fn in_step<T>(f: impl FnOnce() -> T) -> T {
    IN_STEP.with(|s| s.set(true));
    let out = f();
    IN_STEP.with(|s| s.set(false));
    out
}

/// A writer of the run's stream `name`, whose chunks are `T`s (as JSON).
/// Names are 1 to 128 ASCII letters, digits, `_`, `-`, `.` and `:`.
pub fn stream<T: Serialize + ?Sized>(name: impl Into<String>) -> StreamWriter<T> {
    StreamWriter {
        name: name.into(),
        _chunk: PhantomData,
    }
}

/// A writer of one of the run's streams; see [`stream`].
#[derive(Clone, Debug)]
pub struct StreamWriter<T: ?Sized> {
    name: String,
    _chunk: PhantomData<fn(&T)>,
}

impl<T: Serialize + ?Sized> StreamWriter<T> {
    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Appends `value` to the stream. Fails on a closed stream, a bad
    /// name, a value over the payload bound or (in a step) the run's
    /// stream bound.
    pub fn write(&self, value: &T) -> Result<(), Error> {
        let json = serde_json::to_string(value)?;
        let written = if IN_STEP.with(Cell::get) {
            step_context::stream_write(&self.name, &json)
        } else {
            workflow_context::stream_write(&self.name, &json)
        };
        written.map_err(|e| Error::Custom(format!("writing stream `{}`: {e}", self.name)))
    }

    /// Closes the stream: readers reach its end, and later writes fail.
    pub fn close(&self) -> Result<(), Error> {
        let closed = if IN_STEP.with(Cell::get) {
            step_context::stream_close(&self.name)
        } else {
            workflow_context::stream_close(&self.name)
        };
        closed.map_err(|e| Error::Custom(format!("closing stream `{}`: {e}", self.name)))
    }
}
