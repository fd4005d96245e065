//! The journal model: the ordered, append-only record of a run.
//!
//! Commands (what the workflow asked for) and completions (what it was
//! given) share one sequence. Commands are matched on replay by their
//! command ID, the order in which the workflow issued them; completions are
//! delivered in journal order. Entries are stored with the format version
//! of [`crate::codec`].

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::codec::{self, CodecError};

/// One journal entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the run's journal, from 0.
    pub seq: u64,
    /// When the entry was appended, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    #[serde(rename = "fact", alias = "event")]
    pub fact: Fact,
}

/// What a journal entry records: a command the workflow issued, a
/// completion it was given, or a change of the run's life (start, end).
///
/// Variants are only ever appended: their order is the binary format.
/// [`FactKind`] names each variant without its fields: its snake-case
/// name is the `kind` of the entry's JSON shape ([`entry_to_json`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, strum::EnumDiscriminants)]
#[strum_discriminants(
    name(FactKind),
    derive(strum::EnumIter, strum::EnumString, strum::IntoStaticStr),
    strum(serialize_all = "snake_case")
)]
pub enum Fact {
    /// The run was admitted.
    RunStarted {
        workflow: String,
        input: String,
    },
    /// The workflow scheduled a step.
    StepScheduled {
        command: u32,
        #[serde(rename = "step_name", alias = "name")]
        name: String,
        input: String,
        step_id: String,
        /// Digest of the step's name and input, to detect divergence.
        digest: String,
    },
    /// An attempt is about to run; durable before it runs.
    StepAttemptStarted {
        command: u32,
        attempt: u32,
    },
    /// An attempt failed and will be retried no sooner than `retry_at_ms`.
    StepAttemptFailed {
        command: u32,
        attempt: u32,
        error: String,
        retry_at_ms: u64,
    },
    StepCompleted {
        command: u32,
        output: String,
    },
    StepFailed {
        command: u32,
        error: String,
        fatal: bool,
        attempts: u32,
    },
    TimerScheduled {
        command: u32,
        fire_at_ms: u64,
    },
    /// The workflow passed `patched(change_id)` with the new code.
    PatchMarker {
        command: u32,
        change_id: String,
    },
    TimerFired {
        command: u32,
    },
    RunCompleted {
        output: String,
    },
    RunFailed {
        #[serde(rename = "error_kind", alias = "kind")]
        kind: String,
        error: String,
    },
    /// The workflow created a hook; the store's answer is recorded with it.
    HookCreated {
        command: u32,
        token: String,
        force: bool,
        registration: HookRegistration,
    },
    /// The workflow awaits the `index`-th payload of the hook created by
    /// command `hook`.
    HookNext {
        command: u32,
        hook: u32,
        token: String,
        index: u64,
    },
    HookReceived {
        command: u32,
        payload: String,
    },
    /// Another run took the token over; the awaited payload never comes.
    HookForceClaimed {
        command: u32,
        claimed_by_run_id: String,
    },
    /// The workflow disposed of the hook created by command `hook`.
    HookDisposed {
        command: u32,
        hook: u32,
    },
    /// The workflow read another run's status.
    RunStatusRead {
        command: u32,
        run_id: String,
        status: String,
    },
    /// The workflow waits for another run to end.
    RunAwaited {
        command: u32,
        run_id: String,
    },
    /// An awaited run ended.
    AwaitedRunEnded {
        command: u32,
        status: String,
        output: Option<String>,
        error: Option<String>,
    },
    /// The workflow started a run; `outcome` is its run ID, or the run that
    /// held the token.
    WorkflowStarted {
        command: u32,
        workflow: String,
        input: String,
        token: Option<String>,
        outcome: StartOutcome,
    },
    /// The run was cancelled.
    RunCancelled,
    /// A failed run was retried: the entries from `from_seq` up to this
    /// one (its first failure for good and everything after it) no longer
    /// count, so the failed step runs again with fresh attempts and the
    /// same step ID, while the steps completed before it keep their results.
    RunRetried {
        from_seq: u64,
    },
    /// Attempt `attempt` of the step of `command` waited `waited_ms` for
    /// its rate or concurrency limit's key `key` before it started
    /// (recorded with the attempt's start; the workflow never sees it).
    StepThrottled {
        command: u32,
        attempt: u32,
        key: String,
        waited_ms: u64,
    },
    /// Someone asked for the run to be cancelled (`by`: who, `reason`:
    /// why; a passed deadline is `deadline_exceeded`). The workflow's next
    /// wait after this entry receives it, in journal order, and its cleanup
    /// runs within the grace bound.
    CancelRequested {
        reason: String,
        by: String,
    },
    /// The run must end by `deadline_ms` (on the engine's clock), or it is
    /// cancelled with reason `deadline_exceeded`. Recorded at admission.
    DeadlineSet {
        deadline_ms: u64,
    },
    /// A cancelled run ended after its cleanup: `kind` is `cancelled` or
    /// `deadline_exceeded`, `error` says why and how the cleanup ended,
    /// `output` is the workflow's output if it returned one.
    RunEndedCancelled {
        #[serde(rename = "error_kind", alias = "kind")]
        kind: String,
        error: String,
        output: Option<String>,
    },
    /// The workflow started a child run (of its own component, or of the
    /// latest component of `deployment`) whose end follows `close` when
    /// this run ends; `outcome` is its run ID, or the run that held the
    /// token. The successor of [`Fact::WorkflowStarted`].
    ChildStarted {
        command: u32,
        workflow: String,
        deployment: Option<String>,
        input: String,
        token: Option<String>,
        close: ClosePolicy,
        timeout_ms: Option<u64>,
        outcome: StartOutcome,
    },
    /// The workflow set its run's attribute `key` to `value`.
    AttributeSet {
        command: u32,
        key: String,
        value: String,
    },
    /// The workflow wrote `value` (JSON) to its run's stream `stream`; the
    /// store stores the chunk with this entry (`crate::stream`).
    StreamWritten {
        command: u32,
        stream: String,
        value: String,
    },
    /// The workflow closed its run's stream `stream`.
    StreamClosed {
        command: u32,
        stream: String,
    },
    /// The workflow replied `reply` (JSON) to the `index`-th payload of
    /// hook `token`, which it received by command `request`: the answer a
    /// resume waiting for a reply gets.
    HookReplied {
        command: u32,
        request: u32,
        token: String,
        index: u64,
        reply: String,
    },
    /// The workflow refused the payload its `hook-next` command `request`
    /// received (payload `index` of hook `token`): it does not decode as
    /// the hook's type. A retry of a run that failed on it skips it.
    HookRefused {
        command: u32,
        request: u32,
        token: String,
        index: u64,
        reason: String,
    },
    /// A retry skipped payload `index` of hook `token`, which the run had
    /// refused: the hook's next `hook-next` is given the payload after it.
    PayloadSkipped {
        token: String,
        index: u64,
    },
    /// The run's spans belong to trace `trace_id` (32 hex digits), under
    /// the run's own span `span_id` (16), itself under the caller's span
    /// `parent_span_id` when the start carried a `traceparent`. Recorded at
    /// admission, so every activation, whichever worker drives it and
    /// however late, continues the same trace.
    Traced {
        trace_id: String,
        span_id: String,
        parent_span_id: Option<String>,
    },
    /// Worker `by_worker` took the run over from `from_worker`, whose lease
    /// on it expired at `expired_at_ms` without being released: that
    /// worker died or lost touch while driving the run, and what it had in
    /// flight (a step's attempt) runs again. The workflow never sees it.
    TakenOver {
        from_worker: String,
        expired_at_ms: u64,
        by_worker: String,
    },
    /// Someone (`by`) paused the run: until [`Fact::RunResumed`] no code of
    /// it runs (no step, timer or payload reaches it; payloads queue).
    /// `status` and `wake_at_ms` are its record's when it paused, which
    /// its resume restores for a run none of whose code ran (a delayed
    /// start, a queued run). The workflow never sees it.
    RunPaused {
        by: String,
        status: String,
        wake_at_ms: Option<u64>,
    },
    /// The paused run was resumed: it goes on where it stood.
    RunResumed,
    /// Someone (`by`) restarted the ended run from entry `from_seq` (a
    /// step's scheduling, or a position): as [`Fact::RunRetried`], the
    /// entries from `from_seq` up to this one no longer count, so the
    /// commands from there on run again under the same command and step
    /// IDs, while everything before keeps its result.
    RunRestarted {
        from_seq: u64,
        by: String,
    },
    /// Someone (`by`) moved the live run from build `from` to build `to`
    /// (component hashes), its journal having replayed on `to`: from here
    /// on it runs there. The workflow never sees it.
    RunMoved {
        from: String,
        to: String,
        by: String,
    },
    /// The workflow continued as new: the run ended here, and run
    /// `next_run_id` (of the same workflow and build, with `input`) took
    /// over its start token, its attributes and its parent.
    RunContinued {
        next_run_id: String,
        input: String,
    },
}

