//! Schedules: a workflow started on time. What a schedule is (its spec,
//! overlap and catch-up policies, pause, bounds, recent fires), when its
//! spec fires (cron in an IANA time zone, or an interval), the run ID a
//! fire derives from the schedule and its nominal time, and the pure
//! decision of what a schedule does at a moment: which nominal times start
//! a run, which are skipped, buffered or missed. No I/O: the engine carries
//! the decisions out, and admission by the derived run ID makes each fire
//! happen at most once, whichever worker (or how many) decides it.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::RunId;

/// The fires a schedule keeps in its record, newest last.
pub const RECENT_FIRES: usize = 50;

/// The longest a schedule's name may be: its fires' run IDs add the
/// nominal time to it.
pub const MAX_SCHEDULE_NAME: usize = 100;

/// Catch-up window when none is given: a year, Temporal's default, so a
/// fire missed while every worker was down still runs when one returns
/// (a nightly job is not lost to a ten-minute outage).
pub const DEFAULT_CATCHUP_WINDOW_MS: u64 = 365 * 86_400_000;

/// The most nominal times one decision looks at: a schedule that missed
/// more (a long outage of a frequent schedule) skips ahead over the rest,
/// counting them as missed.
const MAX_FIRES_PER_DECISION: usize = 1000;

/// When a schedule fires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Spec {
    /// A cron expression (5 fields, or 6 with seconds first) read in an
    /// IANA time zone. A local time skipped by a daylight-saving change
    /// fires once, right after the change; a local time repeated by one
    /// fires once, at its first occurrence.
    Cron {
        expr: String,
        /// An IANA zone such as `Europe/Paris`; `UTC` by default.
        tz: String,
    },
    /// Every `every_ms` milliseconds since the Unix epoch, shifted by
    /// `offset_ms` (so `every 1h` with a 15 minute offset fires at :15).
    Every { every_ms: u64, offset_ms: u64 },
}

/// Why a spec (or a schedule) is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("`{expr}` is not a cron expression: {reason}")]
    Cron { expr: String, reason: String },
    #[error(
        "`{tz}` is not an IANA time zone (write for example Europe/Paris, America/New_York or UTC)"
    )]
    TimeZone { tz: String },
    #[error("an interval must be at least one second, not {every_ms} ms")]
    Interval { every_ms: u64 },
    #[error("`{spec}` never fires")]
    Never { spec: String },
}

impl Spec {
    /// A cron spec, checked.
    pub fn cron(expr: &str, tz: Option<&str>) -> Result<Spec, SpecError> {
        let spec = Spec::Cron {
            expr: expr.trim().to_string(),
            tz: tz.unwrap_or("UTC").to_string(),
        };
        spec.check()?;
        Ok(spec)
    }

    /// An interval spec, checked.
    pub fn every(every_ms: u64, offset_ms: u64) -> Result<Spec, SpecError> {
        let spec = Spec::Every {
            every_ms,
            offset_ms,
        };
        spec.check()?;
        Ok(spec)
    }

    /// Refuses an expression, zone or interval that cannot fire.
    pub fn check(&self) -> Result<(), SpecError> {
        match self {
            Spec::Cron { expr, tz } => {
                parse_cron(expr)?;
                zone(tz)?;
            }
            Spec::Every { every_ms, .. } if *every_ms < 1000 => {
                return Err(SpecError::Interval {
                    every_ms: *every_ms,
                });
            }
            Spec::Every { .. } => {}
        }
        Ok(())
    }

    /// The first fire time strictly after `after_ms`, if any.
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        match self {
            Spec::Every {
                every_ms,
                offset_ms,
            } => {
                let offset = offset_ms % every_ms;
                let base = after_ms.saturating_sub(offset) / every_ms * every_ms + offset;
                let next = if base > after_ms {
                    base
                } else {
                    base + every_ms
                };
                Some(next)
            }
            Spec::Cron { expr, tz } => {
                let cron = parse_cron(expr).ok()?;
                let tz = zone(tz).ok()?;
                // Cron times are whole seconds: search from the second
                // `after_ms` falls in (croner keeps a fraction it is given).
                let after_ms = after_ms / 1000 * 1000;
                let after = Utc
                    .timestamp_millis_opt(i64::try_from(after_ms).ok()?)
                    .single()?
                    .with_timezone(&tz);
                let mut from = after;
                // A repeated local hour would match twice: only its first
                // occurrence fires.
                for _ in 0..4 {
                    let next = cron.find_next_occurrence(&from, false).ok()?;
                    let next_ms = u64::try_from(next.timestamp_millis()).ok()?;
                    if !repeats_earlier_wall_time(&tz, &next) {
                        return Some(next_ms);
                    }
                    from = next;
                }
                None
            }
        }
    }

    /// The next `n` fire times after `after_ms`.
    pub fn upcoming(&self, after_ms: u64, n: usize) -> Vec<u64> {
        let mut times = Vec::with_capacity(n);
        let mut at = after_ms;
        while times.len() < n {
            let Some(next) = self.next_after(at) else {
                break;
            };
            times.push(next);
            at = next;
        }
        times
    }

    /// The fire times in `[from_ms, to_ms]`, oldest first, at most `limit`.
    pub fn times_between(&self, from_ms: u64, to_ms: u64, limit: usize) -> Vec<u64> {
        let mut times = Vec::new();
        let mut next = self.next_after(from_ms.saturating_sub(1));
        while let Some(at) = next.filter(|at| *at <= to_ms) {
            if times.len() == limit {
                break;
            }
            times.push(at);
            next = self.next_after(at);
        }
        times
    }

    /// The spec as a person reads it.
    pub fn describe(&self) -> String {
        match self {
            Spec::Cron { expr, tz } => format!("cron `{expr}` in {tz}"),
            Spec::Every {
                every_ms,
                offset_ms,
            } => {
                let every = humanize_ms(*every_ms);
                if *offset_ms == 0 {
                    format!("every {every}")
                } else {
                    format!("every {every}, offset {}", humanize_ms(*offset_ms))
                }
            }
        }
    }
}

