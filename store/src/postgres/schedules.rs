//! Schedules: one row per name, the record beside the columns the due
//! query reads. An update is a compare-and-set on the revision, so workers
//! deciding the same schedule never block each other: one write wins, the
//! other is refused and reads again.

use keel_core::schedule::ScheduleRecord;

use super::*;

/// The columns a schedule's row keeps beside its record.
fn columns(s: &ScheduleRecord) -> (Option<i64>, bool, Option<i64>) {
    (
        s.next_fire_ms.map(i),
        s.buffered_ms.is_some(),
        s.claim.as_ref().map(|c| i(c.until_ms)),
    )
}

#[async_trait]
impl ScheduleStore for PgStore {
    async fn create_schedule(&self, schedule: &ScheduleRecord) -> Result<()> {
        let mut record = schedule.clone();
        record.revision = 0;
        let (next, buffered, claim) = columns(&record);
        let created = self
            .exec(
                "INSERT INTO schedules (name, record, revision, paused, next_fire_ms, buffered, claim_until_ms)
                 VALUES ($1, $2, 0, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING",
                &[
                    &record.settings.name,
                    &codec::encode(&record),
                    &record.settings.paused,
                    &next,
                    &buffered,
                    &claim,
                ],
            )
            .await?;
        if created == 0 {
            return Err(StoreError::ScheduleExists {
                name: record.settings.name,
            });
        }
        Ok(())
    }

    async fn update_schedule(&self, schedule: &ScheduleRecord) -> Result<u64> {
        let mut next = schedule.clone();
        next.revision += 1;
        let (next_fire, buffered, claim) = columns(&next);
        let updated = self
            .exec(
                "UPDATE schedules SET record = $2, revision = $3, paused = $4, next_fire_ms = $5,
                     buffered = $6, claim_until_ms = $7
                 WHERE name = $1 AND revision = $8",
                &[
                    &next.settings.name,
                    &codec::encode(&next),
                    &i(next.revision),
                    &next.settings.paused,
                    &next_fire,
                    &buffered,
                    &claim,
                    &i(schedule.revision),
                ],
            )
            .await?;
        if updated == 1 {
            return Ok(next.revision);
        }
        let name = next.settings.name;
        Err(match self.schedule(&name).await? {
            Some(_) => StoreError::ScheduleConflict { name },
            None => StoreError::ScheduleNotFound { name },
        })
    }

    async fn schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        Ok(self
            .records(
                "SELECT record FROM schedules WHERE name = $1",
                &[&name],
                "schedule",
            )
            .await?
            .pop())
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>> {
        self.records(
            "SELECT record FROM schedules ORDER BY name",
            &[],
            "schedule",
        )
        .await
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        Ok(self
            .exec("DELETE FROM schedules WHERE name = $1", &[&name])
            .await?
            == 1)
    }

    async fn due_schedules(&self, now_ms: u64, limit: usize) -> Result<Vec<ScheduleRecord>> {
        self.records(
            "SELECT record FROM schedules
             WHERE NOT paused AND (next_fire_ms <= $1 OR buffered)
               AND (claim_until_ms IS NULL OR claim_until_ms < $1)
             ORDER BY next_fire_ms LIMIT $2",
            &[&i(now_ms), &(limit as i64)],
            "schedule",
        )
        .await
    }
}