/// How the store answered a workflow's `create_hook`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HookRegistration {
    Registered,
    BoundToStart,
    Conflict { owner_run_id: String },
}

/// How a start from a workflow ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartOutcome {
    Started { run_id: String },
    HookConflict { conflicting_run_id: String },
    Refused { reason: String },
}

impl Fact {
    /// The fact ends the run.
    pub fn is_end(&self) -> bool {
        matches!(
            self,
            Fact::RunCompleted { .. }
                | Fact::RunFailed { .. }
                | Fact::RunCancelled
                | Fact::RunEndedCancelled { .. }
                | Fact::RunContinued { .. }
        )
    }

    /// The command this fact issues, if it is a command.
    pub fn command(&self) -> Option<u32> {
        match self {
            Fact::StepScheduled { command, .. }
            | Fact::TimerScheduled { command, .. }
            | Fact::PatchMarker { command, .. }
            | Fact::HookCreated { command, .. }
            | Fact::HookNext { command, .. }
            | Fact::HookDisposed { command, .. }
            | Fact::RunStatusRead { command, .. }
            | Fact::RunAwaited { command, .. }
            | Fact::WorkflowStarted { command, .. }
            | Fact::ChildStarted { command, .. }
            | Fact::AttributeSet { command, .. }
            | Fact::StreamWritten { command, .. }
            | Fact::StreamClosed { command, .. }
            | Fact::HookReplied { command, .. }
            | Fact::HookRefused { command, .. } => Some(*command),
            _ => None,
        }
    }

