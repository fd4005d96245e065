//! The conformance suite: what every [`Store`] must do, runnable against
//! any implementation.
//!
//! A [`Harness`] makes fresh stores and reopens them. [`run_all`] runs every
//! case and returns each one's outcome; [`conformance_tests!`] turns the
//! cases into one `#[tokio::test]` each for a store's own test suite:
//!
//! ```ignore
//! keel_store::conformance_tests!(SledHarness::default());
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::journal::Fact;
use keel_core::{Entry, HookRecord, HookRegistration, RunCursor, RunId, RunRecord, RunStatus};

use keel_core::schedule::{Claim, Overlap, ScheduleRecord, ScheduleSpec, Spec};
use keel_core::testing::{JournalBuilder, run_record, timer_entry};

use crate::{Admission, HookPayload, KeyClaim, Lease, PayloadId, Store, StoreError};

mod continuation;
mod due;
mod flow;
mod integrations;
mod jobs;
mod pauses;
mod retention;
mod streams;
use continuation::*;
use due::*;
use flow::*;
use integrations::*;
use jobs::*;
use pauses::*;
use retention::*;
use streams::*;

/// Makes the stores the suite runs against.
#[async_trait]
pub trait Harness: Send + Sync {
    /// A new, empty store.
    async fn fresh(&self) -> Arc<dyn Store>;

    /// The same store opened anew, as after a crash and a restart: `store`
    /// is the only handle to it and is dropped first.
    async fn reopen(&self, store: Arc<dyn Store>) -> Arc<dyn Store>;
}

/// A case's outcome: `Err` says what the store did wrong.
pub type Outcome = Result<(), String>;

type CaseFuture<'a> = Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

/// One case of the suite.
pub struct Case {
    /// The case's name, as its test is named.
    pub name: &'static str,
    run: for<'a> fn(&'a dyn Harness) -> CaseFuture<'a>,
}

impl Case {
    /// Runs the case against stores from `harness`.
    pub async fn run(&self, harness: &dyn Harness) -> Outcome {
        (self.run)(harness).await
    }
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        /// Every case of the suite.
        pub fn cases() -> Vec<Case> {
            vec![$(Case { name: stringify!($name), run: |h| Box::pin($name(h)) }),*]
        }

        /// Generates one `#[tokio::test]` per conformance case, each running
        /// against stores from `$harness` (an expression, evaluated per test).
        #[macro_export]
        macro_rules! conformance_tests {
            ($harness:expr) => {
                $(
                    #[tokio::test(flavor = "multi_thread")]
                    async fn $name() {
                        let harness = $harness;
                        let case = $crate::conformance::cases()
                            .into_iter()
                            .find(|c| c.name == stringify!($name))
                            .expect("a case of that name");
                        if let Err(e) = case.run(&harness).await {
                            panic!("{}: {e}", stringify!($name));
                        }
                    }
                )*
            };
        }
    };
}

cases!(
    a_start_token_admits_one_of_many_racers,
    a_refused_admission_writes_nothing,
    a_key_admits_one_run_per_window,
    a_refused_trigger_does_not_extend_the_window,
    a_retained_token_is_refused_until_its_retention_passes,
    ending_a_run_releases_unretained_tokens_and_wakes_watchers,
    payloads_are_delivered_in_order,
    resuming_without_an_active_hook_is_not_found,
    a_force_claim_moves_the_token_and_tells_the_old_owner,
    a_recovered_registration_finds_its_own_hook,
    a_hook_keeps_its_payload_schema,
    disposing_releases_a_token_at_once,
    journals_read_back_in_order_and_children_stay_apart,
    a_status_change_is_stored_with_its_entries,
    only_runs_that_have_not_ended_are_live,
    importing_a_run_twice_is_refused,
    acknowledged_writes_survive_a_reopen,
    expired_keys_and_tokens_are_purged,
    components_are_stored_by_hash,
    components_are_deleted_unless_stored_again_since,
    one_owner_holds_a_lease_until_it_expires,
    a_write_fenced_by_a_lost_lease_is_refused,
    a_journal_position_is_written_once,
    workers_are_listed_with_the_runs_they_hold,
    runs_are_paged_newest_first,
    a_deployment_is_replaced_by_its_hash_deleted_as_read_and_survives_a_reopen,
    an_ended_run_is_live_again_after_a_retry_is_appended,
    a_run_id_is_admitted_once,
    a_schedule_is_created_once_and_survives_a_reopen,
    a_schedule_update_is_refused_after_another_writer,
    due_schedules_are_those_with_work_and_no_live_claim,
    a_deleted_schedule_is_gone,
    a_group_holds_its_limit_and_queues_the_rest,
    queued_runs_start_by_priority_then_arrival,
    a_full_group_cancels_by_its_strategy,
    an_override_pauses_and_resumes_a_group,
    a_delayed_start_asks_for_its_slot_when_due,
    racing_admissions_never_exceed_the_limit,
    a_rate_window_grants_its_limit_per_window_to_racers,
    step_permits_hold_their_limit_against_racers_and_lapse,
    a_failed_runs_slot_is_kept_out_of_its_group_until_a_retry,
    a_cancel_request_is_kept_once_wakes_its_run_and_ends_with_it,
    a_pause_is_kept_once_until_lifted_and_wakes_its_run_both_ways,
    a_child_run_keeps_its_parent_and_wakes_it_when_it_ends,
    runs_are_found_by_their_attributes_newest_first,
    ended_runs_are_read_oldest_first_page_by_page,
    deleting_runs_removes_all_they_stored_and_spares_live_ones,
    racing_deletions_delete_each_run_once,
    a_purge_keeps_a_retained_token_until_its_retention_passes,
    the_stats_count_what_the_store_holds,
    a_job_is_created_once_and_its_progress_survives_a_reopen,
    a_job_update_is_refused_after_another_writer,
    jobs_are_listed_newest_first_and_running_ones_found,
    a_workflows_stream_writes_are_stored_with_their_entries_once,
    a_steps_writes_are_numbered_marked_on_restart_and_bounded,
    racing_writers_of_one_stream_get_distinct_indexes,
    a_runs_streams_are_deleted_with_it,
    a_payload_id_is_delivered_once,
    a_payload_id_is_remembered_after_its_hook_is_gone,
    the_signing_secret_is_the_first_one_stored,
    a_webhook_is_created_once_and_deleted_with_its_signatures,
    a_signature_is_claimed_once_until_it_expires,
    due_runs_are_claimed_earliest_first_in_batches,
    a_run_admitted_under_a_lease_is_due_when_it_expires,
    a_take_of_a_lost_lease_names_the_worker_that_lost_it,
    a_lease_held_across_a_reopen_is_taken_over_naming_its_worker,
    an_admission_lease_released_frees_its_run_and_nothing_else,
    two_claimers_never_take_one_run,
    a_lease_that_expires_makes_its_run_due,
    a_woken_run_is_due_at_once_and_a_wake_outlives_a_lease,
    a_release_asks_for_the_run_again_when_told,
    an_ended_run_leaves_the_index_and_the_counts,
    a_continuation_takes_over_the_start_hook_with_its_untaken_payloads,
    a_continuation_of_a_run_without_a_start_hook_hands_nothing_over,
);