/// Whether `at` is the second occurrence of a local wall time (the hour a
/// daylight-saving change repeats).
fn repeats_earlier_wall_time(tz: &chrono_tz::Tz, at: &DateTime<chrono_tz::Tz>) -> bool {
    match tz.from_local_datetime(&at.naive_local()) {
        chrono::LocalResult::Ambiguous(first, _) => first.timestamp() != at.timestamp(),
        _ => false,
    }
}

fn parse_cron(expr: &str) -> Result<croner::Cron, SpecError> {
    let fields = expr.split_whitespace().count();
    if !(5..=6).contains(&fields) && !expr.starts_with('@') {
        return Err(SpecError::Cron {
            expr: expr.into(),
            reason: format!(
                "it has {fields} fields; write 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)"
            ),
        });
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .build()
        .parse(expr)
        .map_err(|e| SpecError::Cron {
            expr: expr.into(),
            reason: out_of_range(expr).unwrap_or_else(|| e.to_string()),
        })
}

/// The first number of `expr`'s fields outside its field's range, said
/// so (the parser's own words are `Number out of bounds`).
fn out_of_range(expr: &str) -> Option<String> {
    const FIELDS: [(&str, u32, u32); 6] = [
        ("seconds", 0, 59),
        ("minute", 0, 59),
        ("hour", 0, 23),
        ("day-of-month", 1, 31),
        ("month", 1, 12),
        ("day-of-week", 0, 7),
    ];
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let named = &FIELDS[FIELDS.len() - fields.len().min(FIELDS.len())..];
    fields
        .iter()
        .zip(named)
        .find_map(|(field, (name, lo, hi))| {
            // Values and range ends count; a step (after `/`) does not.
            let values = field
                .split(',')
                .flat_map(|part| part.split('/').next().unwrap_or("").split('-'));
            values
                .filter_map(|v| v.parse::<u32>().ok())
                .find(|n| !(*lo..=*hi).contains(n))
                .map(|n| format!("{n} is out of range for the {name} field ({lo}-{hi})"))
        })
}

fn zone(tz: &str) -> Result<chrono_tz::Tz, SpecError> {
    chrono_tz::Tz::from_str(tz).map_err(|_| SpecError::TimeZone { tz: tz.into() })
}

/// `90000` as `1m30s`.
fn humanize_ms(ms: u64) -> String {
    humantime_like(std::time::Duration::from_millis(ms))
}

fn humantime_like(d: std::time::Duration) -> String {
    let mut secs = d.as_secs();
    let ms = d.subsec_millis();
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if ms > 0 {
        out.push_str(&format!("{ms}ms"));
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

/// What a fire does while the previous fire's run is still live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Overlap {
    /// No fire while the previous one's run is live; the fire is recorded
    /// as skipped.
    #[default]
    Skip,
    /// At most one fire waits for the live run to end, then starts.
    BufferOne,
    /// Every fire starts, whatever is live.
    AllowAll,
}

impl Overlap {
    /// `skip`, `buffer-one` or `allow-all`.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer-one",
            Overlap::AllowAll => "allow-all",
        }
    }
}

impl FromStr for Overlap {
    type Err = String;
    fn from_str(s: &str) -> Result<Overlap, String> {
        match s {
            "skip" => Ok(Overlap::Skip),
            "buffer-one" => Ok(Overlap::BufferOne),
            "allow-all" => Ok(Overlap::AllowAll),
            other => Err(format!(
                "`{other}` is not an overlap policy: write skip, buffer-one or allow-all"
            )),
        }
    }
}

