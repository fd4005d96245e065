//! Restarts and forks on request (`keel_core::restart`): an ended run
//! again from a step or a position of its journal, in place
//! (`RunRestarted`, honoured by replay as a retry is), or a new run whose
//! journal carries the source's up to there. Either one on another build
//! only if what it keeps replays there, the first difference named if not.

use std::sync::Arc;

use keel_core::index::JournalIndex;
use keel_core::journal::{Entry, Fact};
use keel_core::restart::{self, RestartPoint};
use keel_core::{RunId, RunRecord};

use super::Keel;
use crate::component::Loaded;
use crate::{Error, Result, StartOptions};

/// The attribute a fork is given: the run it was forked from.
pub const FORKED_FROM: &str = "forked_from";

/// What a fork takes besides its source, its point and who asks.
#[derive(Clone, Debug, Default)]
pub struct ForkOptions {
    /// A deployment name or a build's hash to run on (the source's if
    /// absent).
    pub on: Option<String>,
    /// The fork's input, as JSON (the source's if absent).
    pub input: Option<String>,
    /// The fork's run ID, chosen by the caller so that a fork whose answer
    /// was lost is asked again into the same run (then refused as
    /// `run_exists`, naming it); a new one if absent.
    pub run_id: Option<RunId>,
}

impl Keel {
    /// Restarts an ended run from `point` (a step's first scheduling, or a
    /// journal position), by `by`: the journal records the restart
    /// (`RunRestarted`), the commands from there run again under the same
    /// command and step IDs, and the steps before it keep their results.
    /// With `on` (a deployment name or a build's hash) the run is pinned to
    /// that build. The run is live again on return (a worker, or `drive`,
    /// takes it on). Refused ([`Error::NotRestartable`]) for a live run,
    /// for a point its journal does not hold, when the part that runs
    /// again started runs or wrote streams (seen outside; a fork can), and
    /// on another build unless the part kept replays there.
    pub async fn restart_run(
        &self,
        run_id: &str,
        point: &RestartPoint,
        on: Option<&str>,
        by: &str,
    ) -> Result<RunRecord> {
        let run = self.get_run(run_id).await?;
        let refuse = |reason: String| Error::NotRestartable {
            run_id: run.run_id.clone(),
            action: "restarted",
            reason,
        };
        if !run.status.is_final() {
            return Err(refuse(format!(
                "it is {}; only an ended run is restarted in place (fork it, or cancel it first)",
                run.status.as_str()
            )));
        }
        let (index, from_seq) = self.point_of(&run, point).await?.map_err(&refuse)?;
        if let Some(why) = restart::restart_refusal(&index, from_seq)
            .or_else(|| restart::undone_work_refusal(&index, from_seq))
        {
            return Err(refuse(why));
        }
        let (loaded, moved) = self.target_of(&run, on).await?;
        if moved {
            let kept = index.entries()[..from_seq as usize].to_vec();
            self.check_replays(&loaded, &run, kept)
                .await
                .map_err(&refuse)?;
        }
        let entry = index.next_entry(
            Fact::RunRestarted {
                from_seq,
                by: by.into(),
            },
            self.now_ms(),
        );
        let on = moved.then(|| loaded.hash.clone());
        let run = self.reopen(run.clone(), vec![entry], on).await?.ok_or_else(|| {
            refuse("its workflow has a concurrency limit and the run, which did not fail, holds no slot to take back; fork it instead (a fork asks for a slot as any start does)".into())
        })?;
        tracing::info!(run_id, from_seq, by, "run restarted");
        Ok(run)
    }

