//! The API's JSON bodies: what clients send and what they get back. Run,
//! hook and event views carry inputs, outputs and payloads as JSON values
//! (the store keeps them as JSON text); the CLI's client reads the same
//! types back into records.

use keel_core::bulk::{BulkAction, JobCounts, JobRecord, JobState, RunFailure};
use keel_core::journal::Entry;
use keel_core::schedule::{Fire, FireOutcome, ScheduleRecord, ScheduleSpec, Spec};
use keel_core::timeline::Row;
use keel_core::{
    Deployment, EventOutcome, EventRecord, HookRecord, RunError, RunRecord, RunStatus,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// JSON text as a value; text that is not JSON stays a string.
pub(crate) fn value_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.into()))
}

/// A run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunView {
    pub run_id: String,
    pub workflow: String,
    /// The hash of the component the run is pinned to.
    pub component_hash: String,
    pub input: Value,
    pub status: RunStatus,
    /// The output, once completed.
    pub output: Option<Value>,
    /// Why it failed or was cancelled.
    pub error: Option<RunError>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// When a waiting run's next timer is due.
    pub wake_at_ms: Option<u64>,
    /// Its place in its concurrency group (key, slot or queue position),
    /// when its workflow declares a limit; given by single-run reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<keel_core::flow::RunSlot>,
    /// The run whose workflow started this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// Its searchable attributes.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub attributes: keel_core::Attributes,
    /// The runs its workflow started, in order; given by single-run reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildView>,
    /// What a waiting run waits on (its open hooks' tokens, its timers,
    /// the runs it awaits); given by single-run reads, starts and resumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_on: Vec<keel_core::timeline::WaitingOn>,
    /// A resume's payload ID (the one given, or one keel chose): a resume
    /// retried with it delivers nothing twice, and its reply is at
    /// `/v1/hooks/{token}/replies/{payload_id}`. Given by resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_id: Option<String>,
    /// The workflow's reply to the payload, when the resume asked to wait
    /// for it (`wait_reply_ms`) and it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Value>,
}

/// A run that a run's workflow started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChildView {
    pub run_id: String,
    pub workflow: String,
    /// The deployment it runs on, when not its parent's component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// What becomes of it when its parent ends.
    pub close: keel_core::lifecycle::ClosePolicy,
    /// Its status now (absent if the store no longer holds it).
    pub status: Option<RunStatus>,
}

impl From<&keel_host::ChildRun> for ChildView {
    fn from(c: &keel_host::ChildRun) -> Self {
        ChildView {
            run_id: c.child.run_id.to_string(),
            workflow: c.child.workflow.clone(),
            deployment: c.child.deployment.clone(),
            close: c.child.close,
            status: c.status,
        }
    }
}

impl RunView {
    /// The view of `run` with its place in its concurrency group.
    pub async fn with_slot(keel: &keel_host::Keel, run: &RunRecord) -> keel_host::Result<Self> {
        let mut view = RunView::from(run);
        if !run.status.is_final() {
            view.concurrency = keel.run_slot(&run.run_id).await?;
            view.waiting_on = keel.waiting_on(run).await?;
        }
        Ok(view)
    }

    /// The view of `run` as single-run reads give it: with its place in
    /// its concurrency group and its children (read from its journal).
    pub async fn read(keel: &keel_host::Keel, run: &RunRecord) -> keel_host::Result<Self> {
        let mut view = RunView::with_slot(keel, run).await?;
        let children = keel.children(&run.run_id).await?;
        view.children = children.iter().map(ChildView::from).collect();
        Ok(view)
    }
}

impl From<&RunRecord> for RunView {
    fn from(r: &RunRecord) -> Self {
        RunView {
            run_id: r.run_id.to_string(),
            workflow: r.workflow.clone(),
            component_hash: r.component_hash.to_string(),
            input: value_of(&r.input),
            status: r.status,
            output: r.output.as_deref().map(value_of),
            error: r.error.clone(),
            created_at_ms: r.created_at_ms,
            updated_at_ms: r.updated_at_ms,
            wake_at_ms: r.wake_at_ms,
            concurrency: None,
            parent_run_id: r.parent_run_id.as_ref().map(|p| p.to_string()),
            attributes: r.attributes.clone(),
            children: Vec::new(),
            waiting_on: Vec::new(),
            payload_id: None,
            reply: None,
        }
    }
}

