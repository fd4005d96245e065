//! Conformance cases of due work (`keel_core::due`): runs claimed earliest
//! due first in bounded batches, never by two claimers, a held lease due
//! at its expiry, wakes that make a run due at once (and are not lost to a
//! lease taken before them), retries asked for at release, and the live
//! counts kept with every status change.

use std::collections::HashSet;

use super::*;

/// Admits `run_id` with status `status` at `at_ms` (its record's
/// `updated_at_ms` too) and timer `wake_at_ms`.
async fn admit_at(
    store: &dyn Store,
    run_id: &str,
    status: RunStatus,
    at_ms: u64,
    wake_at_ms: Option<u64>,
) -> Outcome {
    let mut record = run_record(run_id, status, at_ms);
    record.wake_at_ms = wake_at_ms;
    let journal = started(&record.workflow);
    store
        .admit(Admission {
            run: &record,
            key: None,
            start_hook: None,
            journal: &journal,
            flow: None,
            now_ms: at_ms,
            lease: None,
            handover: None,
        })
        .await
        .map(|_| ())
        .map_err(fail("admit"))
}

/// Stores `run_id`'s record as waiting (on `wake_at_ms`, or on nothing
/// but a wake), fenced by `lease`, then releases the lease: a drive that
/// suspended.
async fn suspend(store: &dyn Store, lease: &Lease, wake_at_ms: Option<u64>) -> Outcome {
    let run_id = lease.run_id.as_str();
    let mut record = store.get_run(run_id).await.map_err(fail("get_run"))?;
    record.status = RunStatus::Waiting;
    record.wake_at_ms = wake_at_ms;
    let seq = store.journal(run_id).await.map_err(fail("journal"))?.len() as u64;
    let entry = timer_entry(seq, 0);
    store
        .append(run_id, &[entry], Some(&record), Some(lease))
        .await
        .map_err(fail("append"))?;
    store
        .release_lease(lease, None)
        .await
        .map_err(fail("release"))
}

async fn claim(
    store: &dyn Store,
    owner: &str,
    now_ms: u64,
    limit: usize,
) -> Result<Vec<Lease>, String> {
    store
        .claim_due(owner, 1_000, now_ms, limit)
        .await
        .map_err(fail("claim_due"))
}

fn ids(leases: &[Lease]) -> Vec<&str> {
    leases.iter().map(|l| l.run_id.as_str()).collect()
}

pub(super) async fn due_runs_are_claimed_earliest_first_in_batches(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit_at(&*store, "pending-late", RunStatus::Pending, 10, None).await?;
    admit_at(&*store, "pending-early", RunStatus::Pending, 5, None).await?;
    admit_at(&*store, "scheduled", RunStatus::Scheduled, 1, Some(100)).await?;
    admit_at(&*store, "timer", RunStatus::Pending, 1, None).await?;
    admit_at(&*store, "hook", RunStatus::Pending, 1, None).await?;
    for (run_id, wake_at) in [("timer", Some(50)), ("hook", None)] {
        let lease = store
            .acquire_lease(run_id, "w0", 1_000, 2)
            .await
            .map_err(fail("acquire"))?
            .ok_or("a free lease was not taken")?;
        suspend(&*store, &lease, wake_at).await?;
    }
    let first = claim(&*store, "w1", 60, 2).await?;
    check(ids(&first) == ["pending-early", "pending-late"], || {
        format!("the first batch of two at 60: {:?}", ids(&first))
    })?;
    check(
        first
            .iter()
            .all(|l| l.owner == "w1" && l.expires_at_ms == 1_060),
        || format!("the batch's leases: {first:?}"),
    )?;
    let second = claim(&*store, "w1", 60, 10).await?;
    check(ids(&second) == ["timer"], || {
        format!("the runs left due at 60: {:?}", ids(&second))
    })?;
    let next = store.next_due().await.map_err(fail("next_due"))?;
    check(next == Some(100), || {
        format!("the next due time after the claims: {next:?}")
    })?;
    let later = claim(&*store, "w1", 100, 10).await?;
    check(ids(&later) == ["scheduled"], || {
        format!("due at 100: {:?}", ids(&later))
    })?;
    let none = claim(&*store, "w2", 1_000, 10).await?;
    check(none.is_empty(), || {
        format!("runs leased unexpired, or waiting on nothing due, were claimed: {none:?}")
    })?;
    let next = store.next_due().await.map_err(fail("next_due"))?;
    check(next == Some(1_060), || {
        format!("the earliest lease expiry is the next due time: {next:?}")
    })
}