/// Runs every case; returns `(name, outcome)` for each.
pub async fn run_all(harness: &dyn Harness) -> Vec<(&'static str, Outcome)> {
    let mut outcomes = Vec::new();
    for case in cases() {
        outcomes.push((case.name, case.run(harness).await));
    }
    outcomes
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Outcome {
    if ok { Ok(()) } else { Err(what()) }
}

fn fail<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn run(id: &str, status: RunStatus) -> RunRecord {
    run_record(id, status, 0)
}

fn started(workflow: &str) -> Vec<Entry> {
    JournalBuilder::started(workflow, "null").entries()
}

fn hook(
    token: &str,
    run_id: &str,
    command: Option<u32>,
    retain_until_ms: Option<u64>,
) -> HookRecord {
    HookRecord {
        token: token.into(),
        run_id: run_id.into(),
        command,
        metadata: None,
        created_at_ms: 0,
        retain_until_ms,
        active: true,
        next_payload: 0,
        payload_schema: None,
    }
}

/// Admits `run_id` with optional start hook and key, at `now_ms`.
async fn admit(
    store: &dyn Store,
    run_id: &str,
    start_hook: Option<&HookRecord>,
    key: Option<KeyClaim<'_>>,
    now_ms: u64,
) -> Result<(), StoreError> {
    let mut record = run(run_id, RunStatus::Pending);
    record.created_at_ms = now_ms;
    let journal = started(&record.workflow);
    store
        .admit(Admission {
            run: &record,
            key,
            start_hook,
            journal: &journal,
            flow: None,
            now_ms,
            lease: None,
            handover: None,
        })
        .await
        .map(|_| ())
}

/// Ends `run_id` completed at `now_ms`, its record otherwise as stored.
/// Consumes a run's wake, as a worker's take of its lease does.
async fn take_wake(store: &dyn Store, run_id: &str) -> Outcome {
    let lease = store
        .acquire_lease(run_id, "taker", 1_000, 0)
        .await
        .map_err(fail("acquire"))?
        .ok_or_else(|| format!("run {run_id}'s lease is held"))?;
    store
        .release_lease(&lease, None)
        .await
        .map_err(fail("release"))
}

async fn end(store: &dyn Store, run_id: &str, now_ms: u64) -> Result<Vec<RunId>, StoreError> {
    let mut record = store.get_run(run_id).await?;
    record.status = RunStatus::Completed;
    record.output = Some("1".into());
    record.updated_at_ms = now_ms;
    let seq = store.journal(run_id).await?.len() as u64;
    let tail = JournalBuilder::continuing(seq, now_ms)
        .then(Fact::RunCompleted { output: "1".into() })
        .entries();
    store.end_run(&record, &tail, now_ms, None).await
}

async fn a_start_token_admits_one_of_many_racers(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("run-{i:02}");
            let start = hook("order:1", &id, None, None);
            (
                id,
                admit(&*store, &format!("run-{i:02}"), Some(&start), None, 0).await,
            )
        }));
    }
    let mut admitted = Vec::new();
    let mut refused = Vec::new();
    for task in tasks {
        match task.await.map_err(fail("admission task"))? {
            (id, Ok(())) => admitted.push(id),
            (
                _,
                Err(StoreError::HookConflict {
                    conflicting_run_id, ..
                }),
            ) => refused.push(conflicting_run_id),
            (id, Err(e)) => return Err(format!("{id} failed with {e}, not a conflict")),
        }
    }
    check(admitted.len() == 1, || {
        format!("{} runs admitted with one token", admitted.len())
    })?;
    check(refused.iter().all(|r| *r == admitted[0]), || {
        format!("refusals name {refused:?}, not the owner {}", admitted[0])
    })
}

async fn a_refused_admission_writes_nothing(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", Some(&hook("t", "a", None, None)), None, 0)
        .await
        .map_err(fail("first admission"))?;
    let refused = admit(&*store, "b", Some(&hook("t", "b", None, None)), None, 0).await;
    check(
        matches!(refused, Err(StoreError::HookConflict { .. })),
        || format!("second admission: {refused:?}"),
    )?;
    let record = store.get_run("b").await;
    check(
        matches!(record, Err(StoreError::RunNotFound { .. })),
        || format!("a refused run has a record: {record:?}"),
    )?;
    let journal = store.journal("b").await.map_err(fail("journal"))?;
    check(journal.is_empty(), || {
        format!("a refused run has a journal: {journal:?}")
    })
}

async fn a_key_admits_one_run_per_window(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let claim = Some(KeyClaim {
        key: "k",
        ttl_ms: 1000,
    });
    admit(&*store, "a", None, claim, 0)
        .await
        .map_err(fail("first"))?;
    let second = admit(&*store, "b", None, claim, 999).await;
    check(
        matches!(&second, Err(StoreError::IdempotencyCollision { existing_run_id, .. }) if *existing_run_id == "a"),
        || format!("within the window: {second:?}"),
    )?;
    admit(&*store, "c", None, claim, 1000)
        .await
        .map_err(fail("after the window"))?;
    let hold = store.key_hold("w", "k").await.map_err(fail("key hold"))?;
    check(
        hold.as_ref()
            .is_some_and(|h| h.run_id == "c" && h.expires_at_ms == 2000),
        || format!("the key is held by {hold:?}"),
    )
}

async fn a_refused_trigger_does_not_extend_the_window(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let claim = Some(KeyClaim {
        key: "k",
        ttl_ms: 100,
    });
    admit(&*store, "a", None, claim, 0)
        .await
        .map_err(fail("first"))?;
    let _ = admit(&*store, "b", None, claim, 90).await;
    admit(&*store, "c", None, claim, 100)
        .await
        .map_err(fail("a refused trigger extended the window"))
}

