//! Child runs: what a run's end does to the runs it started, by each
//! child's close policy (`cancel`: a cancel request, `abandon`: nothing,
//! `wait`: the end is held until the child has ended), and a run's
//! children as its parent's journal lists them.

use keel_core::lifecycle::{self, Child, ClosePolicy};
use keel_core::{RunId, RunRecord, RunStatus};

use super::Keel;
use crate::activation::RunJournal;
use crate::effects::Effect;
use crate::{Error, Result};

/// What closing a run's children did.
pub(super) struct Closing {
    /// Live children asked to cancel (close policy `cancel`).
    pub cancelled: Vec<RunId>,
    /// Live children the run's end waits for (close policy `wait`): the
    /// run may end when there are none.
    pub waiting_on: Vec<RunId>,
}

/// A run's child with its status now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildRun {
    pub child: Child,
    /// `None` if the child's record cannot be found.
    pub status: Option<RunStatus>,
}

impl Keel {
    /// Applies the close policies of the live children of `run`, about to
    /// end: each `cancel` child gets a cancel request (stored before the
    /// parent's end is, so a crash between them loses none), and unless
    /// `hold` is false (a terminated run ends at once) a live `wait` child
    /// holds the end: the run is woken when it ends.
    pub(super) async fn close_children(
        &self,
        run: &RunRecord,
        journal: &RunJournal,
        hold: bool,
    ) -> Result<Closing> {
        let children = journal.children();
        let mut waiting_on = Vec::new();
        if hold {
            for child in children.iter().filter(|c| c.close == ClosePolicy::Wait) {
                let Some(now) = self.child_now(&child.run_id).await? else {
                    continue;
                };
                if now.status.is_final() {
                    continue;
                }
                // Watched, then read again, so that its end cannot slip
                // between the read and the watch.
                self.store()
                    .watch(now.run_id.as_str(), run.run_id.as_str())
                    .await?;
                if self
                    .child_now(&child.run_id)
                    .await?
                    .is_some_and(|c| !c.status.is_final())
                {
                    waiting_on.push(child.run_id.clone());
                }
            }
        }
        let mut cancelled = Vec::new();
        let mut gated = false;
        for child in children.iter().filter(|c| c.close == ClosePolicy::Cancel) {
            let Some(now) = self.child_now(&child.run_id).await? else {
                continue;
            };
            if now.status.is_final() {
                continue;
            }
            if !std::mem::replace(&mut gated, true) {
                journal.gate(Effect::ChildCancel).await?;
            }
            let request = lifecycle::parent_closed(run, self.now_ms());
            // Boxed: cancelling a child may end it, which closes its own.
            let asked = self.cancel(now.run_id.as_str(), &request.reason, &request.by);
            let after = Box::pin(asked).await?;
            if !after.status.is_final() {
                cancelled.push(now.run_id.clone());
            }
        }
        Ok(Closing {
            cancelled,
            waiting_on,
        })
    }

    /// Drives the children a parent's end asked to cancel through their
    /// cleanup, in the background (a worker may drive them instead).
    pub(super) fn drive_cancelled(&self, children: Vec<RunId>) {
        if children.is_empty() {
            return;
        }
        let keel = self.clone();
        tokio::spawn(async move {
            for child in children {
                if let Err(e) = keel.drive(child.as_str()).await {
                    tracing::warn!(%child, "driving the cancelled child failed: {e}");
                }
            }
        });
    }

    /// A child run as it stands now: the last run of its chain if it
    /// continued as new; `None` if the store no longer holds it (taken as
    /// ended).
    async fn child_now(&self, run_id: &RunId) -> Result<Option<RunRecord>> {
        match keel_store::latest_run(self.store().as_ref(), run_id.as_str()).await {
            Ok(run) => Ok(Some(run)),
            Err(keel_store::StoreError::RunNotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The runs `run_id`'s workflow started, in order, with their close
    /// policies and statuses.
    pub async fn children(&self, run_id: &str) -> Result<Vec<ChildRun>> {
        let entries = self.journal(run_id).await?;
        let index =
            keel_core::index::JournalIndex::new(entries).map_err(|e| Error::JournalWrite {
                run_id: run_id.into(),
                reason: format!("the stored journal is malformed: {e}"),
            })?;
        let mut out = Vec::new();
        for child in index.children() {
            let status = match self.get_run(child.run_id.as_str()).await {
                Ok(run) => Some(run.status),
                Err(Error::RunNotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            out.push(ChildRun { child, status });
        }
        Ok(out)
    }
}