/// What became of one nominal fire time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum FireOutcome {
    /// Its run was admitted.
    Started,
    /// Its run existed already (another worker, or a retry, fired it).
    AlreadyFired,
    /// The previous fire's run was live (overlap `skip`, or a second
    /// waiting fire under `buffer-one`).
    Skipped,
    /// It waits for the live run to end (`buffer-one`).
    Buffered,
    /// It was due longer ago than the catch-up window (an outage).
    Missed,
    /// Its start was refused (the target is gone, the input no longer fits).
    Failed,
}

impl FireOutcome {
    /// The outcome's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FireOutcome::Started => "started",
            FireOutcome::AlreadyFired => "already_fired",
            FireOutcome::Skipped => "skipped",
            FireOutcome::Buffered => "buffered",
            FireOutcome::Missed => "missed",
            FireOutcome::Failed => "failed",
        }
    }
}

/// One nominal fire time and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Fire {
    /// When the spec said to fire.
    pub nominal_ms: u64,
    /// When the fire was decided.
    pub at_ms: u64,
    pub outcome: FireOutcome,
    /// The fire's run (its derived ID), when it started or had started.
    pub run_id: Option<RunId>,
    /// Why a start was refused.
    pub error: Option<String>,
}

/// A schedule as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// What the schedule was told to be: name, target, spec, policies.
    pub settings: ScheduleSpec,
    /// The nominal time of the next fire not yet decided; `None` once the
    /// schedule is past its end.
    pub next_fire_ms: Option<u64>,
    /// A fire waiting for the live run to end (`buffer-one`).
    pub buffered_ms: Option<u64>,
    /// The run of the latest fire started: overlap looks at it.
    pub last_run_id: Option<RunId>,
    /// The latest fires, newest last, at most [`RECENT_FIRES`].
    pub recent: Vec<Fire>,
    /// Fires missed in all (also those no longer in `recent`).
    pub missed: u64,
    /// The worker deciding its fires, and until when (a claim another
    /// worker may take once it has expired).
    pub claim: Option<Claim>,
    /// Bumped by every write: an update names the revision it read, and
    /// is refused if another write came first.
    pub revision: u64,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

impl crate::codec::Stored for ScheduleRecord {}

/// A worker's claim on a schedule while it decides and starts fires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub owner: String,
    pub until_ms: u64,
}

impl crate::manifest::DeclaredSchedule {
    /// The settings of the schedule `name` this declaration makes for
    /// `workflow` on `deployment`.
    pub fn settings(
        &self,
        name: &str,
        workflow: &str,
        deployment: &str,
    ) -> Result<ScheduleSpec, SpecError> {
        let spec = match (&self.cron, self.every_ms) {
            (Some(expr), None) => Spec::cron(expr, self.tz.as_deref())?,
            (None, Some(every)) => Spec::every(every, 0)?,
            _ => {
                return Err(SpecError::Never {
                    spec: "a declared schedule needs `cron` or `every`, not both".into(),
                });
            }
        };
        let overlap = match self.overlap.as_deref() {
            None => Overlap::default(),
            Some(s) => s
                .parse()
                .map_err(|reason| SpecError::Never { spec: reason })?,
        };
        Ok(ScheduleSpec {
            name: name.into(),
            workflow: workflow.into(),
            deployment: Some(deployment.into()),
            input: self.input.clone().unwrap_or_else(|| "null".into()),
            additional_metadata: None,
            spec,
            overlap,
            catchup_window_ms: self.catchup_window_ms.unwrap_or(DEFAULT_CATCHUP_WINDOW_MS),
            paused: false,
            note: None,
            start_at_ms: None,
            end_at_ms: None,
            declared_by: Some(deployment.into()),
        })
    }
}

/// What a schedule is told to be, by a caller: the record's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    pub name: String,
    pub workflow: String,
    pub deployment: Option<String>,
    pub input: String,
    pub additional_metadata: Option<String>,
    pub spec: Spec,
    pub overlap: Overlap,
    pub catchup_window_ms: u64,
    pub paused: bool,
    pub note: Option<String>,
    pub start_at_ms: Option<u64>,
    pub end_at_ms: Option<u64>,
    /// The deployment that declares it, for a schedule declared in code.
    pub declared_by: Option<String>,
}

impl ScheduleRecord {
    /// A new schedule from `spec`, first firing after `now_ms` (or at its
    /// start bound).
    pub fn new(settings: ScheduleSpec, now_ms: u64) -> ScheduleRecord {
        let mut record = ScheduleRecord {
            settings,
            next_fire_ms: None,
            buffered_ms: None,
            last_run_id: None,
            recent: Vec::new(),
            missed: 0,
            claim: None,
            revision: 0,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
        };
        record.next_fire_ms = record.first_fire_after(now_ms);
        record
    }

