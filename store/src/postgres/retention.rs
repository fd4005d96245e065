//! Retention on PostgreSQL: ended runs oldest first (the partial index
//! `runs_ended`), their deletion, and the store's figures.
//!
//! A deletion locks the runs' rows with `FOR UPDATE SKIP LOCKED`, so two
//! workers purging at once take disjoint runs and never wait on each
//! other's rows, then deletes every table's rows of the runs it locked, in
//! one transaction.

use keel_core::retention::{Deleted, StoreStats};

use super::*;
use crate::RetentionStore;

/// The tables holding rows of a run by `run_id`, beside `runs`, `journal`,
/// `inbox` and `chunks` (whose sizes a deletion reports) and `hooks` (whose
/// retained tokens a purge keeps).
const RUN_TABLES: &[&str] = &[
    "run_due",
    "claims",
    "flow_slots",
    "flow_failed",
    "cancel_requests",
    "pauses",
    "streams",
];

#[async_trait]
impl RetentionStore for PgStore {
    async fn ended_runs(
        &self,
        created_before_ms: u64,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        let (after_ms, after_id) = match after {
            Some(c) => (i(c.created_at_ms), c.run_id.as_str()),
            None => (-1, ""),
        };
        self.records(
            "SELECT record FROM runs
             WHERE NOT live AND created_at_ms < $1 AND (created_at_ms, run_id) > ($2, $3)
             ORDER BY created_at_ms, run_id LIMIT $4",
            &[&i(created_before_ms), &after_ms, &after_id, &(limit as i64)],
            "run record",
        )
        .await
    }

    async fn delete_runs(&self, run_ids: &[RunId], tokens_at_ms: Option<u64>) -> Result<Deleted> {
        let wanted: Vec<&str> = run_ids.iter().map(|r| r.as_str()).collect();
        // Hooks retained past this time stay; `None` keeps none.
        let kept_after = tokens_at_ms.map_or(i64::MAX, i);
        transact!(self, |tx| {
            let locked = tx
                .rows(
                    "SELECT run_id, octet_length(record) FROM runs
                     WHERE run_id = ANY($1) AND NOT live
                     ORDER BY run_id FOR UPDATE SKIP LOCKED",
                    &[&wanted],
                )
                .await
                .map_err(pg)?;
            let ids: Vec<String> = locked.iter().map(|r| r.get(0)).collect();
            let mut deleted = Deleted {
                runs: ids.iter().map(|id| RunId::from(id.as_str())).collect(),
                bytes: locked
                    .iter()
                    .map(|r| u(i64::from(r.get::<_, i32>(1))))
                    .sum(),
                ..Deleted::default()
            };
            if ids.is_empty() {
                return Ok(Attempt::Done(deleted));
            }
            let sized = |table: &str, column: &str| {
                format!(
                    "WITH d AS (DELETE FROM {table} WHERE run_id = ANY($1)
                         RETURNING octet_length({column}) AS n)
                     SELECT count(*), coalesce(sum(n), 0)::bigint FROM d"
                )
            };
            let journal = tx
                .row(&sized("journal", "entry"), &[&ids])
                .await
                .map_err(pg)?;
            let inbox = tx
                .row(&sized("inbox", "payload"), &[&ids])
                .await
                .map_err(pg)?;
            let chunks = tx
                .row(&sized("chunks", "chunk"), &[&ids])
                .await
                .map_err(pg)?;
            deleted.journal_entries = journal.as_ref().map_or(0, |r| u(r.get(0)));
            for row in [journal, inbox, chunks].into_iter().flatten() {
                deleted.bytes += u(row.get(1));
            }
            for table in RUN_TABLES {
                tx.run(
                    &format!("DELETE FROM {table} WHERE run_id = ANY($1)"),
                    &[&ids],
                )
                .await
                .map_err(pg)?;
            }
            tx.run(
                "DELETE FROM hooks WHERE run_id = ANY($1)
                     AND NOT coalesce(retain_until_ms > $2, false)",
                &[&ids, &kept_after],
            )
            .await
            .map_err(pg)?;
            tx.run(
                "DELETE FROM watchers WHERE run_id = ANY($1) OR watcher = ANY($1)",
                &[&ids],
            )
            .await
            .map_err(pg)?;
            tx.run("DELETE FROM runs WHERE run_id = ANY($1)", &[&ids])
                .await
                .map_err(pg)?;
            Ok(Attempt::Done(deleted))
        })
    }

    async fn delete_events_before(&self, before_ms: u64) -> Result<u64> {
        let rows = self
            .select("SELECT event_id, record FROM events", &[])
            .await?;
        let mut old = Vec::new();
        for row in &rows {
            let event: EventRecord = codec::decode(row.get(1), "event")?;
            if event.at_ms < before_ms {
                old.push(row.get::<_, String>(0));
            }
        }
        if old.is_empty() {
            return Ok(0);
        }
        self.exec("DELETE FROM events WHERE event_id = ANY($1)", &[&old])
            .await
    }

    async fn stats(&self) -> Result<StoreStats> {
        let mut stats = StoreStats::default();
        for run in self
            .records::<RunRecord>("SELECT record FROM runs", &[], "run record")
            .await?
        {
            *stats
                .runs_by_status
                .entry(run.status.as_str().to_string())
                .or_default() += 1;
        }
        let figures = self
            .select_one(
                "SELECT
                   (SELECT count(*) FROM journal),
                   (SELECT coalesce(sum(octet_length(entry)), 0)::bigint FROM journal),
                   (SELECT count(*) FROM hooks),
                   (SELECT count(*) FROM inbox),
                   (SELECT coalesce(sum(octet_length(payload)), 0)::bigint FROM inbox),
                   (SELECT count(*) FROM events),
                   (SELECT count(*) FROM components),
                   (SELECT coalesce(sum(octet_length(bytes)), 0)::bigint FROM components),
                   (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
                      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE n.nspname = current_schema() AND c.relkind = 'r')",
                &[],
            )
            .await?
            .expect("one row");
        let n = |k: usize| u(figures.get::<_, i64>(k));
        stats.journal_entries = n(0);
        stats.journal_bytes = n(1);
        stats.hooks = n(2);
        stats.payloads = n(3);
        stats.payload_bytes = n(4);
        stats.events = n(5);
        stats.components = n(6);
        stats.component_bytes = n(7);
        stats.size_bytes = n(8);
        Ok(stats)
    }
}