pub(super) async fn a_run_admitted_under_a_lease_is_due_when_it_expires(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    let record = run_record("r", RunStatus::Pending, 10);
    let journal = started(&record.workflow);
    store
        .admit(Admission {
            run: &record,
            key: None,
            start_hook: None,
            journal: &journal,
            flow: None,
            now_ms: 10,
            lease: Some(crate::AdmissionLease {
                owner: "admitter",
                expires_at_ms: 500,
            }),
            handover: None,
        })
        .await
        .map_err(fail("admit"))?;
    check(claim(&*store, "other", 499, 10).await?.is_empty(), || {
        "a run admitted under a lease was claimed before it expired".into()
    })?;
    let next = store.next_due().await.map_err(fail("next_due"))?;
    check(next == Some(500), || format!("due at {next:?}"))?;
    let mine = store
        .acquire_lease("r", "admitter", 1_000, 20)
        .await
        .map_err(fail("acquire"))?;
    check(mine.is_some(), || {
        "the admitting worker could not take its run's lease".into()
    })?;
    let other = store
        .acquire_lease("r", "other", 1_000, 30)
        .await
        .map_err(fail("acquire"))?;
    check(other.is_none(), || format!("another took it: {other:?}"))
}

pub(super) async fn an_admission_lease_released_frees_its_run_and_nothing_else(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    let record = run_record("r", RunStatus::Pending, 10);
    let journal = started(&record.workflow);
    let lease = crate::AdmissionLease {
        owner: "admitter",
        expires_at_ms: 500,
    };
    store
        .admit(Admission {
            run: &record,
            key: None,
            start_hook: None,
            journal: &journal,
            flow: None,
            now_ms: 10,
            lease: Some(lease),
            handover: None,
        })
        .await
        .map_err(fail("admit"))?;
    store
        .release_lease(&lease.lease("r"), None)
        .await
        .map_err(fail("release"))?;
    let claimed = claim(&*store, "other", 20, 10).await?;
    check(ids(&claimed) == ["r"], || {
        format!("the released admission lease left the run held: claimed {claimed:?}")
    })?;
    // An admission that never happened: releasing its lease writes nothing.
    store
        .release_lease(&lease.lease("never"), None)
        .await
        .map_err(fail("release"))?;
    let run = store.get_run("never").await;
    check(matches!(run, Err(StoreError::RunNotFound { .. })), || {
        format!("a release made a run: {run:?}")
    })?;
    let held = store.held_leases(20).await.map_err(fail("held"))?;
    check(held.iter().all(|l| l.owner == "other"), || {
        format!("the admitter still holds {held:?}")
    })?;
    let next = store.next_due().await.map_err(fail("next_due"))?;
    check(next == Some(1_020), || {
        format!("only the other claimer's lease should be due, at 1020: {next:?}")
    })
}

pub(super) async fn two_claimers_never_take_one_run(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    for n in 0..60 {
        admit_at(&*store, &format!("r{n:02}"), RunStatus::Pending, n, None).await?;
    }
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("w{worker}");
            let mut taken = Vec::new();
            loop {
                let batch = store.claim_due(&owner, 10_000, 100, 7).await?;
                if batch.is_empty() {
                    return Ok::<_, StoreError>(taken);
                }
                taken.extend(batch.into_iter().map(|l| l.run_id));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.map_err(fail("join"))?.map_err(fail("claim"))?);
    }
    let distinct: HashSet<&RunId> = all.iter().collect();
    check(all.len() == 60 && distinct.len() == 60, || {
        format!(
            "{} claims of {} distinct runs, of 60 due",
            all.len(),
            distinct.len()
        )
    })
}

pub(super) async fn a_lease_that_expires_makes_its_run_due(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit_at(&*store, "r", RunStatus::Pending, 0, None).await?;
    let held = store
        .claim_due("w1", 100, 0, 10)
        .await
        .map_err(fail("claim"))?;
    check(ids(&held) == ["r"], || format!("claimed: {held:?}"))?;
    let early = claim(&*store, "w2", 99, 10).await?;
    check(early.is_empty(), || {
        format!("a run was claimed under a live lease: {early:?}")
    })?;
    let listed = store.held_leases(99).await.map_err(fail("held_leases"))?;
    check(listed == held, || {
        format!("the held leases at 99: {listed:?}")
    })?;
    let lapsed = store.held_leases(100).await.map_err(fail("held_leases"))?;
    check(lapsed.is_empty(), || {
        format!("an expired lease is listed as held: {lapsed:?}")
    })?;
    let taken = claim(&*store, "w2", 100, 10).await?;
    check(
        ids(&taken) == ["r"] && taken[0].epoch > held[0].epoch,
        || format!("at the lease's expiry: {taken:?} after {held:?}"),
    )?;
    let entry = timer_entry(1, 0);
    let stale = store.append("r", &[entry], None, Some(&held[0])).await;
    check(matches!(stale, Err(StoreError::LeaseLost { .. })), || {
        format!("a write of the expired lease's owner: {stale:?}")
    })
}

