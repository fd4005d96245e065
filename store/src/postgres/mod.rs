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
    Admission, ComponentStore, DeploymentStore, EventStore, HookPayload, HookStore, JournalStore,
    KeyStore, Lease, LeaseStore, Registered, Result, RunStore, Store, StoreError, Wake, WakeStore,
    WorkerRecord, WorkerStore,
};

mod schema;
mod tls;

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

/// An attempt at a transaction: done, refused, or to be retried because it
/// lost a race (a unique key, a serialization failure, a deadlock).
enum Attempt<T> {
    Done(T),
    Retry,
}

/// Runs `$body` (an async block's body, with `$tx` the transaction) and
/// commits, again while it loses races; evaluates to the store result. A
/// failed commit is [`StoreError::Unconfirmed`].
macro_rules! transact {
    ($store:expr, |$tx:ident| $body:block) => {{
        let mut client = $store.client().await?;
        let mut outcome = None;
        for _ in 0..RETRIES {
            let txn = client.transaction().await.map_err(pg)?;
            let attempt: Result<Attempt<_>> = {
                let $tx = &txn;
                async { $body }.await
            };
            match attempt? {
                Attempt::Retry => {
                    let _ = txn.rollback().await;
                }
                Attempt::Done(value) => match txn.commit().await {
                    Ok(()) => {
                        outcome = Some(Ok(value));
                        break;
                    }
                    Err(e) if is_race(&e) => {}
                    Err(e) => {
                        outcome = Some(Err(StoreError::Unconfirmed {
                            reason: describe(&e),
                        }));
                        break;
                    }
                },
            }
        }
        outcome.unwrap_or_else(|| {
            Err(StoreError::Backend {
                reason: format!("the transaction lost {RETRIES} races in a row"),
            })
        })
    }};
}

/// How many times a transaction that lost a race is tried again.
const RETRIES: usize = 50;