async fn a_retained_token_is_refused_until_its_retention_passes(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(
        &*store,
        "a",
        Some(&hook("t", "a", None, Some(1000))),
        None,
        0,
    )
    .await
    .map_err(fail("admission"))?;
    end(&*store, "a", 10).await.map_err(fail("end"))?;
    let during = admit(&*store, "b", Some(&hook("t", "b", None, None)), None, 500).await;
    check(
        matches!(&during, Err(StoreError::HookConflict { conflicting_run_id, .. }) if *conflicting_run_id == "a"),
        || format!("during retention: {during:?}"),
    )?;
    let kept = store
        .get_hook("t", 500)
        .await
        .map_err(fail("get_hook during retention"))?;
    check(!kept.active && kept.run_id == "a", || {
        format!("retained hook: {kept:?}")
    })?;
    let resumed = store.resume_hook("t", "1").await;
    check(
        matches!(resumed, Err(StoreError::HookNotFound { .. })),
        || format!("a finished run received a payload: {resumed:?}"),
    )?;
    admit(&*store, "c", Some(&hook("t", "c", None, None)), None, 1000)
        .await
        .map_err(fail("after retention"))
}

async fn ending_a_run_releases_unretained_tokens_and_wakes_watchers(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", Some(&hook("t", "a", None, None)), None, 0)
        .await
        .map_err(fail("admit a"))?;
    admit(&*store, "b", None, None, 0)
        .await
        .map_err(fail("admit b"))?;
    store.watch("a", "b").await.map_err(fail("watch"))?;
    let woken = end(&*store, "a", 5).await.map_err(fail("end"))?;
    check(woken == ["b"], || format!("woken: {woken:?}"))?;
    check(store.is_woken("b").await.map_err(fail("is_woken"))?, || {
        "the watcher has no wakeup".into()
    })?;
    take_wake(&*store, "b").await?;
    check(
        !store.is_woken("b").await.map_err(fail("is_woken"))?,
        || "the wake survived a take of the run's lease".into(),
    )?;
    let record = store.get_run("a").await.map_err(fail("get_run"))?;
    check(record.status == RunStatus::Completed, || {
        format!("{record:?}")
    })?;
    let journal = store.journal("a").await.map_err(fail("journal"))?;
    check(
        journal.last().is_some_and(|e| e.fact.is_end()) && journal.len() == 2,
        || format!("journal after the end: {journal:?}"),
    )?;
    admit(&*store, "c", Some(&hook("t", "c", None, None)), None, 6)
        .await
        .map_err(fail("the token was not released"))
}

async fn payloads_are_delivered_in_order(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", Some(&hook("t", "a", None, None)), None, 0)
        .await
        .map_err(fail("admit"))?;
    for i in 0..20 {
        let owner = store
            .resume_hook("t", &i.to_string())
            .await
            .map_err(fail("resume"))?;
        check(owner == "a", || format!("resume answered {owner}"))?;
    }
    for i in 0..20u64 {
        let p = store.payload("a", "t", i).await.map_err(fail("payload"))?;
        check(p == HookPayload::Ready(i.to_string()), || {
            format!("payload {i}: {p:?}")
        })?;
    }
    let next = store.payload("a", "t", 20).await.map_err(fail("payload"))?;
    check(next == HookPayload::Pending, || {
        format!("payload 20: {next:?}")
    })?;
    check(store.is_woken("a").await.map_err(fail("is_woken"))?, || {
        "a payload did not wake its run".into()
    })
}

async fn resuming_without_an_active_hook_is_not_found(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let r = store.resume_hook("nobody", "1").await;
    check(matches!(r, Err(StoreError::HookNotFound { .. })), || {
        format!("{r:?}")
    })
}

async fn a_force_claim_moves_the_token_and_tells_the_old_owner(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit a"))?;
    admit(&*store, "b", None, None, 0)
        .await
        .map_err(fail("admit b"))?;
    let first = store
        .register_hook(&hook("t", "a", Some(0), None), false, 0)
        .await
        .map_err(fail("register a"))?;
    check(first.registration == HookRegistration::Registered, || {
        format!("{first:?}")
    })?;
    let plain = store
        .register_hook(&hook("t", "b", Some(0), None), false, 0)
        .await
        .map_err(fail("register b"))?;
    check(
        plain.registration
            == HookRegistration::Conflict {
                owner_run_id: "a".into(),
            },
        || format!("without force: {plain:?}"),
    )?;
    take_wake(&*store, "a").await?;
    let forced = store
        .register_hook(&hook("t", "b", Some(0), None), true, 0)
        .await
        .map_err(fail("force"))?;
    check(
        forced.registration == HookRegistration::Registered
            && forced.claimed_from.as_ref().is_some_and(|r| *r == "a"),
        || format!("with force: {forced:?}"),
    )?;
    let old = store.payload("a", "t", 0).await.map_err(fail("payload"))?;
    check(old == HookPayload::ForceClaimed("b".into()), || {
        format!("old owner sees {old:?}")
    })?;
    check(store.is_woken("a").await.map_err(fail("is_woken"))?, || {
        "the old owner was not woken".into()
    })?;
    let owner = store.resume_hook("t", "1").await.map_err(fail("resume"))?;
    check(owner == "b", || format!("payload went to {owner}"))
}

async fn a_recovered_registration_finds_its_own_hook(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", Some(&hook("start", "a", None, None)), None, 0)
        .await
        .map_err(fail("admit"))?;
    let own = hook("t", "a", Some(2), None);
    store
        .register_hook(&own, false, 0)
        .await
        .map_err(fail("register"))?;
    let again = store
        .register_hook(&own, false, 0)
        .await
        .map_err(fail("again"))?;
    check(again.registration == HookRegistration::Registered, || {
        format!("{again:?}")
    })?;
    let other = store
        .register_hook(&hook("t", "a", Some(5), None), false, 0)
        .await
        .map_err(fail("other command"))?;
    check(
        matches!(other.registration, HookRegistration::Conflict { .. }),
        || format!("another command of the same run: {other:?}"),
    )?;
    let bound = store
        .register_hook(&hook("start", "a", Some(7), None), false, 0)
        .await
        .map_err(fail("start token"))?;
    check(bound.registration == HookRegistration::BoundToStart, || {
        format!("{bound:?}")
    })
}

