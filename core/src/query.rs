//! Which runs a listing asks for: filters by status, workflow and creation
//! time, and the cursor that pages through runs newest first.

use serde::{Deserialize, Serialize};

use crate::records::{RunRecord, RunStatus};

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
    }

    /// Whether runs created before `created_at_ms` can still match (runs
    /// are listed newest first, so a listing stops below `since`).
    pub fn reaches(&self, created_at_ms: u64) -> bool {
        self.since_ms.is_none_or(|t| created_at_ms >= t)
    }
}

/// One page of a listing, newest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunPage {
    pub runs: Vec<RunRecord>,
    /// Pass as `before` for the next page; `None` on the last page.
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
        }
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
