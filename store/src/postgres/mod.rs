//! The PostgreSQL store: one database that any number of processes on any
//! number of machines share.
//!
//! Every operation of the [`Store`] trait is one transaction. Token and key
//! ownership is decided under row locks (`SELECT ... FOR UPDATE`, or a
//! conditional `UPDATE`); two transactions that both find a token free race
//! on its primary key, and the loser is retried, then sees the winner and is
//! refused naming it. Payload order is the order of the row lock on the
//! hook. Leases live on the run's row: taking one increments its epoch, and
//! every fenced write locks the row and checks owner and epoch in the same
//! transaction. Wakes cross processes as `NOTIFY` on the channel
//! `keel_<schema>`, committed with the change they announce; a dedicated
//! connection `LISTEN`s and reconnects with backoff. A failed commit is
//! reported [`StoreError::Unconfirmed`].

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Transaction};
use keel_core::codec;
use keel_core::journal;
use keel_core::{
    Capabilities, Deployment, Entry, EventRecord, HookRecord, HookRegistration, KeyHold,
    Registration, RunCursor, RunId, RunRecord,
};
use tokio::sync::broadcast;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, NoTls, Row};

use crate::{
    Admission, Admitted, CancelStore, ComponentStore, DeploymentStore, EventStore, HookPayload,
    HookStore, JournalStore, KeyStore, Lease, LeaseStore, PauseStore, Registered, Result, RunStore,
    ScheduleStore, Store, StoreError, Wake, WakeStore, WorkerRecord, WorkerStore,
};

#[macro_use]
mod tx;
mod catalog;
mod flow;
mod hooks;
mod integrations;
mod jobs;
mod retention;
mod runs;
mod schedules;
mod schema;
mod streams;
mod tls;
mod wakes;

use hooks::*;
use tx::*;
use wakes::*;

pub use schema::SCHEMA_VERSION;

/// How to reach and use a PostgreSQL store.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// A libpq URL: `postgres://user@host/db` or
    /// `postgresql:///db?host=/var/run/postgresql`.
    pub url: String,
    /// The schema keel's tables live in, so that several deployments can
    /// share a database (`[a-z_][a-z0-9_]*`).
    pub schema: String,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Any statement running longer is cancelled by the server.
    pub statement_timeout: Duration,
    /// With `sslmode=require` in the URL, connections use TLS and the
    /// server's certificate must chain to the system's roots or to the
    /// certificates in this PEM file.
    pub ca_cert: Option<std::path::PathBuf>,
}

impl PgOptions {
    /// Defaults for the database at `url`: schema `keel`, 16 connections,
    /// a 30 s statement timeout.
    pub fn new(url: impl Into<String>) -> Self {
        PgOptions {
            url: url.into(),
            schema: "keel".into(),
            pool_size: 16,
            statement_timeout: Duration::from_secs(30),
            ca_cert: None,
        }
    }
}

/// The PostgreSQL store. Clones share the pool and the listener.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    schema: String,
    /// The URL without its password, for messages.
    location: String,
    wakes: broadcast::Sender<Wake>,
    listener: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Statements through the connection's prepared-statement cache: one round