pub(super) async fn a_woken_run_is_due_at_once_and_a_wake_outlives_a_lease(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "r", Some(&hook("t", "r", None, None)), None, 0)
        .await
        .map_err(fail("admit"))?;
    let lease = claim(&*store, "w1", 0, 1).await?;
    check(ids(&lease) == ["r"], || format!("claimed: {lease:?}"))?;
    suspend(&*store, &lease[0], None).await?;
    check(claim(&*store, "w1", 5_000, 10).await?.is_empty(), || {
        "a run waiting on a hook alone was claimed".into()
    })?;
    check(
        store.next_due().await.map_err(fail("next_due"))?.is_none(),
        || "a run waiting on a hook alone has a due time".into(),
    )?;
    store.resume_hook("t", "1").await.map_err(fail("resume"))?;
    let woken = claim(&*store, "w1", 1, 10).await?;
    check(ids(&woken) == ["r"], || {
        format!("a delivered payload did not make the run due: {woken:?}")
    })?;
    // A payload while the lease is held: not due until the release, then
    // due at once, though the take came before it.
    store.resume_hook("t", "2").await.map_err(fail("resume"))?;
    check(claim(&*store, "w2", 2, 10).await?.is_empty(), || {
        "a woken run was claimed under a live lease".into()
    })?;
    suspend(&*store, &woken[0], None).await?;
    let again = claim(&*store, "w2", 3, 10).await?;
    check(ids(&again) == ["r"], || {
        format!("a wake during a lease was lost at its release: {again:?}")
    })?;
    suspend(&*store, &again[0], None).await?;
    store
        .request_cancel(
            "r",
            &keel_core::lifecycle::CancelRequest {
                reason: "stop".into(),
                by: "test".into(),
                at_ms: 4,
            },
        )
        .await
        .map_err(fail("request_cancel"))?;
    let cancelled = claim(&*store, "w3", 4, 10).await?;
    check(ids(&cancelled) == ["r"], || {
        format!("a cancel request did not make the run due: {cancelled:?}")
    })
}

pub(super) async fn a_release_asks_for_the_run_again_when_told(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "r", Some(&hook("t", "r", None, None)), None, 0)
        .await
        .map_err(fail("admit"))?;
    let lease = claim(&*store, "w1", 0, 1).await?;
    suspend(&*store, &lease[0], None).await?;
    store.resume_hook("t", "1").await.map_err(fail("resume"))?;
    let failing = claim(&*store, "w1", 10, 1).await?;
    // The drive failed for a reason outside the run: try again at 500.
    store
        .release_lease(&failing[0], Some(500))
        .await
        .map_err(fail("release"))?;
    check(claim(&*store, "w1", 499, 10).await?.is_empty(), || {
        "a run asked again at 500 was due before".into()
    })?;
    let next = store.next_due().await.map_err(fail("next_due"))?;
    check(next == Some(500), || format!("next due: {next:?}"))?;
    let retried = claim(&*store, "w1", 500, 10).await?;
    check(ids(&retried) == ["r"], || {
        format!("the retry at 500: {retried:?}")
    })?;
    // A run its record makes due at once (pending) waits for the retry too.
    admit_at(&*store, "p", RunStatus::Pending, 0, None).await?;
    let failing = claim(&*store, "w1", 600, 10).await?;
    check(ids(&failing) == ["p"], || format!("claimed: {failing:?}"))?;
    store
        .release_lease(&failing[0], Some(900))
        .await
        .map_err(fail("release"))?;
    let early = claim(&*store, "w1", 899, 10).await?;
    check(early.is_empty(), || {
        format!("a pending run released for a retry at 900 was claimed at 899: {early:?}")
    })?;
    let later = claim(&*store, "w1", 900, 10).await?;
    check(ids(&later) == ["p"], || format!("at 900: {later:?}"))
}