impl From<RunView> for RunRecord {
    fn from(v: RunView) -> Self {
        RunRecord {
            run_id: v.run_id.into(),
            workflow: v.workflow,
            component_hash: v.component_hash.into(),
            input: v.input.to_string(),
            status: v.status,
            output: v.output.map(|o| o.to_string()),
            error: v.error,
            created_at_ms: v.created_at_ms,
            updated_at_ms: v.updated_at_ms,
            wake_at_ms: v.wake_at_ms,
            parent_run_id: v.parent_run_id.map(Into::into),
            attributes: v.attributes,
        }
    }
}

/// One page of runs, newest first.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RunList {
    pub runs: Vec<RunView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// A run with its journal and its timeline.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RunDetail {
    pub run: RunView,
    /// One row per command: steps with their attempts, timers, hooks,
    /// child runs.
    pub timeline: Vec<Row>,
    /// The journal, in order (`{seq, at_ms, kind, ...}`).
    pub journal: Vec<JournalEntry>,
    /// The server's clock, to measure open rows against.
    pub now_ms: u64,
}

/// A journal entry: `seq`, `at_ms`, `kind` and the fields of its kind.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct JournalEntry {
    pub seq: u64,
    pub at_ms: u64,
    /// The fact's kind in snake case (`step_scheduled`, `run_completed`, ...).
    pub kind: String,
    #[serde(flatten)]
    pub fields: serde_json::Map<String, Value>,
}

impl JournalEntry {
    /// The entry in the one JSON shape journals have.
    pub fn of(entry: &Entry) -> JournalEntry {
        serde_json::from_value(keel_core::journal::entry_to_json(entry))
            .expect("an entry's JSON has seq, at_ms and kind")
    }

    /// The entry back from its JSON.
    pub fn to_entry(&self) -> Result<Entry, String> {
        let value = serde_json::to_value(self).map_err(|e| e.to_string())?;
        keel_core::journal::entry_from_json(&value)
    }
}

/// A stream a run wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StreamView {
    pub name: String,
    /// How many chunks it holds (the next chunk's index).
    pub chunks: u64,
    /// No chunk comes after its last.
    pub closed: bool,
    /// Bytes of data it holds.
    pub bytes: u64,
}

impl From<&keel_core::stream::StreamInfo> for StreamView {
    fn from(s: &keel_core::stream::StreamInfo) -> Self {
        StreamView {
            name: s.name.clone(),
            chunks: s.chunks,
            closed: s.closed,
            bytes: s.bytes,
        }
    }
}

/// A run's streams.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StreamList {
    pub streams: Vec<StreamView>,
}

/// One chunk of a stream, as the `data` of its server-sent event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChunkView {
    /// Its place in the stream (also the event's `id`).
    pub index: u64,
    pub at_ms: u64,
    /// `data`, `restart` or `closed` (also the event's name).
    pub kind: String,
    /// A data chunk's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The step that wrote it (or restarts), if a step did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// That step's attempt: a `restart` drops the step's chunks of
    /// earlier attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

impl From<&keel_core::stream::Chunk> for ChunkView {
    fn from(c: &keel_core::stream::Chunk) -> Self {
        use keel_core::stream::{ChunkBody, Origin};
        let (mut step_id, mut attempt) = match &c.origin {
            Origin::Step { step_id, attempt } => (Some(step_id.clone()), Some(*attempt)),
            Origin::Workflow { .. } => (None, None),
        };
        let (kind, value) = match &c.body {
            ChunkBody::Data(json) => ("data", Some(value_of(json))),
            ChunkBody::Restart {
                step_id: s,
                attempt: a,
            } => {
                (step_id, attempt) = (Some(s.clone()), Some(*a));
                ("restart", None)
            }
            ChunkBody::Closed => ("closed", None),
        };
        ChunkView {
            index: c.index,
            at_ms: c.at_ms,
            kind: kind.into(),
            value,
            step_id,
            attempt,
        }
    }
}

/// A reply to a payload delivered with an ID.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplyView {
    pub run_id: String,
    pub token: String,
    pub payload_id: String,
    /// The payload's place among the hook's payloads.
    pub index: u64,
    /// The workflow's reply, once it sent one.
    pub reply: Option<Value>,
}