    /// Takes `settings` (a redeploy's declaration), keeping what the
    /// schedule has done and whether it is paused; a changed spec or bound
    /// fires next at its first time after `now_ms`. Whether anything changed.
    pub fn redeclare(&mut self, settings: ScheduleSpec, now_ms: u64) -> bool {
        let next = ScheduleSpec {
            paused: self.settings.paused,
            note: self.settings.note.clone(),
            ..settings
        };
        if next == self.settings {
            return false;
        }
        let respec = next.spec != self.settings.spec
            || next.start_at_ms != self.settings.start_at_ms
            || next.end_at_ms != self.settings.end_at_ms;
        self.settings = next;
        if respec {
            self.next_fire_ms = self.first_fire_after(now_ms);
        }
        true
    }

    /// The first nominal time after `after_ms` within the bounds.
    pub fn first_fire_after(&self, after_ms: u64) -> Option<u64> {
        let from = match self.settings.start_at_ms {
            Some(start) if start > after_ms => start - 1,
            _ => after_ms,
        };
        self.within_end(self.settings.spec.next_after(from))
    }

    fn within_end(&self, at: Option<u64>) -> Option<u64> {
        at.filter(|at| self.settings.end_at_ms.is_none_or(|end| *at <= end))
    }

    /// Whether a worker should look at it at `now_ms`: a fire is due or
    /// buffered, and no other worker's claim holds.
    pub fn is_due(&self, now_ms: u64) -> bool {
        !self.settings.paused
            && (self.next_fire_ms.is_some_and(|at| at <= now_ms) || self.buffered_ms.is_some())
            && self.claim.as_ref().is_none_or(|c| c.until_ms < now_ms)
    }

    /// The run ID of the fire at `nominal_ms`: the schedule's name and the
    /// nominal time in UTC, so any worker derives the same one.
    pub fn run_id_of(&self, nominal_ms: u64) -> RunId {
        fire_run_id(&self.settings.name, nominal_ms)
    }

    /// Records `fire`, keeping the newest [`RECENT_FIRES`].
    pub fn remember(&mut self, fire: Fire) {
        if fire.outcome == FireOutcome::Missed {
            self.missed += 1;
        }
        self.recent.push(fire);
        if self.recent.len() > RECENT_FIRES {
            let extra = self.recent.len() - RECENT_FIRES;
            self.recent.drain(..extra);
        }
    }

    /// Keeps, in this record (written by another writer while a worker
    /// fired the schedule: an operator's pause, say), what the worker's
    /// pass decided in `fired`, the record it claimed and advanced: the
    /// fires it recorded, its latest run and, when the spec is the same,
    /// how far it got. The other writer's settings stay.
    pub fn keep_fires_of(&mut self, fired: &ScheduleRecord) {
        let new: Vec<Fire> = fired
            .recent
            .iter()
            .filter(|f| !self.recent.iter().any(|r| r.nominal_ms == f.nominal_ms))
            .cloned()
            .collect();
        for fire in new {
            self.remember(fire);
        }
        self.recent.sort_by_key(|f| f.nominal_ms);
        if fired.last_run_id.is_some() {
            self.last_run_id = fired.last_run_id.clone();
        }
        if self.settings.spec == fired.settings.spec {
            self.buffered_ms = fired.buffered_ms;
            self.next_fire_ms = match (self.next_fire_ms, fired.next_fire_ms) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (_, None) | (None, _) => None,
            };
        }
    }

    /// Pauses or resumes it. A resumed schedule fires next after `now_ms`:
    /// the time it was paused is not caught up.
    pub fn set_paused(&mut self, paused: bool, note: Option<String>, now_ms: u64) {
        if self.settings.paused && !paused {
            self.next_fire_ms = self.first_fire_after(now_ms);
        }
        self.settings.paused = paused;
        self.settings.note = note;
    }

    /// Decides every fire due at `now_ms`, given whether the run of the
    /// latest started fire is still live, and advances the schedule past
    /// them. The engine starts [`Decision::starts`] in order, then records
    /// the outcomes.
    pub fn decide(&mut self, now_ms: u64, last_live: bool) -> Decision {
        let mut decision = Decision::default();
        if self.settings.paused {
            return decision;
        }
        let mut live = last_live;
        if let Some(buffered) = self.buffered_ms
            && !live
        {
            self.buffered_ms = None;
            decision.starts.push(buffered);
            live = true;
        }
        self.skip_missed(now_ms, &mut decision);
        let mut due = Vec::new();
        while due.len() < MAX_FIRES_PER_DECISION
            && let Some(nominal) = self.next_fire_ms.filter(|at| *at <= now_ms)
        {
            self.next_fire_ms = self.within_end(self.settings.spec.next_after(nominal));
            due.push(nominal);
        }
        // Under `skip`, of the fires due at once (late ones caught up and
        // the one on time) only the latest starts: the earlier ones would
        // only keep it from starting.
        if self.settings.overlap == Overlap::Skip
            && !live
            && let Some(latest) = due.pop()
        {
            let superseded = due.drain(..).map(|n| (n, FireOutcome::Skipped));
            decision.recorded.extend(superseded);
            decision.starts.push(latest);
        }
        for nominal in due {
            let outcome = match (self.settings.overlap, live) {
                (Overlap::AllowAll, _) | (_, false) => {
                    decision.starts.push(nominal);
                    live = true;
                    continue;
                }
                (Overlap::Skip, true) => FireOutcome::Skipped,
                (Overlap::BufferOne, true) if self.buffered_ms.is_none() => {
                    self.buffered_ms = Some(nominal);
                    FireOutcome::Buffered
                }
                (Overlap::BufferOne, true) => FireOutcome::Skipped,
            };
            decision.recorded.push((nominal, outcome));
        }
        decision
    }

    /// Moves the schedule past the fires due longer ago than the catch-up
    /// window, recording them missed (beyond [`MAX_FIRES_PER_DECISION`] of
    /// them, only counting them).
    fn skip_missed(&mut self, now_ms: u64, decision: &mut Decision) {
        let window_start = now_ms.saturating_sub(self.settings.catchup_window_ms);
        let mut listed = 0;
        while let Some(nominal) = self.next_fire_ms.filter(|at| *at < window_start) {
            if listed == MAX_FIRES_PER_DECISION {
                let resume = self.within_end(self.settings.spec.next_after(window_start - 1));
                self.missed += count_between(&self.settings.spec, nominal, resume, now_ms);
                self.next_fire_ms = resume;
                return;
            }
            decision.recorded.push((nominal, FireOutcome::Missed));
            listed += 1;
            self.next_fire_ms = self.within_end(self.settings.spec.next_after(nominal));
        }
    }

    /// The decision for one fire at `nominal_ms` now (a trigger, or one
    /// time of a backfill), under the overlap policy; it does not move the
    /// schedule's own next fire.
    pub fn decide_one(&mut self, nominal_ms: u64, last_live: bool) -> Decision {
        let mut decision = Decision::default();
        match (self.settings.overlap, last_live) {
            (Overlap::AllowAll, _) | (_, false) => decision.starts.push(nominal_ms),
            (Overlap::Skip, true) => decision.recorded.push((nominal_ms, FireOutcome::Skipped)),
            (Overlap::BufferOne, true) if self.buffered_ms.is_none() => {
                self.buffered_ms = Some(nominal_ms);
                decision.recorded.push((nominal_ms, FireOutcome::Buffered));
            }
            (Overlap::BufferOne, true) => {
                decision.recorded.push((nominal_ms, FireOutcome::Skipped))
            }
        }
        decision
    }
}

