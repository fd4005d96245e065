//! The conformance suite on the sled store and on PostgreSQL, and proof
//! that the suite fails a store that breaks its rules.
//!
//! The PostgreSQL cases need a database: `KEEL_TEST_POSTGRES` holds its
//! URL (`scripts/test.sh` starts one and sets it). Without it they fail,
//! never skip.

use std::sync::Arc;

use async_trait::async_trait;
use keel_store::conformance::{self, Harness};
use keel_store::faulty::FaultyStore;
use keel_store::sled::SledStore;
use keel_store::{HookStore, RunStore, Store, WakeStore};

/// Sled stores in temporary directories, kept until the harness drops.
#[derive(Default)]
struct SledHarness {
    dirs: std::sync::Mutex<Vec<tempfile::TempDir>>,
}

impl SledHarness {
    fn open(&self) -> SledStore {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SledStore::open(dir.path()).expect("opening a sled store");
        self.dirs.lock().unwrap().push(dir);
        store
    }
}

#[async_trait]
impl Harness for SledHarness {
    async fn fresh(&self) -> Arc<dyn Store> {
        Arc::new(self.open())
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        let path = store.location();
        drop(store);
        Arc::new(SledStore::reopen(path).expect("reopening the sled store"))
    }
}

keel_store::conformance_tests!(SledHarness::default());

/// Sled stores that lose their start hooks.
#[derive(Default)]
struct BrokenHarness(SledHarness);

#[async_trait]
impl Harness for BrokenHarness {
    async fn fresh(&self) -> Arc<dyn Store> {
        let store = FaultyStore::new(self.0.open());
        store.lose_start_hooks();
        Arc::new(store)
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        self.0.reopen(store).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_suite_fails_a_store_that_loses_start_hooks() {
    let outcomes = conformance::run_all(&BrokenHarness::default()).await;
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|(_, o)| o.is_err())
        .map(|(name, _)| *name)
        .collect();
    for expected in [
        "a_start_token_admits_one_of_many_racers",
        "a_refused_admission_writes_nothing",
        "payloads_are_delivered_in_order",
    ] {
        assert!(
            failed.contains(&expected),
            "{expected} passed on a broken store; failed: {failed:?}"
        );
    }
    // The cases that do not involve start hooks still pass.
    assert!(!failed.contains(&"journals_read_back_in_order_and_children_stay_apart"));
}

/// PostgreSQL stores, each in a schema of its own in the test database.
mod postgres {
    use super::*;
    use keel_store::postgres::{PgOptions, PgStore};

    /// The test database's URL, from `KEEL_TEST_POSTGRES`.
    pub fn url() -> String {
        std::env::var("KEEL_TEST_POSTGRES").unwrap_or_else(|_| {
            panic!(
                "KEEL_TEST_POSTGRES is not set: the PostgreSQL tests need a database. \
                 Run scripts/test.sh, which starts PostgreSQL and sets it, or set it to a \
                 database you own, e.g. postgresql:///keel_test?host=/var/run/postgresql"
            )
        })
    }

    #[derive(Default)]
    pub struct PgHarness;

    impl PgHarness {
        fn options(schema: &str) -> PgOptions {
            let mut options = PgOptions::new(url());
            options.schema = schema.into();
            options.pool_size = 8;
            options
        }
    }

    #[async_trait]
    impl Harness for PgHarness {
        async fn fresh(&self) -> Arc<dyn Store> {
            let schema = format!("keel_test_{}", uuid_like());
            Arc::new(
                PgStore::open(Self::options(&schema))
                    .await
                    .expect("opening a PostgreSQL store"),
            )
        }

        async fn reopen(&self, store: Arc<dyn Store>) -> Arc<dyn Store> {
            let location = store.location();
            let schema = location
                .rsplit_once("(schema ")
                .and_then(|(_, s)| s.strip_suffix(')'))
                .expect("the location names the schema")
                .to_string();
            drop(store);
            Arc::new(
                PgStore::open(Self::options(&schema))
                    .await
                    .expect("reopening the PostgreSQL store"),
            )
        }
    }

