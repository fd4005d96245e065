//! The records a store keeps beside the journal: runs, hooks, idempotency
//! keys and ingested events, and the capabilities a store declares.

use serde::{Deserialize, Serialize};

use crate::ids::{ComponentHash, HookToken, RunId};
use crate::journal::HookRegistration;

/// A run's status.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::EnumIter,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RunStatus {
    /// Admitted, not yet executed.
    Pending,
    /// Being executed, or interrupted while it was (a worker resumes it).
    Running,
    /// Suspended until a timer is due.
    Waiting,
    /// Ended with an output.
    Completed,
    /// Ended with an error.
    Failed,
    /// Ended by a cancel.
    Cancelled,
    /// Admitted to start later (a delayed start): its first activation is
    /// at `wake_at_ms`. Last, so that stored statuses keep their codes.
    Scheduled,
    /// Admitted over its workflow's concurrency limit: it starts when its
    /// key has a free slot (`core::flow`).
    Queued,
    /// Paused by an operator (`keel runs pause`): no code of it runs until
    /// it is resumed; payloads sent to it queue.
    Paused,
    /// Ended by continuing as new: a run of the same workflow took over
    /// (its ID is [`crate::ids::continued_run_id`] of this one's).
    Continued,
}

impl RunStatus {
    /// The status in snake case.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Every status, in order.
    pub fn all() -> Vec<RunStatus> {
        use strum::IntoEnumIterator;
        RunStatus::iter().collect()
    }

    /// Every status a run lives in (none of them final), in order.
    pub fn live() -> Vec<RunStatus> {
        use strum::IntoEnumIterator;
        RunStatus::iter().filter(|s| !s.is_final()).collect()
    }

    /// The status named by [`RunStatus::as_str`].
    pub fn parse(s: &str) -> Option<RunStatus> {
        s.parse().ok()
    }

    /// The status named by [`RunStatus::as_str`], or an error that lists
    /// every status.
    pub fn named(s: &str) -> Result<RunStatus, UnknownStatus> {
        RunStatus::parse(s).ok_or_else(|| UnknownStatus(s.to_string()))
    }

    /// The run waits (on a timer, a hook, another run, its start time, a
    /// concurrency slot or its resume): it holds no worker, however its
    /// instance is kept.
    pub fn waits(self) -> bool {
        matches!(
            self,
            RunStatus::Waiting | RunStatus::Scheduled | RunStatus::Queued | RunStatus::Paused
        )
    }

    /// The run has ended and will not execute again.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled | RunStatus::Continued
        )
    }
}

/// A name that is no run status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a run status; use {list}", list = status_names())]
pub struct UnknownStatus(pub String);

/// Every status's name, in order, separated by commas.
fn status_names() -> String {
    use strum::IntoEnumIterator;
    RunStatus::iter()
        .map(RunStatus::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunError {
    /// The error's kind in snake case (`guest_trap`, `non_determinism`, ...).
    pub kind: String,
    pub message: String,
}

/// A run's index record; the journal remains the source of truth.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: RunId,
    pub workflow: String,
    /// The component the run is pinned to.
    pub component_hash: ComponentHash,
    /// The input, as JSON.
    pub input: String,
    pub status: RunStatus,
    pub output: Option<String>,
    pub error: Option<RunError>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// When a waiting run's next timer is due.
    pub wake_at_ms: Option<u64>,
    /// The run whose workflow started this one (its child).
    #[serde(default)]
    pub parent_run_id: Option<RunId>,
    /// Searchable string attributes, set at start and by the workflow
    /// (`runs list --attr KEY=VALUE`).
    #[serde(default)]
    pub attributes: Attributes,
}

/// A run's attributes: at most [`MAX_ATTRIBUTES`] keys, each a name of
/// at most 64 characters (`[A-Za-z0-9_.-]`) with a value of at most
/// [`MAX_ATTRIBUTE_VALUE`] bytes.
pub type Attributes = std::collections::BTreeMap<String, String>;

/// The most attributes a run holds.
pub const MAX_ATTRIBUTES: usize = 32;

/// The longest attribute value, in bytes.
pub const MAX_ATTRIBUTE_VALUE: usize = 256;

/// Why `key = value` cannot be one of a run's attributes, if it cannot.
pub fn check_attribute(key: &str, value: &str) -> Result<(), String> {
    check_attribute_filter(key, value)?;
    if !can_hold(value) {
        return Err(format!(
            "attribute `{key}` has a value holding a NUL character, which no store keeps"
        ));
    }
    Ok(())
}

/// Why `name` cannot name one of a run's attributes or queries (`what`),
/// if it cannot: 1 to 64 letters, digits, `_`, `.` and `-`.
pub fn check_key_name(what: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    match ok {
        true => Ok(()),
        false => Err(format!(
            "{what} name `{name}` is not 1 to 64 characters of letters, digits, `_`, `.` and `-`"
        )),
    }
}

/// Why `key = value` cannot filter runs by attribute, if it cannot: a
/// name or a size no attribute has. A value no attribute can hold (a NUL)
/// is a filter that matches no run ([`can_hold`]).
pub fn check_attribute_filter(key: &str, value: &str) -> Result<(), String> {
    check_key_name("attribute", key)?;
    if value.len() > MAX_ATTRIBUTE_VALUE {
        return Err(format!(
            "attribute `{key}` has a value of {} bytes, over the limit of {MAX_ATTRIBUTE_VALUE}",
            value.len()
        ));
    }
    Ok(())
}

/// Whether a run's attributes can hold `value` (a store keeps no NUL).
pub fn can_hold(value: &str) -> bool {
    !value.contains('\0')
}

/// Why `attributes` cannot be a run's, if they cannot.
pub fn check_attributes(attributes: &Attributes) -> Result<(), String> {
    if attributes.len() > MAX_ATTRIBUTES {
        return Err(format!(
            "{} attributes, over the limit of {MAX_ATTRIBUTES}",
            attributes.len()
        ));
    }
    attributes
        .iter()
        .try_for_each(|(k, v)| check_attribute(k, v))
}

impl crate::codec::Stored for RunRecord {
    /// 2: `parent_run_id` and `attributes` were added.
    const VERSION: u16 = 2;

    fn decode_earlier(version: u16, bytes: &[u8]) -> Option<Result<Self, postcard::Error>> {
        (version == 1).then(|| crate::codec::decode_layout::<RunRecordV1>(bytes).map(Into::into))
    }
}

/// A run record as keel wrote it before `parent_run_id` and `attributes`
/// (layout 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunRecordV1 {
    run_id: RunId,
    workflow: String,
    component_hash: ComponentHash,
    input: String,
    status: RunStatus,
    output: Option<String>,
    error: Option<RunError>,
    created_at_ms: u64,
    updated_at_ms: u64,
    wake_at_ms: Option<u64>,
}

