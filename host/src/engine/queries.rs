//! Queries of a run's state ([`keel_core::run_query`]): answered by an
//! offline replay of its journal on its build, which writes nothing and
//! runs no step, so a query never changes the run it reads.

use keel_core::divergence::Verdict;
use keel_core::run_query::RunQueries;

use super::Keel;
use crate::{Error, Result};

impl Keel {
    /// The queries run `run_id`'s workflow had set when a replay of its
    /// journal reached the end (live or ended; nothing is written).
    /// `QueryReplay` when the journal does not replay on the run's build.
    pub async fn queries(&self, run_id: &str) -> Result<RunQueries> {
        let run = self.get_run(run_id).await?;
        let loaded = self.component_by_hash(&run.component_hash).await?;
        let entries = self.store().journal(run_id).await?;
        let position = entries.last().map_or(0, |e| e.seq);
        let (verdict, values) = self
            .inner
            .runtime
            .replay_queries(&loaded, &run, entries)
            .await?;
        if let Verdict::Diverged(_) = verdict {
            return Err(Error::QueryReplay {
                run_id: run.run_id,
                verdict: verdict.summary(),
            });
        }
        tracing::debug!(%run_id, position, queries = values.len(), "queries answered by a replay");
        Ok(RunQueries {
            run_id: run.run_id,
            position,
            values,
        })
    }

    /// The value (JSON) of run `run_id`'s query `name`, as
    /// [`Keel::queries`] answers it; `QueryNotFound` naming the queries
    /// the workflow set when it set no `name`.
    pub async fn query(&self, run_id: &str, name: &str) -> Result<(RunQueries, String)> {
        let mut queries = self.queries(run_id).await?;
        match queries.values.remove(name) {
            Some(value) => Ok((queries, value)),
            None => Err(Error::QueryNotFound {
                run_id: queries.run_id,
                name: name.into(),
                set: queries.values.into_keys().collect(),
            }),
        }
    }
}
