//! Flow control: concurrency limits per key, the queue of runs over a
//! limit, and the decisions a store makes when a run is admitted, ends, or
//! an operator changes a limit.
//!
//! A workflow declares `concurrency(key = CEL, limit = N, on_limit = ...)`.
//! Runs whose key evaluates to the same string form a **group**
//! (workflow, key). At most `limit` runs of a group **hold a slot** at once:
//! a run takes one when it is admitted (a delayed start when it comes due)
//! and keeps it until it ends, parked on a timer or a hook included. A run
//! that finds no free slot is **queued** (or cancelled, by the strategy)
//! and takes the next slot that frees, in priority order (1 first, 5 last),
//! first come first served within a priority. Keys are independent, so a
//! key with many queued runs never delays another key's runs. An
//! operator's override replaces the declared limit for a workflow or one
//! key value; a limit of 0 pauses the group (new runs queue, none start).
//!
//! Everything here is pure; stores apply these decisions inside the same
//! transaction that admits or ends the run.

use serde::{Deserialize, Serialize};

use crate::ids::RunId;
use crate::journal::Fact;
use crate::{Entry, RunError, RunRecord, RunStatus};

/// What happens to a run that finds its group at the limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum OnLimit {
    /// It waits in the group's queue (the default).
    #[default]
    Queue,
    /// It starts in place of the oldest run in progress, which is
    /// cancelled; it takes that run's slot when the cancel ends it.
    CancelInProgress,
    /// It ends `cancelled` at once, naming the run that holds the slot.
    CancelNewest,
}

impl OnLimit {
    /// The strategy in snake case.
    pub fn as_str(self) -> &'static str {
        match self {
            OnLimit::Queue => "queue",
            OnLimit::CancelInProgress => "cancel_in_progress",
            OnLimit::CancelNewest => "cancel_newest",
        }
    }

    /// The strategy named by [`OnLimit::as_str`].
    pub fn parse(s: &str) -> Option<OnLimit> {
        [
            OnLimit::Queue,
            OnLimit::CancelInProgress,
            OnLimit::CancelNewest,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

/// A workflow's concurrency limit, as its manifest declares it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Concurrency {
    /// A CEL expression over `input` and `additional_metadata` giving the
    /// group's key (a constant string makes one limit for every run).
    pub key: String,
    /// Runs of one key in progress at once.
    pub limit: u32,
    #[serde(default)]
    pub on_limit: OnLimit,
}

/// The longest concurrency key, in bytes.
pub const MAX_KEY_LEN: usize = 256;

/// `key` if it can name a group, or why not.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.len() > MAX_KEY_LEN {
        return Err(format!(
            "a concurrency key of {} bytes is too long; keys are at most {MAX_KEY_LEN} bytes",
            key.len()
        ));
    }
    Ok(())
}

/// The highest limit an operator may set.
pub const MAX_LIMIT: u32 = 1_000_000;

/// `limit` if an operator may set it, or why not.
pub fn check_limit(limit: u32) -> Result<u32, String> {
    if limit > MAX_LIMIT {
        return Err(format!(
            "a concurrency limit of {limit} is too high; limits are 0 (paused) to {MAX_LIMIT}"
        ));
    }
    Ok(limit)
}

/// The highest priority (starts first).
pub const HIGHEST_PRIORITY: u8 = 1;
/// The lowest priority.
pub const LOWEST_PRIORITY: u8 = 5;
/// The priority of a start that names none.
pub const DEFAULT_PRIORITY: u8 = 3;
/// Where a run waiting for a `cancel_in_progress` eviction stands: ahead of
/// every priority, so that it takes the slot its eviction frees.
pub const PREEMPTING: u8 = 0;

/// `priority` if it is one a start may give, or why not.
pub fn check_priority(priority: u8) -> Result<u8, String> {
    if (HIGHEST_PRIORITY..=LOWEST_PRIORITY).contains(&priority) {
        Ok(priority)
    } else {
        Err(format!(
            "priority {priority} is out of range: {HIGHEST_PRIORITY} (highest) to {LOWEST_PRIORITY} (lowest), {DEFAULT_PRIORITY} by default"
        ))
    }
}