/// Nominal times from `from` (inclusive) up to `until` (exclusive, or
/// `now_ms` when `None`), counted without listing them.
fn count_between(spec: &Spec, from: u64, until: Option<u64>, now_ms: u64) -> u64 {
    let end = until.unwrap_or(now_ms);
    if let Spec::Every { every_ms, .. } = spec {
        return end.saturating_sub(from).div_ceil(*every_ms);
    }
    let mut n = 0;
    let mut at = Some(from);
    while let Some(t) = at.filter(|t| *t < end) {
        n += 1;
        at = spec.next_after(t);
    }
    n
}

/// What a schedule decided at a moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Nominal times whose runs to start, in order.
    pub starts: Vec<u64>,
    /// Nominal times decided without a start, with their outcome.
    pub recorded: Vec<(u64, FireOutcome)>,
}

/// The run ID of the fire of schedule `name` at `nominal_ms`:
/// `NAME:20261201T090000Z` (milliseconds appear when not zero).
pub fn fire_run_id(name: &str, nominal_ms: u64) -> RunId {
    let at = Utc
        .timestamp_millis_opt(nominal_ms as i64)
        .single()
        .unwrap_or_default();
    let stamp = if nominal_ms.is_multiple_of(1000) {
        at.format("%Y%m%dT%H%M%SZ").to_string()
    } else {
        at.format("%Y%m%dT%H%M%S%.3fZ").to_string()
    };
    RunId::from(format!("{name}:{stamp}"))
}