async fn a_hook_keeps_its_payload_schema(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    let schema = r#"{"type":"object","required":["approved"]}"#;
    let typed = HookRecord {
        payload_schema: Some(schema.into()),
        ..hook("t", "a", Some(1), None)
    };
    store
        .register_hook(&typed, false, 0)
        .await
        .map_err(fail("register"))?;
    let got = store.get_hook("t", 0).await.map_err(fail("get"))?;
    check(got.payload_schema.as_deref() == Some(schema), || {
        format!("get_hook: {:?}", got.payload_schema)
    })?;
    let listed = store.list_hooks(0).await.map_err(fail("list"))?;
    check(
        listed
            .iter()
            .any(|h| h.token == "t" && h.payload_schema.as_deref() == Some(schema)),
        || format!("list_hooks: {listed:?}"),
    )?;
    // A workflow's hook on its run's start token gives the start hook its
    // payload type.
    admit(
        &*store,
        "b",
        Some(&hook("start:b", "b", None, None)),
        None,
        0,
    )
    .await
    .map_err(fail("admit b"))?;
    let bound = store
        .register_hook(
            &HookRecord {
                payload_schema: Some(schema.into()),
                ..hook("start:b", "b", Some(0), None)
            },
            false,
            0,
        )
        .await
        .map_err(fail("bind"))?;
    check(bound.registration == HookRegistration::BoundToStart, || {
        format!("{bound:?}")
    })?;
    let start = store
        .get_hook("start:b", 0)
        .await
        .map_err(fail("get start"))?;
    check(
        start.is_start_hook() && start.payload_schema.as_deref() == Some(schema),
        || format!("the start hook: {start:?}"),
    )
}

async fn disposing_releases_a_token_at_once(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(
        &*store,
        "a",
        Some(&hook("t", "a", None, Some(u64::MAX))),
        None,
        0,
    )
    .await
    .map_err(fail("admit"))?;
    store.resume_hook("t", "1").await.map_err(fail("resume"))?;
    store
        .dispose_hook("a", "t")
        .await
        .map_err(fail("dispose"))?;
    let gone = store.get_hook("t", 1).await;
    check(matches!(gone, Err(StoreError::HookNotFound { .. })), || {
        format!("{gone:?}")
    })?;
    admit(&*store, "b", Some(&hook("t", "b", None, None)), None, 1)
        .await
        .map_err(fail("the disposed token is still held"))
}

async fn journals_read_back_in_order_and_children_stay_apart(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let parent: Vec<Entry> = (0..300).map(|s| timer_entry(s, s as u32)).collect();
    store
        .append("p", &parent[..200], None, None)
        .await
        .map_err(fail("append"))?;
    store
        .append("p", &parent[200..], None, None)
        .await
        .map_err(fail("append"))?;
    store
        .append("p.1", &[timer_entry(0, 9)], None, None)
        .await
        .map_err(fail("append child"))?;
    let read = store.journal("p").await.map_err(fail("journal"))?;
    check(read == parent, || {
        format!("read {} entries, wrote {}", read.len(), parent.len())
    })?;
    let child = store.journal("p.1").await.map_err(fail("journal"))?;
    check(child == [timer_entry(0, 9)], || {
        format!("child journal: {child:?}")
    })
}

async fn a_status_change_is_stored_with_its_entries(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    let mut waiting = run("a", RunStatus::Waiting);
    waiting.wake_at_ms = Some(99);
    store
        .append("a", &[timer_entry(1, 0)], Some(&waiting), None)
        .await
        .map_err(fail("append"))?;
    let record = store.get_run("a").await.map_err(fail("get_run"))?;
    check(record == waiting, || format!("{record:?}"))?;
    let live = store.live_runs().await.map_err(fail("live_runs"))?;
    check(live.len() == 1, || format!("live: {live:?}"))
}

async fn only_runs_that_have_not_ended_are_live(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    for id in ["a", "b", "c"] {
        admit(&*store, id, None, None, 0)
            .await
            .map_err(fail("admit"))?;
    }
    end(&*store, "b", 1).await.map_err(fail("end"))?;
    let live: Vec<RunId> = store
        .live_runs()
        .await
        .map_err(fail("live_runs"))?
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    check(live == ["a", "c"], || format!("live: {live:?}"))?;
    let all = store.list_runs().await.map_err(fail("list_runs"))?;
    check(all.len() == 3, || format!("{} runs listed", all.len()))
}

async fn a_child_run_keeps_its_parent_and_wakes_it_when_it_ends(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "p", None, None, 0)
        .await
        .map_err(fail("admit the parent"))?;
    let mut child = run("p.0", RunStatus::Pending);
    child.parent_run_id = Some("p".into());
    let journal = started(&child.workflow);
    store
        .admit(Admission {
            run: &child,
            key: None,
            start_hook: None,
            journal: &journal,
            flow: None,
            now_ms: 0,
            lease: None,
            handover: None,
        })
        .await
        .map_err(fail("admit the child"))?;
    let read = store.get_run("p.0").await.map_err(fail("get_run"))?;
    check(read.parent_run_id.as_deref() == Some("p"), || {
        format!("the child's record: {read:?}")
    })?;
    // The parent's end waits for the child: watched, then woken by its end.
    take_wake(&*store, "p").await?;
    store.watch("p.0", "p").await.map_err(fail("watch"))?;
    let mut ended = run("p.0", RunStatus::Completed);
    ended.parent_run_id = Some("p".into());
    ended.output = Some("1".into());
    let tail = JournalBuilder::continuing(journal.len() as u64, 1)
        .then(Fact::RunCompleted { output: "1".into() })
        .entries();
    let woken = store
        .end_run(&ended, &tail, 1, None)
        .await
        .map_err(fail("end_run"))?;
    check(woken == ["p"], || format!("woken: {woken:?}"))?;
    check(store.is_woken("p").await.map_err(fail("is_woken"))?, || {
        "the parent was not woken".into()
    })?;
    let listed = store.list_runs().await.map_err(fail("list_runs"))?;
    let kept = listed.iter().find(|r| r.run_id == "p.0");
    check(
        kept.is_some_and(|r| r.parent_run_id.as_deref() == Some("p")),
        || format!("listed: {kept:?}"),
    )
}