/// trip each instead of two (prepare, then execute).
trait Cached {
    async fn run(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<u64>;
    async fn rows(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Vec<Row>>;
    async fn row(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Option<Row>>;
}

type PgResult<T> = std::result::Result<T, tokio_postgres::Error>;

macro_rules! cached {
    ($t:ty) => {
        impl Cached for $t {
            async fn run(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<u64> {
                let statement = self.prepare_cached(sql).await?;
                self.execute(&statement, params).await
            }
            async fn rows(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Vec<Row>> {
                let statement = self.prepare_cached(sql).await?;
                self.query(&statement, params).await
            }
            async fn row(
                &self,
                sql: &str,
                params: &[&(dyn ToSql + Sync)],
            ) -> PgResult<Option<Row>> {
                let statement = self.prepare_cached(sql).await?;
                self.query_opt(&statement, params).await
            }
        }
    };
}

cached!(Object);
cached!(Transaction<'_>);

pub(crate) fn pg(e: tokio_postgres::Error) -> StoreError {
    // The database server's disk is full: the statement was refused.
    if e.code() == Some(&tokio_postgres::error::SqlState::DISK_FULL) {
        return StoreError::StorageFull {
            reason: describe(&e),
        };
    }
    // A deadlock or a serialization failure aborted the transaction
    // before its commit: `transact!` tries it again.
    if matches!(
        e.code(),
        Some(c) if *c == tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED
            || *c == tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
    ) {
        return StoreError::Race {
            reason: describe(&e),
        };
    }
    StoreError::Backend {
        reason: describe(&e),
    }
}

/// An error in words, with its causes (a TLS handshake's reason, say).
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl PgStore {
    /// Connects, applies the migrations the schema lacks (refusing a newer
    /// schema) and starts listening for wakes. TLS is used when the URL asks
    /// for it (`sslmode=require`), never silently skipped then.
    pub async fn open(options: PgOptions) -> Result<PgStore> {
        match tls::connector(&options)? {
            Some(tls) => Self::open_with(options, tls).await,
            None => Self::open_with(options, NoTls).await,
        }
    }

    async fn open_with<T>(options: PgOptions, tls: T) -> Result<PgStore>
    where
        T: tls::Connector,
        T::Stream: Send + Sync,
        T::TlsConnect: Send + Sync,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
    {
        let location = redact(&options.url);
        let unavailable = |reason: String| StoreError::Unavailable {
            location: location.clone(),
            reason,
        };
        let schema = options.schema.clone();
        let valid = schema
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(unavailable(format!(
                "`{schema}` is not a schema name keel uses (lower-case letters, digits, _)"
            )));
        }
        let mut config = tokio_postgres::Config::from_str(&options.url)
            .map_err(|e| unavailable(format!("the URL does not parse: {e}")))?;
        config.options(format!(
            "-c search_path={schema} -c statement_timeout={}",
            options.statement_timeout.as_millis()
        ));
        config.connect_timeout(Duration::from_secs(10));
        let (mut client, connection) = config
            .connect(tls.clone())
            .await
            .map_err(|e| unavailable(describe(&e)))?;
        let driver = tokio::spawn(connection);
        let migrated = schema::migrate(&mut client, &schema, &location).await;
        drop(client);
        let _ = driver.await;
        migrated?;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .build()
            .map_err(|e| unavailable(e.to_string()))?;
        let (wakes, _) = broadcast::channel(1024);
        let listener = tokio::spawn(listen(config, tls, channel(&schema), wakes.clone()));
        Ok(PgStore {
            inner: Arc::new(Inner {
                pool,
                schema,
                location,
                wakes,
                listener,
            }),
        })
    }

    /// Applies the migrations the schema lacks and returns the version it
    /// had, without keeping a store open.
    pub async fn migrate(options: &PgOptions) -> Result<i64> {
        match tls::connector(options)? {
            Some(tls) => Self::migrate_with(options, tls).await,
            None => Self::migrate_with(options, NoTls).await,
        }
    }

    async fn migrate_with<T>(options: &PgOptions, tls: T) -> Result<i64>
    where
        T: tls::Connector,
        T::Stream: Send + Sync,
        T::TlsConnect: Send + Sync,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
    {
        let location = redact(&options.url);
        let config = tokio_postgres::Config::from_str(&options.url).map_err(|e| {
            StoreError::Unavailable {
                location: location.clone(),
                reason: format!("the URL does not parse: {e}"),
            }
        })?;
        let (mut client, connection) =
            config
                .connect(tls)
                .await
                .map_err(|e| StoreError::Unavailable {
                    location: location.clone(),
                    reason: describe(&e),
                })?;
        let driver = tokio::spawn(connection);
        let found = schema::migrate(&mut client, &options.schema, &location).await;
        drop(client);
        let _ = driver.await;
        found
    }

    /// `VACUUM FULL` of keel's tables: gives the space of deleted rows
    /// back to the operating system (it locks each table while it
    /// rewrites it). Plain `VACUUM`, which autovacuum runs, only makes it
    /// reusable.
    pub async fn vacuum_full(&self) -> Result<()> {
        self.vacuum("VACUUM FULL").await
    }

    /// Runs `VACUUM (ANALYZE)` on each of the store's tables, as
    /// autovacuum would in time: for a benchmark that measures a steady
    /// state after writing many rows at once.
    pub async fn vacuum_analyze(&self) -> Result<()> {
        self.vacuum("VACUUM (ANALYZE)").await
    }

    /// Runs a checkpoint and waits for it (`CHECKPOINT`, which needs a
    /// superuser or the `pg_checkpoint` role): every page changed so far is
    /// written out now, so that a benchmark measuring a steady state after
    /// writing many rows at once does not measure the disk busy with them.
    pub async fn checkpoint(&self) -> Result<()> {
        self.client()
            .await?
            .batch_execute("CHECKPOINT")
            .await
            .map_err(pg)
    }

    async fn vacuum(&self, command: &str) -> Result<()> {
        let client = self.client().await?;
        let tables = client
            .query(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 AND c.relkind = 'r'",
                &[&self.inner.schema],
            )
            .await
            .map_err(pg)?;
        for table in tables {
            let name: String = table.get(0);
            client
                .batch_execute(&format!("{command} {}.{name}", self.inner.schema))
                .await
                .map_err(pg)?;
        }
        Ok(())
    }

    /// Drops the store's schema and everything in it: for tests.
    #[doc(hidden)]
    pub async fn drop_schema(&self) -> Result<()> {
        let client = self.client().await?;
        client
            .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.inner.schema))
            .await
            .map_err(pg)
    }

    async fn client(&self) -> Result<Object> {
        self.inner
            .pool
            .get()
            .await
            .map_err(|e| StoreError::Backend {
                reason: format!("no database connection: {}", pool_error(&e)),
            })
    }

    /// Announces `wake` to every process on commit of `tx`.
    async fn notify(&self, tx: &Transaction<'_>, wake: &Wake) -> Result<()> {
        tx.run(
            "SELECT pg_notify($1, $2)",
            &[&channel(&self.inner.schema), &payload_of(wake)],
        )
        .await
        .map_err(pg)?;
        Ok(())
    }
}

/// A pool's failure in words: a connection's own error with its causes
/// (the server's message, a refused connection), not deadpool's summary
/// ("Error occurred while creating a new object: db error").
fn pool_error(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => describe(e),
        other => other.to_string(),
    }
}

/// The URL without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

impl PgStore {
    /// Runs `sql` on a pooled connection; the rows it changed.
    async fn exec(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        self.client().await?.run(sql, params).await.map_err(pg)
    }

    /// The rows `sql` selects, on a pooled connection.
    async fn select(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        self.client().await?.rows(sql, params).await.map_err(pg)
    }

    /// The row `sql` selects, if any, on a pooled connection.
    async fn select_one(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>> {
        self.client().await?.row(sql, params).await.map_err(pg)
    }

    /// The records `sql` selects (one encoded column), decoded as `what`.
    async fn records<T: codec::Stored>(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        what: &str,
    ) -> Result<Vec<T>> {
        self.select(sql, params)
            .await?
            .iter()
            .map(|r| Ok(codec::decode(r.get(0), what)?))
            .collect()
    }
}

impl Store for PgStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    fn location(&self) -> String {
        format!("{} (schema {})", self.inner.location, self.inner.schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_round_trip_through_payloads() {
        for wake in [
            Wake::Admitted,
            Wake::Run("r-1".into()),
            Wake::Cancel("r-2".into()),
        ] {
            assert_eq!(wake_of(&payload_of(&wake)), wake);
        }
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("postgres://keel:s3cret@db:5432/keel"),
            "postgres://keel:***@db:5432/keel"
        );
        assert_eq!(
            redact("postgresql:///keel?host=/run"),
            "postgresql:///keel?host=/run"
        );
    }

    /// Locks row `first` then row `second` of `pair` in one transaction,
    /// meeting the other locker at `meet` between the two on its first try
    /// only; the tries it took.
    async fn lock_both(
        store: &PgStore,
        (first, second): (i32, i32),
        meet: &tokio::sync::Barrier,
        tries: &std::sync::atomic::AtomicUsize,
    ) -> Result<usize> {
        use std::sync::atomic::Ordering;
        transact!(store, |tx| {
            let try_number = tries.fetch_add(1, Ordering::SeqCst);
            let lock = "SELECT k FROM pair WHERE k = $1 FOR UPDATE";
            tx.row(lock, &[&first]).await.map_err(pg)?;
            if try_number == 0 {
                meet.wait().await;
            }
            tx.row(lock, &[&second]).await.map_err(pg)?;
            Ok(Attempt::Done(try_number + 1))
        })
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_transaction_a_deadlock_aborts_before_its_commit_is_tried_again() {
        let url = std::env::var("KEEL_TEST_POSTGRES")
            .expect("KEEL_TEST_POSTGRES is not set: run scripts/test.sh, which starts PostgreSQL");
        let mut options = PgOptions::new(url);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        options.schema = format!("keel_deadlock_{}_{nanos}", std::process::id());
        options.pool_size = 4;
        let store = PgStore::open(options).await.unwrap();
        let client = store.client().await.unwrap();
        client
            .batch_execute(
                "CREATE TABLE pair (k int PRIMARY KEY); INSERT INTO pair VALUES (1), (2)",
            )
            .await
            .unwrap();
        drop(client);
        // Each holds one row and asks for the other's: PostgreSQL aborts
        // one of them with a deadlock at its second statement. Its second
        // try may lock its first row again before the survivor, woken, takes
        // it (PostgreSQL does not queue row locks in order), and deadlock
        // with it once more: then both are tried twice.
        let meet = tokio::sync::Barrier::new(2);
        let (a_tries, b_tries) = Default::default();
        let (a, b) = tokio::join!(
            lock_both(&store, (1, 2), &meet, &a_tries),
            lock_both(&store, (2, 1), &meet, &b_tries),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let tries = [a, b];
        assert!(
            tries.iter().any(|&t| t >= 2),
            "each deadlock's loser was tried again, and both completed: {tries:?}"
        );
    }

    #[tokio::test]
    async fn a_full_database_disk_is_storage_full() {
        let url = std::env::var("KEEL_TEST_POSTGRES")
            .expect("KEEL_TEST_POSTGRES is not set: run scripts/test.sh, which starts PostgreSQL");
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let e = client
            .batch_execute(
                "DO $$ BEGIN RAISE EXCEPTION 'could not extend file' USING ERRCODE = 'disk_full'; END $$",
            )
            .await
            .unwrap_err();
        let error = pg(e);
        assert_eq!(error.kind().as_str(), "storage_full", "{error}");
        assert!(
            error.to_string().contains("could not extend file"),
            "{error}"
        );
    }
}
