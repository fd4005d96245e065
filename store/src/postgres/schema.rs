//! The PostgreSQL store's schema and its migrations, applied at open (or by
//! `keel store migrate`) under an advisory lock, so that processes opening
//! the store at once migrate it once. A schema newer than this keel knows
//! is refused.

use tokio_postgres::Client;

use super::pg;
use crate::{Result, StoreError};

/// The schema version this keel writes.
pub const SCHEMA_VERSION: i64 = 20;

/// The migrations, in order: the one at index `i` brings version `i` to
/// `i + 1`.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE runs (
    run_id text PRIMARY KEY,
    live boolean NOT NULL,
    record bytea NOT NULL,
    lease_owner text NOT NULL DEFAULT '',
    lease_epoch bigint NOT NULL DEFAULT 0,
    lease_expires_ms bigint NOT NULL DEFAULT 0
);
CREATE INDEX runs_live ON runs (run_id) WHERE live;
CREATE TABLE journal (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    entry bytea NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE keys (
    workflow text NOT NULL,
    key text NOT NULL,
    run_id text NOT NULL,
    expires_at_ms bigint NOT NULL,
    PRIMARY KEY (workflow, key)
);
CREATE TABLE hooks (
    token text PRIMARY KEY,
    run_id text NOT NULL,
    command bigint,
    metadata text,
    created_at_ms bigint NOT NULL,
    retain_until_ms bigint,
    active boolean NOT NULL,
    next_payload bigint NOT NULL
);
CREATE INDEX hooks_run ON hooks (run_id);
CREATE TABLE inbox (
    run_id text NOT NULL,
    token text NOT NULL,
    idx bigint NOT NULL,
    payload text NOT NULL,
    PRIMARY KEY (run_id, token, idx)
);
CREATE TABLE claims (
    run_id text NOT NULL,
    token text NOT NULL,
    claimed_by text NOT NULL,
    PRIMARY KEY (run_id, token)
);
CREATE TABLE wakeups (run_id text PRIMARY KEY);
CREATE TABLE watchers (
    run_id text NOT NULL,
    watcher text NOT NULL,
    PRIMARY KEY (run_id, watcher)
);
CREATE TABLE events (event_id text PRIMARY KEY, record bytea NOT NULL);
CREATE TABLE subscriptions (
    event_key text NOT NULL,
    workflow text NOT NULL,
    hash text NOT NULL,
    PRIMARY KEY (event_key, workflow)
);
CREATE TABLE components (hash text PRIMARY KEY, bytes bytea NOT NULL);
"#,
    r#"
CREATE TABLE workers (
    worker_id text PRIMARY KEY,
    host text NOT NULL,
    pid bigint NOT NULL,
    started_at_ms bigint NOT NULL,
    heartbeat_at_ms bigint NOT NULL
);
"#,
    r#"
CREATE TABLE deployments (hash text PRIMARY KEY, record bytea NOT NULL);
"#,
    // Listings go newest first by admission time, whatever IDs runs were
    // given; the column is filled from the records below.
    r#"
ALTER TABLE runs ADD COLUMN created_at_ms bigint NOT NULL DEFAULT 0;
CREATE INDEX runs_created ON runs (created_at_ms DESC, run_id DESC);
"#,
    r#"
CREATE TABLE schedules (
    name text PRIMARY KEY,
    record bytea NOT NULL,
    revision bigint NOT NULL,
    paused boolean NOT NULL,
    next_fire_ms bigint,
    buffered boolean NOT NULL,
    claim_until_ms bigint
);
CREATE INDEX schedules_due ON schedules (next_fire_ms) WHERE NOT paused;
"#,
    // Flow control (`flow.rs`).
    r#"
CREATE TABLE flow_groups (
    workflow text NOT NULL,
    key text NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (workflow, key)
);
CREATE TABLE flow_slots (
    run_id text PRIMARY KEY,
    workflow text NOT NULL,
    key text NOT NULL,
    record bytea NOT NULL
);
CREATE INDEX flow_slots_group ON flow_slots (workflow, key);
CREATE TABLE flow_limits (
    workflow text NOT NULL,
    scope text NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (workflow, scope)
);
CREATE SEQUENCE flow_seq;
"#,
    // Step rate limits (`flow.rs`).
    r#"
CREATE TABLE rate_windows (key text PRIMARY KEY, record bytea NOT NULL);
"#,
    // Step concurrency limits, and the slots of failed runs kept for a
    // retry (`flow.rs`).
    r#"
CREATE TABLE step_permits (key text PRIMARY KEY, record bytea NOT NULL);
CREATE TABLE flow_failed (run_id text PRIMARY KEY, record bytea NOT NULL);
"#,
    // Cancel requests (`wakes.rs`).
    r#"
CREATE TABLE cancel_requests (run_id text PRIMARY KEY, record bytea NOT NULL);
"#,
    // Run attributes, indexed for `runs list --attr` (`runs.rs`); runs
    // written before them have none.
    r#"
ALTER TABLE runs ADD COLUMN attributes jsonb NOT NULL DEFAULT '{}'::jsonb;
CREATE INDEX runs_attributes ON runs USING gin (attributes jsonb_path_ops);
"#,
    // Retention (`retention.rs`): ended runs oldest first, and the watches
    // a deleted run is the watcher in.
    r#"
CREATE INDEX runs_ended ON runs (created_at_ms, run_id) WHERE NOT live;
CREATE INDEX watchers_watcher ON watchers (watcher);
"#,
    // Bulk operations' jobs (`jobs.rs`).
    r#"
CREATE TABLE jobs (
    job_id text PRIMARY KEY,
    revision bigint NOT NULL,
    running boolean NOT NULL,
    record bytea NOT NULL
);
CREATE INDEX jobs_running ON jobs (job_id) WHERE running;
"#,
    // When each component was last stored, for `deployments prune`
    // (`catalog.rs`); components stored before it count as stored at 0.
    r#"
ALTER TABLE components ADD COLUMN stored_at_ms bigint NOT NULL DEFAULT 0;
"#,
    // Streams a run writes (`streams.rs`), and payload IDs, which a
    // resume retried with the same ID finds its first delivery by.
    r#"
CREATE TABLE streams (
    run_id text NOT NULL,
    stream text NOT NULL,
    state bytea NOT NULL,
    bytes bigint NOT NULL,
    PRIMARY KEY (run_id, stream)
);
CREATE TABLE chunks (
    run_id text NOT NULL,
    stream text NOT NULL,
    idx bigint NOT NULL,
    chunk bytea NOT NULL,
    PRIMARY KEY (run_id, stream, idx)
);
ALTER TABLE inbox ADD COLUMN payload_id text;
CREATE UNIQUE INDEX inbox_payload_id ON inbox (run_id, token, payload_id)
    WHERE payload_id IS NOT NULL;
"#,
    // The schema a hook's payloads must fit.
    r#"
ALTER TABLE hooks ADD COLUMN payload_schema text;
"#,
    // Scoped tokens' signing secret; signed webhooks and the signatures
    // they accepted.
    r#"
CREATE TABLE secrets (name text PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE webhooks (id text PRIMARY KEY, record bytea NOT NULL);
CREATE TABLE webhook_signatures (
    webhook_id text NOT NULL,
    signature text NOT NULL,
    until_ms bigint NOT NULL,
    PRIMARY KEY (webhook_id, signature)
);
CREATE INDEX webhook_signatures_until ON webhook_signatures (until_ms);
"#,
    // Due work (`keel_core::due`): each run's driving state in a narrow
    // table of its own (its lease, its record-given due time, whether
    // something woke it, and the due time derived from them by the rule of
    // `keel_core::due::DueState::due_at`), so that taking, renewing and
    // releasing a lease rewrites a small row with two indexes, never the
    // run's record and its indexes; the run's status and workflow beside
    // its record (filled from the live runs' records below), for the counts.
    r#"
ALTER TABLE runs ADD COLUMN status text NOT NULL DEFAULT '',
    ADD COLUMN workflow text NOT NULL DEFAULT '';
CREATE TABLE run_due (
    run_id text PRIMARY KEY,
    live boolean NOT NULL,
    next_at_ms bigint,
    woken boolean NOT NULL DEFAULT false,
    lease_owner text NOT NULL DEFAULT '',
    lease_epoch bigint NOT NULL DEFAULT 0,
    lease_expires_ms bigint NOT NULL DEFAULT 0,
    due_at_ms bigint GENERATED ALWAYS AS (
        CASE WHEN NOT live THEN NULL
             WHEN lease_owner <> '' THEN lease_expires_ms
             WHEN woken THEN 0
             ELSE next_at_ms END) STORED
);
INSERT INTO run_due (run_id, live, lease_owner, lease_epoch, lease_expires_ms, woken)
    SELECT r.run_id, r.live, r.lease_owner, r.lease_epoch, r.lease_expires_ms,
        r.live AND w.run_id IS NOT NULL
    FROM runs r LEFT JOIN wakeups w USING (run_id);
DROP TABLE wakeups;
ALTER TABLE runs DROP COLUMN lease_owner, DROP COLUMN lease_epoch,
    DROP COLUMN lease_expires_ms;
"#,
    // The due index for the workers' claims; the leased runs, for
    // `workers`; counts of live runs by workflow and status, kept by a
    // trigger in the transaction of every status change, on 64 rows each
    // so that concurrent changes seldom wait on one row; and the expiries
    // the worker's purges of keys and retired hooks look up.
    r#"
CREATE INDEX run_due_at ON run_due (due_at_ms, run_id) WHERE due_at_ms IS NOT NULL;
CREATE INDEX run_due_held ON run_due (lease_owner) WHERE lease_owner <> '';
CREATE TABLE run_counts (
    workflow text NOT NULL,
    status text NOT NULL,
    shard integer NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (workflow, status, shard)
);
INSERT INTO run_counts (workflow, status, shard, n)
    SELECT workflow, status, hashtext(run_id) & 63, count(*) FROM runs WHERE live
    GROUP BY 1, 2, 3;
CREATE FUNCTION count_runs() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.live THEN
        INSERT INTO run_counts AS c (workflow, status, shard, n)
            VALUES (OLD.workflow, OLD.status, hashtext(OLD.run_id) & 63, -1)
            ON CONFLICT (workflow, status, shard) DO UPDATE SET n = c.n - 1;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.live THEN
        INSERT INTO run_counts AS c (workflow, status, shard, n)
            VALUES (NEW.workflow, NEW.status, hashtext(NEW.run_id) & 63, 1)
            ON CONFLICT (workflow, status, shard) DO UPDATE SET n = c.n + 1;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER runs_counted_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.live) EXECUTE FUNCTION count_runs();
CREATE TRIGGER runs_counted_update AFTER UPDATE OF status, live ON runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.live IS DISTINCT FROM NEW.live)
    EXECUTE FUNCTION count_runs();
