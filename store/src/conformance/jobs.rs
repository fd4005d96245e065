//! Conformance cases of bulk operations' jobs: created once, updated by
//! compare-and-set on the revision, listed newest first, running ones
//! found by any worker.

use keel_core::bulk::{BulkAction, BulkRequest, InFlight, JobRecord, JobState, Upgrade};
use keel_core::query::RunFilter;

use super::*;

fn job(id: &str, at_ms: u64) -> JobRecord {
    let request = BulkRequest {
        action: BulkAction::Retry,
        filter: RunFilter {
            statuses: vec![RunStatus::Failed],
            ..RunFilter::default()
        },
        reason: None,
        force: false,
        // Kept with the job, as an upgrade's is.
        upgrade: Some(Upgrade {
            name: "order".into(),
            to: "0123abcd".into(),
            dry_run: true,
            ramp: Some(10),
        }),
        // Kept with the job too, as a bulk restart's or fork's is.
        restart: Some(keel_core::bulk::BulkRestart {
            from: keel_core::restart::RestartPoint::Step("charge".into()),
            on: Some("order".into()),
        }),
    };
    JobRecord::new(id.into(), request, at_ms)
}

pub(super) async fn a_job_is_created_once_and_its_progress_survives_a_reopen(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    let created = job("0001", 10);
    store.create_job(&created).await.map_err(fail("create"))?;
    let again = store.create_job(&created).await;
    check(
        matches!(again, Err(StoreError::JobConflict { ref job_id }) if job_id == "0001"),
        || format!("a second create: {again:?}"),
    )?;
    let mut progress = created.clone();
    progress.claim("w1", 20, 1_000);
    progress.begin_page(
        vec![InFlight {
            run_id: "r1".into(),
            journal_len: 7,
        }],
        Some("5-r1".into()),
    );
    let revision = store.update_job(&progress).await.map_err(fail("update"))?;
    check(revision == 1, || {
        format!("revision after one update: {revision}")
    })?;
    let store = h.reopen(store).await;
    let read = store.job("0001").await.map_err(fail("read"))?;
    progress.revision = 1;
    check(read.as_ref() == Some(&progress), || {
        format!("the progress reads back whole: {read:?}")
    })?;
    let missing = store.job("0002").await.map_err(fail("read"))?;
    check(missing.is_none(), || format!("{missing:?}"))
}

pub(super) async fn a_job_update_is_refused_after_another_writer(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let created = job("0001", 10);
    store.create_job(&created).await.map_err(fail("create"))?;
    let mut a = created.clone();
    a.claim("w1", 20, 1_000);
    let mut b = created.clone();
    b.claim("w2", 20, 1_000);
    store.update_job(&a).await.map_err(fail("update"))?;
    let late = store.update_job(&b).await;
    check(matches!(late, Err(StoreError::JobConflict { .. })), || {
        format!("an update of a stale read: {late:?}")
    })?;
    let read = store
        .job("0001")
        .await
        .map_err(fail("read"))?
        .ok_or("the job is gone")?;
    check(read.claim.as_ref().is_some_and(|c| c.owner == "w1"), || {
        format!("the first writer's claim stays: {read:?}")
    })?;
    let gone = store.update_job(&job("never-created", 0)).await;
    check(matches!(gone, Err(StoreError::JobNotFound { .. })), || {
        format!("{gone:?}")
    })
}

pub(super) async fn jobs_are_listed_newest_first_and_running_ones_found(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    for (id, at) in [("0002", 20), ("0001", 10), ("0003", 30)] {
        store
            .create_job(&job(id, at))
            .await
            .map_err(fail("create"))?;
    }
    let mut done = store
        .job("0002")
        .await
        .map_err(fail("read"))?
        .ok_or("the job is gone")?;
    done.finish(JobState::Completed, 40);
    store.update_job(&done).await.map_err(fail("finish"))?;
    let ids = |jobs: Vec<JobRecord>| jobs.into_iter().map(|j| j.job_id).collect::<Vec<_>>();
    let listed = ids(store.jobs(10).await.map_err(fail("list"))?);
    check(listed == ["0003", "0002", "0001"], || {
        format!("newest first: {listed:?}")
    })?;
    let listed = ids(store.jobs(2).await.map_err(fail("list"))?);
    check(listed == ["0003", "0002"], || {
        format!("limited: {listed:?}")
    })?;
    let running = ids(store.running_jobs().await.map_err(fail("running"))?);
    check(running == ["0001", "0003"], || {
        format!("running, oldest first, the completed one not: {running:?}")
    })
}
