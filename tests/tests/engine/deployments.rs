//! Deployments changed where they stand: a run that failed for want of a
//! grant completes once its build is granted, without a redeploy; a
//! redeploy keeps the name's grants and never moves the name back to an
//! older build unless forced. On sled, or PostgreSQL with
//! `KEEL_TEST_STORE`.

use std::path::Path;

use crate::common::{TestStore, attempts, json, open_with, order_input, step_ids};
use keel_host::core::deployment::Target;
use keel_host::core::restart::RestartPoint;
use keel_host::core::{ErrorKind, GrantSpec, RunStatus};
use keel_host::{DeploySpec, ForkOptions, Keel, StartOptions};
use keel_payment_api::PaymentApi;

/// Deploys the guest at `path` as `order` with `grants` (`None`: keep the
/// name's) and `force`.
async fn deploy(
    keel: &Keel,
    path: &str,
    grants: Option<GrantSpec>,
    force: bool,
) -> keel_host::Result<keel_host::core::Deployment> {
    let spec = DeploySpec {
        name: Some("order".into()),
        grants,
        force,
        ..DeploySpec::default()
    };
    let bytes = std::fs::read(path).unwrap();
    Ok(keel.deploy(Path::new(path), &bytes, spec).await?.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compensated_run_failed_for_want_of_a_grant_is_refused_a_retry_and_forked_once_granted() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let (keel, _) = open_with(store.config(), keel_tests::ORDER).await;
    let first = deploy(&keel, keel_tests::ORDER, None, false).await.unwrap();
    assert!(first.grants.is_empty(), "a new name is granted nothing");
    let input = order_input(&api, "o-g");
    let options = StartOptions::default();
    let run = keel
        .start_workflow("process_order", Target::Name("order"), &input, &options)
        .await
        .unwrap();
    let failed = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed);
    // Denied: not retried (no retry can get a grant), and the message
    // names the build that lacks it and the grant to add.
    let message = failed.error.unwrap().message;
    let short = &first.hash.to_string()[..12];
    let wanted = format!(
        "deployment `order` (build {short}) grants no HTTP access there; grant it (`keel deployments grant order --allow-http {}`",
        api.addr
    );
    assert!(message.contains(&wanted), "{message}");
    let before = keel.journal(&run.run_id).await.unwrap();
    assert_eq!(
        attempts(&before),
        [1, 1, 1],
        "reserve, the charge once, the saga's release"
    );
    assert!(api.requests().is_empty());

    let granted = GrantSpec {
        http: vec![api.addr.to_string()],
        ..GrantSpec::default()
    };
    let changed = keel.grant("order", &granted, false).await.unwrap();
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].grants, granted);
    // The saga released the items when the charge failed: a retry would
    // complete the order on a reservation that is gone, so it is refused,
    // and a fork from the start, on the granted build, places it anew.
    let refused = keel.retry(&run.run_id).await.unwrap_err();
    assert!(
        refused.kind() == ErrorKind::NotRetryable
            && refused.to_string().contains("release_inventory"),
        "{refused}"
    );
    let fork = keel
        .fork_run(
            &run.run_id,
            &RestartPoint::Step("reserve_inventory".into()),
            &ForkOptions::default(),
            "test",
        )
        .await
        .unwrap();
    let done = keel.drive(&fork.run_id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let journal = keel.journal(&fork.run_id).await.unwrap();
    assert_eq!(attempts(&journal), [1, 1], "reserve and charge, once each");
    let ids = step_ids(&journal);
    assert!(
        ids.iter().all(|id| id.starts_with(fork.run_id.as_str())),
        "the fork's own step IDs: {ids:?}"
    );
    let charges = api.charges();
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].0, ids[1], "charged under the fork's step ID");
    assert_eq!(
        json(done.output.as_deref().unwrap())["charge_id"],
        charges[0].1.as_str()
    );
    // The name did not move: still the one build, as deployed.
    let now = keel.deployment("order").await.unwrap();
    assert_eq!(
        (now.hash.clone(), now.deployed_at_ms),
        (first.hash.clone(), first.deployed_at_ms)
    );
    let source = keel.journal(&run.run_id).await.unwrap();
    assert_eq!(
        source.len(),
        before.len(),
        "the refused retry wrote nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redeploy_keeps_the_names_grants_and_never_moves_it_back_unasked() {
    let store = TestStore::new();
    let (keel, _) = open_with(store.config(), keel_tests::ORDER).await;
    let granted = GrantSpec {
        http: vec!["api.example.com".into()],
        env: vec!["PAYMENT_KEY".into()],
        ..GrantSpec::default()
    };
    let v1 = deploy(&keel, keel_tests::ORDER, Some(granted.clone()), false)
        .await
        .unwrap();
    // A new build deployed without grants keeps the name's.
    let v2 = deploy(&keel, keel_tests::ORDER_V2_COMPATIBLE, None, false)
        .await
        .unwrap();
    assert_ne!(v1.hash, v2.hash);
    assert_eq!(v2.grants, granted);
    // The older build again: refused, named, and the name stays on v2.
    let refused = deploy(&keel, keel_tests::ORDER, None, false)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::OlderBuild, "{refused}");
    let text = refused.to_string();
    assert!(
        text.contains(&v1.hash.to_string()) && text.contains(&v2.hash.to_string()),
        "{text}"
    );
    assert_eq!(keel.deployment("order").await.unwrap().hash, v2.hash);
    // Forced, it moves back; the same build again is no move at all.
    let back = deploy(&keel, keel_tests::ORDER, None, true).await.unwrap();
    assert_eq!(keel.deployment("order").await.unwrap().hash, v1.hash);
    assert_eq!(back.grants, granted);
    deploy(&keel, keel_tests::ORDER, None, false).await.unwrap();
    // Asked for none, it grants none; a grant by hash changes that build only.
    let bare = deploy(&keel, keel_tests::ORDER, Some(GrantSpec::default()), false)
        .await
        .unwrap();
    assert!(bare.grants.is_empty());
    let v2_hash = v2.hash.to_string();
    let extra = GrantSpec {
        dirs: vec!["/srv/data".into()],
        ..GrantSpec::default()
    };
    let changed = keel.grant(&v2_hash[..12], &extra, false).await.unwrap();
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].grants, granted.with(&extra));
    assert!(keel.deployment("order").await.unwrap().grants.is_empty());
    // Replaced, exactly what is given; a malformed grant or an unknown
    // deployment is refused.
    let only = GrantSpec {
        env: vec!["ONLY".into()],
        ..GrantSpec::default()
    };
    let replaced = keel.grant(&v2_hash, &only, true).await.unwrap();
    assert_eq!(replaced[0].grants, only);
    let url = GrantSpec {
        http: vec!["https://api.example.com/".into()],
        ..GrantSpec::default()
    };
    let bad = keel.grant("order", &url, false).await.unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidGrant);
    let unknown = keel.grant("nope", &only, false).await.unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::DeploymentNotFound);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_moves_to_a_newer_build_only_where_its_journal_replays() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let (keel, _) = open_with(store.config(), keel_tests::ORDER).await;
    let v1 = deploy(&keel, keel_tests::ORDER, None, false).await.unwrap();
    let run = keel
        .start_workflow(
            "process_order",
            Target::Name("order"),
            &order_input(&api, "o-on"),
            &StartOptions::default(),
        )
        .await
        .unwrap();
    let failed = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed, "denied its charge");
    let before = keel.journal(&run.run_id).await.unwrap();
    let granted = GrantSpec {
        http: vec![api.addr.to_string()],
        ..GrantSpec::default()
    };

    // A build that charges before it reserves: the run's journal does not
    // replay there, so the retry is refused and the run stays as it was.
    let wrong = deploy(
        &keel,
        keel_tests::ORDER_V2_INCOMPATIBLE,
        Some(granted),
        false,
    )
    .await
    .unwrap();
    let refused = keel.retry_on(&run.run_id, "order").await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::NotRetryable, "{refused}");
    let text = refused.to_string();
    assert!(
        text.contains(&format!(
            "does not replay on build {} of `order`",
            &wrong.hash.as_str()[..12]
        )) && text.contains("reserve_inventory")
            && text.contains("charge_user"),
        "{text}"
    );
    let still = keel.get_run(&run.run_id).await.unwrap();
    assert_eq!(
        (still.status, &still.component_hash),
        (RunStatus::Failed, &v1.hash)
    );
    assert_eq!(keel.journal(&run.run_id).await.unwrap().len(), before.len());

    // A build that replays it (and keeps the name's grants): the journal
    // replays there, but the saga released the items when the charge was
    // denied, so the retry is refused naming the release; a fork from the
    // start onto that build places the order anew, under its own IDs.
    let right = deploy(&keel, keel_tests::ORDER_V2_COMPATIBLE, None, false)
        .await
        .unwrap();
    let refused = keel.retry_on(&run.run_id, "order").await.unwrap_err();
    assert!(
        refused.kind() == ErrorKind::NotRetryable
            && refused.to_string().contains("release_inventory"),
        "{refused}"
    );
    let options = ForkOptions {
        on: Some("order".into()),
        ..ForkOptions::default()
    };
    let fork = keel
        .fork_run(
            &run.run_id,
            &RestartPoint::Step("reserve_inventory".into()),
            &options,
            "test",
        )
        .await
        .unwrap();
    assert_eq!(fork.component_hash, right.hash);
    let done = keel.drive(&fork.run_id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        done.component_hash, right.hash,
        "pinned to the build it forked onto"
    );
    let ids = step_ids(&keel.journal(&fork.run_id).await.unwrap());
    assert_eq!(api.charges()[0].0, ids[1], "charged under the fork's ID");
    assert!(keel.replay(&fork.run_id, None).await.unwrap().is_ok());
    // An unknown deployment is refused as such.
    let unknown = keel.retry_on(&run.run_id, "nope").await.unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::DeploymentNotFound);
}