impl RunRecordV1 {
    /// `run` in the layout before `parent_run_id` and `attributes` (which
    /// it loses).
    pub(crate) fn of(run: &RunRecord) -> RunRecordV1 {
        RunRecordV1 {
            run_id: run.run_id.clone(),
            workflow: run.workflow.clone(),
            component_hash: run.component_hash.clone(),
            input: run.input.clone(),
            status: run.status,
            output: run.output.clone(),
            error: run.error.clone(),
            created_at_ms: run.created_at_ms,
            updated_at_ms: run.updated_at_ms,
            wake_at_ms: run.wake_at_ms,
        }
    }
}

impl From<RunRecordV1> for RunRecord {
    fn from(v1: RunRecordV1) -> RunRecord {
        RunRecord {
            run_id: v1.run_id,
            workflow: v1.workflow,
            component_hash: v1.component_hash,
            input: v1.input,
            status: v1.status,
            output: v1.output,
            error: v1.error,
            created_at_ms: v1.created_at_ms,
            updated_at_ms: v1.updated_at_ms,
            wake_at_ms: v1.wake_at_ms,
            parent_run_id: None,
            attributes: Attributes::new(),
        }
    }
}

/// The run that holds an idempotency key, until its window passes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyHold {
    pub run_id: RunId,
    pub expires_at_ms: u64,
}

impl crate::codec::Stored for KeyHold {}

/// An ingested event and the runs it started or was deduplicated against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub event_id: String,
    pub key: String,
    pub payload: String,
    pub metadata: String,
    pub at_ms: u64,
    pub outcomes: Vec<EventOutcome>,
}

impl crate::codec::Stored for EventRecord {}

/// What an event did for one subscribed workflow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EventOutcome {
    pub workflow: String,
    /// The run it started, or the run that already held the key.
    pub run_id: Option<RunId>,
    /// The start collided with an idempotency key and was swallowed.
    pub deduplicated: bool,
    /// Why no run was started (a key expression that failed, say).
    pub error: Option<String>,
}

/// What a store supports, declared so that a start needing more fails
/// before anything is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// A run and its start hook are admitted in one transaction.
    pub atomic_start_hook: bool,
    /// A token can be held after its run ends (`min_retention`).
    pub hook_retention: bool,
}

impl Capabilities {
    /// Everything keel can ask of a store; what sled provides.
    pub const ALL: Capabilities = Capabilities {
        atomic_start_hook: true,
        hook_retention: true,
    };
}