CREATE TRIGGER runs_counted_delete AFTER DELETE ON runs
    FOR EACH ROW WHEN (OLD.live) EXECUTE FUNCTION count_runs();
CREATE INDEX keys_expiry ON keys (expires_at_ms);
CREATE INDEX hooks_retired ON hooks (retain_until_ms) WHERE NOT active;
"#,
    // Payload IDs remembered by token after their delivery, whether or not
    // a run still holds the token (a sender's retry of the delivery that
    // ended its run is a duplicate), until they expire.
    r#"
CREATE TABLE remembered_payloads (
    token text NOT NULL,
    payload_id text NOT NULL,
    run_id text NOT NULL,
    idx bigint NOT NULL,
    until_ms bigint NOT NULL,
    PRIMARY KEY (token, payload_id)
);
CREATE INDEX remembered_payloads_until ON remembered_payloads (until_ms);
"#,
    // Pauses: holds on live runs, kept until lifted.
    r#"
CREATE TABLE pauses (run_id text PRIMARY KEY, record bytea NOT NULL);
"#,
];

/// Copies each run's admission time from its record into its row.
async fn fill_creation_times(tx: &tokio_postgres::Transaction<'_>, schema: &str) -> Result<()> {
    let rows = tx
        .query(&format!("SELECT run_id, record FROM {schema}.runs"), &[])
        .await
        .map_err(pg)?;
    let update = format!("UPDATE {schema}.runs SET created_at_ms = $2 WHERE run_id = $1");
    for row in rows {
        let run: keel_core::RunRecord = keel_core::codec::decode(row.get(1), "run record")?;
        tx.execute(
            &update,
            &[&run.run_id.as_str(), &super::i(run.created_at_ms)],
        )
        .await
        .map_err(pg)?;
    }
    Ok(())
}