async fn runs_are_found_by_their_attributes_newest_first(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let attrs = |pairs: &[(&str, &str)]| -> keel_core::Attributes {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let runs = [
        ("r1", 10, attrs(&[("tenant", "acme"), ("region", "eu")])),
        ("r2", 20, attrs(&[("tenant", "globex")])),
        ("r3", 30, attrs(&[("tenant", "acme")])),
        ("r4", 40, attrs(&[])),
        ("r5", 50, attrs(&[("tenant", "acme"), ("region", "us")])),
    ];
    for (id, at, attributes) in &runs {
        let mut record = run(id, RunStatus::Pending);
        record.created_at_ms = *at;
        record.attributes = attributes.clone();
        let journal = started(&record.workflow);
        store
            .admit(Admission {
                run: &record,
                key: None,
                start_hook: None,
                journal: &journal,
                flow: None,
                now_ms: *at,
                lease: None,
                handover: None,
            })
            .await
            .map_err(fail("admit"))?;
    }
    let ids = |found: Vec<RunRecord>| -> Vec<String> {
        found.into_iter().map(|r| r.run_id.into_string()).collect()
    };
    let find =
        |pairs: &'static [(&'static str, &'static str)], before: Option<RunCursor>, limit| {
            let store = store.clone();
            let wanted = attrs(pairs);
            async move {
                store
                    .runs_with_attributes(&wanted, before.as_ref(), limit)
                    .await
                    .map(ids)
            }
        };
    let acme = find(&[("tenant", "acme")], None, 10)
        .await
        .map_err(fail("find"))?;
    check(acme == ["r5", "r3", "r1"], || {
        format!("tenant=acme: {acme:?}")
    })?;
    let both = find(&[("tenant", "acme"), ("region", "eu")], None, 10)
        .await
        .map_err(fail("find"))?;
    check(both == ["r1"], || {
        format!("tenant=acme, region=eu: {both:?}")
    })?;
    let cursor = RunCursor {
        created_at_ms: 30,
        run_id: "r3".into(),
    };
    let page = find(&[("tenant", "acme")], Some(cursor), 1)
        .await
        .map_err(fail("find"))?;
    check(page == ["r1"], || format!("the next page: {page:?}"))?;
    let first = find(&[("tenant", "acme")], None, 1)
        .await
        .map_err(fail("find"))?;
    check(first == ["r5"], || format!("a page of one: {first:?}"))?;
    let none = find(&[("tenant", "initech")], None, 10)
        .await
        .map_err(fail("find"))?;
    check(none.is_empty(), || format!("tenant=initech: {none:?}"))?;

    // An attribute set later (the workflow's) is found once the record
    // holding it is stored, and the old value no longer is.
    let mut changed = run("r2", RunStatus::Waiting);
    changed.created_at_ms = 20;
    changed.attributes = attrs(&[("tenant", "acme")]);
    store
        .append("r2", &[timer_entry(1, 0)], Some(&changed), None)
        .await
        .map_err(fail("append"))?;
    let acme = find(&[("tenant", "acme")], None, 10)
        .await
        .map_err(fail("find"))?;
    check(acme == ["r5", "r3", "r2", "r1"], || {
        format!("after the change: {acme:?}")
    })?;
    let globex = find(&[("tenant", "globex")], None, 10)
        .await
        .map_err(fail("find"))?;
    check(globex.is_empty(), || format!("the old value: {globex:?}"))?;
    let kept = store.get_run("r2").await.map_err(fail("get_run"))?;
    check(kept.attributes == changed.attributes, || {
        format!("{kept:?}")
    })
}

async fn a_cancel_request_is_kept_once_wakes_its_run_and_ends_with_it(h: &dyn Harness) -> Outcome {
    use keel_core::lifecycle::CancelRequest;
    let store = h.fresh().await;
    let ask = |reason: &str, at_ms| CancelRequest {
        reason: reason.into(),
        by: "api".into(),
        at_ms,
    };
    let missing = store.request_cancel("nobody", &ask("x", 1)).await;
    check(
        matches!(missing, Err(StoreError::RunNotFound { .. })),
        || format!("a cancel of no run: {missing:?}"),
    )?;
    for id in ["a", "b"] {
        admit(&*store, id, None, None, 0)
            .await
            .map_err(fail("admit"))?;
    }
    take_wake(&*store, "a").await?;
    let first = store
        .request_cancel("a", &ask("first", 1))
        .await
        .map_err(fail("request_cancel"))?;
    check(first == Some(ask("first", 1)), || {
        format!("first: {first:?}")
    })?;
    let second = store
        .request_cancel("a", &ask("second", 2))
        .await
        .map_err(fail("second request_cancel"))?;
    check(second == Some(ask("first", 1)), || {
        format!("a second request replaced the first: {second:?}")
    })?;
    check(store.is_woken("a").await.map_err(fail("is_woken"))?, || {
        "the request did not wake the run".into()
    })?;
    let store = h.reopen(store).await;
    let kept = store
        .cancel_request("a")
        .await
        .map_err(fail("cancel_request"))?;
    check(kept == Some(ask("first", 1)), || {
        format!("after a reopen: {kept:?}")
    })?;
    let other = store
        .cancel_request("b")
        .await
        .map_err(fail("cancel_request b"))?;
    check(other.is_none(), || format!("b was never asked: {other:?}"))?;
    let mut record = run("a", RunStatus::Cancelled);
    record.updated_at_ms = 3;
    let seq = store.journal("a").await.map_err(fail("journal"))?.len() as u64;
    let tail = JournalBuilder::continuing(seq, 3)
        .then(ask("first", 1).fact())
        .then(keel_core::lifecycle::cancelled_end(
            "first",
            "api",
            keel_core::lifecycle::Cleanup::Failed("x".into()),
        ))
        .entries();
    store
        .end_run(&record, &tail, 3, None)
        .await
        .map_err(fail("end_run"))?;
    let gone = store
        .cancel_request("a")
        .await
        .map_err(fail("cancel_request"))?;
    check(gone.is_none(), || {
        format!("kept past the run's end: {gone:?}")
    })?;
    end(&*store, "b", 4).await.map_err(fail("end b"))?;
    let late = store
        .request_cancel("b", &ask("late", 5))
        .await
        .map_err(fail("late request_cancel"))?;
    check(late.is_none(), || {
        format!("an ended run took a request: {late:?}")
    })?;
    let late = store
        .cancel_request("b")
        .await
        .map_err(fail("cancel_request"))?;
    check(late.is_none(), || {
        format!("an ended run holds a request: {late:?}")
    })
}

async fn importing_a_run_twice_is_refused(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let record = run("x", RunStatus::Completed);
    let journal = started("w");
    store
        .import(&record, &journal)
        .await
        .map_err(fail("import"))?;
    let again = store.import(&record, &journal).await;
    check(matches!(again, Err(StoreError::RunExists { .. })), || {
        format!("{again:?}")
    })?;
    let live = store.live_runs().await.map_err(fail("live"))?;
    check(live.is_empty(), || {
        "an imported finished run is live".into()
    })
}

async fn acknowledged_writes_survive_a_reopen(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", Some(&hook("t", "a", None, None)), None, 0)
        .await
        .map_err(fail("admit"))?;
    store
        .append("a", &[timer_entry(1, 0)], None, None)
        .await
        .map_err(fail("append"))?;
    store
        .resume_hook("t", "\"p\"")
        .await
        .map_err(fail("resume"))?;
    let store = h.reopen(store).await;
    let journal = store.journal("a").await.map_err(fail("journal"))?;
    check(journal.len() == 2, || {
        format!("journal after reopen: {journal:?}")
    })?;
    let p = store.payload("a", "t", 0).await.map_err(fail("payload"))?;
    check(p == HookPayload::Ready("\"p\"".into()), || {
        format!("payload after reopen: {p:?}")
    })?;
    let again = admit(&*store, "b", Some(&hook("t", "b", None, None)), None, 0).await;
    check(
        matches!(again, Err(StoreError::HookConflict { .. })),
        || format!("the token was lost in the reopen: {again:?}"),
    )
}

