//! Schedules, their fires, and the requests that change them.

use keel_core::RunStatus;
use keel_core::schedule::{Fire, FireOutcome, ScheduleRecord, ScheduleSpec, Spec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::value_of;

/// `POST /v1/schedules`: a schedule to create. Give `cron` (with `tz`) or
/// `every_ms`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRequest {
    /// The schedule's name (letters, digits, `-`, `_`, `.`, `:`; at most
    /// 100): its fires' run IDs are `NAME:YYYYMMDDTHHMMSSZ`. Required to
    /// create; an update takes it from the path.
    #[schemars(regex(pattern = keel_core::ids::NAME_PATTERN), length(max = 100))]
    pub name: Option<String>,
    /// The workflow each fire starts.
    pub workflow: String,
    /// A deployment name (its latest) or component hash; default: the
    /// latest deployment exporting the workflow, at each fire.
    pub deployment: Option<String>,
    /// Every fire's input.
    #[serde(default)]
    pub input: Value,
    /// `additional_metadata` for key expressions (a JSON object).
    pub additional_metadata: Option<Value>,
    /// A cron expression: 5 fields (minute hour day-of-month month
    /// day-of-week), or 6 with seconds first.
    pub cron: Option<String>,
    /// The IANA time zone the cron expression is read in; default `UTC`.
    pub tz: Option<String>,
    /// An interval in milliseconds (at least 1000), on a grid from the
    /// Unix epoch.
    #[schemars(range(min = 1000))]
    pub every_ms: Option<u64>,
    /// Shifts the interval's grid.
    pub offset_ms: Option<u64>,
    /// What a fire does while the previous fire's run is live; default
    /// `skip`.
    pub overlap: Option<keel_core::schedule::Overlap>,
    /// A fire due longer ago than this (after an outage) is missed;
    /// default a year (31536000000).
    pub catchup_window_ms: Option<u64>,
    /// Created paused.
    #[serde(default)]
    pub paused: bool,
    /// Why (shown with the schedule).
    pub note: Option<String>,
    /// No fire before this time (ms since the epoch).
    pub start_at_ms: Option<u64>,
    /// No fire after this time.
    pub end_at_ms: Option<u64>,
}

impl ScheduleRequest {
    /// The schedule's settings, checked for a spec that can fire.
    pub fn spec(self) -> Result<ScheduleSpec, keel_host::Error> {
        let name = self.name.clone().unwrap_or_default();
        let invalid = |reason: String| keel_host::Error::InvalidSchedule {
            name: name.clone(),
            reason,
        };
        let spec = match (&self.cron, self.every_ms) {
            (Some(expr), None) => Spec::cron(expr, self.tz.as_deref()),
            (None, Some(every)) => {
                if self.tz.is_some() {
                    return Err(invalid("`tz` goes with `cron`, not `every_ms`".into()));
                }
                Spec::every(every, self.offset_ms.unwrap_or(0))
            }
            (Some(_), Some(_)) => {
                return Err(invalid("give `cron` or `every_ms`, not both".into()));
            }
            (None, None) => return Err(invalid("give `cron` (with `tz`) or `every_ms`".into())),
        }
        .map_err(|e| invalid(e.to_string()))?;
        Ok(ScheduleSpec {
            spec,
            input: self.input.to_string(),
            additional_metadata: self.additional_metadata.map(|m| m.to_string()),
            overlap: self.overlap.unwrap_or_default(),
            catchup_window_ms: self
                .catchup_window_ms
                .unwrap_or(keel_core::schedule::DEFAULT_CATCHUP_WINDOW_MS),
            name,
            workflow: self.workflow,
            deployment: self.deployment,
            paused: self.paused,
            note: self.note,
            start_at_ms: self.start_at_ms,
            end_at_ms: self.end_at_ms,
            declared_by: None,
        })
    }
}