pub(super) async fn an_ended_run_leaves_the_index_and_the_counts(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit_at(&*store, "a", RunStatus::Pending, 0, None).await?;
    admit_at(&*store, "b", RunStatus::Pending, 0, None).await?;
    admit_at(&*store, "c", RunStatus::Scheduled, 0, Some(50)).await?;
    let counts = store.live_counts().await.map_err(fail("live_counts"))?;
    let expect = |pairs: &[(RunStatus, u64)]| {
        let mut counts = crate::LiveCounts::default();
        for (status, n) in pairs {
            counts.add("w", *status, *n);
        }
        counts
    };
    check(
        counts == expect(&[(RunStatus::Pending, 2), (RunStatus::Scheduled, 1)]),
        || format!("counts after admissions: {counts:?}"),
    )?;
    let lease = claim(&*store, "w", 0, 1).await?;
    let mut running = store
        .get_run(&lease[0].run_id)
        .await
        .map_err(fail("get_run"))?;
    running.status = RunStatus::Running;
    store
        .append(
            &lease[0].run_id,
            &[timer_entry(1, 0)],
            Some(&running),
            Some(&lease[0]),
        )
        .await
        .map_err(fail("append"))?;
    end(&*store, "b", 1).await.map_err(fail("end"))?;
    end(&*store, "a", 1).await.map_err(fail("end"))?;
    let counts = store.live_counts().await.map_err(fail("live_counts"))?;
    check(counts == expect(&[(RunStatus::Scheduled, 1)]), || {
        format!("counts after the ends: {counts:?}")
    })?;
    let left = claim(&*store, "w", 10_000, 10).await?;
    check(ids(&left) == ["c"], || {
        format!("the ended runs are still due: {left:?}")
    })?;
    let store = h.reopen(store).await;
    let counts = store.live_counts().await.map_err(fail("live_counts"))?;
    check(counts == expect(&[(RunStatus::Scheduled, 1)]), || {
        format!("counts after a reopen: {counts:?}")
    })?;
    // Held when the store was reopened: due no later than its lease's
    // expiry (at once on a store one process opens).
    let next = store.next_due().await.map_err(fail("next_due"))?;
    check(next.is_some_and(|at| at <= left[0].expires_at_ms), || {
        format!("a run leased before a reopen is due at {next:?}")
    })
}

/// A process that stops holding a lease (killed, or its store closed)
/// loses it: after the store is opened again, the take that follows names
/// the worker it takes the run over from, no later than the lease's expiry
/// (at once on a store one process opens: that process is gone).
pub(super) async fn a_lease_held_across_a_reopen_is_taken_over_naming_its_worker(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    admit_at(&*store, "held", RunStatus::Running, 1, None).await?;
    let held = store
        .acquire_lease("held", "w1", 30_000, 10)
        .await
        .map_err(fail("acquire"))?
        .ok_or("w1 did not take the run")?;
    let store = h.reopen(store).await;
    let next = store.next_due().await.map_err(fail("next_due"))?;
    let due = next.filter(|at| *at <= held.expires_at_ms).ok_or_else(|| {
        format!("a run leased before a reopen is due at {next:?}, past its lease's expiry")
    })?;
    let now = due.max(20);
    let taken = claim(&*store, "w2", now, 10).await?;
    let lost = taken
        .iter()
        .find(|l| l.run_id.as_str() == "held")
        .and_then(|l| l.took_over.clone());
    check(
        lost.as_ref()
            .is_some_and(|l| l.owner == "w1" && l.expired_at_ms <= now),
        || format!("w2's take at {now} after the reopen: {taken:?}"),
    )
}

pub(super) async fn a_take_of_a_lost_lease_names_the_worker_that_lost_it(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    for run_id in ["acquired", "claimed", "released"] {
        admit_at(&*store, run_id, RunStatus::Pending, 1, None).await?;
    }
    let take = |run_id: &'static str, owner: &'static str, now_ms: u64| {
        let store = store.clone();
        async move {
            store
                .acquire_lease(run_id, owner, 1_000, now_ms)
                .await
                .map_err(fail("acquire"))?
                .ok_or_else(|| format!("{owner} did not take {run_id} at {now_ms}"))
        }
    };
    let first = take("acquired", "w1", 10).await?;
    check(first.took_over.is_none(), || {
        format!("a free run's take names a lost lease: {first:?}")
    })?;
    let again = take("acquired", "w1", 20).await?;
    check(again.took_over.is_none(), || {
        format!("a take by the lease's own owner names a lost lease: {again:?}")
    })?;
    // w1 dies holding it: w2 takes it once it expired (at 1,020).
    let lost = take("acquired", "w2", 1_020).await?;
    let named = crate::LostLease {
        owner: "w1".into(),
        expired_at_ms: 1_020,
    };
    check(lost.took_over.as_ref() == Some(&named), || {
        format!("a take of w1's expired lease: {lost:?}")
    })?;
    // A lease given up is no loss.
    let released = take("released", "w1", 10).await?;
    store
        .release_lease(&released, None)
        .await
        .map_err(fail("release"))?;
    let after = take("released", "w2", 30).await?;
    check(after.took_over.is_none(), || {
        format!("a take after a release names a lost lease: {after:?}")
    })?;
    // The same through a claim of due work.
    take("claimed", "w1", 10).await?;
    let claimed = claim(&*store, "w3", 2_000, 10).await?;
    let of = |run_id: &str| claimed.iter().find(|l| l.run_id.as_str() == run_id);
    check(
        of("claimed").and_then(|l| l.took_over.as_ref())
            == Some(&crate::LostLease {
                owner: "w1".into(),
                expired_at_ms: 1_010,
            }),
        || format!("a claim of w1's expired lease: {claimed:?}"),
    )
}