    fn uuid_like() -> String {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!(
            "{}_{nanos}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
    }

    keel_store::conformance_tests!(PgHarness);

    #[tokio::test(flavor = "multi_thread")]
    async fn a_database_that_is_not_there_is_named_with_the_servers_words() {
        // The test server, another database on it.
        let url = match url().split_once('?') {
            Some((base, query)) => format!("{}_absent?{query}", base),
            None => format!("{}_absent", url()),
        };
        let err = PgStore::open(keel_store::postgres::PgOptions::new(&url))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
        assert!(!err.contains("creating a new object"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_newer_schema_is_refused() {
        let schema = format!("keel_test_{}", uuid_like());
        let store = PgStore::open(PgHarness::options(&schema)).await.unwrap();
        drop(store);
        let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .execute(
                &format!("UPDATE {schema}.meta SET value = 99 WHERE key = 'schema_version'"),
                &[],
            )
            .await
            .unwrap();
        let err = PgStore::open(PgHarness::options(&schema))
            .await
            .err()
            .unwrap();
        assert!(
            matches!(err, keel_store::StoreError::SchemaTooNew { found: 99, .. }),
            "{err}"
        );
    }

    /// The TCP URL with `sslmode=require` and the CA of the test server's
    /// certificate, from `KEEL_TEST_POSTGRES_TLS` and `KEEL_TEST_POSTGRES_CA`.
    fn tls_options(schema: &str) -> PgOptions {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: run scripts/test.sh, which serves TLS and sets it")
            })
        };
        let mut options = PgOptions::new(var("KEEL_TEST_POSTGRES_TLS"));
        options.schema = schema.into();
        options.pool_size = 2;
        options.ca_cert = Some(var("KEEL_TEST_POSTGRES_CA").into());
        options
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn connections_over_tls_verify_the_server() {
        let schema = format!("keel_test_{}", uuid_like());
        let store = PgStore::open(tls_options(&schema))
            .await
            .expect("opening over TLS");
        assert!(store.list_runs().await.unwrap().is_empty());
        // The store's connections (its listener at least) are encrypted.
        let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let encrypted: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
                 WHERE s.ssl AND a.client_addr IS NOT NULL",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(encrypted >= 1, "no TLS connection to the server");

        let mut untrusted = tls_options(&schema);
        untrusted.ca_cert = None;
        let err = PgStore::open(untrusted).await.err().expect("refused");
        assert_eq!(err.kind().as_str(), "store_unavailable", "{err}");
        assert!(
            err.to_string().to_lowercase().contains("certificate"),
            "{err}"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_older_schema_is_migrated_at_open() {
        use keel_store::{DeploymentStore, FlowStore, RunStore, ScheduleStore, WorkerStore};
        let schema = format!("keel_test_{}", uuid_like());
        let store = PgStore::open(PgHarness::options(&schema)).await.unwrap();
        // Runs whose IDs sort against their admission times.
        for (id, at) in [("zz-older", 5), ("aa-newer", 9)] {
            let run = keel_core::testing::run_record(id, keel_core::RunStatus::Completed, at);
            store.import(&run, &[]).await.unwrap();
        }
        // Live runs waiting on a timer, and on a hook with a wakeup.
        for (id, wake_at) in [("timer", Some(40)), ("woken", None)] {
            let mut run = keel_core::testing::run_record(id, keel_core::RunStatus::Waiting, 1);
            run.wake_at_ms = wake_at;
            store.import(&run, &[]).await.unwrap();
        }
        drop(store);
        let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        // As version 1 left it: no workers, deployments, schedules, jobs,
        // streams, secrets, webhooks or flow-control tables, no payload IDs, components without their storing time, runs without their admission time or
        // attributes, no retention indexes.
        client
            .batch_execute(&format!(
                "DROP TABLE {schema}.workers; DROP TABLE {schema}.deployments;
                 DROP TABLE {schema}.schedules; DROP TABLE {schema}.flow_groups;
                 DROP TABLE {schema}.flow_slots; DROP TABLE {schema}.flow_limits;
                 DROP SEQUENCE {schema}.flow_seq; DROP TABLE {schema}.rate_windows;
                 DROP TABLE {schema}.step_permits; DROP TABLE {schema}.flow_failed;
                 DROP TABLE {schema}.cancel_requests; DROP TABLE {schema}.jobs;
                 DROP TABLE {schema}.streams; DROP TABLE {schema}.chunks;
                 DROP TABLE {schema}.secrets; DROP TABLE {schema}.webhooks;
                 DROP TABLE {schema}.webhook_signatures;
                 ALTER TABLE {schema}.inbox DROP COLUMN payload_id;
                 ALTER TABLE {schema}.hooks DROP COLUMN payload_schema;
                 DROP INDEX {schema}.watchers_watcher;
                 ALTER TABLE {schema}.components DROP COLUMN stored_at_ms;
                 ALTER TABLE {schema}.runs DROP COLUMN created_at_ms;
                 ALTER TABLE {schema}.runs DROP COLUMN attributes;
                 DROP TABLE {schema}.run_counts;
                 DROP FUNCTION {schema}.count_runs() CASCADE;
                 ALTER TABLE {schema}.runs ADD COLUMN lease_owner text NOT NULL DEFAULT '',
                     ADD COLUMN lease_epoch bigint NOT NULL DEFAULT 0,
                     ADD COLUMN lease_expires_ms bigint NOT NULL DEFAULT 0;
                 DROP TABLE {schema}.run_due;
                 ALTER TABLE {schema}.runs DROP COLUMN status, DROP COLUMN workflow;
                 DROP INDEX {schema}.keys_expiry;
                 DROP INDEX {schema}.hooks_retired;
                 DROP TABLE {schema}.remembered_payloads;
                 DROP TABLE {schema}.pauses;
                 CREATE TABLE {schema}.wakeups (run_id text PRIMARY KEY);
                 INSERT INTO {schema}.wakeups VALUES ('woken');
                 UPDATE {schema}.meta SET value = 1 WHERE key = 'schema_version'"
            ))
            .await
            .unwrap();
        // A record as keel wrote it before run records named their parent.
        let older = keel_core::testing::run_record("zz-older", keel_core::RunStatus::Completed, 5);
        client
            .execute(
                &format!("UPDATE {schema}.runs SET record = $1 WHERE run_id = 'zz-older'"),
                &[&keel_core::testing::run_record_layout_1(&older)],
            )
            .await
            .unwrap();
        let from = PgStore::migrate(&PgHarness::options(&schema))
            .await
            .unwrap();
        assert_eq!(from, 1);
        let store = PgStore::open(PgHarness::options(&schema)).await.unwrap();
        assert!(store.list_workers(0).await.unwrap().is_empty());
        assert!(
            keel_store::StreamStore::streams(&store, "zz-older")
                .await
                .unwrap()
                .is_empty()
        );
        assert!(store.deployments().await.unwrap().is_empty());
        assert!(store.list_schedules().await.unwrap().is_empty());
        assert!(
            keel_store::IntegrationStore::list_webhooks(&store)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(store.limit_rows().await.unwrap().is_empty());
        assert!(
            keel_store::JobStore::jobs(&store, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            keel_store::ComponentStore::components(&store)
                .await
                .unwrap()
                .is_empty()
        );
        let permit = keel_store::RateStore::take_permit(&store, "k", "r/1", 1, 1000, 0)
            .await
            .unwrap();
        assert!(matches!(permit, keel_store::Grant::Granted { .. }));
        let listed: Vec<String> = store
            .runs_before(None, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.run_id.into_string())
            .collect();
        assert_eq!(
            listed,
            ["aa-newer", "zz-older", "woken", "timer"],
            "filled from the records"
        );
        let read = store.get_run("zz-older").await.unwrap();
        assert_eq!(read, older, "read through its layout, without a parent");
        // The due index and the counts, from the live runs and the wakeups.
        use keel_store::LeaseStore;
        let counts = store.live_counts().await.unwrap();
        assert_eq!(
            counts.of("w", keel_core::RunStatus::Waiting),
            2,
            "{counts:?}"
        );
        let due = store.claim_due("w", 1_000, 0, 10).await.unwrap();
        let due: Vec<&str> = due.iter().map(|l| l.run_id.as_str()).collect();
        assert_eq!(due, ["woken"], "the woken run is due at once");
        assert_eq!(store.next_due().await.unwrap(), Some(40), "then the timer");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_wake_reaches_another_process_s_store() {
        let schema = format!("keel_test_{}", uuid_like());
        let a = PgStore::open(PgHarness::options(&schema)).await.unwrap();
        let b = PgStore::open(PgHarness::options(&schema)).await.unwrap();
        let mut wakes = b.wake_stream().expect("PostgreSQL announces wakes");
        // The listener may still be connecting: announce until one arrives.
        let record = keel_core::testing::run_record("w", keel_core::RunStatus::Pending, 0);
        let hook = keel_core::HookRecord {
            token: "t".into(),
            run_id: "w".into(),
            command: None,
            metadata: None,
            created_at_ms: 0,
            retain_until_ms: None,
            active: true,
            next_payload: 0,
            payload_schema: None,
        };
        a.admit(keel_store::Admission {
            run: &record,
            key: None,
            start_hook: Some(&hook),
            journal: &[],
            flow: None,
            now_ms: 0,
            lease: None,
            handover: None,
        })
        .await
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            a.resume_hook("t", "1").await.unwrap();
            let got = tokio::time::timeout(std::time::Duration::from_millis(200), async {
                loop {
                    if let Ok(keel_store::Wake::Run(run)) = wakes.recv().await {
                        return run;
                    }
                }
            })
            .await;
            if let Ok(run) = got {
                assert_eq!(run, "w");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no wake arrived");
        }
    }
}