impl From<&keel_host::Reply> for ReplyView {
    fn from(r: &keel_host::Reply) -> Self {
        ReplyView {
            run_id: r.run_id.to_string(),
            token: r.token.to_string(),
            payload_id: r.payload_id.clone(),
            index: r.index,
            reply: r.reply.as_deref().map(value_of),
        }
    }
}

/// A hook holding a token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HookView {
    pub token: String,
    /// The run that owns it.
    pub run_id: String,
    /// The workflow command that created it; absent for a start hook.
    pub command: Option<u32>,
    pub metadata: Option<Value>,
    pub created_at_ms: u64,
    /// The token stays held until then, even after the run ends.
    pub retain_until_ms: Option<u64>,
    /// The run has not ended: the hook accepts payloads.
    pub active: bool,
    /// Payloads resumed into it so far.
    pub payloads: u64,
    /// The JSON Schema its payloads must fit, when the workflow gave its
    /// payload type one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_schema: Option<Value>,
}

impl From<&HookRecord> for HookView {
    fn from(h: &HookRecord) -> Self {
        HookView {
            token: h.token.to_string(),
            run_id: h.run_id.to_string(),
            command: h.command,
            metadata: h.metadata.as_deref().map(value_of),
            created_at_ms: h.created_at_ms,
            retain_until_ms: h.retain_until_ms,
            active: h.active,
            payloads: h.next_payload,
            payload_schema: h.payload_schema.as_deref().map(value_of),
        }
    }
}

impl From<HookView> for HookRecord {
    fn from(v: HookView) -> Self {
        HookRecord {
            token: v.token.into(),
            run_id: v.run_id.into(),
            command: v.command,
            metadata: v.metadata.map(|m| m.to_string()),
            created_at_ms: v.created_at_ms,
            retain_until_ms: v.retain_until_ms,
            active: v.active,
            next_payload: v.payloads,
            payload_schema: v.payload_schema.map(|s| s.to_string()),
        }
    }
}

/// An ingested event and what it did for each subscribed workflow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventView {
    pub event_id: String,
    pub key: String,
    pub payload: Value,
    pub metadata: Value,
    pub at_ms: u64,
    pub outcomes: Vec<EventOutcome>,
}

impl From<&EventRecord> for EventView {
    fn from(e: &EventRecord) -> Self {
        EventView {
            event_id: e.event_id.clone(),
            key: e.key.clone(),
            payload: value_of(&e.payload),
            metadata: value_of(&e.metadata),
            at_ms: e.at_ms,
            outcomes: e.outcomes.clone(),
        }
    }
}

impl From<EventView> for EventRecord {
    fn from(v: EventView) -> Self {
        EventRecord {
            event_id: v.event_id,
            key: v.key,
            payload: v.payload.to_string(),
            metadata: v.metadata.to_string(),
            at_ms: v.at_ms,
            outcomes: v.outcomes,
        }
    }
}

/// `POST /v1/workflows/{workflow}/runs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The run's input.
    #[serde(default)]
    pub input: Value,
    /// A deployment name (its latest) or component hash to start on;
    /// default: the latest deployment exporting the workflow.
    pub deployment: Option<String>,
    /// A start token for the run: refused with `hook_conflict` while
    /// another run holds the token.
    pub hook: Option<StartHookRequest>,
    /// The run's ID, chosen by the client (letters, digits, `-`, `_`, `.`,
    /// `:`; at most 128), so that a client that loses the answer can look
    /// the run up, and a repeated start is refused with `run_exists`;
    /// default: a new UUIDv7.
    #[schemars(regex(pattern = keel_core::ids::NAME_PATTERN))]
    pub run_id: Option<String>,
    /// `additional_metadata` for key expressions (a JSON object).
    pub additional_metadata: Option<Value>,
    /// A delayed start: admitted now (its token and key decided now),
    /// listed `scheduled`, first activated this many milliseconds later.
    pub delay_ms: Option<u64>,
    /// A delayed start at this time (ms since the epoch); not with
    /// `delay_ms`.
    pub start_at_ms: Option<u64>,
    /// Wait up to this many milliseconds for the run to end before
    /// answering; 0 or absent answers once admitted.
    #[schemars(range(max = 60000))]
    pub wait_ms: Option<u64>,
    /// With `wait_ms`: answer as soon as the run waits (for a hook, a
    /// long timer or another run) instead of waiting for its end.
    #[serde(default)]
    pub return_on_wait: bool,
    /// Where the run stands in its concurrency group's queue when its
    /// workflow's limit is reached: 1 (highest) to 5; default 3.
    #[schemars(range(min = 1, max = 5))]
    pub priority: Option<u8>,
    /// Cancel the run with reason `deadline_exceeded` if it has not ended
    /// this many milliseconds after its admission; default: the
    /// workflow's own timeout, if it declares one.
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// The run's searchable attributes (`GET /v1/runs?attr=KEY=VALUE`):
    /// at most 32, names of 1 to 64 letters, digits, `_`, `.`, `-`,
    /// values of at most 256 bytes.
    #[serde(default)]
    pub attributes: keel_core::Attributes,
}