/// The hook that holds a token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRecord {
    pub token: HookToken,
    /// The run that owns the hook.
    pub run_id: RunId,
    /// The workflow command that created it; `None` for a start hook.
    pub command: Option<u32>,
    /// JSON metadata given at creation.
    pub metadata: Option<String>,
    pub created_at_ms: u64,
    /// The token stays unavailable until then, even after the run ends.
    pub retain_until_ms: Option<u64>,
    /// The run has not ended: the hook accepts payloads.
    pub active: bool,
    /// Index of the next payload resumed into it.
    pub next_payload: u64,
    /// The JSON Schema of the hook's payload type, when the workflow gave
    /// one: a payload resumed into the hook must fit it.
    pub payload_schema: Option<String>,
}

impl crate::codec::Stored for HookRecord {
    /// 2: `payload_schema` was added.
    const VERSION: u16 = 2;

    fn decode_earlier(version: u16, bytes: &[u8]) -> Option<Result<Self, postcard::Error>> {
        (version == 1).then(|| crate::codec::decode_layout::<HookRecordV1>(bytes).map(Into::into))
    }
}

/// A hook record as keel wrote it before `payload_schema` (layout 1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HookRecordV1 {
    token: HookToken,
    run_id: RunId,
    command: Option<u32>,
    metadata: Option<String>,
    created_at_ms: u64,
    retain_until_ms: Option<u64>,
    active: bool,
    next_payload: u64,
}

impl From<HookRecordV1> for HookRecord {
    fn from(v1: HookRecordV1) -> HookRecord {
        HookRecord {
            token: v1.token,
            run_id: v1.run_id,
            command: v1.command,
            metadata: v1.metadata,
            created_at_ms: v1.created_at_ms,
            retain_until_ms: v1.retain_until_ms,
            active: v1.active,
            next_payload: v1.next_payload,
            payload_schema: None,
        }
    }
}

impl HookRecord {
    /// The run holding the token at `now_ms`, if any.
    pub fn holder(&self, now_ms: u64) -> Option<&RunId> {
        let retained = self.retain_until_ms.is_some_and(|t| t > now_ms);
        (self.active || retained).then_some(&self.run_id)
    }

    /// A start hook: created by `start()` rather than by the workflow.
    pub fn is_start_hook(&self) -> bool {
        self.command.is_none()
    }
}

/// What registering a workflow's hook does, given the hook that holds its
/// token now (if any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registration {
    /// Nothing to write: the run's own start hook or its own earlier
    /// registration (a recovered run), or a conflict; the answer is final.
    Answer(HookRegistration),
    /// The token is free: write the hook.
    Take,
    /// Another run holds it and `force` takes it over: write the hook, and
    /// tell this run (a claim and a wakeup) that it lost the token.
    TakeFrom(RunId),
    /// The run's own start hook, which takes the payload schema the
    /// workflow gives it: write this record (the held one with that schema)
    /// and answer `BoundToStart`.
    Bind(HookRecord),
}

