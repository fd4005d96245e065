//! Retention: how long an ended run is kept, which ended runs are due to
//! be purged, and what a purge or a store holds (the figures operators
//! read). The rules are decided here; stores only select and delete.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{ComponentHash, Deployment, RunId, RunRecord};

/// How long the ended runs of each component are kept: a deployment's own
/// retention, else the worker's default; `None` keeps them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionRules {
    /// The retention of runs whose deployment sets none (or that have no
    /// deployment: imported runs).
    pub default_ms: Option<u64>,
    /// Component hash to its deployment's retention.
    pub by_component: BTreeMap<ComponentHash, u64>,
}

impl RetentionRules {
    /// The rules of `deployments`, with `default_ms` for the others.
    pub fn new(default_ms: Option<u64>, deployments: &[Deployment]) -> RetentionRules {
        let by_component = deployments
            .iter()
            .filter_map(|d| d.retention_ms.map(|ms| (d.hash.clone(), ms)))
            .collect();
        RetentionRules {
            default_ms,
            by_component,
        }
    }

    /// How long `run` is kept once ended; `None` keeps it.
    pub fn of(&self, run: &RunRecord) -> Option<u64> {
        self.by_component
            .get(&run.component_hash)
            .copied()
            .or(self.default_ms)
    }

    /// The shortest retention of all: no run admitted at or after `now`
    /// minus it is due, so a purge reads only the runs admitted before.
    pub fn shortest_ms(&self) -> Option<u64> {
        self.by_component
            .values()
            .copied()
            .chain(self.default_ms)
            .min()
    }

    /// Whether `run` has ended and been kept its retention at `now_ms`. An
    /// ended run's record was last written when it ended.
    pub fn is_due(&self, run: &RunRecord, now_ms: u64) -> bool {
        run.status.is_final()
            && self
                .of(run)
                .is_some_and(|ms| run.updated_at_ms.saturating_add(ms) <= now_ms)
    }
}

/// What a store deleted with the runs it was asked to delete.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Deleted {
    /// The runs deleted, each with everything stored for it.
    pub runs: Vec<RunId>,
    /// Their journal entries.
    pub journal_entries: u64,
    /// The bytes of their records, entries and payloads.
    pub bytes: u64,
}

impl Deleted {
    /// Adds `other`'s figures to these.
    pub fn add(&mut self, other: Deleted) {
        self.runs.extend(other.runs);
        self.journal_entries += other.journal_entries;
        self.bytes += other.bytes;
    }
}

/// What a store holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StoreStats {
    /// Runs by status (`completed`, `waiting`, ...).
    pub runs_by_status: BTreeMap<String, u64>,
    pub journal_entries: u64,
    /// The bytes of the journal entries, encoded.
    pub journal_bytes: u64,
    /// Hooks holding a token (active, or retained after their run ended).
    pub hooks: u64,
    /// Payloads delivered to hooks and not yet released.
    pub payloads: u64,
    pub payload_bytes: u64,
    pub events: u64,
    pub components: u64,
    pub component_bytes: u64,
    /// The store's size on disk (sled: its directory; PostgreSQL: its
    /// tables with their indexes and TOAST).
    pub size_bytes: u64,
}

/// The components a prune may delete: those no deployment and no run
/// (`referenced`) names, last stored at least `grace_ms` before `now_ms`
/// (so that a start or a deploy that has just stored one, and is about to
/// reference it, keeps it). `stored` is each component's hash and when it
/// was last stored.
pub fn prunable_components<'a>(
    stored: impl IntoIterator<Item = (&'a str, u64)>,
    referenced: &std::collections::BTreeSet<&str>,
    now_ms: u64,
    grace_ms: u64,
) -> Vec<String> {
    let cutoff = now_ms.saturating_sub(grace_ms);
    stored
        .into_iter()
        .filter(|(hash, at)| !referenced.contains(hash) && *at <= cutoff)
        .map(|(hash, _)| hash.to_string())
        .collect()
}

/// What a prune of unreferenced components did (or, in a dry run, would
/// do).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Pruned {
    /// The components deleted (a dry run: that would be), by hash.
    pub components: Vec<String>,
    /// The superseded deployments deleted with their components (a newer
    /// build of the name was deployed and no run names them), as
    /// `NAME@HASH`.
    pub deployments: Vec<String>,
    /// Their bytes.
    pub bytes: u64,
    /// Components kept because a deployment's latest build is theirs or a
    /// run names them.
    pub referenced: u64,
    /// Unreferenced components kept because they were stored within the
    /// grace period.
    pub recent: u64,
    /// Nothing was deleted.
    pub dry_run: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunStatus;

    #[test]
    fn only_unreferenced_components_stored_before_the_grace_are_prunable() {
        let stored = [
            ("deployed", 0),
            ("pinned", 0),
            ("orphan", 100),
            ("fresh", 950),
        ];
        let referenced = ["deployed", "pinned"].into_iter().collect();
        assert_eq!(
            prunable_components(stored, &referenced, 1_000, 900),
            ["orphan"],
            "stored at 100, the cutoff is 100"
        );
        assert_eq!(
            prunable_components(stored, &referenced, 1_000, 0),
            ["orphan", "fresh"]
        );
        assert!(prunable_components(stored, &referenced, 1_000, 901).is_empty());
    }

    fn run(hash: &str, status: RunStatus, ended_at: u64) -> RunRecord {
        let mut run = crate::testing::run_record("r", status, ended_at);
        run.component_hash = hash.into();
        run
    }

    fn deployment(hash: &str, retention_ms: Option<u64>) -> Deployment {
        Deployment {
            name: "d".into(),
            hash: hash.into(),
            workflows: vec![],
            steps: vec![],
            grants: Default::default(),
            limits: Default::default(),
            size_bytes: 0,
            deployed_at_ms: 0,
            retention_ms,
        }
    }

    #[test]
    fn a_deployments_retention_wins_over_the_default() {
        let rules = RetentionRules::new(
            Some(100),
            &[deployment("a", Some(10)), deployment("b", None)],
        );
        assert_eq!(rules.of(&run("a", RunStatus::Completed, 0)), Some(10));
        assert_eq!(rules.of(&run("b", RunStatus::Completed, 0)), Some(100));
        assert_eq!(
            rules.of(&run("imported", RunStatus::Completed, 0)),
            Some(100)
        );
        assert_eq!(rules.shortest_ms(), Some(10));
    }

    #[test]
    fn only_ended_runs_past_their_retention_are_due() {
        let rules = RetentionRules::new(None, &[deployment("a", Some(10))]);
        assert!(!rules.is_due(&run("a", RunStatus::Completed, 5), 14));
        assert!(rules.is_due(&run("a", RunStatus::Completed, 5), 15));
        assert!(rules.is_due(&run("a", RunStatus::Failed, 5), 15));
        assert!(!rules.is_due(&run("a", RunStatus::Waiting, 5), 1_000));
        // No default: runs of other components are kept.
        assert!(!rules.is_due(&run("b", RunStatus::Completed, 0), u64::MAX));
        assert_eq!(RetentionRules::default().shortest_ms(), None);
    }
}