async fn expired_keys_and_tokens_are_purged(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let claim = Some(KeyClaim {
        key: "k",
        ttl_ms: 10,
    });
    admit(
        &*store,
        "a",
        Some(&hook("t", "a", None, Some(10))),
        claim,
        0,
    )
    .await
    .map_err(fail("admit"))?;
    end(&*store, "a", 1).await.map_err(fail("end"))?;
    check(
        store.purge_expired_keys(5).await.map_err(fail("purge"))? == 0,
        || "a key in its window was purged".into(),
    )?;
    let keys = store
        .purge_expired_keys(10)
        .await
        .map_err(fail("purge keys"))?;
    let tokens = store
        .purge_expired_hooks(10)
        .await
        .map_err(fail("purge hooks"))?;
    check(keys == 1 && tokens == 1, || {
        format!("purged {keys} keys, {tokens} tokens")
    })?;
    let hold = store.key_hold("w", "k").await.map_err(fail("key_hold"))?;
    check(hold.is_none(), || format!("{hold:?}"))
}

async fn components_are_stored_by_hash(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    store
        .put_component("abc", b"wasm", 10)
        .await
        .map_err(fail("put"))?;
    store
        .put_component("abc", b"wasm", 20)
        .await
        .map_err(fail("put again"))?;
    let bytes = store.get_component("abc").await.map_err(fail("get"))?;
    check(bytes == b"wasm", || format!("{bytes:?}"))?;
    let missing = store.get_component("def").await;
    check(
        matches!(missing, Err(StoreError::ComponentNotFound { .. })),
        || format!("{missing:?}"),
    )?;
    let listed = store.components().await.map_err(fail("components"))?;
    check(
        listed
            == [crate::StoredComponent {
                hash: "abc".into(),
                size_bytes: 4,
                stored_at_ms: 20,
            }],
        || format!("stored once, last stored at 20: {listed:?}"),
    )
}

async fn components_are_deleted_unless_stored_again_since(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    for (hash, at) in [("old", 10), ("touched", 10), ("new", 50)] {
        store
            .put_component(hash, b"wasm!", at)
            .await
            .map_err(fail("put"))?;
    }
    // Stored again after the prune decided: it is kept.
    store
        .put_component("touched", b"wasm!", 40)
        .await
        .map_err(fail("touch"))?;
    let all: Vec<String> = ["old", "touched", "new", "never"].map(String::from).into();
    let deleted = store
        .delete_components(&all, 30)
        .await
        .map_err(fail("delete"))?;
    let names: Vec<&str> = deleted.iter().map(|c| c.hash.as_str()).collect();
    check(names == ["old"], || {
        format!("only the component not stored since 30: {deleted:?}")
    })?;
    check(deleted[0].size_bytes == 5, || format!("{deleted:?}"))?;
    let store = h.reopen(store).await;
    let gone = store.get_component("old").await;
    check(
        matches!(gone, Err(StoreError::ComponentNotFound { .. })),
        || format!("deleted for good: {gone:?}"),
    )?;
    let left: Vec<String> = store
        .components()
        .await
        .map_err(fail("components"))?
        .into_iter()
        .map(|c| c.hash)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    check(left == ["new", "touched"], || format!("{left:?}"))
}

async fn one_owner_holds_a_lease_until_it_expires(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    let first = store
        .acquire_lease("a", "w1", 100, 0)
        .await
        .map_err(fail("acquire"))?;
    let first = first.ok_or("a free run's lease was not taken")?;
    let other = store
        .acquire_lease("a", "w2", 100, 50)
        .await
        .map_err(fail("acquire"))?;
    check(other.is_none(), || {
        format!("a held lease was taken: {other:?}")
    })?;
    let renewed = store
        .renew_lease(&first, 100, 90)
        .await
        .map_err(fail("renew"))?;
    check(
        renewed.expires_at_ms == 190 && renewed.epoch == first.epoch,
        || format!("renewed: {renewed:?}"),
    )?;
    let still = store
        .acquire_lease("a", "w2", 100, 150)
        .await
        .map_err(fail("acquire"))?;
    check(still.is_none(), || {
        "a renewed lease was taken before it expired".into()
    })?;
    let taken = store
        .acquire_lease("a", "w2", 100, 190)
        .await
        .map_err(fail("acquire"))?;
    let taken = taken.ok_or("an expired lease was not taken")?;
    check(taken.epoch > first.epoch, || {
        format!("epochs {} then {}", first.epoch, taken.epoch)
    })?;
    let due = store.next_due().await.map_err(fail("next_due"))?;
    check(due == Some(taken.expires_at_ms), || {
        format!("a held run is due at {due:?}, not at its lease's expiry")
    })?;
    let lost = store.renew_lease(&first, 100, 200).await;
    check(matches!(lost, Err(StoreError::LeaseLost { .. })), || {
        format!("{lost:?}")
    })?;
    store
        .release_lease(&taken, None)
        .await
        .map_err(fail("release"))?;
    let again = store
        .acquire_lease("a", "w3", 100, 200)
        .await
        .map_err(fail("acquire"))?;
    check(again.is_some_and(|l| l.epoch > taken.epoch), || {
        "a released lease was not free, or its epoch went back".into()
    })
}

async fn a_write_fenced_by_a_lost_lease_is_refused(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    let old = store
        .acquire_lease("a", "w1", 10, 0)
        .await
        .map_err(fail("acquire"))?;
    let old = old.ok_or("lease not taken")?;
    store
        .append("a", &[timer_entry(1, 0)], None, Some(&old))
        .await
        .map_err(fail("a write under a held lease"))?;
    let new = store
        .acquire_lease("a", "w2", 10, 10)
        .await
        .map_err(fail("acquire"))?;
    let new = new.ok_or("an expired lease was not taken")?;
    let zombie = store
        .append("a", &[timer_entry(2, 1)], None, Some(&old))
        .await;
    check(matches!(zombie, Err(StoreError::LeaseLost { .. })), || {
        format!("a zombie's append: {zombie:?}")
    })?;
    let mut record = run("a", RunStatus::Completed);
    record.output = Some("1".into());
    let tail = [timer_entry(2, 1)];
    let ended = store.end_run(&record, &tail, 11, Some(&old)).await;
    check(matches!(ended, Err(StoreError::LeaseLost { .. })), || {
        format!("a zombie's end: {ended:?}")
    })?;
    let journal = store.journal("a").await.map_err(fail("journal"))?;
    check(journal.len() == 2, || {
        format!("the zombie wrote: {journal:?}")
    })?;
    let status = store.get_run("a").await.map_err(fail("get_run"))?.status;
    check(status == RunStatus::Pending, || {
        format!("the zombie ended the run: {status:?}")
    })?;
    store
        .end_run(&record, &tail, 12, Some(&new))
        .await
        .map_err(fail("the new owner's end"))?;
    let taken = store
        .acquire_lease("a", "w3", 10, 12)
        .await
        .map_err(fail("acquire"))?;
    check(taken.is_some(), || {
        "ending a run did not release its lease".into()
    })
}