impl Registration {
    /// Decides the registration of `hook` (created by a workflow's command)
    /// with `force`, when `held` holds its token, at `now_ms`.
    pub fn decide(held: Option<&HookRecord>, hook: &HookRecord, force: bool, now_ms: u64) -> Self {
        let Some((held, owner)) = held.and_then(|h| h.holder(now_ms).map(|o| (h, o))) else {
            return Registration::Take;
        };
        let conflict = || {
            Registration::Answer(HookRegistration::Conflict {
                owner_run_id: owner.to_string(),
            })
        };
        if *owner == hook.run_id {
            if held.is_start_hook() {
                match &hook.payload_schema {
                    Some(schema) if held.payload_schema.as_ref() != Some(schema) => {
                        Registration::Bind(HookRecord {
                            payload_schema: Some(schema.clone()),
                            ..held.clone()
                        })
                    }
                    _ => Registration::Answer(HookRegistration::BoundToStart),
                }
            } else if held.command == hook.command {
                Registration::Answer(HookRegistration::Registered)
            } else {
                conflict()
            }
        } else if force {
            Registration::TakeFrom(owner.clone())
        } else {
            conflict()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;

    #[test]
    fn an_unknown_status_names_every_status() {
        assert_eq!(RunStatus::named("queued"), Ok(RunStatus::Queued));
        let err = RunStatus::named("sleeping").unwrap_err().to_string();
        assert_eq!(
            err,
            "`sleeping` is not a run status; use pending, running, waiting, completed, \
             failed, cancelled, scheduled, queued, paused, continued"
        );
    }

    #[test]
    fn a_run_record_of_layout_1_is_read_without_a_parent_and_rewritten_as_2() {
        let mut run = crate::testing::run_record("r", RunStatus::Waiting, 5);
        run.wake_at_ms = Some(9);
        let v1 = crate::testing::run_record_layout_1(&run);
        let read: RunRecord = codec::decode(&v1, "run record").unwrap();
        assert_eq!(read, run);
        run.parent_run_id = Some("parent".into());
        run.attributes.insert("tenant".into(), "acme".into());
        let v2 = codec::encode(&run);
        assert_eq!(v2[0], 2, "written with layout 2");
        assert_eq!(codec::decode::<RunRecord>(&v2, "run record").unwrap(), run);
        let mut v3 = v2.clone();
        v3[0] = 3;
        let err = codec::decode::<RunRecord>(&v3, "run record").unwrap_err();
        assert!(err.to_string().contains("format version 3"), "{err}");
    }

    #[test]
    fn attributes_are_bounded_names_with_bounded_values() {
        assert!(check_attribute("tenant", "acme").is_ok());
        assert!(check_attribute("order.region-1_a", "").is_ok());
        for bad in ["", "has space", "é", &"k".repeat(65)] {
            let err = check_attribute(bad, "v").unwrap_err();
            assert!(err.contains("attribute name"), "{bad}: {err}");
        }
        let err = check_attribute("k", "a\0b").unwrap_err();
        assert!(err.contains("NUL"), "{err}");
        let err = check_attribute("k", &"v".repeat(257)).unwrap_err();
        assert!(err.contains("257 bytes"), "{err}");
        let many: Attributes = (0..33).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(
            check_attributes(&many)
                .unwrap_err()
                .contains("33 attributes")
        );
    }

    #[test]
    fn statuses_round_trip_through_their_names() {
        for s in [
            RunStatus::Pending,
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
            RunStatus::Continued,
        ] {
            assert_eq!(RunStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(RunStatus::parse("done"), None);
    }

    #[test]
    fn a_hook_record_of_layout_1_is_read_without_a_payload_schema() {
        let hook = HookRecord {
            token: "t".into(),
            run_id: "r".into(),
            command: Some(3),
            metadata: Some("{}".into()),
            created_at_ms: 7,
            retain_until_ms: None,
            active: true,
            next_payload: 2,
            payload_schema: None,
        };
        let v1 = HookRecordV1 {
            token: "t".into(),
            run_id: "r".into(),
            command: Some(3),
            metadata: Some("{}".into()),
            created_at_ms: 7,
            retain_until_ms: None,
            active: true,
            next_payload: 2,
        };
        let bytes = postcard::to_stdvec(&(1u16, v1)).unwrap();
        assert_eq!(codec::decode::<HookRecord>(&bytes, "hook").unwrap(), hook);
        let typed = HookRecord {
            payload_schema: Some(r#"{"type":"boolean"}"#.into()),
            ..hook
        };
        let v2 = codec::encode(&typed);
        assert_eq!(v2[0], 2, "written with layout 2");
        assert_eq!(codec::decode::<HookRecord>(&v2, "hook").unwrap(), typed);
    }

    #[test]
    fn a_token_is_held_while_active_or_retained() {
        let mut hook = HookRecord {
            token: "t".into(),
            run_id: "r".into(),
            command: None,
            metadata: None,
            created_at_ms: 0,
            retain_until_ms: Some(100),
            active: true,
            next_payload: 0,
            payload_schema: None,
        };
        assert_eq!(hook.holder(500).map(|r| r.as_str()), Some("r"));
        hook.active = false;
        assert_eq!(hook.holder(99).map(|r| r.as_str()), Some("r"));
        assert_eq!(hook.holder(100), None);
        assert!(hook.is_start_hook());
    }

    #[test]
    fn registration_decides_by_who_holds_the_token() {
        let hook = |run: &str, command: Option<u32>| HookRecord {
            token: "t".into(),
            run_id: run.into(),
            command,
            metadata: None,
            created_at_ms: 0,
            retain_until_ms: None,
            active: true,
            next_payload: 0,
            payload_schema: None,
        };
        let mine = hook("a", Some(2));
        let decide = |held: Option<&HookRecord>, force| Registration::decide(held, &mine, force, 0);
        assert_eq!(decide(None, false), Registration::Take);
        let start = hook("a", None);
        assert_eq!(
            decide(Some(&start), false),
            Registration::Answer(HookRegistration::BoundToStart)
        );
        assert_eq!(
            decide(Some(&mine), false),
            Registration::Answer(HookRegistration::Registered)
        );
        let other_command = hook("a", Some(5));
        assert!(matches!(
            decide(Some(&other_command), true),
            Registration::Answer(HookRegistration::Conflict { .. })
        ));
        let other_run = hook("b", Some(0));
        assert_eq!(
            decide(Some(&other_run), false),
            Registration::Answer(HookRegistration::Conflict {
                owner_run_id: "b".into()
            })
        );
        assert_eq!(
            decide(Some(&other_run), true),
            Registration::TakeFrom("b".into())
        );
        let mut ended = other_run.clone();
        ended.active = false;
        assert_eq!(decide(Some(&ended), false), Registration::Take);
    }
}
