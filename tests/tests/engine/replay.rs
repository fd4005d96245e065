//! Offline replay of recorded journals against new builds.
//!
//! The fixtures under `tests/journals/` are recorded by the tool itself;
//! regenerate them with
//! `cargo test -p keel-tests --test engine -- --ignored replay::regenerate_journal_fixtures`.

use std::path::{Path, PathBuf};

use crate::common::{TestStore, json, order_input, order_keel};
use keel_host::core::RunStatus;
use keel_host::core::divergence::Verdict;
use keel_host::core::file::JournalFile;
use keel_host::core::journal::Fact;
use keel_host::{Replayer, StartOptions};
use keel_payment_api::PaymentApi;

fn journals(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("journals")
        .join(dir)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "rewrites the committed fixtures under tests/journals"]
async fn regenerate_journal_fixtures() {
    let api = PaymentApi::start(true).await.unwrap();
    let store = TestStore::new();
    let keel = order_keel(&store, &api).await;
    let order = keel.load(keel_tests::ORDER).await.unwrap();
    std::fs::create_dir_all(journals("order")).unwrap();
    for id in ["order-1", "order-2"] {
        let run = keel
            .run(&order, "process_order", &order_input(&api, id))
            .await
            .unwrap();
        let file = JournalFile::new(&run, keel.journal(&run.run_id).await.unwrap());
        std::fs::write(
            journals("order").join(format!("{id}.journal")),
            file.to_bytes(),
        )
        .unwrap();
    }
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let run = keel
        .run(&testbed, "concurrent", "[300, 10, 150]")
        .await
        .unwrap();
    let file = JournalFile::new(&run, keel.journal(&run.run_id).await.unwrap());
    std::fs::create_dir_all(journals("testbed")).unwrap();
    std::fs::write(journals("testbed").join("concurrent.json"), file.to_json()).unwrap();

    let hooks = keel.load(keel_tests::ORDER_HOOKS).await.unwrap();
    std::fs::create_dir_all(journals("order-hooks")).unwrap();
    for workflow in ["order_updates", "order_updates_scoped"] {
        let input = r#"{"order_id": "7", "note": "first"}"#;
        let options = StartOptions::token("order:7");
        let run = keel
            .start_with(&hooks, workflow, input, &options)
            .await
            .unwrap();
        for payload in [r#"{"note": "second"}"#, r#"{"note": "last", "done": true}"#] {
            keel.resume_hook("order:7", payload).await.unwrap();
        }
        let mut run = keel.drive(&run.run_id).await.unwrap();
        if run.status != RunStatus::Completed {
            keel.resume_hook("ship:7", "{}").await.unwrap();
            run = keel.drive(&run.run_id).await.unwrap();
        }
        let file = JournalFile::new(&run, keel.journal(&run.run_id).await.unwrap());
        let path = journals("order-hooks").join(format!("{workflow}.json"));
        std::fs::write(path, file.to_json()).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn recorded_hook_journals_replay_cleanly() {
    let replayer = Replayer::new(keel_tests::ORDER_HOOKS, keel_tests::compiled_cache())
        .await
        .unwrap();
    let reports = replayer
        .replay_paths(&[journals("order-hooks")])
        .await
        .unwrap();
    let outputs: Vec<serde_json::Value> = reports
        .iter()
        .map(|report| match &report.verdict {
            Verdict::Ok {
                output: Some(output),
            } => json(output),
            _ => panic!("{}", report.render()),
        })
        .collect();
    assert_eq!(
        outputs,
        [
            serde_json::json!(["first", "second", "last"]),
            serde_json::json!(["first", "second", "last", "shipped"]),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn v1_journals_replay_cleanly_against_v1_and_the_compatible_v2() {
    for component in [keel_tests::ORDER, keel_tests::ORDER_V2_COMPATIBLE] {
        let replayer = Replayer::new(component, keel_tests::compiled_cache())
            .await
            .unwrap();
        let reports = replayer.replay_paths(&[journals("order")]).await.unwrap();
        assert_eq!(reports.len(), 2);
        for report in reports {
            assert!(report.is_ok(), "{}", report.render());
            let Verdict::Ok {
                output: Some(output),
            } = &report.verdict
            else {
                panic!("no output: {report:?}")
            };
            assert!(
                json(output)["charge_id"]
                    .as_str()
                    .unwrap()
                    .starts_with("ch_")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_incompatible_v2_diverges_at_its_first_command_with_both_sides_shown() {
    let replayer = Replayer::new(
        keel_tests::ORDER_V2_INCOMPATIBLE,
        keel_tests::compiled_cache(),
    )
    .await
    .unwrap();
    let reports = replayer.replay_paths(&[journals("order")]).await.unwrap();
    for report in &reports {
        let Verdict::Diverged(d) = &report.verdict else {
            panic!("expected a divergence: {}", report.render())
        };
        assert_eq!(d.position, 0);
        assert_eq!(d.recorded.step_name.as_deref(), Some("reserve_inventory"));
        assert_eq!(d.requested.step_name.as_deref(), Some("charge_user"));
        assert_eq!(d.recorded.input_digest.as_ref().map(String::len), Some(16));
        assert!(
            d.journal_context
                .iter()
                .any(|(c, v)| *c == 1 && v.step_name.as_deref() == Some("charge_user"))
        );
        let text = report.render();
        assert!(
            text.contains("- journal: step `reserve_inventory`"),
            "{text}"
        );
        assert!(text.contains("+ code:    step `charge_user`"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn patched_is_true_for_new_runs_journaled_and_false_for_old_history() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let keel = order_keel(&store, &api).await;
    let v2 = keel.load(keel_tests::ORDER_V2_COMPATIBLE).await.unwrap();
    let run = keel
        .run(&v2, "process_order", &order_input(&api, "o-9"))
        .await
        .unwrap();
    let journal = keel.journal(&run.run_id).await.unwrap();
    let kinds: Vec<_> = journal
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::StepScheduled { name, .. } => Some(name.clone()),
            Fact::PatchMarker { change_id, .. } => Some(format!("patch:{change_id}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "reserve_inventory",
            "charge_user",
            "patch:send-receipt",
            "send_receipt"
        ]
    );
    assert!(keel.replay(&run.run_id, None).await.unwrap().is_ok());

    // v1 ends where this newer journal goes on.
    let v1 = keel.load(keel_tests::ORDER).await.unwrap();
    match keel.replay(&run.run_id, Some(&v1)).await.unwrap() {
        Verdict::EndedEarly {
            issued,
            recorded,
            next,
            ..
        } => {
            assert_eq!((issued, recorded), (2, 4));
            assert_eq!(next[0].1.kind, "patch_marker");
        }
        other => panic!("expected EndedEarly, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_steps_replay_in_their_recorded_delivery_order() {
    let path = journals("testbed").join("concurrent.json");
    let replayer = Replayer::new(keel_tests::TESTBED, keel_tests::compiled_cache())
        .await
        .unwrap();
    let report = replayer.replay_file(&path).await.unwrap();
    let Verdict::Ok {
        output: Some(output),
    } = &report.verdict
    else {
        panic!("{}", report.render())
    };
    let labels = |out: &str| -> Vec<String> {
        json(out)
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["label"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(labels(output), ["s1", "s2", "s0"]);

    // Swap the first two completions: replay follows the journal, not timing.
    let mut file = JournalFile::parse(&std::fs::read(&path).unwrap()).unwrap();
    let completions: Vec<usize> = (0..file.entries.len())
        .filter(|&i| matches!(file.entries[i].fact, Fact::StepCompleted { .. }))
        .collect();
    let (a, b) = (completions[0], completions[1]);
    let tmp = file.entries[a].fact.clone();
    file.entries[a].fact = file.entries[b].fact.clone();
    file.entries[b].fact = tmp;
    let dir = tempfile::tempdir().unwrap();
    let swapped = dir.path().join("swapped.journal");
    std::fs::write(&swapped, file.to_bytes()).unwrap();
    match replayer.replay_file(&swapped).await.unwrap().verdict {
        Verdict::OutputDiffers { replayed, .. } => {
            assert_eq!(labels(&replayed), ["s2", "s1", "s0"])
        }
        other => panic!("expected OutputDiffers, got {other:?}"),
    }
}

#[test]
fn other_versions_truncation_and_garbage_are_clear_errors() {
    let path = journals("order").join("order-1.journal");
    let bytes = std::fs::read(&path).unwrap();
    assert!(JournalFile::parse(&bytes).is_ok());

    let mut other = bytes.clone();
    other[8] = 99;
    let err = JournalFile::parse(&other).unwrap_err().to_string();
    assert!(
        err.contains("format version 99") && err.contains("reads versions 1 to 2"),
        "{err}"
    );

    let err = JournalFile::parse(&bytes[..bytes.len() / 2])
        .unwrap_err()
        .to_string();
    assert!(err.contains("truncated or corrupted"), "{err}");
    let err = JournalFile::parse(&bytes[..9]).unwrap_err().to_string();
    assert!(err.contains("truncated"), "{err}");

    let err = JournalFile::parse(b"\x00\x01garbage")
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a keel journal file"), "{err}");

    let json_path = journals("testbed").join("concurrent.json");
    let text = std::fs::read_to_string(&json_path).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["header"]["format_version"] = 7.into();
    let err = JournalFile::parse(value.to_string().as_bytes())
        .unwrap_err()
        .to_string();
    assert!(err.contains("format version 7"), "{err}");
}