/// A run's start token.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartHookRequest {
    /// The token; one run holds it at a time.
    pub token: String,
    /// Keep the token this long after the start (milliseconds), even
    /// after the run ends.
    pub retention_ms: Option<u64>,
    /// Metadata shown with the hook.
    pub metadata: Option<Value>,
}

/// `POST /v1/events/{key}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PushEventRequest {
    #[serde(default)]
    pub payload: Value,
    /// `additional_metadata` of the runs it starts (a JSON object).
    pub metadata: Option<Value>,
}

/// `POST /v1/deployments/{name}/grants`: capabilities added to (or, with
/// `replace`, set on) every build of a deployment name, or the one build
/// of a hash.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// Hosts (`host` or `host:port`) steps may send HTTP requests to.
    #[serde(default)]
    #[schemars(inner(regex(pattern = keel_core::deployment::HTTP_GRANT_PATTERN)))]
    pub http: Vec<String>,
    /// Host directories preopened for steps (absolute paths).
    #[serde(default)]
    #[schemars(inner(regex(pattern = keel_core::deployment::DIR_GRANT_PATTERN)))]
    pub dirs: Vec<String>,
    /// Environment variables passed to steps (their values are the worker's).
    #[serde(default)]
    #[schemars(inner(regex(pattern = keel_core::deployment::ENV_GRANT_PATTERN)))]
    pub env: Vec<String>,
    /// Set exactly these grants instead of adding them.
    #[serde(default)]
    pub replace: bool,
}

/// A component as `keel inspect` shows it: what it exports, with the JSON
/// Schemas of its workflows' inputs and outputs.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ComponentView {
    /// The component's content hash.
    pub hash: String,
    /// The keel-sdk version it was built with.
    pub sdk_version: String,
    /// Its workflows: name, input and output JSON Schemas (when their
    /// types derive one), idempotency, concurrency, events.
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    pub workflows: Vec<keel_core::manifest::WorkflowInfo>,
    /// Its steps: name, retry policy, limits.
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    pub steps: Vec<keel_core::manifest::StepInfo>,
    /// Imports a workflow may not call (stubbed out in the workflow
    /// sandbox).
    pub stubbed_in_workflows: Vec<String>,
}

impl From<&keel_host::Loaded> for ComponentView {
    fn from(loaded: &keel_host::Loaded) -> Self {
        ComponentView {
            hash: loaded.hash.to_string(),
            sdk_version: loaded.manifest.sdk_version.clone(),
            workflows: loaded.manifest.workflows.clone(),
            steps: loaded.manifest.steps.clone(),
            stubbed_in_workflows: loaded.stubbed_imports.clone(),
        }
    }
}

/// A deployment list.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DeploymentList {
    /// Newest first.
    pub deployments: Vec<Deployment>,
}

/// Hooks holding tokens now.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct HookList {
    pub hooks: Vec<HookView>,
}

/// Ingested events.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct EventList {
    /// Newest first.
    pub events: Vec<EventView>,
}

/// An error: its kind, message and the IDs it carries.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    /// Stable, snake case: `run_not_found`, `hook_conflict`, ...
    pub kind: String,
    pub message: String,
    /// The IDs the error names (`run_id`, `conflicting_run_id`, `token`, ...).
    #[serde(default)]
    pub ids: std::collections::BTreeMap<String, String>,
    /// For `invalid_input`: each place the input or payload departs from
    /// its schema.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
}