/// Where a run stands in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SlotState {
    /// It holds a slot (in progress, or parked).
    Holding,
    /// It holds a slot and is being cancelled to make room for a
    /// `cancel_in_progress` start; it is not chosen again.
    Evicting,
    /// It waits for a slot.
    Queued,
    /// A delayed start not yet due, or a retried run: it asks for a slot
    /// when it comes due.
    Deferred,
}

impl SlotState {
    /// Whether the run counts against the group's limit.
    pub fn holds(self) -> bool {
        matches!(self, SlotState::Holding | SlotState::Evicting)
    }
}

/// A run's place in its group, as a store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub run_id: RunId,
    pub workflow: String,
    pub key: String,
    pub priority: u8,
    /// The store's admission order within the group (first come first
    /// served within a priority).
    pub seq: u64,
    pub state: SlotState,
}

impl crate::codec::Stored for Slot {}

impl Slot {
    /// The group this slot belongs to.
    pub fn group(&self) -> Group {
        Group {
            workflow: self.workflow.clone(),
            key: self.key.clone(),
        }
    }

    /// The order in which queued runs take slots: priority, then arrival.
    pub fn queue_order(&self) -> (u8, u64) {
        (self.priority, self.seq)
    }
}

/// A workflow's runs of one key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Group {
    pub workflow: String,
    pub key: String,
}

/// What a group's latest admission declared, kept so that the group's
/// limit is known when a run ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    pub group: Group,
    pub declared_limit: u32,
    pub on_limit: OnLimit,
}

impl crate::codec::Stored for GroupRecord {}

/// An operator's limit for a workflow (every key) or one key value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LimitOverride {
    pub workflow: String,
    /// One key value; `None` for every key of the workflow.
    pub key: Option<String>,
    pub limit: u32,
}

impl crate::codec::Stored for LimitOverride {}

/// The limit that holds for a group: a key's override, else the
/// workflow's, else the declared one.
pub fn effective_limit(declared: u32, overrides: &[LimitOverride], group: &Group) -> u32 {
    let of = |key: Option<&str>| {
        overrides
            .iter()
            .find(|o| o.workflow == group.workflow && o.key.as_deref() == key)
            .map(|o| o.limit)
    };
    of(Some(&group.key)).or(of(None)).unwrap_or(declared)
}

/// What admission does with a run of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A slot is free: the run holds it and starts.
    Take,
    /// The run waits in the queue at this priority.
    Queue { priority: u8 },
    /// `cancel_newest`: the run ends cancelled; `holder` holds the slot.
    Reject { holder: RunId },
    /// `cancel_in_progress`: the run waits at the head of the queue and
    /// `victim` (if any is left to choose) is cancelled to free its slot.
    Evict { victim: Option<RunId> },
}

/// Decides a run's admission into a group at `limit`, given the group's
/// slots (any order) and the run's strategy and priority. A limit of 0
/// (paused) queues whatever the strategy.
pub fn decide(limit: u32, slots: &[Slot], on_limit: OnLimit, priority: u8) -> Decision {
    let holding = slots.iter().filter(|s| s.state.holds()).count();
    if holding < limit as usize {
        return Decision::Take;
    }
    let oldest = |pred: fn(SlotState) -> bool| {
        slots
            .iter()
            .filter(|s| pred(s.state))
            .min_by_key(|s| s.seq)
            .map(|s| s.run_id.clone())
    };
    match (on_limit, limit) {
        (_, 0) | (OnLimit::Queue, _) => Decision::Queue { priority },
        (OnLimit::CancelNewest, _) => match oldest(SlotState::holds) {
            Some(holder) => Decision::Reject { holder },
            None => Decision::Queue { priority },
        },
        (OnLimit::CancelInProgress, _) => Decision::Evict {
            victim: oldest(|s| s == SlotState::Holding),
        },
    }
}