/// Copies each live run's status and workflow into its row and its
/// record-given due time into its driving state (ended runs need neither:
/// they are out of the due index and the counts).
async fn fill_due_times(tx: &tokio_postgres::Transaction<'_>, schema: &str) -> Result<()> {
    let rows = tx
        .query(&format!("SELECT record FROM {schema}.runs WHERE live"), &[])
        .await
        .map_err(pg)?;
    let update = format!(
        "WITH due AS (UPDATE {schema}.run_due SET next_at_ms = $3 WHERE run_id = $1)
         UPDATE {schema}.runs SET status = $2, workflow = $4 WHERE run_id = $1"
    );
    for row in rows {
        let run: keel_core::RunRecord = keel_core::codec::decode(row.get(0), "run record")?;
        let next_at = keel_core::due::next_at(&run).map(super::i);
        tx.execute(
            &update,
            &[
                &run.run_id.as_str(),
                &run.status.as_str(),
                &next_at,
                &run.workflow.as_str(),
            ],
        )
        .await
        .map_err(pg)?;
    }
    Ok(())
}

/// Creates the store's schema if needed and applies the migrations it
/// lacks; returns the version it had.
pub(super) async fn migrate(client: &mut Client, schema: &str, location: &str) -> Result<i64> {
    let tx = client.transaction().await.map_err(pg)?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&schema])
        .await
        .map_err(pg)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.meta (key text PRIMARY KEY, value bigint NOT NULL);"
    ))
    .await
    .map_err(pg)?;
    let found: i64 = tx
        .query_opt(
            &format!("SELECT value FROM {schema}.meta WHERE key = 'schema_version'"),
            &[],
        )
        .await
        .map_err(pg)?
        .map_or(0, |row| row.get(0));
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            location: location.into(),
            found: found as u32,
            supported: SCHEMA_VERSION as u32,
        });
    }
    for (version, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.batch_execute(&format!("SET LOCAL search_path TO {schema}; {migration}"))
            .await
            .map_err(pg)?;
        if version + 1 == 4 {
            fill_creation_times(&tx, schema).await?;
        }
        if version + 1 == 17 {
            fill_due_times(&tx, schema).await?;
        }
        tracing::info!(schema, to = version + 1, "store schema migrated");
    }
    tx.execute(
        &format!(
            "INSERT INTO {schema}.meta (key, value) VALUES ('schema_version', $1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        ),
        &[&SCHEMA_VERSION],
    )
    .await
    .map_err(pg)?;
    tx.commit().await.map_err(pg)?;
    Ok(found)
}