pub(crate) fn pg(e: tokio_postgres::Error) -> StoreError {
    // The database server's disk is full: the statement was refused.
    if e.code() == Some(&tokio_postgres::error::SqlState::DISK_FULL) {
        return StoreError::StorageFull {
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

/// The error lost a race that a retry resolves.
fn is_race(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::UNIQUE_VIOLATION
            || *c == SqlState::T_R_SERIALIZATION_FAILURE
            || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// `Retry` if `e` lost a race, the error otherwise.
fn race<T>(e: tokio_postgres::Error) -> Result<Attempt<T>> {
    if is_race(&e) {
        Ok(Attempt::Retry)
    } else {
        Err(pg(e))
    }
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
                reason: format!("no database connection: {e}"),
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

/// A wake as a notification's payload: empty for an admission, the run ID
/// for a run moved on, `cancel:` and the run ID for a cancel request.
fn payload_of(wake: &Wake) -> String {
    match wake {
        Wake::Admitted => String::new(),
        Wake::Run(run_id) => run_id.to_string(),
        Wake::Cancel(run_id) => format!("cancel:{run_id}"),
        Wake::Deployed => DEPLOYED.into(),
    }
}

/// The payload of [`Wake::Deployed`] (no run ID starts with a colon).
const DEPLOYED: &str = ":deployed";

fn wake_of(payload: &str) -> Wake {
    match payload {
        "" => Wake::Admitted,
        DEPLOYED => Wake::Deployed,
        p => match p.strip_prefix("cancel:") {
            Some(run_id) => Wake::Cancel(run_id.into()),
            None => Wake::Run(p.into()),
        },
    }
}

fn channel(schema: &str) -> String {
    format!("keel_{schema}")
}

/// Listens for wakes on a connection of its own, reconnecting with backoff
/// (wakes missed meanwhile are made up for by a general wake and by the
/// engine's polling).
async fn listen<T>(
    config: tokio_postgres::Config,
    tls: T,
    channel: String,
    wakes: broadcast::Sender<Wake>,
) where
    T: tls::Connector,
    T::Stream: Send + Sync,
    T::TlsConnect: Send + Sync,
    <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
{
    let mut backoff = Duration::from_millis(100);
    loop {
        match config.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                backoff = Duration::from_millis(100);
                let listening = async {
                    client
                        .batch_execute(&format!("LISTEN {channel}"))
                        .await
                        .map_err(|e| describe(&e))
                };
                let messages = async {
                    loop {
                        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                            Some(Ok(AsyncMessage::Notification(n))) => {
                                let _ = wakes.send(wake_of(n.payload()));
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => return describe(&e),
                            None => return "the connection closed".to_string(),
                        }
                    }
                };
                tokio::pin!(messages);
                let reason = tokio::select! {
                    listened = listening => match listened {
                        Ok(()) => {
                            // A wake may have been missed while connecting.
                            let _ = wakes.send(Wake::Admitted);
                            messages.await
                        }
                        Err(e) => e,
                    },
                    reason = &mut messages => reason,
                };
                tracing::warn!(
                    channel,
                    "listening for wakes stopped ({reason}); reconnecting"
                );
            }
            Err(e) => {
                tracing::warn!(
                    channel,
                    ?backoff,
                    "cannot listen for wakes: {}",
                    describe(&e)
                );
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Inserts entries; a position the journal holds is a conflict.
async fn insert_entries(tx: &Transaction<'_>, run_id: &str, entries: &[Entry]) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let seqs: Vec<i64> = entries.iter().map(|e| i(e.seq)).collect();
    let bytes: Vec<Vec<u8>> = entries.iter().map(journal::encode).collect();
    let inserted = tx
        .run(
            "INSERT INTO journal (run_id, seq, entry)
             SELECT $1, seq, entry FROM unnest($2::bigint[], $3::bytea[]) AS t(seq, entry)",
            &[&run_id, &seqs, &bytes],
        )
        .await;
    match inserted {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            Err(StoreError::JournalConflict {
                run_id: run_id.into(),
                seq: entries[0].seq,
            })
        }
        Err(e) => Err(pg(e)),
    }
}

/// Locks the run's row and refuses if `fence` is no longer its lease.
async fn check_fence(tx: &Transaction<'_>, run_id: &str, fence: Option<&Lease>) -> Result<()> {
    let Some(fence) = fence else { return Ok(()) };
    let row = tx
        .row(
            "SELECT lease_owner, lease_epoch FROM runs WHERE run_id = $1 FOR UPDATE",
            &[&run_id],
        )
        .await
        .map_err(pg)?;
    let held = row.is_some_and(|r| {
        r.get::<_, String>(0) == fence.owner && u(r.get::<_, i64>(1)) == fence.epoch
    });
    if held {
        Ok(())
    } else {
        Err(StoreError::LeaseLost {
            run_id: fence.run_id.clone(),
            epoch: fence.epoch,
        })
    }
}

fn hook_of(row: &tokio_postgres::Row) -> HookRecord {
    HookRecord {
        token: row.get::<_, String>("token").into(),
        run_id: row.get::<_, String>("run_id").into(),
        command: row.get::<_, Option<i64>>("command").map(|c| c as u32),
        metadata: row.get("metadata"),
        created_at_ms: u(row.get("created_at_ms")),
        retain_until_ms: row.get::<_, Option<i64>>("retain_until_ms").map(u),
        active: row.get("active"),
        next_payload: u(row.get("next_payload")),
    }
}

const HOOK_COLUMNS: &str =
    "token, run_id, command, metadata, created_at_ms, retain_until_ms, active, next_payload";

/// Writes `hook` as a new row (`existing` false) or over the row it
/// replaces, whose lock the caller holds.
async fn write_hook(
    tx: &Transaction<'_>,
    hook: &HookRecord,
    existing: bool,
) -> Result<Attempt<()>> {
    let sql = if existing {
        "UPDATE hooks SET run_id = $2, command = $3, metadata = $4, created_at_ms = $5,
             retain_until_ms = $6, active = $7, next_payload = $8 WHERE token = $1"
    } else {
        "INSERT INTO hooks (token, run_id, command, metadata, created_at_ms, retain_until_ms,
             active, next_payload) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
    };
    let written = tx
        .run(
            sql,
            &[
                &hook.token.as_str(),
                &hook.run_id.as_str(),
                &hook.command.map(i64::from),
                &hook.metadata,
                &i(hook.created_at_ms),
                &hook.retain_until_ms.map(i),
                &hook.active,
                &i(hook.next_payload),
            ],
        )
        .await;
    match written {
        Ok(_) => Ok(Attempt::Done(())),
        Err(e) => race(e),
    }
}

/// The hook row of `token`, locked for this transaction.
async fn lock_hook(tx: &Transaction<'_>, token: &str) -> Result<Option<HookRecord>> {
    let row = tx
        .row(
            &format!("SELECT {HOOK_COLUMNS} FROM hooks WHERE token = $1 FOR UPDATE"),
            &[&token],
        )
        .await
        .map_err(pg)?;
    Ok(row.as_ref().map(hook_of))
}

#[async_trait]
impl RunStore for PgStore {
    async fn admit(&self, a: Admission<'_>) -> Result<()> {
        let run = a.run;
        let record = codec::encode(run);
        transact!(self, |tx| {
            let mut hook_row = false;
            if let Some(hook) = a.start_hook
                && let Some(held) = lock_hook(tx, &hook.token).await?
            {
                if let Some(owner) = held.holder(a.now_ms) {
                    return Err(StoreError::HookConflict {
                        token: hook.token.clone(),
                        conflicting_run_id: owner.clone(),
                    });
                }
                hook_row = true;
            }
            if let Some(claim) = a.key {
                let held = tx
                    .row(
                        "SELECT run_id, expires_at_ms FROM keys
                         WHERE workflow = $1 AND key = $2 FOR UPDATE",
                        &[&run.workflow, &claim.key],
                    )
                    .await
                    .map_err(pg)?;
                let expires = i(a.now_ms.saturating_add(claim.ttl_ms));
                let sql = match &held {
                    Some(row) if u(row.get(1)) > a.now_ms => {
                        return Err(StoreError::IdempotencyCollision {
                            workflow: run.workflow.clone(),
                            key: claim.key.into(),
                            existing_run_id: row.get::<_, String>(0).into(),
                        });
                    }
                    Some(_) => {
                        "UPDATE keys SET run_id = $3, expires_at_ms = $4
                         WHERE workflow = $1 AND key = $2"
                    }
                    None => {
                        "INSERT INTO keys (workflow, key, run_id, expires_at_ms)
                         VALUES ($1, $2, $3, $4)"
                    }
                };
                if let Err(e) = tx
                    .run(
                        sql,
                        &[&run.workflow, &claim.key, &run.run_id.as_str(), &expires],
                    )
                    .await
                {
                    return race(e);
                }
            }
            match tx
                .run(
                    "INSERT INTO runs (run_id, live, record, created_at_ms) VALUES ($1, true, $2, $3)
                     ON CONFLICT (run_id) DO NOTHING",
                    &[&run.run_id.as_str(), &record, &i(run.created_at_ms)],
                )
                .await
            {
                Ok(0) => {
                    return Err(StoreError::RunExists {
                        run_id: run.run_id.clone(),
                    });
                }
                Ok(_) => {}
                Err(e) => return race(e),
            }
            if let Some(hook) = a.start_hook
                && let Attempt::Retry = write_hook(tx, hook, hook_row).await?
            {
                return Ok(Attempt::Retry);
            }
            insert_entries(tx, &run.run_id, a.journal).await?;
            self.notify(tx, &Wake::Admitted).await?;
            Ok(Attempt::Done(()))
        })
    }

    async fn import(&self, run: &RunRecord, entries: &[Entry]) -> Result<()> {
        let record = codec::encode(run);
        transact!(self, |tx| {
            let inserted = tx
                .run(
                    "INSERT INTO runs (run_id, live, record, created_at_ms) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (run_id) DO NOTHING",
                    &[
                        &run.run_id.as_str(),
                        &!run.status.is_final(),
                        &record,
                        &i(run.created_at_ms),
                    ],
                )
                .await
                .map_err(pg)?;
            if inserted == 0 {
                return Err(StoreError::RunExists {
                    run_id: run.run_id.clone(),
                });
            }
            insert_entries(tx, &run.run_id, entries).await?;
            Ok(Attempt::Done(()))
        })
    }

    async fn get_run(&self, run_id: &str) -> Result<RunRecord> {
        let row = self
            .select_one("SELECT record FROM runs WHERE run_id = $1", &[&run_id])
            .await?
            .ok_or_else(|| StoreError::RunNotFound {
                run_id: run_id.into(),
            })?;
        Ok(codec::decode(row.get(0), "run record")?)
    }

    async fn list_runs(&self) -> Result<Vec<RunRecord>> {
        self.records("SELECT record FROM runs ORDER BY run_id", &[], "run record")
            .await
    }

    async fn runs_before(
        &self,
        before: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        let limit = limit as i64;
        match before {
            Some(before) => {
                self.records(
                    "SELECT record FROM runs WHERE (created_at_ms, run_id) < ($1, $2)
                     ORDER BY created_at_ms DESC, run_id DESC LIMIT $3",
                    &[&i(before.created_at_ms), &before.run_id.as_str(), &limit],
                    "run record",
                )
                .await
            }
            None => {
                self.records(
                    "SELECT record FROM runs ORDER BY created_at_ms DESC, run_id DESC LIMIT $1",
                    &[&limit],
                    "run record",
                )
                .await
            }
        }
    }

    async fn live_runs(&self) -> Result<Vec<RunRecord>> {
        self.records(
            "SELECT record FROM runs WHERE live ORDER BY run_id",
            &[],
            "run record",
        )
        .await
    }

    async fn end_run(
        &self,
        run: &RunRecord,
        entries: &[Entry],
        now_ms: u64,
        fence: Option<&Lease>,
    ) -> Result<Vec<RunId>> {
        let record = codec::encode(run);
        let run_id = run.run_id.as_str();
        transact!(self, |tx| {
            check_fence(tx, run_id, fence).await?;
            tx.run(
                "UPDATE hooks SET active = false WHERE run_id = $1 AND retain_until_ms > $2",
                &[&run_id, &i(now_ms)],
            )
            .await
            .map_err(pg)?;
            tx.run("DELETE FROM hooks WHERE run_id = $1 AND active", &[&run_id])
                .await
                .map_err(pg)?;
            tx.run(
                "UPDATE runs SET record = $2, live = false, lease_owner = '',
                     lease_expires_ms = 0 WHERE run_id = $1",
                &[&run_id, &record],
            )
            .await
            .map_err(pg)?;
            insert_entries(tx, run_id, entries).await?;
            let watchers: Vec<RunId> = tx
                .rows(
                    "DELETE FROM watchers WHERE run_id = $1 RETURNING watcher",
                    &[&run_id],
                )
                .await
                .map_err(pg)?
                .iter()
                .map(|r| r.get::<_, String>(0).into())
                .collect();
            for watcher in &watchers {
                tx.run(
                    "INSERT INTO wakeups (run_id) VALUES ($1) ON CONFLICT DO NOTHING",
                    &[&watcher.as_str()],
                )
                .await
                .map_err(pg)?;
                self.notify(tx, &Wake::Run(watcher.clone())).await?;
            }
            tx.run("DELETE FROM inbox WHERE run_id = $1", &[&run_id])
                .await
                .map_err(pg)?;
            tx.run("DELETE FROM claims WHERE run_id = $1", &[&run_id])
                .await
                .map_err(pg)?;
            Ok(Attempt::Done(watchers))
        })
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
    async fn records<T: serde::de::DeserializeOwned>(
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

#[async_trait]
impl JournalStore for PgStore {
    async fn append(
        &self,
        run_id: &str,
        entries: &[Entry],
        run: Option<&RunRecord>,
        fence: Option<&Lease>,
    ) -> Result<()> {
        let record = run.map(|r| (codec::encode(r), !r.status.is_final()));
        transact!(self, |tx| {
            check_fence(tx, run_id, fence).await?;
            insert_entries(tx, run_id, entries).await?;
            if let Some((record, live)) = &record {
                tx.run(
                    "UPDATE runs SET record = $2, live = $3 WHERE run_id = $1",
                    &[&run_id, record, live],
                )
                .await
                .map_err(pg)?;
            }
            Ok(Attempt::Done(()))
        })
    }

    async fn journal(&self, run_id: &str) -> Result<Vec<Entry>> {
        self.select(
            "SELECT entry FROM journal WHERE run_id = $1 ORDER BY seq",
            &[&run_id],
        )
        .await?
        .iter()
        .map(|r| Ok(journal::decode(r.get(0))?))
        .collect()
    }
}

#[async_trait]
impl LeaseStore for PgStore {
    async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<Option<Lease>> {
        let expires = i(now_ms.saturating_add(ttl_ms));
        let row = self
            .select_one(
                "UPDATE runs SET lease_owner = $2, lease_epoch = lease_epoch + 1,
                     lease_expires_ms = $3
                 WHERE run_id = $1
                   AND (lease_owner = '' OR lease_owner = $2 OR lease_expires_ms <= $4)
                 RETURNING lease_epoch",
                &[&run_id, &owner, &expires, &i(now_ms)],
            )
            .await?;
        Ok(row.map(|r| Lease {
            run_id: run_id.into(),
            owner: owner.into(),
            epoch: u(r.get(0)),
            expires_at_ms: u(expires),
        }))
    }

    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64, now_ms: u64) -> Result<Lease> {
        let expires = i(now_ms.saturating_add(ttl_ms));
        let renewed = self
            .exec(
                "UPDATE runs SET lease_expires_ms = $4
                 WHERE run_id = $1 AND lease_owner = $2 AND lease_epoch = $3",
                &[
                    &lease.run_id.as_str(),
                    &lease.owner,
                    &i(lease.epoch),
                    &expires,
                ],
            )
            .await?;
        if renewed == 0 {
            return Err(StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            });
        }
        Ok(Lease {
            expires_at_ms: u(expires),
            ..lease.clone()
        })
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.exec(
            "UPDATE runs SET lease_owner = '', lease_expires_ms = 0
                 WHERE run_id = $1 AND lease_owner = $2 AND lease_epoch = $3",
            &[&lease.run_id.as_str(), &lease.owner, &i(lease.epoch)],
        )
        .await?;
        Ok(())
    }

    async fn leased_elsewhere(&self, owner: &str, now_ms: u64) -> Result<Vec<Lease>> {
        Ok(self
            .select(
                "SELECT run_id, lease_owner, lease_epoch, lease_expires_ms FROM runs
                 WHERE live AND lease_owner <> '' AND lease_owner <> $1
                   AND lease_expires_ms > $2",
                &[&owner, &i(now_ms)],
            )
            .await?
            .iter()
            .map(|r| Lease {
                run_id: r.get::<_, String>(0).into(),
                owner: r.get(1),
                epoch: u(r.get(2)),
                expires_at_ms: u(r.get(3)),
            })
            .collect())
    }
}

#[async_trait]
impl WorkerStore for PgStore {
    async fn heartbeat(&self, w: &WorkerRecord) -> Result<()> {
        self.exec(
            "INSERT INTO workers (worker_id, host, pid, started_at_ms, heartbeat_at_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at_ms = excluded.heartbeat_at_ms",
            &[
                &w.worker_id,
                &w.host,
                &i64::from(w.pid),
                &i(w.started_at_ms),
                &i(w.heartbeat_at_ms),
            ],
        )
        .await?;
        Ok(())
    }

    async fn list_workers(&self, now_ms: u64) -> Result<Vec<(WorkerRecord, usize)>> {
        Ok(self
            .select(
                "SELECT w.worker_id, w.host, w.pid, w.started_at_ms, w.heartbeat_at_ms,
                     (SELECT count(*) FROM runs r WHERE r.live AND r.lease_owner = w.worker_id
                        AND r.lease_expires_ms > $1)
                 FROM workers w ORDER BY w.worker_id",
                &[&i(now_ms)],
            )
            .await?
            .iter()
            .map(|r| {
                let worker = WorkerRecord {
                    worker_id: r.get(0),
                    host: r.get(1),
                    pid: r.get::<_, i64>(2) as u32,
                    started_at_ms: u(r.get(3)),
                    heartbeat_at_ms: u(r.get(4)),
                };
                (worker, u(r.get(5)) as usize)
            })
            .collect())
    }

    async fn remove_worker(&self, worker_id: &str) -> Result<()> {
        self.exec("DELETE FROM workers WHERE worker_id = $1", &[&worker_id])
            .await?;
        Ok(())
    }
}

#[async_trait]
impl HookStore for PgStore {
    async fn register_hook(
        &self,
        hook: &HookRecord,
        force: bool,
        now_ms: u64,
    ) -> Result<Registered> {
        transact!(self, |tx| {
            let held = lock_hook(tx, &hook.token).await?;
            let registered = |registration, claimed_from| {
                Ok(Attempt::Done(Registered {
                    registration,
                    claimed_from,
                }))
            };
            match Registration::decide(held.as_ref(), hook, force, now_ms) {
                Registration::Answer(registration) => registered(registration, None),
                Registration::Take => {
                    if let Attempt::Retry = write_hook(tx, hook, held.is_some()).await? {
                        return Ok(Attempt::Retry);
                    }
                    registered(HookRegistration::Registered, None)
                }
                Registration::TakeFrom(owner) => {
                    tx.run(
                        "INSERT INTO claims (run_id, token, claimed_by) VALUES ($1, $2, $3)
                         ON CONFLICT (run_id, token) DO UPDATE SET claimed_by = excluded.claimed_by",
                        &[&owner.as_str(), &hook.token.as_str(), &hook.run_id.as_str()],
                    )
                    .await
                    .map_err(pg)?;
                    tx.run(
                        "INSERT INTO wakeups (run_id) VALUES ($1) ON CONFLICT DO NOTHING",
                        &[&owner.as_str()],
                    )
                    .await
                    .map_err(pg)?;
                    self.notify(tx, &Wake::Run(owner.clone())).await?;
                    if let Attempt::Retry = write_hook(tx, hook, true).await? {
                        return Ok(Attempt::Retry);
                    }
                    registered(HookRegistration::Registered, Some(owner))
                }
            }
        })
    }

    async fn resume_hook(&self, token: &str, payload: &str) -> Result<RunId> {
        transact!(self, |tx| {
            let row = tx
                .row(
                    "UPDATE hooks SET next_payload = next_payload + 1
                     WHERE token = $1 AND active RETURNING run_id, next_payload - 1",
                    &[&token],
                )
                .await
                .map_err(pg)?;
            let Some(row) = row else {
                return Err(StoreError::HookNotFound {
                    token: token.into(),
                });
            };
            let owner: String = row.get(0);
            let index: i64 = row.get(1);
            tx.run(
                "INSERT INTO inbox (run_id, token, idx, payload) VALUES ($1, $2, $3, $4)",
                &[&owner, &token, &index, &payload],
            )
            .await
            .map_err(pg)?;
            tx.run(
                "INSERT INTO wakeups (run_id) VALUES ($1) ON CONFLICT DO NOTHING",
                &[&owner],
            )
            .await
            .map_err(pg)?;
            let owner = RunId::from(owner);
            self.notify(tx, &Wake::Run(owner.clone())).await?;
            Ok(Attempt::Done(owner))
        })
    }

    async fn get_hook(&self, token: &str, now_ms: u64) -> Result<HookRecord> {
        let row = self
            .select_one(
                &format!("SELECT {HOOK_COLUMNS} FROM hooks WHERE token = $1"),
                &[&token],
            )
            .await?;
        row.map(|r| hook_of(&r))
            .filter(|h| h.holder(now_ms).is_some())
            .ok_or_else(|| StoreError::HookNotFound {
                token: token.into(),
            })
    }

    async fn list_hooks(&self, now_ms: u64) -> Result<Vec<HookRecord>> {
        Ok(self
            .select(
                &format!("SELECT {HOOK_COLUMNS} FROM hooks ORDER BY token"),
                &[],
            )
            .await?
            .iter()
            .map(hook_of)
            .filter(|h| h.holder(now_ms).is_some())
            .collect())
    }

    async fn payload(&self, run_id: &str, token: &str, index: u64) -> Result<HookPayload> {
        let claimed = self
            .select_one(
                "SELECT claimed_by FROM claims WHERE run_id = $1 AND token = $2",
                &[&run_id, &token],
            )
            .await?;
        if let Some(row) = claimed {
            return Ok(HookPayload::ForceClaimed(row.get::<_, String>(0).into()));
        }
        let row = self
            .select_one(
                "SELECT payload FROM inbox WHERE run_id = $1 AND token = $2 AND idx = $3",
                &[&run_id, &token, &i(index)],
            )
            .await?;
        Ok(match row {
            Some(row) => HookPayload::Ready(row.get(0)),
            None => HookPayload::Pending,
        })
    }

    async fn dispose_hook(&self, run_id: &str, token: &str) -> Result<()> {
        transact!(self, |tx| {
            tx.run(
                "DELETE FROM hooks WHERE token = $1 AND run_id = $2",
                &[&token, &run_id],
            )
            .await
            .map_err(pg)?;
            tx.run(
                "DELETE FROM inbox WHERE run_id = $1 AND token = $2",
                &[&run_id, &token],
            )
            .await
            .map_err(pg)?;
            Ok(Attempt::Done(()))
        })
    }

    async fn purge_expired_hooks(&self, now_ms: u64) -> Result<usize> {
        let purged = self
            .exec(
                "DELETE FROM hooks WHERE NOT active
                   AND (retain_until_ms IS NULL OR retain_until_ms <= $1)",
                &[&i(now_ms)],
            )
            .await?;
        Ok(purged as usize)
    }
}

#[async_trait]
impl KeyStore for PgStore {
    async fn key_hold(&self, workflow: &str, key: &str) -> Result<Option<KeyHold>> {
        let row = self
            .select_one(
                "SELECT run_id, expires_at_ms FROM keys WHERE workflow = $1 AND key = $2",
                &[&workflow, &key],
            )
            .await?;
        Ok(row.map(|r| KeyHold {
            run_id: r.get::<_, String>(0).into(),
            expires_at_ms: u(r.get(1)),
        }))
    }

    async fn purge_expired_keys(&self, now_ms: u64) -> Result<usize> {
        let purged = self
            .exec("DELETE FROM keys WHERE expires_at_ms <= $1", &[&i(now_ms)])
            .await?;
        Ok(purged as usize)
    }
}

#[async_trait]
impl EventStore for PgStore {
    async fn subscribe(&self, event_key: &str, workflow: &str, hash: &str) -> Result<()> {
        self.exec(
            "INSERT INTO subscriptions (event_key, workflow, hash) VALUES ($1, $2, $3)
                 ON CONFLICT (event_key, workflow) DO UPDATE SET hash = excluded.hash",
            &[&event_key, &workflow, &hash],
        )
        .await?;
        Ok(())
    }

    async fn subscribers(&self, event_key: &str) -> Result<Vec<(String, String)>> {
        Ok(self
            .select(
                "SELECT workflow, hash FROM subscriptions WHERE event_key = $1 ORDER BY workflow",
                &[&event_key],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    async fn put_event(&self, event: &EventRecord) -> Result<()> {
        self.exec(
            "INSERT INTO events (event_id, record) VALUES ($1, $2)",
            &[&event.event_id, &codec::encode(event)],
        )
        .await?;
        Ok(())
    }

    async fn list_events(&self) -> Result<Vec<EventRecord>> {
        self.records("SELECT record FROM events ORDER BY event_id", &[], "event")
            .await
    }
}

#[async_trait]
impl ComponentStore for PgStore {
    async fn put_component(&self, hash: &str, bytes: &[u8]) -> Result<()> {
        let known = self
            .select_one("SELECT 1 FROM components WHERE hash = $1", &[&hash])
            .await?;
        if known.is_none() {
            self.exec(
                "INSERT INTO components (hash, bytes) VALUES ($1, $2)
                 ON CONFLICT (hash) DO NOTHING",
                &[&hash, &bytes],
            )
            .await?;
        }
        Ok(())
    }

    async fn get_component(&self, hash: &str) -> Result<Vec<u8>> {
        self.select_one("SELECT bytes FROM components WHERE hash = $1", &[&hash])
            .await?
            .map(|r| r.get(0))
            .ok_or_else(|| StoreError::ComponentNotFound { hash: hash.into() })
    }
}

#[async_trait]
impl DeploymentStore for PgStore {
    async fn put_deployment(&self, deployment: &Deployment) -> Result<()> {
        let record = codec::encode(deployment);
        let hash = deployment.hash.as_str();
        transact!(self, |tx| {
            tx.run(
                "INSERT INTO deployments (hash, record) VALUES ($1, $2)
                 ON CONFLICT (hash) DO UPDATE SET record = excluded.record",
                &[&hash, &record],
            )
            .await
            .map_err(pg)?;
            self.notify(tx, &Wake::Deployed).await?;
            Ok(Attempt::Done(()))
        })
    }

    async fn deployments(&self) -> Result<Vec<Deployment>> {
        self.records("SELECT record FROM deployments", &[], "deployment")
            .await
    }

    async fn deployment(&self, hash: &str) -> Result<Option<Deployment>> {
        Ok(self
            .records(
                "SELECT record FROM deployments WHERE hash = $1",
                &[&hash],
                "deployment",
            )
            .await?
            .pop())
    }
}

#[async_trait]
impl WakeStore for PgStore {
    async fn watch(&self, run_id: &str, watcher: &str) -> Result<()> {
        self.exec(
            "INSERT INTO watchers (run_id, watcher) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&run_id, &watcher],
        )
        .await?;
        Ok(())
    }

    async fn is_woken(&self, run_id: &str) -> Result<bool> {
        Ok(self
            .select_one("SELECT 1 FROM wakeups WHERE run_id = $1", &[&run_id])
            .await?
            .is_some())
    }

    async fn take_wakeup(&self, run_id: &str) -> Result<bool> {
        Ok(self
            .exec("DELETE FROM wakeups WHERE run_id = $1", &[&run_id])
            .await?
            > 0)
    }

    async fn wakeups(&self) -> Result<Vec<RunId>> {
        Ok(self
            .select("SELECT run_id FROM wakeups", &[])
            .await?
            .iter()
            .map(|r| r.get::<_, String>(0).into())
            .collect())
    }

    fn wake_stream(&self) -> Option<broadcast::Receiver<Wake>> {
        Some(self.inner.wakes.subscribe())
    }

    async fn announce(&self, wake: &Wake) -> Result<()> {
        self.exec(
            "SELECT pg_notify($1, $2)",
            &[&channel(&self.inner.schema), &payload_of(wake)],
        )
        .await?;
        Ok(())
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