/// The queued runs that take the slots free at `limit`, in order.
pub fn promotions(limit: u32, slots: &[Slot]) -> Vec<RunId> {
    let holding = slots.iter().filter(|s| s.state.holds()).count();
    let mut queued: Vec<&Slot> = slots
        .iter()
        .filter(|s| s.state == SlotState::Queued)
        .collect();
    queued.sort_by_key(|s| s.queue_order());
    queued
        .into_iter()
        .take((limit as usize).saturating_sub(holding))
        .map(|s| s.run_id.clone())
        .collect()
}

/// A queued run's place in its group's queue (1 is next), given the
/// group's slots.
pub fn position(slot: &Slot, slots: &[Slot]) -> Option<u64> {
    (slot.state == SlotState::Queued).then(|| {
        1 + slots
            .iter()
            .filter(|s| s.state == SlotState::Queued && s.queue_order() < slot.queue_order())
            .count() as u64
    })
}

/// A run's place in flow control, as shown beside the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunSlot {
    /// The group's key.
    pub key: String,
    pub state: SlotState,
    pub priority: u8,
    /// Its place in the queue (1 is next), while queued.
    pub position: Option<u64>,
    /// The group's limit now.
    pub limit: u32,
}

/// A group or an override, as `limits list` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LimitRow {
    pub workflow: String,
    /// The key value; `None` for a workflow-wide override.
    pub key: Option<String>,
    /// What the workflow declares (`None` for an override with no group).
    pub declared: Option<u32>,
    /// The operator's override that applies, if any.
    pub overridden: Option<u32>,
    /// The limit that holds.
    pub limit: u32,
    pub in_progress: u64,
    pub queued: u64,
}

/// The rows of `limits list`: one per group, and one per workflow-wide
/// override, by workflow then key.
pub fn limit_rows(
    groups: &[GroupRecord],
    slots: &[Slot],
    overrides: &[LimitOverride],
) -> Vec<LimitRow> {
    let mut rows: Vec<LimitRow> = groups
        .iter()
        .map(|g| {
            let of = |pred: fn(SlotState) -> bool| {
                slots
                    .iter()
                    .filter(|s| s.workflow == g.group.workflow && s.key == g.group.key)
                    .filter(|s| pred(s.state))
                    .count() as u64
            };
            let limit = effective_limit(g.declared_limit, overrides, &g.group);
            let overridden = overrides
                .iter()
                .any(|o| {
                    o.workflow == g.group.workflow
                        && o.key.as_ref().is_none_or(|k| *k == g.group.key)
                })
                .then_some(limit);
            LimitRow {
                workflow: g.group.workflow.clone(),
                key: Some(g.group.key.clone()),
                declared: Some(g.declared_limit),
                overridden,
                limit,
                in_progress: of(SlotState::holds),
                queued: of(|s| s == SlotState::Queued),
            }
        })
        .collect();
    for o in overrides {
        let listed = rows
            .iter()
            .any(|r| r.workflow == o.workflow && r.key == o.key);
        if !listed {
            rows.push(LimitRow {
                workflow: o.workflow.clone(),
                key: o.key.clone(),
                declared: None,
                overridden: Some(o.limit),
                limit: o.limit,
                in_progress: 0,
                queued: 0,
            });
        }
    }
    rows.sort_by(|a, b| (&a.workflow, &a.key).cmp(&(&b.workflow, &b.key)));
    rows
}

/// A `cancel_newest` run as admission stores it: ended `cancelled` at
/// once, naming the run that holds the slot, with its journal's end.
pub fn rejected(
    run: &RunRecord,
    journal: &[Entry],
    key: &str,
    holder: &RunId,
    now_ms: u64,
) -> (RunRecord, Entry) {
    let mut run = run.clone();
    run.status = RunStatus::Cancelled;
    run.wake_at_ms = None;
    run.updated_at_ms = now_ms;
    run.error = Some(RunError {
        kind: "cancelled".into(),
        message: format!(
            "cancelled at admission (cancel_newest): the concurrency key `{key}` of workflow `{}` is at its limit, held by run {holder}",
            run.workflow
        ),
    });
    let end = Entry {
        seq: journal.last().map_or(0, |e| e.seq + 1),
        at_ms: now_ms,
        fact: Fact::RunCancelled,
    };
    (run, end)
}