/// One nominal fire time and what became of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FireView {
    /// When the spec said to fire (ms since the epoch).
    pub nominal_ms: u64,
    /// When the fire was decided.
    pub at_ms: u64,
    pub outcome: FireOutcome,
    /// The fire's run, when it started (or had started before).
    pub run_id: Option<String>,
    /// Why its start was refused.
    pub error: Option<String>,
    /// Its run's status when the view was made (absent without a run, or
    /// if the run is gone).
    #[serde(default)]
    pub run_status: Option<RunStatus>,
}

impl From<&Fire> for FireView {
    fn from(f: &Fire) -> Self {
        FireView {
            nominal_ms: f.nominal_ms,
            at_ms: f.at_ms,
            outcome: f.outcome,
            run_id: f.run_id.as_ref().map(|r| r.to_string()),
            error: f.error.clone(),
            run_status: None,
        }
    }
}

/// A schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleView {
    pub name: String,
    pub workflow: String,
    pub deployment: Option<String>,
    pub input: Value,
    pub additional_metadata: Option<Value>,
    pub spec: Spec,
    /// The spec in words.
    pub description: String,
    pub overlap: keel_core::schedule::Overlap,
    pub catchup_window_ms: u64,
    pub paused: bool,
    pub note: Option<String>,
    pub start_at_ms: Option<u64>,
    pub end_at_ms: Option<u64>,
    /// The next fire not yet decided; absent past the schedule's end.
    pub next_fire_ms: Option<u64>,
    /// The next five fire times.
    pub upcoming_ms: Vec<u64>,
    /// A fire waiting for the live run to end (`buffer-one`).
    pub buffered_ms: Option<u64>,
    /// The run of the latest fire started.
    pub last_run_id: Option<String>,
    /// The latest fires, newest last.
    pub recent: Vec<FireView>,
    /// Fires missed in all.
    pub missed: u64,
    /// The deployment that declares it in code (`#[workflow(schedule(...))]`);
    /// its redeploys update or delete it.
    pub declared_by: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

impl ScheduleView {
    /// The view of `s`, with its next fire times counted from its next fire.
    pub fn of(s: &ScheduleRecord) -> Self {
        let upcoming_ms = match (s.settings.paused, s.next_fire_ms) {
            (false, Some(next)) => {
                let mut times = vec![next];
                times.extend(
                    s.settings
                        .spec
                        .upcoming(next, 4)
                        .into_iter()
                        .filter(|t| s.settings.end_at_ms.is_none_or(|end| *t <= end)),
                );
                times
            }
            _ => Vec::new(),
        };
        ScheduleView {
            name: s.settings.name.clone(),
            workflow: s.settings.workflow.clone(),
            deployment: s.settings.deployment.clone(),
            input: value_of(&s.settings.input),
            additional_metadata: s.settings.additional_metadata.as_deref().map(value_of),
            spec: s.settings.spec.clone(),
            description: s.settings.spec.describe(),
            overlap: s.settings.overlap,
            catchup_window_ms: s.settings.catchup_window_ms,
            paused: s.settings.paused,
            note: s.settings.note.clone(),
            start_at_ms: s.settings.start_at_ms,
            end_at_ms: s.settings.end_at_ms,
            next_fire_ms: s.next_fire_ms,
            upcoming_ms,
            buffered_ms: s.buffered_ms,
            last_run_id: s.last_run_id.as_ref().map(|r| r.to_string()),
            recent: s.recent.iter().map(FireView::from).collect(),
            missed: s.missed,
            declared_by: s.settings.declared_by.clone(),
            created_at_ms: s.created_at_ms,
            updated_at_ms: s.updated_at_ms,
        }
    }
}

/// Every schedule.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleList {
    /// By name.
    pub schedules: Vec<ScheduleView>,
}

/// `POST /v1/schedules/{name}/pause` and `/resume`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    /// Why, shown with the schedule.
    pub note: Option<String>,
}

/// `POST /v1/schedules/{name}/backfill`: every nominal time in
/// `[from_ms, to_ms]` starts its run (one already started is found).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackfillRequest {
    pub from_ms: u64,
    pub to_ms: u64,
}

/// Fires, oldest first.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct FireList {
    pub fires: Vec<FireView>,
}
