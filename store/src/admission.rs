//! What admitting a run writes, once its store has read the run's
//! concurrency group: the record (as given, `queued`, or `cancelled` by
//! `cancel_newest`), its journal's first entries, its start hook, and the
//! slots to store. Shared by every store, so that they decide alike.

use keel_core::flow::{self, Decision, Group, GroupRecord, PREEMPTING, Slot, SlotState};
use keel_core::{Entry, HookRecord, RunRecord, RunStatus};

use crate::{Admission, Admitted};

/// The writes of one admission.
pub(crate) struct AdmissionPlan {
    pub(crate) run: RunRecord,
    pub(crate) journal: Vec<Entry>,
    pub(crate) start_hook: Option<HookRecord>,
    /// Slots to store: the run's own, and a victim now evicting.
    pub(crate) slots: Vec<Slot>,
    /// The group's record, with what this admission declares.
    pub(crate) group: Option<GroupRecord>,
    pub(crate) admitted: Admitted,
}

impl AdmissionPlan {
    /// A run with no concurrency group: everything as given.
    pub(crate) fn as_given(a: &Admission<'_>) -> Self {
        AdmissionPlan {
            run: a.run.clone(),
            journal: a.journal.to_vec(),
            start_hook: a.start_hook.cloned(),
            slots: Vec::new(),
            group: None,
            admitted: Admitted::AsGiven,
        }
    }

    /// Decides `a`'s entry into its group (`a.flow` set), at `limit`,
    /// given the group's `slots` and the new slot's arrival order `seq`.
    pub(crate) fn decide(a: &Admission<'_>, limit: u32, slots: &[Slot], seq: u64) -> Self {
        let mut plan = AdmissionPlan::as_given(a);
        let Some(claim) = a.flow else {
            return plan;
        };
        let group = Group {
            workflow: a.run.workflow.clone(),
            key: claim.key.into(),
        };
        plan.group = Some(GroupRecord {
            group: group.clone(),
            declared_limit: claim.limit,
            on_limit: claim.on_limit,
        });
        let slot = |state, priority| Slot {
            run_id: a.run.run_id.clone(),
            workflow: group.workflow.clone(),
            key: group.key.clone(),
            priority,
            seq,
            state,
        };
        if a.run.status == RunStatus::Scheduled {
            plan.slots.push(slot(SlotState::Deferred, claim.priority));
            return plan;
        }
        match flow::decide(limit, slots, claim.on_limit, claim.priority) {
            Decision::Take => plan.slots.push(slot(SlotState::Holding, claim.priority)),
            Decision::Queue { priority } => {
                plan.run.status = RunStatus::Queued;
                plan.slots.push(slot(SlotState::Queued, priority));
                plan.admitted = Admitted::Queued;
            }
            Decision::Reject { holder } => {
                let (run, end) = flow::rejected(a.run, a.journal, claim.key, &holder, a.now_ms);
                plan.run = run;
                plan.journal.push(end);
                if let Some(hook) = &mut plan.start_hook {
                    hook.active = false;
                }
                plan.admitted = Admitted::Rejected { holder };
            }
            Decision::Evict { victim } => {
                plan.run.status = RunStatus::Queued;
                plan.slots.push(slot(SlotState::Queued, PREEMPTING));
                if let Some(v) = slots.iter().find(|s| Some(&s.run_id) == victim.as_ref()) {
                    plan.slots.push(Slot {
                        state: SlotState::Evicting,
                        ..v.clone()
                    });
                }
                plan.admitted = Admitted::Evicting { victim };
            }
        }
        plan
    }
}