/// A place where a value departs from its schema.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Problem {
    /// A JSON pointer into the value (`/items/0/amount`; `/` is the whole).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

/// `GET /healthz`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// `ok` when the store answers.
    pub status: String,
    /// Where the store is (no secrets); only to a caller with the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// keel's version; only to a caller with the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A worker sharing the store.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WorkerView {
    pub worker_id: String,
    pub host: String,
    pub pid: u32,
    pub started_at_ms: u64,
    /// When it last said it was alive.
    pub heartbeat_at_ms: u64,
    /// Runs whose leases it holds.
    pub runs: usize,
    /// It has not heartbeaten for three lease times (killed, or cut off
    /// from the store); it is forgotten an hour later.
    pub gone: bool,
}

impl From<keel_host::WorkerState> for WorkerView {
    fn from(w: keel_host::WorkerState) -> Self {
        WorkerView {
            worker_id: w.record.worker_id,
            host: w.record.host,
            pid: w.record.pid,
            started_at_ms: w.record.started_at_ms,
            heartbeat_at_ms: w.record.heartbeat_at_ms,
            runs: w.runs,
            gone: w.gone,
        }
    }
}

/// The workers sharing the store.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WorkerList {
    pub workers: Vec<WorkerView>,
}

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
    /// default 60000.
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

/// `GET /v1/limits`: every concurrency group and operator's override.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct LimitList {
    pub limits: Vec<keel_core::flow::LimitRow>,
}

/// `POST /v1/limits/{workflow}`: an operator's concurrency limit.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitRequest {
    /// One key value; absent for every key of the workflow.
    #[schemars(length(max = 256))]
    pub key: Option<String>,
    /// Runs of one key in progress at once; 0 pauses (new runs queue).
    #[schemars(range(max = 1000000))]
    pub limit: u32,
}

/// `POST /v1/limits/{workflow}/reset`: which override to remove.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitResetRequest {
    /// One key value's override; absent for the workflow's.
    #[schemars(length(max = 256))]
    pub key: Option<String>,
}

/// What a limit change did.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct LimitChange {
    /// Queued runs that the change started.
    pub started: Vec<String>,
    /// The groups and overrides now.
    pub limits: Vec<keel_core::flow::LimitRow>,
}

/// What a purge of ended runs past their retention did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PurgeView {
    /// The runs deleted and what they freed.
    pub deleted: keel_core::retention::Deleted,
    /// The ended runs read and decided on.
    pub examined: u64,
    /// The runs whose journal file was archived first.
    pub archived: u64,
    /// Whether every ended run was decided on (false: the pass stopped
    /// at its budget and the next goes on).
    pub complete: bool,
}

impl From<keel_host::Purge> for PurgeView {
    fn from(p: keel_host::Purge) -> Self {
        PurgeView {
            deleted: p.deleted,
            examined: p.examined,
            archived: p.archived,
            complete: p.complete,
        }
    }
}

/// Which runs a bulk operation acts on: the filters of `GET /v1/runs`
/// (at least one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkFilter {
    /// Any of these statuses.
    #[serde(default)]
    pub status: Vec<RunStatus>,
    /// This workflow.
    pub workflow: Option<String>,
    /// Admitted at or after this time (ms since the epoch).
    pub since_ms: Option<u64>,
    /// Admitted before this time (ms since the epoch).
    pub until_ms: Option<u64>,
    /// The run ID or the workflow contains this text.
    pub search: Option<String>,
    /// Fired by this schedule.
    pub schedule: Option<String>,
    /// Has every one of these attributes with this value.
    #[serde(default)]
    pub attributes: keel_core::Attributes,
}

impl From<BulkFilter> for keel_core::RunFilter {
    fn from(f: BulkFilter) -> Self {
        keel_core::RunFilter {
            statuses: f.status,
            workflow: f.workflow,
            since_ms: f.since_ms,
            until_ms: f.until_ms,
            search: f.search,
            schedule: f.schedule,
            attributes: f.attributes,
        }
    }
}

impl From<&keel_core::RunFilter> for BulkFilter {
    fn from(f: &keel_core::RunFilter) -> Self {
        BulkFilter {
            status: f.statuses.clone(),
            workflow: f.workflow.clone(),
            since_ms: f.since_ms,
            until_ms: f.until_ms,
            search: f.search.clone(),
            schedule: f.schedule.clone(),
            attributes: f.attributes.clone(),
        }
    }
}