    /// Forks a run from `point` into a new run of the same workflow, by
    /// `by`: its journal carries the source's commands and completions
    /// before the point (steps keep their results; their step IDs are the
    /// fork's own), as `options` say (its build, input and run ID). It is admitted as any start
    /// (its input checked, its idempotency key and concurrency slot
    /// claimed), with the source's attributes and `forked_from=SOURCE`.
    /// Refused ([`Error::NotRestartable`]) for a point the journal does not
    /// hold, when the part carried holds a hook, a run it started or a
    /// stream chunk (a new run cannot take them over), and when the part
    /// carried does not replay on the fork's build and input, naming the
    /// first difference.
    pub async fn fork_run(
        &self,
        run_id: &str,
        point: &RestartPoint,
        options: &ForkOptions,
        by: &str,
    ) -> Result<RunRecord> {
        let (on, input) = (options.on.as_deref(), options.input.as_deref());
        let source = self.get_run(run_id).await?;
        let refuse = |reason: String| Error::NotRestartable {
            run_id: source.run_id.clone(),
            action: "forked",
            reason,
        };
        let (index, from_seq) = self.point_of(&source, point).await?.map_err(&refuse)?;
        let fork_id = options
            .run_id
            .clone()
            .unwrap_or_else(|| RunId::from(uuid::Uuid::now_v7().to_string()));
        let carried = restart::fork_prefix(&index, from_seq, &fork_id).map_err(&refuse)?;
        let (loaded, _) = self.target_of(&source, on).await?;
        let input = match input {
            Some(input) => serde_json::from_str::<serde_json::Value>(input)
                .map_err(|e| Error::InvalidInput {
                    reason: format!("the fork's input is not JSON: {e}"),
                })?
                .to_string(),
            None => source.input.clone(),
        };
        let fork = RunRecord {
            run_id: fork_id.clone(),
            input: input.clone(),
            component_hash: loaded.hash.clone(),
            ..source.clone()
        };
        let mut journal = vec![Entry {
            seq: 0,
            at_ms: self.now_ms(),
            fact: Fact::RunStarted {
                workflow: source.workflow.clone(),
                input: input.clone(),
            },
        }];
        journal.extend(carried.iter().enumerate().map(|(i, e)| Entry {
            seq: i as u64 + 1,
            ..e.clone()
        }));
        self.check_replays(&loaded, &fork, journal)
            .await
            .map_err(&refuse)?;
        let mut attributes = source.attributes.clone();
        attributes.insert(FORKED_FROM.into(), source.run_id.to_string());
        let options = StartOptions {
            run_id: Some(fork_id),
            attributes,
            carried,
            ..StartOptions::default()
        };
        let run = self
            .start_with(&loaded, &source.workflow, &input, &options)
            .await?;
        tracing::info!(run_id, fork = %run.run_id, from_seq, by, "run forked");
        Ok(run)
    }

    /// The index of `run`'s stored journal and the position `point` names
    /// in it, or why it names none.
    async fn point_of(
        &self,
        run: &RunRecord,
        point: &RestartPoint,
    ) -> Result<std::result::Result<(JournalIndex, u64), String>> {
        let entries = self.store().journal(run.run_id.as_str()).await?;
        Ok(JournalIndex::new(entries)
            .map_err(|e| format!("its stored journal is malformed: {e}"))
            .and_then(|index| {
                let from_seq = restart::start_over_at(&index, point)?;
                Ok((index, from_seq))
            }))
    }

    /// The build `on` names (a deployment name, or a hash or its unique
    /// prefix), or `run`'s own; and whether it is another than the run's.
    async fn target_of(&self, run: &RunRecord, on: Option<&str>) -> Result<(Arc<Loaded>, bool)> {
        let hash = match on {
            Some(target) => self.deployment(target).await?.hash,
            None => run.component_hash.clone(),
        };
        let loaded = self.component_by_hash(&hash).await?;
        loaded.check_workflow(&run.workflow)?;
        Ok((loaded, hash != run.component_hash))
    }

    /// Whether `entries` of `run` replay on `loaded`; the first difference
    /// if not.
    async fn check_replays(
        &self,
        loaded: &Arc<Loaded>,
        run: &RunRecord,
        entries: Vec<Entry>,
    ) -> std::result::Result<(), String> {
        let verdict = self
            .replay_entries(loaded, run, entries)
            .await
            .map_err(|e| e.to_string())?;
        match verdict.is_ok() {
            true => Ok(()),
            false => Err(format!(
                "its journal up to there does not replay on build {}: {}",
                &loaded.hash.as_str()[..12.min(loaded.hash.as_str().len())],
                verdict.summary()
            )),
        }
    }
}