/// The schedule name and nominal time of a fire's run ID, if it is one.
pub fn parse_fire_run_id(run_id: &str) -> Option<(&str, u64)> {
    let (name, stamp) = run_id.rsplit_once(':')?;
    let format = if stamp.contains('.') {
        "%Y%m%dT%H%M%S%.3fZ"
    } else {
        "%Y%m%dT%H%M%SZ"
    };
    let at = chrono::NaiveDateTime::parse_from_str(stamp, format).ok()?;
    Some((name, u64::try_from(at.and_utc().timestamp_millis()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Milliseconds of a UTC time.
    fn utc(s: &str) -> u64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis() as u64
    }

    fn in_zone(ms: u64, tz: &str) -> String {
        let tz: chrono_tz::Tz = tz.parse().unwrap();
        Utc.timestamp_millis_opt(ms as i64)
            .unwrap()
            .with_timezone(&tz)
            .format("%Y-%m-%d %H:%M %Z")
            .to_string()
    }

    fn fires(spec: &Spec, from: &str, n: usize, tz: &str) -> Vec<String> {
        spec.upcoming(utc(from), n)
            .into_iter()
            .map(|ms| in_zone(ms, tz))
            .collect()
    }

    #[test]
    fn a_skipped_local_time_fires_once_right_after_the_spring_change() {
        // 02:30 does not exist in Paris on 2026-03-29 (02:00 -> 03:00).
        let spec = Spec::cron("30 2 * * *", Some("Europe/Paris")).unwrap();
        assert_eq!(
            fires(&spec, "2026-03-27T12:00:00Z", 3, "Europe/Paris"),
            [
                "2026-03-28 02:30 CET",
                "2026-03-29 03:00 CEST",
                "2026-03-30 02:30 CEST"
            ]
        );
        // New York springs forward on 2026-03-08 (02:00 -> 03:00).
        let spec = Spec::cron("30 2 * * *", Some("America/New_York")).unwrap();
        assert_eq!(
            fires(&spec, "2026-03-07T12:00:00Z", 3, "America/New_York"),
            [
                "2026-03-08 03:00 EDT",
                "2026-03-09 02:30 EDT",
                "2026-03-10 02:30 EDT"
            ]
        );
    }

    #[test]
    fn a_repeated_local_hour_fires_once_in_the_autumn_change() {
        // 02:30 happens twice in Paris on 2026-10-25 (03:00 -> 02:00).
        let spec = Spec::cron("30 2 * * *", Some("Europe/Paris")).unwrap();
        assert_eq!(
            fires(&spec, "2026-10-24T12:00:00Z", 3, "Europe/Paris"),
            [
                "2026-10-25 02:30 CEST",
                "2026-10-26 02:30 CET",
                "2026-10-27 02:30 CET"
            ]
        );
        // 01:30 happens twice in New York on 2026-11-01 (02:00 -> 01:00).
        let spec = Spec::cron("30 1 * * *", Some("America/New_York")).unwrap();
        assert_eq!(
            fires(&spec, "2026-10-31T12:00:00Z", 3, "America/New_York"),
            [
                "2026-11-01 01:30 EDT",
                "2026-11-02 01:30 EST",
                "2026-11-03 01:30 EST"
            ]
        );
    }

    #[test]
    fn cron_times_are_whole_seconds_whatever_the_time_searched_from() {
        let spec = Spec::cron("0 9 * * *", None).unwrap();
        let nine = utc("2026-12-01T09:00:00Z");
        assert_eq!(spec.next_after(nine - 1), Some(nine));
        assert_eq!(spec.next_after(nine - 1000 + 575), Some(nine));
        assert_eq!(spec.next_after(nine + 999), Some(nine + 86_400_000));
        assert_eq!(spec.times_between(nine - 86_400_000 + 1, nine, 10), [nine]);
    }

    #[test]
    fn an_hourly_schedule_fires_the_repeated_hour_once() {
        let spec = Spec::cron("0 * * * *", Some("Europe/Paris")).unwrap();
        // 02:00 CEST and 02:00 CET both match, a wall time repeated by the
        // change: it fires once, so two hours pass before 03:00.
        let times = spec.upcoming(utc("2026-10-24T23:30:00Z"), 4);
        let hours: Vec<u64> = times
            .windows(2)
            .map(|w| (w[1] - w[0]) / 3_600_000)
            .collect();
        assert_eq!(
            hours,
            [2, 1, 1],
            "{:?}",
            times
                .iter()
                .map(|t| in_zone(*t, "Europe/Paris"))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn specs_that_cannot_fire_are_refused_naming_the_problem() {
        let e = Spec::cron("61 * * * *", None).unwrap_err();
        assert!(matches!(e, SpecError::Cron { .. }), "{e}");
        let e = Spec::cron("* * *", None).unwrap_err();
        assert!(e.to_string().contains("3 fields"), "{e}");
        let e = Spec::cron("0 9 * * *", Some("Mars/Olympus")).unwrap_err();
        assert!(e.to_string().contains("IANA"), "{e}");
        assert!(Spec::every(500, 0).is_err());
        // Six fields: seconds first.
        let spec = Spec::cron("*/10 * * * * *", None).unwrap();
        assert_eq!(
            spec.next_after(utc("2026-01-01T00:00:01Z")),
            Some(utc("2026-01-01T00:00:10Z"))
        );
    }

    #[test]
    fn intervals_fire_on_their_grid_not_by_adding_to_the_last_fire() {
        let spec = Spec::every(300_000, 60_000).unwrap();
        assert_eq!(
            spec.next_after(utc("2026-01-01T00:00:00Z")),
            Some(utc("2026-01-01T00:01:00Z"))
        );
        assert_eq!(
            spec.next_after(utc("2026-01-01T00:01:00Z")),
            Some(utc("2026-01-01T00:06:00Z"))
        );
        assert_eq!(
            spec.next_after(utc("2026-01-01T00:03:17.5Z")),
            Some(utc("2026-01-01T00:06:00Z"))
        );
        assert_eq!(spec.describe(), "every 5m, offset 1m");
    }

    fn schedule(overlap: Overlap, window_ms: u64, now: u64) -> ScheduleRecord {
        ScheduleRecord::new(
            ScheduleSpec {
                name: "sync".into(),
                workflow: "w".into(),
                deployment: None,
                input: "null".into(),
                additional_metadata: None,
                spec: Spec::every(60_000, 0).unwrap(),
                overlap,
                catchup_window_ms: window_ms,
                paused: false,
                note: None,
                start_at_ms: None,
                end_at_ms: None,
                declared_by: None,
            },
            now,
        )
    }

    #[test]
    fn an_outage_fires_what_the_window_covers_and_records_the_rest_missed() {
        let t0 = utc("2026-01-01T00:00:00Z");
        let mut s = schedule(Overlap::AllowAll, 120_000, t0);
        assert_eq!(s.next_fire_ms, Some(t0 + 60_000));
        // Down for three periods: at 3m30s, fires at 1m (missed), 2m, 3m.
        let d = s.decide(t0 + 210_000, false);
        assert_eq!(d.starts, [t0 + 120_000, t0 + 180_000]);
        assert_eq!(d.recorded, [(t0 + 60_000, FireOutcome::Missed)]);
        assert_eq!(s.next_fire_ms, Some(t0 + 240_000));
    }

    #[test]
    fn skip_and_buffer_one_hold_fires_back_while_a_run_is_live() {
        let t0 = utc("2026-01-01T00:00:00Z");
        let mut s = schedule(Overlap::Skip, 60_000, t0);
        let d = s.decide(t0 + 60_000, true);
        assert!(d.starts.is_empty());
        assert_eq!(d.recorded, [(t0 + 60_000, FireOutcome::Skipped)]);
        let d = s.decide(t0 + 120_000, false);
        assert_eq!(d.starts, [t0 + 120_000]);

        let mut s = schedule(Overlap::BufferOne, 300_000, t0);
        let d = s.decide(t0 + 180_000, true);
        assert_eq!(
            d.recorded,
            [
                (t0 + 60_000, FireOutcome::Buffered),
                (t0 + 120_000, FireOutcome::Skipped),
                (t0 + 180_000, FireOutcome::Skipped)
            ]
        );
        assert_eq!(s.buffered_ms, Some(t0 + 60_000));
        // Still live: the buffered fire waits.
        assert!(s.decide(t0 + 190_000, true).starts.is_empty());
        let d = s.decide(t0 + 200_000, false);
        assert_eq!(d.starts, [t0 + 60_000]);
        assert_eq!(s.buffered_ms, None);
    }

    #[test]
    fn a_number_out_of_range_names_its_field() {
        let refused = |expr| Spec::cron(expr, None).unwrap_err().to_string();
        assert!(
            refused("0 25 * * *").contains("25 is out of range for the hour field (0-23)"),
            "{}",
            refused("0 25 * * *")
        );
        assert!(refused("61 * * * *").contains("the minute field (0-59)"));
        assert!(refused("0 0 1-32 * *").contains("32 is out of range for the day-of-month field"));
        assert!(refused("70 0 0 * * *").contains("the seconds field"));
        // A step is not a value: `*/90` in minutes is croner's to judge.
        assert!(Spec::cron("*/5 * * * *", None).is_ok());
    }

    #[test]
    fn under_skip_the_fire_on_time_starts_and_the_late_ones_give_way() {
        let t0 = utc("2026-01-01T00:00:00Z");
        let mut s = schedule(Overlap::Skip, 600_000, t0);
        // Down for three periods: the fires at 1m and 2m are late, the one
        // at 3m on time; it is the one that runs.
        let d = s.decide(t0 + 180_000, false);
        assert_eq!(d.starts, [t0 + 180_000]);
        assert_eq!(
            d.recorded,
            [
                (t0 + 60_000, FireOutcome::Skipped),
                (t0 + 120_000, FireOutcome::Skipped)
            ]
        );
        assert_eq!(s.next_fire_ms, Some(t0 + 240_000));
        // While its run is live, the next is skipped as before.
        let d = s.decide(t0 + 240_000, true);
        assert!(d.starts.is_empty());
        assert_eq!(d.recorded, [(t0 + 240_000, FireOutcome::Skipped)]);
    }

    #[test]
    fn the_default_window_catches_up_a_nightly_job_after_an_outage() {
        let t0 = utc("2026-01-01T00:00:00Z");
        let mut settings = schedule(Overlap::Skip, DEFAULT_CATCHUP_WINDOW_MS, t0).settings;
        settings.spec = Spec::cron("0 2 * * *", Some("Europe/Berlin")).unwrap();
        let mut s = ScheduleRecord::new(settings, t0);
        let nightly = utc("2026-01-01T01:00:00Z");
        assert_eq!(s.next_fire_ms, Some(nightly));
        // Every worker was down from 00:55 to 01:10 UTC.
        let d = s.decide(nightly + 600_000, false);
        assert_eq!(d.starts, [nightly], "the nightly fire still runs, late");
        assert!(d.recorded.is_empty(), "nothing missed: {:?}", d.recorded);
    }

    #[test]
    fn a_long_outage_skips_ahead_counting_what_it_missed() {
        let t0 = utc("2026-01-01T00:00:00Z");
        let mut s = ScheduleRecord::new(
            ScheduleSpec {
                spec: Spec::every(1000, 0).unwrap(),
                ..schedule(Overlap::AllowAll, 0, t0).settings
            },
            t0,
        );
        // A day down at one fire a second, with no catch-up window.
        let d = s.decide(t0 + 86_400_000, false);
        assert_eq!(d.starts, [t0 + 86_400_000]);
        let listed = d
            .recorded
            .iter()
            .filter(|(_, o)| *o == FireOutcome::Missed)
            .count();
        assert_eq!(listed, MAX_FIRES_PER_DECISION, "the first ones are listed");
        assert_eq!(s.missed + listed as u64, 86_399, "every one is counted");
        assert_eq!(s.next_fire_ms, Some(t0 + 86_401_000));
    }

    #[test]
    fn paused_schedules_decide_nothing_and_resume_from_now() {
        let t0 = utc("2026-01-01T00:00:00Z");
        let mut s = schedule(Overlap::Skip, 60_000, t0);
        s.set_paused(true, Some("maintenance".into()), t0);
        assert_eq!(s.decide(t0 + 600_000, false), Decision::default());
        assert!(!s.is_due(t0 + 600_000));
        s.set_paused(false, None, t0 + 610_000);
        assert_eq!(s.next_fire_ms, Some(t0 + 660_000));
    }

    #[test]
    fn bounds_limit_the_fires() {
        let t0 = utc("2026-01-01T00:00:00Z");
        let mut settings = schedule(Overlap::AllowAll, 600_000, t0).settings;
        settings.start_at_ms = Some(t0 + 300_000);
        settings.end_at_ms = Some(t0 + 420_000);
        let mut s = ScheduleRecord::new(settings, t0);
        assert_eq!(s.next_fire_ms, Some(t0 + 300_000));
        let d = s.decide(t0 + 900_000, false);
        assert_eq!(d.starts, [t0 + 300_000, t0 + 360_000, t0 + 420_000]);
        assert_eq!(s.next_fire_ms, None, "past its end");
    }

    #[test]
    fn fire_run_ids_round_trip_and_are_valid_run_ids() {
        let at = utc("2026-12-01T09:00:00Z");
        let id = fire_run_id("nightly-report", at);
        assert_eq!(id.as_str(), "nightly-report:20261201T090000Z");
        RunId::parse(id.as_str()).unwrap();
        assert_eq!(parse_fire_run_id(id.as_str()), Some(("nightly-report", at)));
        let id = fire_run_id("fast", at + 500);
        assert_eq!(id.as_str(), "fast:20261201T090000.500Z");
        assert_eq!(parse_fire_run_id(id.as_str()), Some(("fast", at + 500)));
    }

    #[test]
    fn a_pass_that_met_a_pause_keeps_its_fires_in_the_paused_record() {
        let t0 = utc("2026-01-01T00:00:00Z");
        let before = schedule(Overlap::AllowAll, 120_000, t0);
        // A worker fires 1m; meanwhile an operator pauses the schedule.
        let mut fired = before.clone();
        let d = fired.decide(t0 + 60_000, false);
        assert_eq!(d.starts, [t0 + 60_000]);
        fired.remember(Fire {
            nominal_ms: t0 + 60_000,
            at_ms: t0 + 60_000,
            outcome: FireOutcome::Started,
            run_id: Some(fire_run_id("sync", t0 + 60_000)),
            error: None,
        });
        fired.last_run_id = Some(fire_run_id("sync", t0 + 60_000));
        let mut paused = before.clone();
        paused.set_paused(true, Some("maintenance".into()), t0 + 60_000);
        paused.keep_fires_of(&fired);
        assert!(paused.settings.paused, "the pause stays");
        assert_eq!(paused.recent.len(), 1, "the fire is recorded");
        assert_eq!(paused.last_run_id, fired.last_run_id);
        assert_eq!(paused.next_fire_ms, Some(t0 + 120_000), "not fired again");
        paused.keep_fires_of(&fired);
        assert_eq!(paused.recent.len(), 1, "kept once");
    }
}