    /// The command this fact completes, if it is a completion.
    pub fn completes(&self) -> Option<u32> {
        match self {
            Fact::StepCompleted { command, .. }
            | Fact::StepFailed { command, .. }
            | Fact::TimerFired { command }
            | Fact::HookReceived { command, .. }
            | Fact::HookForceClaimed { command, .. }
            | Fact::AwaitedRunEnded { command, .. } => Some(*command),
            _ => None,
        }
    }

    /// The fact's name in snake case, as `keel runs show` prints it.
    pub fn name(&self) -> &'static str {
        FactKind::from(self).into()
    }

    /// A one-line description of a command, for divergence reports.
    pub fn describe(&self) -> String {
        match self {
            Fact::StepScheduled { name, input, .. } => {
                format!("step `{name}` with input {}", excerpt(input, 80))
            }
            Fact::TimerScheduled { fire_at_ms, .. } => {
                format!("a timer due at {}", crate::clock::timestamp(*fire_at_ms))
            }
            Fact::PatchMarker { change_id, .. } => format!("patch marker `{change_id}`"),
            Fact::HookCreated { token, force, .. } => {
                let force = if *force { " with force" } else { "" };
                format!("hook `{token}`{force}")
            }
            Fact::HookNext { token, index, .. } => format!("payload {index} of hook `{token}`"),
            Fact::HookDisposed { hook, .. } => format!("disposal of the hook of command {hook}"),
            Fact::RunStatusRead { run_id, .. } => format!("the status of run {run_id}"),
            Fact::RunAwaited { run_id, .. } => format!("the end of run {run_id}"),
            Fact::WorkflowStarted {
                workflow, input, ..
            } => format!("a run of `{workflow}` with input {}", excerpt(input, 80)),
            Fact::AttributeSet { key, value, .. } => {
                format!("attribute `{key}` set to {}", excerpt(value, 80))
            }
            Fact::StreamWritten { stream, value, .. } => {
                format!("a write of {} to stream `{stream}`", excerpt(value, 80))
            }
            Fact::StreamClosed { stream, .. } => format!("the close of stream `{stream}`"),
            Fact::HookReplied {
                token,
                index,
                reply,
                ..
            } => format!(
                "a reply of {} to payload {index} of hook `{token}`",
                excerpt(reply, 80)
            ),
            Fact::HookRefused { token, index, .. } => {
                format!("the refusal of payload {index} of hook `{token}`")
            }
            Fact::ChildStarted {
                workflow,
                deployment,
                input,
                close,
                ..
            } => {
                let on = deployment
                    .as_ref()
                    .map(|d| format!(" of deployment `{d}`"))
                    .unwrap_or_default();
                format!(
                    "a child run of `{workflow}`{on} ({} on close) with input {}",
                    close.as_str(),
                    excerpt(input, 80)
                )
            }
            other => other.name().to_string(),
        }
    }
}

