//! Which runs a listing asks for: filters by status, workflow and creation
//! time, and the cursor that pages through runs newest first.

use serde::{Deserialize, Serialize};

use crate::ids::RunId;
use crate::records::{RunRecord, RunStatus};

/// The most runs one page of a listing holds; a caller pages on with the
/// cursor for more.
pub const MAX_PAGE: usize = 1000;

/// A listing's filters; empty fields match every run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFilter {
    /// Any of these statuses.
    pub statuses: Vec<RunStatus>,
    /// This workflow.
    pub workflow: Option<String>,
    /// Created at or after this time.
    pub since_ms: Option<u64>,
    /// Created before this time.
    pub until_ms: Option<u64>,
    /// The run ID, or the workflow, contains this text.
    pub search: Option<String>,
    /// Fired by this schedule (its run ID names the schedule).
    pub schedule: Option<String>,
    /// Has every one of these attributes with this value.
    #[serde(default)]
    pub attributes: crate::records::Attributes,
}

impl RunFilter {
    /// Whether `run` passes every filter.
    pub fn matches(&self, run: &RunRecord) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&run.status))
            && self.workflow.as_ref().is_none_or(|w| *w == run.workflow)
            && self.since_ms.is_none_or(|t| run.created_at_ms >= t)
            && self.until_ms.is_none_or(|t| run.created_at_ms < t)
            && self.search.as_ref().is_none_or(|s| {
                run.run_id.contains(s.as_str()) || run.workflow.contains(s.as_str())
            })
            && self.schedule.as_ref().is_none_or(|s| {
                crate::schedule::parse_fire_run_id(&run.run_id).is_some_and(|(name, _)| name == s)
            })
            && self
                .attributes
                .iter()
                .all(|(k, v)| run.attributes.get(k) == Some(v))
    }

    /// Whether runs created before `created_at_ms` can still match (runs
    /// are listed newest first, so a listing stops below `since`).
    pub fn reaches(&self, created_at_ms: u64) -> bool {
        self.since_ms.is_none_or(|t| created_at_ms >= t)
    }
}

/// A place in the listing of runs, which is newest first: by admission
/// time, then by run ID (whatever IDs clients chose). The runs after a
/// cursor are those that sort below it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunCursor {
    pub created_at_ms: u64,
    pub run_id: RunId,
}

impl RunCursor {
    /// The place of `run`: the next page starts after it.
    pub fn of(run: &RunRecord) -> RunCursor {
        RunCursor {
            created_at_ms: run.created_at_ms,
            run_id: run.run_id.clone(),
        }
    }

    /// The place above every run created before `ms` (and below every run
    /// created at `ms` or later): where a listing `until_ms` starts.
    pub fn before_time(ms: u64) -> RunCursor {
        RunCursor {
            created_at_ms: ms,
            run_id: RunId::default(),
        }
    }

    /// The cursor as a listing hands it out: `MS-RUNID`.
    pub fn encode(&self) -> String {
        format!("{}-{}", self.created_at_ms, self.run_id)
    }

    /// A cursor [`RunCursor::encode`] made, or `None`.
    pub fn decode(s: &str) -> Option<RunCursor> {
        let (ms, run_id) = s.split_once('-')?;
        Some(RunCursor {
            created_at_ms: ms.parse().ok()?,
            run_id: RunId::from(run_id),
        })
    }
}

/// One page of a listing, newest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunPage {
    pub runs: Vec<RunRecord>,
    /// Where the next page starts ([`RunCursor::encode`]); `None` on the
    /// last page.
    pub next_cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, workflow: &str, status: RunStatus, at: u64) -> RunRecord {
        RunRecord {
            run_id: id.into(),
            workflow: workflow.into(),
            component_hash: "h".into(),
            input: "null".into(),
            status,
            output: None,
            error: None,
            created_at_ms: at,
            updated_at_ms: at,
            wake_at_ms: None,
            parent_run_id: None,
            attributes: Default::default(),
        }
    }

    #[test]
    fn cursors_order_by_time_then_id_and_round_trip() {
        let older = RunCursor::of(&run("zzzz-older", "w", RunStatus::Pending, 100));
        let newer = RunCursor::of(&run("aaaa-newer", "w", RunStatus::Pending, 200));
        assert!(older < newer);
        assert!(RunCursor::before_time(200) < newer);
        assert!(older < RunCursor::before_time(101));
        assert_eq!(RunCursor::decode(&older.encode()), Some(older));
        assert_eq!(RunCursor::decode("x-1"), None);
        assert_eq!(RunCursor::decode("12"), None);
    }

    #[test]
    fn every_attribute_of_a_filter_must_match() {
        let mut r = run("0192-abc", "order", RunStatus::Failed, 100);
        r.attributes = [("tenant", "acme"), ("region", "eu")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        let filter = |pairs: &[(&str, &str)]| RunFilter {
            attributes: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        assert!(filter(&[("tenant", "acme")]).matches(&r));
        assert!(filter(&[("tenant", "acme"), ("region", "eu")]).matches(&r));
        assert!(!filter(&[("tenant", "acme"), ("region", "us")]).matches(&r));
        assert!(!filter(&[("plan", "pro")]).matches(&r));
    }

    #[test]
    fn every_filter_must_pass() {
        let r = run("0192-abc", "order", RunStatus::Failed, 100);
        assert!(RunFilter::default().matches(&r));
        let failed = RunFilter {
            statuses: vec![RunStatus::Failed, RunStatus::Cancelled],
            ..Default::default()
        };
        assert!(failed.matches(&r));
        let waiting = RunFilter {
            statuses: vec![RunStatus::Waiting],
            ..Default::default()
        };
        assert!(!waiting.matches(&r));
        let other = RunFilter {
            workflow: Some("refund".into()),
            ..Default::default()
        };
        assert!(!other.matches(&r));
        let window = RunFilter {
            since_ms: Some(100),
            until_ms: Some(101),
            ..Default::default()
        };
        assert!(window.matches(&r));
        assert!(
            !RunFilter {
                until_ms: Some(100),
                ..Default::default()
            }
            .matches(&r)
        );
        assert!(
            RunFilter {
                search: Some("abc".into()),
                ..Default::default()
            }
            .matches(&r)
        );
        assert!(
            RunFilter {
                search: Some("ord".into()),
                ..Default::default()
            }
            .matches(&r)
        );
        assert!(
            !RunFilter {
                search: Some("zzz".into()),
                ..Default::default()
            }
            .matches(&r)
        );
    }
}