/// `POST /v1/runs/bulk`: an action on every run a filter selects, carried
/// out as a job.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequestBody {
    pub action: BulkAction,
    pub filter: BulkFilter,
    /// `cancel`: the reason each run's cleanup sees (at most 1024 bytes).
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// `cancel`: end each run at once, without its cleanup. `delete`: end
    /// live runs at once, then delete them.
    #[serde(default)]
    pub force: bool,
    /// Count the runs it would act on and show a few; submit nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// What a bulk operation would do (`dry_run`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct BulkPreviewView {
    /// Runs the filter selects that the action applies to.
    pub acted_on: u64,
    /// Runs the filter selects whose status the action passes over.
    pub passed_over: u64,
    /// The first runs it would act on.
    pub sample: Vec<RunView>,
}

/// A bulk operation's job and its progress.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct JobView {
    pub job_id: String,
    pub action: BulkAction,
    /// The filter, bounded to the runs admitted before the job was
    /// submitted (`until_ms`).
    pub filter: BulkFilter,
    pub reason: Option<String>,
    pub force: bool,
    pub state: JobState,
    pub counts: JobCounts,
    /// The first runs the action failed on.
    pub errors: Vec<RunFailure>,
    /// The worker carrying it out, while one does.
    pub worker: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub finished_at_ms: Option<u64>,
}

impl From<&JobRecord> for JobView {
    fn from(job: &JobRecord) -> Self {
        JobView {
            job_id: job.job_id.clone(),
            action: job.request.action,
            filter: BulkFilter::from(&job.request.filter),
            reason: job.request.reason.clone(),
            force: job.request.force,
            state: job.state,
            counts: job.counts,
            errors: job.errors.clone(),
            worker: job.claim.as_ref().map(|c| c.owner.clone()),
            created_at_ms: job.created_at_ms,
            updated_at_ms: job.updated_at_ms,
            finished_at_ms: job.finished_at_ms,
        }
    }
}

/// `GET /v1/jobs`: the newest jobs first.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct JobList {
    pub jobs: Vec<JobView>,
}

/// The longest grace a prune takes: a century, in milliseconds.
pub const MAX_GRACE_MS: u64 = 3_153_600_000_000;

/// `POST /v1/components/prune`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    /// Keep a component stored within this many milliseconds (a start or a
    /// deploy may be about to name it); default an hour; at most a century.
    #[schemars(range(max = MAX_GRACE_MS))]
    pub grace_ms: Option<u64>,
    /// Say what would be deleted; delete nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// `POST /v1/tokens`: what the scoped token may do, and for how long.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// What the token may do.
    pub scope: keel_core::access::Scope,
    /// Its lifetime in milliseconds (1 h if left out, at most 7 days).
    #[serde(default)]
    #[schemars(range(min = 1, max = 604800000))]
    pub ttl_ms: Option<u64>,
}

/// A scoped token and what it grants.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct TokenView {
    /// The token, to send as `Authorization: Bearer TOKEN`.
    pub token: String,
    /// What it may do.
    pub scope: keel_core::access::Scope,
    pub issued_at_ms: u64,
    /// When it stops being accepted.
    pub expires_at_ms: u64,
}

/// `POST /v1/webhooks`: a webhook, where its deliveries go (`hook` or
/// `event`) and how they are signed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookRequest {
    /// The webhook's ID: deliveries are sent to `POST /v1/webhooks/{id}`.
    #[schemars(regex(pattern = keel_core::ids::NAME_PATTERN))]
    pub id: String,
    /// The hook a delivery resumes; each `{/json/pointer}` is replaced by
    /// the string or number at that place in the body
    /// (`order:{/data/object/metadata/order_id}`).
    #[serde(default)]
    pub hook: Option<String>,
    /// The event key a delivery is pushed as.
    #[serde(default)]
    pub event: Option<String>,
    /// The signature scheme: `stripe`, `github` or `hmac`.
    pub scheme: WebhookScheme,
    /// The header of an `hmac` signature (hex HMAC-SHA256 of the body).
    #[serde(default)]
    pub header: Option<String>,
    /// Stripe's timestamp tolerance in seconds (300 if left out).
    #[serde(default)]
    pub tolerance_s: Option<u64>,
    /// The secret shared with the sender (never shown again).
    pub secret: String,
}