/// An entry in keel's one JSON shape, shared by journal files and every
/// JSON output: `seq`, `at_ms`, `kind` (the fact's name), then the fact's
/// fields, with inputs and outputs as the strings recorded, so that the
/// shape is lossless.
pub fn entry_to_json(entry: &Entry) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    if let Ok(serde_json::Value::Object(tagged)) = serde_json::to_value(&entry.fact)
        && let Some((_, serde_json::Value::Object(fields))) = tagged.into_iter().next()
    {
        out.extend(fields);
    }
    out.insert("seq".into(), entry.seq.into());
    out.insert("at_ms".into(), entry.at_ms.into());
    out.insert("kind".into(), entry.fact.name().into());
    serde_json::Value::Object(out)
}

/// Reads an entry in the shape [`entry_to_json`] writes, or in the shape
/// journal files had before it (`{"seq", "at_ms", "event": {"Variant": {..}}}`).
pub fn entry_from_json(value: &serde_json::Value) -> Result<Entry, String> {
    let Some(kind) = value.get("kind").and_then(|k| k.as_str()) else {
        return serde_json::from_value(value.clone()).map_err(|e| e.to_string());
    };
    let number = |field: &str| {
        value
            .get(field)
            .and_then(|v| v.as_u64())
            .ok_or_else(|| format!("entry has no number `{field}`"))
    };
    let mut fields = value.as_object().cloned().unwrap_or_default();
    for meta in ["seq", "at_ms", "kind"] {
        fields.remove(meta);
    }
    let fact_kind = match kind.parse::<FactKind>() {
        Ok(fact_kind) => fact_kind,
        // keel 0.1 wrote a cancelled run's end with its end kind in place
        // of the entry's kind.
        Err(_) if matches!(kind, "cancelled" | "deadline_exceeded") => {
            fields.insert("error_kind".into(), kind.into());
            FactKind::RunEndedCancelled
        }
        Err(_) => return Err(format!("no journal entry is of kind `{kind}`")),
    };
    // The variant's name, as serde's external tagging spells it.
    let variant = format!("{fact_kind:?}");
    // A variant without fields (`run_cancelled`, `run_resumed`) is its name.
    let unit = fields
        .is_empty()
        .then(|| serde_json::from_value::<Fact>(serde_json::Value::String(variant.clone())).ok())
        .flatten();
    let fact: Fact = match unit {
        Some(fact) => fact,
        None => serde_json::from_value(serde_json::json!({ variant: fields }))
            .map_err(|e| format!("entry of kind `{kind}`: {e}"))?,
    };
    Ok(Entry {
        seq: number("seq")?,
        at_ms: number("at_ms")?,
        fact,
    })
}

impl codec::Stored for Entry {}

/// Encodes an entry with the current format version.
pub fn encode(entry: &Entry) -> Vec<u8> {
    codec::encode(entry)
}

/// Decodes a stored entry, refusing other format versions.
pub fn decode(bytes: &[u8]) -> Result<Entry, CodecError> {
    codec::decode(bytes, "journal entry")
}

/// The digest of a step call (name and input), to detect divergence.
pub fn step_digest(name: &str, input: &str) -> String {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0]);
    h.update(input.as_bytes());
    hex::encode(&h.finalize()[..8])
}

/// At most `max` characters of `s`, with an ellipsis when cut.
pub fn excerpt(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The run's end as the journal records it, if it does.
pub fn recorded_end(entries: &[Entry]) -> Option<&Fact> {
    entries.iter().rev().map(|e| &e.fact).find(|f| f.is_end())
}

/// What becomes of a child run when its parent ends (completed, failed
/// or cancelled), chosen when the parent starts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ClosePolicy {
    /// The child gets a cancel request and runs its own cleanup.
    #[default]
    Cancel,
    /// The child goes on.
    Abandon,
    /// The parent's end waits until the child has ended.
    Wait,
}

impl ClosePolicy {
    /// The policy's name, as the CLI and the API show it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClosePolicy::Cancel => "cancel",
            ClosePolicy::Abandon => "abandon",
            ClosePolicy::Wait => "wait",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_other_versions_are_refused() {
        let entry = Entry {
            seq: 3,
            at_ms: 42,
            fact: Fact::StepCompleted {
                command: 1,
                output: "\"ok\"".into(),
            },
        };
        let bytes = encode(&entry);
        assert_eq!(decode(&bytes).unwrap(), entry);

        let mut other = bytes.clone();
        other[0] = 9;
        let err = decode(&other).unwrap_err();
        assert!(err.to_string().contains("format version 9"), "{err}");
    }