/// A step's rate limit, as its manifest declares it: at most `limit`
/// attempts of the steps sharing a key start in any window of `per_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    /// A CEL expression over the step's `input` (a constant shares one
    /// limit between steps).
    pub key: String,
    pub limit: u32,
    pub per_ms: u64,
}

/// The grants of a rate-limited key in its latest window, oldest first:
/// a sliding log, so that no window of the limit's length holds more than
/// its limit, however the grants fall.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateWindow {
    pub grants: Vec<u64>,
}

impl crate::codec::Stored for RateWindow {}

impl RateWindow {
    /// The guard kept beyond a window of `per_ms`: a tenth of it, at most
    /// 250 ms, so that calls still fit their window at the service when
    /// they reach it a little after their grant (an instance to make, a
    /// journal write, a connection).
    pub fn guard_ms(per_ms: u64) -> u64 {
        (per_ms / 10).min(250)
    }

    /// Takes a grant at `now_ms` (`Ok`), or says when the next one may be
    /// taken (`Err`). At most `limit` grants fall in any span of `per_ms`
    /// plus [`RateWindow::guard_ms`].
    pub fn take(&mut self, limit: u32, per_ms: u64, now_ms: u64) -> Result<(), u64> {
        let span = per_ms.saturating_add(Self::guard_ms(per_ms));
        // Grants go in time order even if a caller's clock lags another's.
        let now_ms = now_ms.max(self.grants.last().copied().unwrap_or(0));
        self.grants.retain(|&at| at.saturating_add(span) > now_ms);
        if self.grants.len() < limit as usize {
            self.grants.push(now_ms);
            return Ok(());
        }
        // The grant that must leave the span before another may enter.
        let leaving = self.grants[self.grants.len() - limit as usize];
        Err(leaving.saturating_add(span))
    }

    /// Moves the grant made at `at_ms` to `now_ms` (never earlier): the
    /// attempt it admitted is about to call out now, and the window counts
    /// from the call, so the time an instance took to start is not lost
    /// from it. A grant already gone from the window is left alone.
    pub fn restamp(&mut self, at_ms: u64, now_ms: u64) {
        let Some(i) = self.grants.iter().position(|g| *g == at_ms) else {
            return;
        };
        self.grants.remove(i);
        let at = now_ms.max(at_ms);
        let place = self.grants.partition_point(|g| *g <= at);
        self.grants.insert(place, at);
    }
}

/// A step's concurrency limit, as its manifest declares it: at most
/// `limit` attempts of the steps sharing a key run at once, across every
/// worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepConcurrency {
    /// A CEL expression over the step's `input` (a constant shares one
    /// limit between steps).
    pub key: String,
    pub limit: u32,
}

/// A permit to run one step attempt under a step concurrency key: its
/// holder (the run and the step's command) and when it lapses unless
/// renewed, so that a worker that dies frees its permits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permit {
    pub holder: String,
    pub expires_ms: u64,
}

/// The permits held on a step concurrency key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permits {
    pub held: Vec<Permit>,
}

impl crate::codec::Stored for Permits {}

impl Permits {
    /// Takes (or renews) `holder`'s permit until `now_ms + ttl_ms` (`Ok`),
    /// or says in how many milliseconds the first permit held lapses
    /// (`Err`). Lapsed permits are dropped; a holder that holds a permit
    /// already renews it whatever the limit, since it is the same step
    /// calling again (a retry after its worker died).
    pub fn take(&mut self, holder: &str, limit: u32, now_ms: u64, ttl_ms: u64) -> Result<(), u64> {
        self.held.retain(|p| p.expires_ms > now_ms);
        let expires_ms = now_ms.saturating_add(ttl_ms);
        if let Some(p) = self.held.iter_mut().find(|p| p.holder == holder) {
            p.expires_ms = expires_ms;
            return Ok(());
        }
        if self.held.len() < limit as usize {
            self.held.push(Permit {
                holder: holder.to_string(),
                expires_ms,
            });
            return Ok(());
        }
        let first = self
            .held
            .iter()
            .map(|p| p.expires_ms)
            .min()
            .unwrap_or(now_ms);
        Err(first.saturating_sub(now_ms).max(1))
    }

