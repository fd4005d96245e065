//! Retention end to end: ended runs past their retention (a deployment's,
//! else the engine's default) are purged with everything they stored,
//! live runs are untouched and complete afterwards, purged runs are
//! archived as journal files that replay and import back, deletion on
//! request refuses live runs unless it cancels them, and two engines
//! purging one store at once delete each run once. On sled, or PostgreSQL
//! with `KEEL_TEST_STORE`.

use crate::common;

use crate::common::{ManualClock, TestStore, open, open_backend};
use keel_host::core::file::JournalFile;
use keel_host::core::{RunId, RunStatus};
use keel_host::{DeploySpec, Error, Keel, Replayer, archive_path};

const T0: u64 = 1_800_000_000_000;
const HOUR: u64 = 3_600_000;

/// Runs `count` `two_steps` runs to their end; their IDs.
async fn ended_runs(keel: &Keel, loaded: &keel_host::Loaded, count: usize) -> Vec<RunId> {
    let mut ids = Vec::new();
    for n in 0..count {
        let run = keel.run(loaded, "two_steps", &n.to_string()).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        ids.push(run.run_id);
    }
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn ended_runs_past_their_retention_are_purged_and_live_runs_go_on() {
    let store = TestStore::new();
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    config.retention.default_ms = Some(HOUR);
    let (keel, loaded, backend) = open_backend(config, keel_tests::TESTBED).await;
    let ended = ended_runs(&keel, &loaded, 5).await;
    // Live: asleep for two hours.
    let sleeping = keel
        .run(&loaded, "sleeper", &(2 * HOUR).to_string())
        .await
        .unwrap();
    assert_eq!(sleeping.status, RunStatus::Waiting);
    let before = keel.store_stats().await.unwrap();

    clock.advance(HOUR - 1);
    let early = keel.purge_ended(usize::MAX).await.unwrap();
    assert!(
        early.deleted.runs.is_empty(),
        "nothing is due yet: {early:?}"
    );

    clock.advance(1);
    let purge = keel.purge_ended(usize::MAX).await.unwrap();
    let mut purged = purge.deleted.runs.clone();
    purged.sort();
    let mut expected = ended.clone();
    expected.sort();
    assert_eq!(purged, expected, "exactly the ended runs");
    assert!(purge.complete && purge.deleted.bytes > 0, "{purge:?}");
    for run_id in &ended {
        assert!(matches!(
            keel.get_run(run_id).await,
            Err(Error::RunNotFound { .. })
        ));
        assert!(
            keel_host::store::JournalStore::journal(&*backend, run_id)
                .await
                .unwrap()
                .is_empty()
        );
    }
    let after = keel.store_stats().await.unwrap();
    assert_eq!(after.runs_by_status.get("completed"), None, "{after:?}");
    assert_eq!(after.runs_by_status.get("waiting"), Some(&1));
    assert_eq!(
        after.journal_entries,
        before.journal_entries - purge.deleted.journal_entries
    );
    drop(backend);

    // The live run is untouched and completes once its timer is due.
    clock.advance(2 * HOUR);
    keel.work_once().await.unwrap();
    let woke = keel.get_run(&sleeping.run_id).await.unwrap();
    assert_eq!(woke.status, RunStatus::Completed, "{woke:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployments_retention_applies_to_its_runs_and_its_redeploys() {
    let store = TestStore::new();
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    let (keel, loaded) = open(config).await;
    let before = ended_runs(&keel, &loaded, 1).await;
    clock.advance(10 * HOUR);
    let kept = keel.purge_ended(usize::MAX).await.unwrap();
    assert!(
        kept.deleted.runs.is_empty(),
        "no retention keeps every run: {kept:?}"
    );
    let path = std::path::Path::new(keel_tests::TESTBED);
    let bytes = std::fs::read(path).unwrap();
    let spec = DeploySpec {
        name: Some("kept-briefly".into()),
        retention_ms: Some(HOUR),
        ..DeploySpec::default()
    };
    let (deployment, loaded) = keel.deploy(path, &bytes, spec).await.unwrap();
    assert_eq!(deployment.retention_ms, Some(HOUR));
    let ended = ended_runs(&keel, &loaded, 2).await;
    clock.advance(HOUR);
    let purge = keel.purge_ended(usize::MAX).await.unwrap();
    assert_eq!(purge.deleted.runs.len(), 3, "{purge:?}");
    assert!(
        ended
            .iter()
            .chain(&before)
            .all(|id| purge.deleted.runs.contains(id))
    );
    // A redeploy without --retention keeps the name's.
    let again = keel
        .deploy(
            path,
            &bytes,
            DeploySpec {
                name: Some("kept-briefly".into()),
                ..DeploySpec::default()
            },
        )
        .await
        .unwrap()
        .0;
    assert_eq!(again.retention_ms, Some(HOUR));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_archived_run_replays_and_imports_back() {
    let store = TestStore::new();
    let archive = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    config.retention.default_ms = Some(HOUR);
    config.retention.archive_dir = Some(archive.path().join("runs"));
    let (keel, loaded) = open(config).await;
    let run_id = ended_runs(&keel, &loaded, 1).await.remove(0);
    let original = keel.get_run(&run_id).await.unwrap();
    let journal = keel.journal(&run_id).await.unwrap();
    clock.advance(HOUR);
    let purge = keel.purge_ended(usize::MAX).await.unwrap();
    assert_eq!(
        (purge.archived, purge.deleted.runs.len()),
        (1, 1),
        "{purge:?}"
    );

    let file = archive_path(&archive.path().join("runs"), &run_id);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o077, 0, "the archive is private to this user");
    let replayer = Replayer::new(keel_tests::TESTBED, keel_tests::compiled_cache())
        .await
        .unwrap();
    let report = replayer.replay_file(&file).await.unwrap();
    assert!(report.is_ok(), "{}", report.render());

    let parsed = JournalFile::parse(&std::fs::read(&file).unwrap()).unwrap();
    keel.import(&parsed).await.unwrap();
    let back = keel.get_run(&run_id).await.unwrap();
    assert_eq!(back, original);
    assert_eq!(keel.journal(&run_id).await.unwrap(), journal);
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_on_request_refuses_a_live_run_unless_it_cancels_it() {
    let store = TestStore::new();
    let (keel, loaded) = open(store.config()).await;
    let ended = ended_runs(&keel, &loaded, 1).await.remove(0);
    let sleeping = keel.run(&loaded, "sleeper", "36000000").await.unwrap();
    let refused = keel
        .delete_runs(&[ended.clone(), sleeping.run_id.clone()], false)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Error::RunLive { run_id, .. } if *run_id == sleeping.run_id),
        "{refused}"
    );
    assert!(
        keel.get_run(&ended).await.is_ok(),
        "a refused delete deletes nothing"
    );
    let unknown = keel
        .delete_runs(&["nobody".into()], false)
        .await
        .unwrap_err();
    assert!(matches!(unknown, Error::RunNotFound { .. }), "{unknown}");

    let deleted = keel
        .delete_runs(&[ended.clone(), sleeping.run_id.clone()], true)
        .await
        .unwrap();
    assert_eq!(deleted.runs.len(), 2, "{deleted:?}");
    for run_id in [&ended, &sleeping.run_id] {
        assert!(matches!(
            keel.get_run(run_id).await,
            Err(Error::RunNotFound { .. })
        ));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_engines_purging_one_store_at_once_delete_each_run_once() {
    let store = TestStore::new();
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    config.retention.default_ms = Some(HOUR);
    let (shared, _) = common::open_store(&config).await;
    let keel = Keel::open(config.engine.clone(), shared.clone()).unwrap();
    let other = Keel::open(config.engine.clone(), shared).unwrap();
    let loaded = keel.load(keel_tests::TESTBED).await.unwrap();
    // One real run, imported again under 1,199 other IDs: three batches.
    let model = ended_runs(&keel, &loaded, 1).await.remove(0);
    let file = JournalFile::new(
        &keel.get_run(&model).await.unwrap(),
        keel.journal(&model).await.unwrap(),
    );
    let mut all = vec![model];
    for n in 1..1200 {
        let mut copy = file.clone();
        copy.header.run.run_id = format!("copy-{n:04}").into();
        all.push(keel.import(&copy).await.unwrap().run_id);
    }
    clock.advance(HOUR);
    let (a, b) = tokio::join!(keel.purge_ended(usize::MAX), other.purge_ended(usize::MAX));
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut deleted: Vec<RunId> = a
        .deleted
        .runs
        .iter()
        .chain(&b.deleted.runs)
        .cloned()
        .collect();
    deleted.sort();
    all.sort();
    assert_eq!(deleted.len(), all.len(), "each run deleted once");
    assert_eq!(deleted, all);
    assert!(
        keel.runs_page(&Default::default(), None, 10)
            .await
            .unwrap()
            .runs
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn components_no_deployment_or_run_names_are_pruned_after_the_grace() {
    let store = TestStore::new();
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    let (keel, testbed, backend) = open_backend(config, keel_tests::TESTBED).await;
    let run = keel.run(&testbed, "two_steps", "1").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    let deploy = |path: &'static str| {
        let keel = keel.clone();
        async move {
            let path = std::path::Path::new(path);
            let spec = DeploySpec {
                name: Some("app".into()),
                ..DeploySpec::default()
            };
            keel.deploy(path, &std::fs::read(path).unwrap(), spec)
                .await
                .unwrap()
                .0
        }
    };
    // `app` is deployed twice: its first build is superseded by the second.
    let first = deploy(keel_tests::ORDER_HOOKS).await;
    clock.advance(1);
    let latest = deploy(keel_tests::TESTBED_REORDERED).await;
    // Run from a path, never deployed, and no run of it.
    let order = keel.load(keel_tests::ORDER).await.unwrap();

    clock.advance(HOUR);
    let dry = keel.prune_components(HOUR, true).await.unwrap();
    let mut expected = vec![order.hash.to_string(), first.hash.to_string()];
    expected.sort();
    let mut got = dry.components.clone();
    got.sort();
    assert_eq!(got, expected, "{dry:?}");
    assert_eq!(dry.deployments, [format!("app@{}", first.hash)]);
    assert_eq!((dry.referenced, dry.recent), (2, 0), "{dry:?}");
    assert!(dry.bytes > 0 && dry.dry_run);
    let within = keel.prune_components(2 * HOUR, false).await.unwrap();
    assert!(within.components.is_empty(), "{within:?}");
    assert_eq!(within.recent, 2, "stored within the grace: {within:?}");

    // Once its last run is deleted, the testbed is unreferenced too.
    keel.delete_runs(std::slice::from_ref(&run.run_id), false)
        .await
        .unwrap();
    let pruned = keel.prune_components(HOUR, false).await.unwrap();
    expected.push(testbed.hash.to_string());
    expected.sort();
    let mut got = pruned.components.clone();
    got.sort();
    assert_eq!(got, expected, "{pruned:?}");
    assert_eq!(pruned.deployments, [format!("app@{}", first.hash)]);
    assert_eq!(pruned.referenced, 1, "the name's latest build: {pruned:?}");
    for hash in &expected {
        let gone = keel_host::store::ComponentStore::get_component(&*backend, hash).await;
        assert!(gone.is_err(), "{hash} is deleted");
    }
    let kept =
        keel_host::store::ComponentStore::get_component(&*backend, latest.hash.as_str()).await;
    assert!(kept.is_ok(), "the latest build stays");
    let names: Vec<String> = keel
        .deployments()
        .await
        .unwrap()
        .iter()
        .map(|d| d.hash.to_string())
        .collect();
    assert_eq!(
        names,
        [latest.hash.to_string()],
        "the superseded record is gone"
    );

    // A build run again is stored again and runs.
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let again = keel.run(&testbed, "two_steps", "2").await.unwrap();
    assert_eq!(again.status, RunStatus::Completed, "{again:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_stops_heartbeating_is_shown_gone_then_forgotten() {
    use keel_host::store::{WorkerRecord, WorkerStore};
    let store = TestStore::new();
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    let lease_ms = config.lease_ttl.as_millis() as u64;
    let (keel, _, backend) = open_backend(config, keel_tests::TESTBED).await;
    // A worker that announced itself and was killed: it never signs off.
    let killed = WorkerRecord {
        worker_id: "killed".into(),
        host: "elsewhere".into(),
        pid: 7,
        started_at_ms: T0,
        heartbeat_at_ms: T0,
    };
    backend.heartbeat(&killed).await.unwrap();
    clock.advance(keel_host::GONE_AFTER_LEASES * lease_ms);
    let workers = keel.workers().await.unwrap();
    assert_eq!(workers.len(), 1);
    assert!(!workers[0].gone, "not yet: {workers:?}");
    clock.advance(1);
    assert!(
        keel.workers().await.unwrap()[0].gone,
        "no heartbeat for 3 leases"
    );
    assert_eq!(keel.forget_gone_workers().await.unwrap(), 0, "kept an hour");
    clock.advance(keel_host::FORGET_GONE_AFTER_MS);
    assert_eq!(keel.forget_gone_workers().await.unwrap(), 1);
    assert!(keel.workers().await.unwrap().is_empty());
}
