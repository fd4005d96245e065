//! Compensation: a workflow registers how to undo each step that took
//! effect, and on an error or a cancel the saga undoes them in reverse
//! order, each as an ordinary journaled step (so each runs once, with a
//! stable step ID, and replays like any other).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::executor::{StepFuture, cancelled, non_cancellable};

type Compensation = Pin<Box<dyn Future<Output = Result<(), Error>>>>;

/// The compensations of what a workflow did so far, run in reverse order
/// when it fails or is cancelled.
///
/// ```ignore
/// #[workflow]
/// async fn book(trip: Trip) -> Result<Booking, keel_sdk::Error> {
///     let saga = keel_sdk::Saga::new();
///     saga.run(async {
///         let flight = saga.step(reserve_flight(trip.clone()), |f| cancel_flight(f.id.clone())).await?;
///         let hotel = saga.step(reserve_hotel(trip.clone()), |h| cancel_hotel(h.id.clone())).await?;
///         Ok(Booking { flight, hotel })
///     })
///     .await
/// }
/// ```
#[derive(Default)]
pub struct Saga {
    compensations: RefCell<Vec<Compensation>>,
}

impl Saga {
    /// A saga with nothing to undo.
    pub fn new() -> Self {
        Saga::default()
    }

    /// Runs `step` to its end, even if the run is cancelled meanwhile (so
    /// that what it did is known), and if it completed registers
    /// `compensation` of its output to undo it. Returns the step's output,
    /// or [`Error::Cancelled`] when the run was cancelled (before the step,
    /// which then never starts, or while it ran).
    pub async fn step<T, U, C>(&self, step: StepFuture<T>, compensation: C) -> Result<T, Error>
    where
        T: DeserializeOwned,
        U: DeserializeOwned + 'static,
        C: FnOnce(&T) -> StepFuture<U>,
    {
        if let Some(cancel) = cancelled() {
            return Err(cancel);
        }
        let output = non_cancellable(step).await?;
        self.add(compensation(&output));
        match cancelled() {
            Some(cancel) => Err(cancel),
            None => Ok(output),
        }
    }

    /// Registers a compensation of something done outside [`Saga::step`].
    pub fn add<U: DeserializeOwned + 'static>(&self, compensation: StepFuture<U>) {
        self.compensations
            .borrow_mut()
            .push(Box::pin(async move { compensation.await.map(|_| ()) }));
    }

    /// Runs the registered compensations in reverse order of registration,
    /// each to its end whatever the run's cancel, and forgets them. Every
    /// one runs even if one before it failed; the first failure is
    /// returned.
    pub async fn compensate(&self) -> Result<(), Error> {
        let compensations = std::mem::take(&mut *self.compensations.borrow_mut());
        let mut first_failure = None;
        for compensation in compensations.into_iter().rev() {
            if let Err(e) = non_cancellable(compensation).await {
                first_failure.get_or_insert(e);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    /// Runs `body`; when it fails (a cancel included), compensates and
    /// returns the body's error. A compensation's failure is added to it.
    pub async fn run<T>(&self, body: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        let failed = match body.await {
            Ok(output) => return Ok(output),
            Err(e) => e,
        };
        match self.compensate().await {
            Ok(()) => Err(failed),
            Err(Error::Cancelled { .. }) => Err(failed),
            Err(e) => Err(Error::Custom(format!(
                "{failed}; then a compensation failed: {e}"
            ))),
        }
    }
}