impl WebhookRequest {
    /// Where its deliveries go and how they are signed, or why the request
    /// cannot say.
    pub fn spec(
        &self,
    ) -> Result<(keel_core::webhook::Target, keel_core::webhook::Scheme), keel_host::Error> {
        use keel_core::webhook::{STRIPE_TOLERANCE_S, Scheme, Target};
        let invalid = |reason: &str| keel_host::Error::InvalidInput {
            reason: format!("webhook `{}`: {reason}", self.id),
        };
        let target = match (&self.hook, &self.event) {
            (Some(token), None) => Target::Hook {
                token: token.clone(),
            },
            (None, Some(key)) => Target::Event { key: key.clone() },
            _ => {
                return Err(invalid(
                    "give `hook` (a hook token, with `{/json/pointer}` parts) or `event` (an event key), one of them",
                ));
            }
        };
        let scheme = match (self.scheme, &self.header, self.tolerance_s) {
            (WebhookScheme::Stripe, None, tolerance) => Scheme::Stripe {
                tolerance_s: tolerance.unwrap_or(STRIPE_TOLERANCE_S),
            },
            (WebhookScheme::Github, None, None) => Scheme::Github,
            (WebhookScheme::Hmac, Some(header), None) => Scheme::Hmac {
                header: header.clone(),
            },
            (WebhookScheme::Hmac, None, _) => {
                return Err(invalid(
                    "an `hmac` webhook names the `header` its signature comes in",
                ));
            }
            _ => {
                return Err(invalid(
                    "`header` is for `hmac` webhooks and `tolerance_s` for `stripe` ones",
                ));
            }
        };
        Ok((target, scheme))
    }
}

/// A webhook's signature scheme.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookScheme {
    /// `Stripe-Signature: t=...,v1=...`.
    #[default]
    Stripe,
    /// `X-Hub-Signature-256: sha256=...`.
    Github,
    /// A hex HMAC-SHA256 of the body in `header`.
    Hmac,
}

/// A webhook as the API shows it (without its secret).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WebhookView {
    pub id: String,
    /// Where deliveries are sent.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    pub scheme: WebhookScheme,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance_s: Option<u64>,
    pub created_at_ms: u64,
}

impl WebhookView {
    /// The view of `record`.
    pub fn of(record: &keel_core::webhook::WebhookRecord) -> Self {
        use keel_core::webhook::{Scheme, Target};
        let (hook, event) = match &record.target {
            Target::Hook { token } => (Some(token.clone()), None),
            Target::Event { key } => (None, Some(key.clone())),
        };
        let (scheme, header, tolerance_s) = match &record.scheme {
            Scheme::Stripe { tolerance_s } => (WebhookScheme::Stripe, None, Some(*tolerance_s)),
            Scheme::Github => (WebhookScheme::Github, None, None),
            Scheme::Hmac { header } => (WebhookScheme::Hmac, Some(header.clone()), None),
        };
        WebhookView {
            id: record.id.clone(),
            path: format!("/v1/webhooks/{}", record.id),
            hook,
            event,
            scheme,
            header,
            tolerance_s,
            created_at_ms: record.created_at_ms,
        }
    }
}

/// The webhooks, by ID.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookView>,
}

/// Where a verified delivery went.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryView {
    /// The hook it resumed, if it went to a hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The run that holds the hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The delivery was delivered before (by its delivery ID) and not again.
    #[serde(default)]
    pub duplicate: bool,
    /// The event it was pushed as, if it went to an event key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<EventView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the API's journal and detail endpoints write, and what the
    /// remote CLI and the clients read back, for every kind of entry.
    #[test]
    fn every_kind_of_entry_round_trips_through_the_api_shape() {
        for (seq, fact) in keel_core::testing::every_fact().into_iter().enumerate() {
            let entry = Entry {
                seq: seq as u64,
                at_ms: 7,
                fact,
            };
            let sent = serde_json::to_string(&JournalEntry::of(&entry)).unwrap();
            let read: JournalEntry = serde_json::from_str(&sent).unwrap();
            assert_eq!(read.kind, entry.fact.name(), "{sent}");
            assert_eq!(read.to_entry().as_ref(), Ok(&entry), "{sent}");
        }
    }
}