/// What a deploy may change: every deployment and every schedule.
async fn deployed_state(
    keel: &Keel,
) -> (
    Vec<keel_host::core::Deployment>,
    Vec<keel_host::core::schedule::ScheduleRecord>,
) {
    let mut deployments = keel.deployments().await.unwrap().to_vec();
    deployments.sort_by(|a, b| a.hash.cmp(&b.hash));
    let mut schedules = keel.schedules().await.unwrap();
    schedules.sort_by(|a, b| a.settings.name.cmp(&b.settings.name));
    (deployments, schedules)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_deploy_changes_nothing() {
    let store = TestStore::new();
    let (keel, _) = open_with(store.config(), keel_tests::TESTBED).await;
    let bytes = std::fs::read(keel_tests::TESTBED).unwrap();
    let path = Path::new(keel_tests::TESTBED);
    let granted = GrantSpec {
        env: vec!["TESTBED_KEY".into()],
        ..GrantSpec::default()
    };
    let spec = |name: &str| DeploySpec {
        name: Some(name.into()),
        ..DeploySpec::default()
    };
    let first = DeploySpec {
        grants: Some(granted.clone()),
        ..spec("testbed")
    };
    keel.deploy(path, &bytes, first).await.unwrap();
    let before = deployed_state(&keel).await;
    assert!(
        before.1.iter().any(|s| s.settings.name == "testbed.hourly"),
        "the testbed declares a schedule: {:?}",
        before.1
    );

    // The same bytes under a name whose declared schedule (`NAME.hourly`)
    // would be too long: a valid deployment name, so only the schedule's
    // check refuses it, after the deployment was found to be the same build.
    let long = "t".repeat(100);
    let refusals = [
        ("a schedule name too long", spec(&long), bytes.clone()),
        ("a name at the limit", spec(&"n".repeat(128)), bytes.clone()),
        ("an invalid name", spec("no spaces"), bytes.clone()),
        (
            "an invalid grant",
            DeploySpec {
                grants: Some(GrantSpec {
                    http: vec!["https://api.example.com/".into()],
                    ..GrantSpec::default()
                }),
                ..spec("testbed")
            },
            bytes.clone(),
        ),
        (
            "a limit out of range",
            DeploySpec {
                limits: keel_host::core::deployment::StepLimits {
                    max_memory_mib: Some(0),
                    ..Default::default()
                },
                ..spec("testbed")
            },
            bytes.clone(),
        ),
        ("not a component", spec("testbed"), b"not wasm".to_vec()),
    ];
    for (what, spec, bytes) in refusals {
        let refused = keel.deploy(path, &bytes, spec).await;
        let error = refused.err().unwrap_or_else(|| panic!("{what}: deployed"));
        assert_eq!(
            deployed_state(&keel).await,
            before,
            "{what} ({error}) changed the deployments or schedules"
        );
    }
    // And the deployment still answers to its name, with its grants.
    let testbed = keel.deployment("testbed").await.unwrap();
    assert_eq!(testbed.grants, granted);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_within_the_same_millisecond_is_still_the_latest() {
    // A stopped clock: every deploy happens in the same millisecond.
    let store = TestStore::new();
    let mut config = store.config();
    config.clock = crate::common::ManualClock::at(1_796_083_200_000);
    let (keel, _) = open_with(config, keel_tests::ORDER).await;
    for (path, other) in [
        (keel_tests::ORDER, keel_tests::ORDER_V2_COMPATIBLE),
        (keel_tests::ORDER_V2_COMPATIBLE, keel_tests::ORDER),
    ] {
        let first = deploy(&keel, path, None, true).await.unwrap();
        let second = deploy(&keel, other, None, true).await.unwrap();
        assert!(second.deployed_at_ms > first.deployed_at_ms);
        // Whichever hash sorts first, the name is the last build deployed.
        assert_eq!(keel.deployment("order").await.unwrap().hash, second.hash);
    }
}