async fn a_journal_position_is_written_once(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    store
        .append("a", &[timer_entry(1, 0)], None, None)
        .await
        .map_err(fail("append"))?;
    let twice = store.append("a", &[timer_entry(1, 5)], None, None).await;
    check(
        matches!(twice, Err(StoreError::JournalConflict { seq: 1, .. })),
        || format!("a second entry 1: {twice:?}"),
    )?;
    let journal = store.journal("a").await.map_err(fail("journal"))?;
    check(journal[1] == timer_entry(1, 0), || {
        format!("entry 1 is now {:?}", journal[1])
    })
}

async fn workers_are_listed_with_the_runs_they_hold(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let worker = |id: &str, at: u64| crate::WorkerRecord {
        worker_id: id.into(),
        host: "h".into(),
        pid: 7,
        started_at_ms: 1,
        heartbeat_at_ms: at,
    };
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    store
        .heartbeat(&worker("w1", 5))
        .await
        .map_err(fail("heartbeat"))?;
    store
        .heartbeat(&worker("w2", 5))
        .await
        .map_err(fail("heartbeat"))?;
    store
        .heartbeat(&worker("w1", 9))
        .await
        .map_err(fail("heartbeat"))?;
    store
        .acquire_lease("a", "w1", 100, 10)
        .await
        .map_err(fail("acquire"))?;
    let listed = store.list_workers(20).await.map_err(fail("list_workers"))?;
    let w1 = listed.iter().find(|(w, _)| w.worker_id == "w1");
    check(
        w1.is_some_and(|(w, runs)| w.heartbeat_at_ms == 9 && *runs == 1),
        || format!("{listed:?}"),
    )?;
    check(listed.len() == 2, || format!("{listed:?}"))?;
    store
        .remove_worker("w2")
        .await
        .map_err(fail("remove_worker"))?;
    let listed = store
        .list_workers(200)
        .await
        .map_err(fail("list_workers"))?;
    check(listed.len() == 1 && listed[0].1 == 0, || {
        format!("after removal and expiry: {listed:?}")
    })
}

async fn runs_are_paged_newest_first(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    // Client-chosen IDs that sort against the order of admission, and
    // three runs admitted in the same millisecond.
    for (id, at) in [
        ("zzzz-older", 10),
        ("mmmm", 20),
        ("aaaa-newer", 30),
        ("b-tie", 30),
        ("c-tie", 30),
    ] {
        admit(&*store, id, None, None, at)
            .await
            .map_err(fail("admit"))?;
    }
    let mut imported = run("0000-imported", RunStatus::Completed);
    imported.created_at_ms = 25;
    store
        .import(&imported, &started("w"))
        .await
        .map_err(fail("import"))?;
    let ids = |runs: &[RunRecord]| {
        runs.iter()
            .map(|r| r.run_id.to_string())
            .collect::<Vec<_>>()
    };
    let all = store.runs_before(None, 10).await.map_err(fail("all"))?;
    let expected = [
        "c-tie",
        "b-tie",
        "aaaa-newer",
        "0000-imported",
        "mmmm",
        "zzzz-older",
    ];
    check(ids(&all) == expected, || format!("all: {:?}", ids(&all)))?;
    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .runs_before(cursor.as_ref(), 2)
            .await
            .map_err(fail("a page"))?;
        let Some(last) = page.last() else { break };
        cursor = Some(keel_core::RunCursor::of(last));
        pages.push(ids(&page));
    }
    check(
        pages
            == [
                ["c-tie", "b-tie"],
                ["aaaa-newer", "0000-imported"],
                ["mmmm", "zzzz-older"],
            ],
        || format!("pages of 2: {pages:?}"),
    )?;
    let before_30 = store
        .runs_before(Some(&keel_core::RunCursor::before_time(30)), 10)
        .await
        .map_err(fail("before 30"))?;
    check(
        ids(&before_30) == ["0000-imported", "mmmm", "zzzz-older"],
        || format!("created before 30: {:?}", ids(&before_30)),
    )
}

async fn a_deployment_is_replaced_by_its_hash_deleted_as_read_and_survives_a_reopen(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    let mut deployment = keel_core::Deployment {
        name: "order".into(),
        hash: "h1".into(),
        workflows: vec!["process_order".into()],
        steps: vec!["charge".into()],
        grants: keel_core::GrantSpec::default(),
        limits: keel_core::StepLimits::default(),
        size_bytes: 4,
        deployed_at_ms: 1,
        retention_ms: Some(86_400_000),
    };
    store
        .put_deployment(&deployment)
        .await
        .map_err(fail("put"))?;
    deployment.grants.http = vec!["api.example".into()];
    deployment.limits.step_timeout_ms = Some(5000);
    deployment.deployed_at_ms = 2;
    store
        .put_deployment(&deployment)
        .await
        .map_err(fail("put again"))?;
    let mut other = deployment.clone();
    other.hash = "h2".into();
    store.put_deployment(&other).await.map_err(fail("put h2"))?;
    let store = h.reopen(store).await;
    let all = store.deployments().await.map_err(fail("list"))?;
    check(all.len() == 2, || format!("deployments: {all:?}"))?;
    let found = store.deployment("h1").await.map_err(fail("get"))?;
    check(found.as_ref() == Some(&deployment), || {
        format!("h1 after reopen: {found:?}")
    })?;
    let missing = store.deployment("h3").await.map_err(fail("get h3"))?;
    check(missing.is_none(), || format!("h3: {missing:?}"))?;
    // A deletion of the record as deployed at 1 finds it redeployed at 2.
    let stale = store
        .delete_deployment("h1", 1)
        .await
        .map_err(fail("delete stale"))?;
    check(!stale, || "a redeployed record is kept".into())?;
    let deleted = store
        .delete_deployment("h1", 2)
        .await
        .map_err(fail("delete"))?;
    check(deleted, || "the record as read is deleted".into())?;
    let again = store
        .delete_deployment("h1", 2)
        .await
        .map_err(fail("delete again"))?;
    check(!again, || "nothing is left to delete".into())?;
    let store = h.reopen(store).await;
    let all = store.deployments().await.map_err(fail("list"))?;
    check(all.len() == 1 && all[0].hash == "h2", || {
        format!("after the deletion: {all:?}")
    })
}

