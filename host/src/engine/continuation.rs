//! Continue-as-new: a workflow ends its run, and a run of the same
//! workflow on the same build takes its place with a new input, its start
//! token (with the payloads the run did not take), its attributes and its
//! parent. The new run's ID derives from the old one's
//! ([`keel_core::RunId::continued`]), so a recovered run that continues
//! again finds the run it started; the new run is admitted, taking the
//! token over in the same store transaction, before the old run's end is
//! written.

use keel_core::{RunId, RunRecord};
use keel_store::Handover;

use super::{Keel, StartOptions};
use crate::activation::RunJournal;
use crate::effects::Effect;
use crate::{Error, Result};

impl Keel {
    /// Admits the run that continues `run` with `input`, or finds it
    /// admitted by an earlier activation; its ID. What the journal holds
    /// so far is durable first: the input derives from it. A refusal (an
    /// input the workflow's schema refuses) is the old run's failure.
    pub(super) async fn admit_continuation(
        &self,
        run: &RunRecord,
        input: &str,
        journal: &RunJournal,
    ) -> Result<RunId> {
        let next = run.run_id.continued();
        journal.gate(Effect::Continue).await?;
        let component = self.component_by_hash(&run.component_hash).await?;
        let options = StartOptions {
            attributes: run.attributes.clone(),
            ..StartOptions::default()
        };
        let handover = Handover {
            from: &run.run_id,
            taken: journal.start_payloads_taken(),
        };
        let admitted = self
            .admit(
                &component,
                &run.workflow,
                input,
                &options,
                next.clone(),
                run.parent_run_id.clone(),
                Some(handover),
            )
            .await;
        match admitted {
            Ok(_) => {
                tracing::info!(next_run_id = %next, "the run continues as new");
                Ok(next)
            }
            // Admitted by an earlier activation of the run, which stopped
            // before the run's end was written.
            Err(Error::RunExists { .. }) => Ok(next),
            Err(e) => Err(e),
        }
    }
}