    /// Gives `holder`'s permit back; whether it held one.
    pub fn release(&mut self, holder: &str) -> bool {
        let before = self.held.len();
        self.held.retain(|p| p.holder != holder);
        self.held.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(run: &str, seq: u64, priority: u8, state: SlotState) -> Slot {
        Slot {
            run_id: run.into(),
            workflow: "w".into(),
            key: "k".into(),
            priority,
            seq,
            state,
        }
    }

    #[test]
    fn a_free_slot_is_taken_and_a_full_group_applies_its_strategy() {
        let slots = [
            slot("a", 1, 3, SlotState::Holding),
            slot("b", 2, 3, SlotState::Holding),
        ];
        assert_eq!(decide(3, &slots, OnLimit::Queue, 3), Decision::Take);
        assert_eq!(
            decide(2, &slots, OnLimit::Queue, 2),
            Decision::Queue { priority: 2 }
        );
        assert_eq!(
            decide(2, &slots, OnLimit::CancelNewest, 3),
            Decision::Reject { holder: "a".into() }
        );
        assert_eq!(
            decide(2, &slots, OnLimit::CancelInProgress, 3),
            Decision::Evict {
                victim: Some("a".into())
            }
        );
    }

    #[test]
    fn an_evicting_run_is_not_chosen_twice_and_a_paused_group_queues() {
        let slots = [
            slot("a", 1, 3, SlotState::Evicting),
            slot("b", 2, 3, SlotState::Holding),
        ];
        assert_eq!(
            decide(2, &slots, OnLimit::CancelInProgress, 3),
            Decision::Evict {
                victim: Some("b".into())
            }
        );
        let all = [slot("a", 1, 3, SlotState::Evicting)];
        assert_eq!(
            decide(1, &all, OnLimit::CancelInProgress, 3),
            Decision::Evict { victim: None }
        );
        for on_limit in [OnLimit::CancelNewest, OnLimit::CancelInProgress] {
            assert_eq!(decide(0, &[], on_limit, 4), Decision::Queue { priority: 4 });
        }
    }

    #[test]
    fn queued_runs_take_free_slots_by_priority_then_arrival() {
        let slots = [
            slot("holder", 1, 3, SlotState::Holding),
            slot("late-urgent", 5, 1, SlotState::Queued),
            slot("early", 2, 3, SlotState::Queued),
            slot("later", 3, 3, SlotState::Queued),
            slot("preempting", 9, PREEMPTING, SlotState::Queued),
            slot("deferred", 0, 1, SlotState::Deferred),
        ];
        assert_eq!(
            promotions(4, &slots),
            ["preempting", "late-urgent", "early"].map(RunId::from)
        );
        assert!(promotions(1, &slots).is_empty());
        assert_eq!(position(&slots[3], &slots), Some(4));
        assert_eq!(position(&slots[0], &slots), None);
    }

    #[test]
    fn a_key_override_beats_the_workflow_s_which_beats_the_declared_limit() {
        let group = Group {
            workflow: "w".into(),
            key: "t1".into(),
        };
        let mut overrides = vec![];
        assert_eq!(effective_limit(2, &overrides, &group), 2);
        overrides.push(LimitOverride {
            workflow: "w".into(),
            key: None,
            limit: 5,
        });
        assert_eq!(effective_limit(2, &overrides, &group), 5);
        overrides.push(LimitOverride {
            workflow: "w".into(),
            key: Some("t1".into()),
            limit: 0,
        });
        assert_eq!(effective_limit(2, &overrides, &group), 0);
        let other = Group {
            workflow: "w".into(),
            key: "t2".into(),
        };
        assert_eq!(effective_limit(2, &overrides, &other), 5);
    }

    #[test]
    fn limit_rows_count_each_group_and_list_overrides_without_groups() {
        let groups = [GroupRecord {
            group: Group {
                workflow: "w".into(),
                key: "k".into(),
            },
            declared_limit: 2,
            on_limit: OnLimit::Queue,
        }];
        let slots = [
            slot("a", 1, 3, SlotState::Holding),
            slot("b", 2, 3, SlotState::Queued),
            slot("c", 3, 3, SlotState::Deferred),
        ];
        let overrides = [LimitOverride {
            workflow: "v".into(),
            key: None,
            limit: 1,
        }];
        let rows = limit_rows(&groups, &slots, &overrides);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].workflow.as_str(), rows[0].limit), ("v", 1));
        let w = &rows[1];
        assert_eq!((w.limit, w.in_progress, w.queued), (2, 1, 1));
        assert_eq!(w.overridden, None);
    }

    #[test]
    fn no_span_of_a_rate_window_holds_more_than_its_limit() {
        let mut window = RateWindow::default();
        let (limit, per) = (10, 1000);
        let span = per + RateWindow::guard_ms(per);
        let mut now = 0;
        let mut granted = Vec::new();
        while granted.len() < 50 {
            match window.take(limit, per, now) {
                Ok(()) => granted.push(now),
                Err(at) => {
                    assert!(at > now, "a retry time in the future");
                    now = at;
                }
            }
        }
        for (i, at) in granted.iter().enumerate() {
            let within = granted[i..].iter().filter(|g| **g < at + span).count();
            assert!(
                within <= limit as usize,
                "{within} grants from {at}: {granted:?}"
            );
        }
        assert_eq!(
            granted[10], span,
            "the eleventh waits for the first to leave"
        );
        // A grant moved to its call's time holds the window open longer.
        let mut window = RateWindow::default();
        window.take(1, per, 0).unwrap();
        window.restamp(0, 180);
        assert_eq!(window.take(1, per, span), Err(180 + span));
        assert!(*granted.last().unwrap() >= 4 * per);
    }

    #[test]
    fn priorities_outside_one_to_five_are_refused() {
        assert!(check_priority(0).is_err());
        assert!(check_priority(6).is_err());
        assert_eq!(check_priority(1), Ok(1));
    }

    #[test]
    fn a_rejected_run_ends_cancelled_naming_the_holder() {
        let run = crate::testing::run_record("r", RunStatus::Pending, 5);
        let journal = crate::testing::JournalBuilder::started("w", "{}").entries();
        let (ended, end) = rejected(&run, &journal, "t1", &"holder".into(), 9);
        assert_eq!(ended.status, RunStatus::Cancelled);
        assert!(ended.error.unwrap().message.contains("holder"));
        assert_eq!((end.seq, end.fact), (1, Fact::RunCancelled));
    }

    #[test]
    fn step_permits_hold_the_limit_lapse_and_renew() {
        let mut permits = Permits::default();
        assert_eq!(permits.take("r1/1", 2, 0, 100), Ok(()));
        assert_eq!(permits.take("r2/1", 2, 10, 100), Ok(()));
        // Full: the first permit lapses at 100.
        assert_eq!(permits.take("r3/1", 2, 40, 100), Err(60));
        // A holder renews whatever the limit.
        assert_eq!(permits.take("r1/1", 2, 50, 100), Ok(()));
        assert_eq!(permits.take("r3/1", 2, 60, 100), Err(50));
        // r2's permit lapses at 110 (its worker died): r3 takes it.
        assert_eq!(permits.take("r3/1", 2, 110, 100), Ok(()));
        assert!(permits.release("r1/1"));
        assert!(!permits.release("r1/1"));
        assert_eq!(permits.take("r4/1", 2, 120, 100), Ok(()));
        assert_eq!(permits.held.len(), 2);
        // A limit of 0 takes nothing.
        assert_eq!(Permits::default().take("r/1", 0, 0, 100), Err(1));
    }
}
