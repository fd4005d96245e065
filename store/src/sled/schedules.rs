//! Schedules: one record per name in the `schedules` tree, updated by
//! compare-and-swap on the bytes read, so a revision is written once.

use keel_core::schedule::ScheduleRecord;

use super::*;

fn decode(bytes: &[u8]) -> Result<ScheduleRecord> {
    Ok(codec::decode(bytes, "schedule")?)
}

#[async_trait]
impl ScheduleStore for SledStore {
    async fn create_schedule(&self, schedule: &ScheduleRecord) -> Result<()> {
        self.room()?;
        let mut record = schedule.clone();
        record.revision = 0;
        let created = self
            .inner
            .schedules
            .compare_and_swap(
                record.settings.name.as_bytes(),
                None::<&[u8]>,
                Some(codec::encode(&record)),
            )
            .map_err(backend)?;
        if created.is_err() {
            return Err(StoreError::ScheduleExists {
                name: record.settings.name.clone(),
            });
        }
        self.sync().await
    }

    async fn update_schedule(&self, schedule: &ScheduleRecord) -> Result<u64> {
        self.room()?;
        let name = schedule.settings.name.as_str();
        let Some(current) = self.inner.schedules.get(name).map_err(backend)? else {
            return Err(StoreError::ScheduleNotFound { name: name.into() });
        };
        if decode(&current)?.revision != schedule.revision {
            return Err(StoreError::ScheduleConflict { name: name.into() });
        }
        let mut next = schedule.clone();
        next.revision += 1;
        let swapped = self
            .inner
            .schedules
            .compare_and_swap(name, Some(current), Some(codec::encode(&next)))
            .map_err(backend)?;
        if swapped.is_err() {
            return Err(StoreError::ScheduleConflict { name: name.into() });
        }
        self.sync().await?;
        Ok(next.revision)
    }

    async fn schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        match self.inner.schedules.get(name).map_err(backend)? {
            Some(bytes) => Ok(Some(decode(&bytes)?)),
            None => Ok(None),
        }
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>> {
        self.inner
            .schedules
            .iter()
            .map(|kv| decode(&kv.map_err(backend)?.1))
            .collect()
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        let removed = self.inner.schedules.remove(name).map_err(backend)?;
        self.sync().await?;
        Ok(removed.is_some())
    }

    async fn due_schedules(&self, now_ms: u64, limit: usize) -> Result<Vec<ScheduleRecord>> {
        let mut due: Vec<ScheduleRecord> = self
            .list_schedules()
            .await?
            .into_iter()
            .filter(|s| s.is_due(now_ms))
            .collect();
        due.sort_by_key(|s| s.next_fire_ms.unwrap_or(0));
        due.truncate(limit);
        Ok(due)
    }
}