async fn an_ended_run_is_live_again_after_a_retry_is_appended(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    end(&*store, "a", 1).await.map_err(fail("end"))?;
    let live = store.live_runs().await.map_err(fail("live"))?;
    check(live.is_empty(), || {
        format!("an ended run is live: {live:?}")
    })?;
    let seq = store.journal("a").await.map_err(fail("journal"))?.len() as u64;
    let retried = JournalBuilder::continuing(seq, 2)
        .then(Fact::RunRetried { from_seq: seq - 1 })
        .entries();
    store
        .append("a", &retried, Some(&run("a", RunStatus::Pending)), None)
        .await
        .map_err(fail("append"))?;
    let live: Vec<RunId> = store
        .live_runs()
        .await
        .map_err(fail("live"))?
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    check(live == ["a"], || format!("live after the retry: {live:?}"))?;
    let record = store.get_run("a").await.map_err(fail("get"))?;
    check(record.status == RunStatus::Pending, || {
        format!("{record:?}")
    })
}

async fn a_run_id_is_admitted_once(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    let again = admit(&*store, "a", Some(&hook("t", "a", None, None)), None, 0).await;
    check(matches!(again, Err(StoreError::RunExists { .. })), || {
        format!("{again:?}")
    })?;
    let hook = store.get_hook("t", 0).await;
    check(matches!(hook, Err(StoreError::HookNotFound { .. })), || {
        format!("the refused admission registered its token: {hook:?}")
    })?;
    let journal = store.journal("a").await.map_err(fail("journal"))?;
    check(journal.len() == 1, || format!("journal: {journal:?}"))
}

fn schedule(name: &str, next_fire_ms: Option<u64>) -> ScheduleRecord {
    let mut record = ScheduleRecord::new(
        ScheduleSpec {
            name: name.into(),
            workflow: "w".into(),
            deployment: None,
            input: "null".into(),
            additional_metadata: None,
            spec: Spec::Every {
                every_ms: 60_000,
                offset_ms: 0,
            },
            overlap: Overlap::Skip,
            catchup_window_ms: 60_000,
            paused: false,
            note: None,
            start_at_ms: None,
            end_at_ms: None,
            declared_by: None,
        },
        0,
    );
    record.next_fire_ms = next_fire_ms;
    record
}

async fn a_schedule_is_created_once_and_survives_a_reopen(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let mut first = schedule("nightly", Some(60_000));
    first.revision = 7;
    store
        .create_schedule(&first)
        .await
        .map_err(fail("create"))?;
    let again = store.create_schedule(&schedule("nightly", None)).await;
    check(
        matches!(again, Err(StoreError::ScheduleExists { ref name }) if name == "nightly"),
        || format!("a second create: {again:?}"),
    )?;
    let store = h.reopen(store).await;
    let read = store.schedule("nightly").await.map_err(fail("read"))?;
    first.revision = 0;
    check(read.as_ref() == Some(&first), || {
        format!("created at revision 0 and read back whole: {read:?}")
    })?;
    let missing = store.schedule("other").await.map_err(fail("read"))?;
    check(missing.is_none(), || format!("{missing:?}"))
}

async fn a_schedule_update_is_refused_after_another_writer(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let created = schedule("sync", Some(60_000));
    store
        .create_schedule(&created)
        .await
        .map_err(fail("create"))?;
    let mut a = created.clone();
    a.next_fire_ms = Some(120_000);
    let mut b = created.clone();
    b.next_fire_ms = Some(180_000);
    let revision = store.update_schedule(&a).await.map_err(fail("update"))?;
    check(revision == 1, || {
        format!("revision after one update: {revision}")
    })?;
    let late = store.update_schedule(&b).await;
    check(
        matches!(late, Err(StoreError::ScheduleConflict { .. })),
        || format!("an update of a stale read: {late:?}"),
    )?;
    let read = store
        .schedule("sync")
        .await
        .map_err(fail("read"))?
        .ok_or("the schedule is gone")?;
    check(
        read.next_fire_ms == Some(120_000) && read.revision == 1,
        || format!("the first writer's record stays: {read:?}"),
    )?;
    let gone = store
        .update_schedule(&schedule("never-created", None))
        .await;
    check(
        matches!(gone, Err(StoreError::ScheduleNotFound { .. })),
        || format!("{gone:?}"),
    )
}

async fn due_schedules_are_those_with_work_and_no_live_claim(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let mut paused = schedule("paused", Some(1_000));
    paused.settings.paused = true;
    let mut buffered = schedule("buffered", Some(900_000));
    buffered.buffered_ms = Some(500);
    let mut claimed = schedule("claimed", Some(1_000));
    claimed.claim = Some(Claim {
        owner: "w1".into(),
        until_ms: 20_000,
    });
    for s in [
        schedule("later", Some(900_000)),
        schedule("ended", None),
        schedule("due-second", Some(5_000)),
        schedule("due-first", Some(2_000)),
        paused,
        buffered,
        claimed,
    ] {
        store.create_schedule(&s).await.map_err(fail("create"))?;
    }
    let names =
        |due: Vec<ScheduleRecord>| due.into_iter().map(|s| s.settings.name).collect::<Vec<_>>();
    let due = names(store.due_schedules(10_000, 10).await.map_err(fail("due"))?);
    check(due == ["due-first", "due-second", "buffered"], || {
        format!("due at 10 s, earliest first: {due:?}")
    })?;
    let due = names(store.due_schedules(10_000, 1).await.map_err(fail("due"))?);
    check(due == ["due-first"], || format!("limited to one: {due:?}"))?;
    // Once the claim has expired, another worker may take the schedule.
    let due = names(store.due_schedules(30_000, 10).await.map_err(fail("due"))?);
    check(due.contains(&"claimed".to_string()), || {
        format!("due at 30 s: {due:?}")
    })
}

async fn a_deleted_schedule_is_gone(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    store
        .create_schedule(&schedule("s", Some(1)))
        .await
        .map_err(fail("create"))?;
    check(
        store.delete_schedule("s").await.map_err(fail("delete"))?,
        || "deleting an existing schedule says so".into(),
    )?;
    check(
        !store.delete_schedule("s").await.map_err(fail("delete"))?,
        || "deleting it again finds nothing".into(),
    )?;
    let listed = store.list_schedules().await.map_err(fail("list"))?;
    check(listed.is_empty(), || format!("{listed:?}"))?;
    let due = store.due_schedules(10, 10).await.map_err(fail("due"))?;
    check(due.is_empty(), || format!("{due:?}"))
}
