//! Runs: a run, its children, pages of runs, a run with its journal and
//! timeline, journal entries, and the start request.

use keel_core::journal::Entry;
use keel_core::timeline::Row;
use keel_core::{RunError, RunRecord, RunStatus};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::value_of;

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
    /// The pause that holds it (`status` is `paused` once its driver has
    /// stopped it); given by single-run reads, pauses and resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<keel_core::lifecycle::PauseRequest>,
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
    /// The run that continues this one, when its workflow continued as new
    /// (`status` is `continued`): its ID derives from this run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_as: Option<String>,
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
        if !run.status.is_final() {
            view.paused = keel.pause_of(&run.run_id).await?;
        }
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
            paused: None,
            children: Vec::new(),
            waiting_on: Vec::new(),
            payload_id: None,
            reply: None,
            continued_as: (r.status == RunStatus::Continued)
                .then(|| r.run_id.continued().into_string()),
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

impl RunDetail {
    /// The detail of `run`: as single-run reads give it, with its timeline
    /// and journal as read now.
    pub async fn read(keel: &keel_host::Keel, run: &RunRecord) -> keel_host::Result<Self> {
        let journal = keel.journal(&run.run_id).await?;
        Ok(RunDetail {
            run: RunView::read(keel, run).await?,
            timeline: keel_core::timeline::timeline(&journal),
            journal: journal.iter().map(JournalEntry::of).collect(),
            now_ms: keel.clock_ms(),
        })
    }
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

/// `POST /v1/runs/{run_id}/restart`: where the ended run starts over (a
/// step, or a journal position: one of them), and on which build.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    {"required": ["from_step"], "properties": {"from_step": {"type": "string"}, "at": {"type": "null"}}},
    {"required": ["at"], "properties": {"at": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64}, "from_step": {"type": "null"}}}
]))]
pub struct RestartRequest {
    /// The step whose first scheduling it starts over from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_step: Option<String>,
    /// The journal position it starts over from, instead of a step (a
    /// journal holds far fewer than 2^32 entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
    /// A deployment name (its current build) or a build's hash to run on;
    /// refused unless the journal kept replays there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<String>,
}

impl RestartRequest {
    /// The point it names, or why it names none.
    pub fn point(&self) -> Result<keel_core::restart::RestartPoint, String> {
        use keel_core::restart::RestartPoint;
        match (&self.from_step, self.at) {
            (Some(step), None) => Ok(RestartPoint::Step(step.clone())),
            (None, Some(seq)) => Ok(RestartPoint::Seq(seq)),
            _ => Err(
                "give `from_step` (a step's name) or `at` (a journal position), one of them".into(),
            ),
        }
    }
}

/// `POST /v1/runs/{run_id}/fork`: where the fork starts over (a step, or
/// a journal position: one of them), on which build and with which input.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    {"required": ["from_step"], "properties": {"from_step": {"type": "string"}, "at": {"type": "null"}}},
    {"required": ["at"], "properties": {"at": {"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64}, "from_step": {"type": "null"}}}
]))]
pub struct ForkRequest {
    /// The step whose first scheduling it starts over from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_step: Option<String>,
    /// The journal position it starts over from, instead of a step (a
    /// journal holds far fewer than 2^32 entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
    /// A deployment name (its current build) or a build's hash to run on;
    /// refused unless the journal carried replays there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<String>,
    /// The fork's input (the source's if absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The fork's run ID, chosen by the client (letters, digits, `-`,
    /// `_`, `.`, `:`; at most 128) so that a fork whose answer was lost is
    /// asked again into the same run (409 `run_exists` then, naming it); a
    /// new one if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = keel_core::ids::NAME_PATTERN))]
    pub run_id: Option<String>,
}

impl ForkRequest {
    /// Where it starts over, as a restart's request says it.
    pub fn restart(&self) -> RestartRequest {
        RestartRequest {
            from_step: self.from_step.clone(),
            at: self.at,
            on: self.on.clone(),
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