    #[test]
    fn every_kind_of_fact_round_trips_through_its_binary_and_json_shapes() {
        use strum::IntoEnumIterator;
        let examples = crate::testing::every_fact();
        for kind in FactKind::iter() {
            assert!(
                examples.iter().any(|f| FactKind::from(f) == kind),
                "journal::examples() has no fact of kind `{}`: add one, with every field set",
                <&str>::from(kind)
            );
        }
        for (seq, fact) in examples.into_iter().enumerate() {
            let entry = Entry {
                seq: seq as u64,
                at_ms: 1_000 + seq as u64,
                fact,
            };
            assert_eq!(decode(&encode(&entry)).unwrap(), entry);
            let json = entry_to_json(&entry);
            assert_eq!(json["kind"], entry.fact.name(), "{json}");
            let text = serde_json::to_string(&json).unwrap();
            let back = entry_from_json(&serde_json::from_str(&text).unwrap());
            assert_eq!(back.as_ref(), Ok(&entry), "{text}");
            // The shape journal files had before `kind`.
            let old = serde_json::to_value(&entry).unwrap();
            assert_eq!(entry_from_json(&old).as_ref(), Ok(&entry), "{old}");
        }
    }

    #[test]
    fn a_cancelled_end_written_by_keel_0_1_still_reads() {
        let old = serde_json::json!({
            "seq": 5, "at_ms": 9, "kind": "deadline_exceeded",
            "error": "cleanup completed", "output": null,
        });
        let entry = entry_from_json(&old).unwrap();
        assert_eq!(
            entry.fact,
            Fact::RunEndedCancelled {
                kind: "deadline_exceeded".into(),
                error: "cleanup completed".into(),
                output: None,
            }
        );
        let err = entry_from_json(&serde_json::json!({"seq": 0, "at_ms": 0, "kind": "nope"}));
        assert_eq!(err, Err("no journal entry is of kind `nope`".into()));
    }

    #[test]
    fn old_json_files_name_the_fact_event() {
        let old = r#"{"seq": 0, "at_ms": 1, "event": {"TimerFired": {"command": 2}}}"#;
        let entry: Entry = serde_json::from_str(old).unwrap();
        assert_eq!(entry.fact, Fact::TimerFired { command: 2 });
        let new = serde_json::to_value(&entry).unwrap();
        assert!(new.get("fact").is_some(), "{new}");
    }

    #[test]
    fn the_json_shape_is_flat_and_lossless() {
        let facts = [
            Fact::StepScheduled {
                command: 1,
                name: "charge".into(),
                input: "{\"a\": 1}".into(),
                step_id: "r-1".into(),
                digest: "d".into(),
            },
            Fact::RunFailed {
                kind: "guest_trap".into(),
                error: "boom".into(),
            },
            Fact::RunCancelled,
            Fact::RunRetried { from_seq: 4 },
            Fact::HookCreated {
                command: 2,
                token: "t".into(),
                force: true,
                registration: HookRegistration::Conflict {
                    owner_run_id: "o".into(),
                },
            },
        ];
        for (seq, fact) in facts.into_iter().enumerate() {
            let entry = Entry {
                seq: seq as u64,
                at_ms: 7,
                fact,
            };
            let json = entry_to_json(&entry);
            assert_eq!(json["kind"], entry.fact.name());
            assert_eq!(entry_from_json(&json).unwrap(), entry, "{json}");
        }
        let json = entry_to_json(&Entry {
            seq: 0,
            at_ms: 1,
            fact: Fact::StepScheduled {
                command: 0,
                name: "n".into(),
                input: "1".into(),
                step_id: "s".into(),
                digest: "d".into(),
            },
        });
        assert_eq!(json["step_name"], "n");
        assert_eq!(json["input"], "1");
    }

    #[test]
    fn old_shapes_still_read() {
        let old = serde_json::json!({"seq": 0, "at_ms": 1, "event": {"StepScheduled": {
            "command": 0, "name": "n", "input": "1", "step_id": "s", "digest": "d"}}});
        let entry = entry_from_json(&old).unwrap();
        assert!(matches!(entry.fact, Fact::StepScheduled { ref name, .. } if name == "n"));
        let bad = serde_json::json!({"seq": 0, "at_ms": 1, "kind": "no_such_fact"});
        assert!(entry_from_json(&bad).unwrap_err().contains("no_such_fact"));
    }

    #[test]
    fn excerpts_cut_on_characters() {
        assert_eq!(excerpt("héllo", 2), "hé…");
        assert_eq!(excerpt("hi", 5), "hi");
    }
}
