//! Schedules in the engine: creating, changing and reading them, and firing
//! them. Any worker fires any schedule, with no leader: it claims the
//! schedule by a compare-and-set on its revision, decides its fires
//! ([`ScheduleRecord::decide`]), admits each as a run whose ID derives from
//! the schedule's name and the nominal time (so a second admission, by
//! another worker or after a crash, is refused `run_exists` and counted as
//! already fired), then records the outcomes and drops the claim with one
//! more compare-and-set. A worker that dies holding a claim leaves it to
//! expire; the next worker decides those fires again and finds their runs.

use keel_core::RunId;
use keel_core::deployment::{self, Target};
use keel_core::ids::check_name;
use keel_core::schedule::{
    Claim, Fire, FireOutcome, MAX_SCHEDULE_NAME, ScheduleRecord, ScheduleSpec,
};
use keel_store::StoreError;

use super::{Keel, StartOptions, lock};
use crate::{Error, Result};

/// Schedules one worker pass looks at.
const DUE_BATCH: usize = 32;

/// The most nominal times one backfill starts.
pub const MAX_BACKFILL: usize = 10_000;

/// Tries of a change that lost a compare-and-set to another writer.
const CHANGE_TRIES: usize = 16;

impl Keel {
    /// Creates a schedule; its first fire is the spec's first time after
    /// now (or its start bound). Refused before anything is stored for a
    /// name outside the safe set, a spec that cannot fire, input that is
    /// not JSON or over the payload bound, or a target that does not start
    /// the workflow.
    pub async fn create_schedule(&self, spec: ScheduleSpec) -> Result<ScheduleRecord> {
        self.check_schedule(&spec).await?;
        let record = ScheduleRecord::new(spec, self.now_ms());
        self.store().create_schedule(&record).await?;
        self.schedules_changed();
        tracing::info!(schedule = %record.settings.name, spec = %record.settings.spec.describe(), "schedule created");
        Ok(record)
    }

    async fn check_schedule(&self, spec: &ScheduleSpec) -> Result<()> {
        self.check_schedule_settings(spec)?;
        let all = self.deployments().await?;
        deployment::resolve(&all, &spec.workflow, target(&spec.deployment))?;
        Ok(())
    }

    /// Every check of a schedule's settings but whether its workflow is
    /// deployed (a deploy checks its declarations before it stores).
    fn check_schedule_settings(&self, spec: &ScheduleSpec) -> Result<()> {
        check_name("schedule name", &spec.name)?;
        let invalid = |reason: String| Error::InvalidSchedule {
            name: spec.name.clone(),
            reason,
        };
        if spec.name.len() > MAX_SCHEDULE_NAME {
            return Err(invalid(format!(
                "a schedule's name is at most {MAX_SCHEDULE_NAME} characters (its fires' run IDs add the time to it)"
            )));
        }
        spec.spec.check().map_err(|e| invalid(e.to_string()))?;
        if let (Some(start), Some(end)) = (spec.start_at_ms, spec.end_at_ms)
            && end < start
        {
            return Err(invalid("its end is before its start".into()));
        }
        self.inner.config.limits.payload(
            spec.input.len(),
            || format!("the input of schedule `{}`", spec.name),
            None,
        )?;
        serde_json::from_str::<serde_json::Value>(&spec.input).map_err(|e| {
            Error::InvalidInput {
                reason: format!("the input of schedule `{}` is not JSON: {e}", spec.name),
            }
        })?;
        if let Some(metadata) = &spec.additional_metadata {
            match serde_json::from_str::<serde_json::Value>(metadata) {
                Ok(serde_json::Value::Object(_)) => {}
                _ => {
                    return Err(Error::InvalidInput {
                        reason: "additional metadata must be a JSON object".into(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Changes a schedule's settings to `settings` (the same name),
    /// checked as a creation is. Its fires and whether it is paused are
    /// kept; a changed spec or bound fires next at its first time after
    /// now. A schedule declared in code is changed by redeploying it, and
    /// refused here.
    pub async fn update_schedule(&self, settings: ScheduleSpec) -> Result<ScheduleRecord> {
        self.check_schedule(&settings).await?;
        let name = settings.name.clone();
        let now = self.now_ms();
        let updated = self
            .change_schedule(&name, |s| {
                if let Some(deployment) = &s.settings.declared_by {
                    return Err(Error::InvalidSchedule {
                        name: name.clone(),
                        reason: format!(
                            "it is declared in the code of deployment `{deployment}`; change the `schedule(...)` there and redeploy"
                        ),
                    });
                }
                s.redeclare(settings.clone(), now);
                Ok(())
            })
            .await?;
        tracing::info!(schedule = %name, spec = %updated.settings.spec.describe(), "schedule updated");
        Ok(updated)
    }

    /// The schedule named `name`.
    pub async fn schedule(&self, name: &str) -> Result<ScheduleRecord> {
        self.store()
            .schedule(name)
            .await?
            .ok_or_else(|| Error::ScheduleNotFound { name: name.into() })
    }

    /// Every schedule, by name.
    pub async fn schedules(&self) -> Result<Vec<ScheduleRecord>> {
        Ok(self.store().list_schedules().await?)
    }

    /// Deletes a schedule and returns it as it was; its fires' runs are
    /// left as they are.
    pub async fn delete_schedule(&self, name: &str) -> Result<ScheduleRecord> {
        let record = self.schedule(name).await?;
        if !self.store().delete_schedule(name).await? {
            return Err(Error::ScheduleNotFound { name: name.into() });
        }
        tracing::info!(schedule = name, "schedule deleted");
        Ok(record)
    }

    /// Pauses a schedule: no fire until it is resumed, and the time it was
    /// paused is not caught up.
    pub async fn pause_schedule(&self, name: &str, note: Option<String>) -> Result<ScheduleRecord> {
        let now = self.now_ms();
        self.change_schedule(name, |s| {
            s.set_paused(true, note.clone(), now);
            Ok(())
        })
        .await
    }

    /// Resumes a paused schedule; it fires next at its first time after now.
    pub async fn resume_schedule(
        &self,
        name: &str,
        note: Option<String>,
    ) -> Result<ScheduleRecord> {
        let now = self.now_ms();
        self.change_schedule(name, |s| {
            s.set_paused(false, note.clone(), now);
            Ok(())
        })
        .await
    }

    /// Reads, changes and writes a schedule, again if another writer came
    /// first.
    async fn change_schedule(
        &self,
        name: &str,
        mut change: impl FnMut(&mut ScheduleRecord) -> Result<()>,
    ) -> Result<ScheduleRecord> {
        for _ in 0..CHANGE_TRIES {
            let mut record = self.schedule(name).await?;
            change(&mut record)?;
            record.updated_at_ms = self.now_ms();
            match self.store().update_schedule(&record).await {
                Ok(revision) => {
                    record.revision = revision;
                    self.schedules_changed();
                    return Ok(record);
                }
                Err(StoreError::ScheduleConflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::ScheduleConflict { name: name.into() })
    }

    /// Fires a schedule once now, under its overlap policy; returns the
    /// fire.
    pub async fn trigger_schedule(&self, name: &str) -> Result<Fire> {
        let now = self.now_ms();
        let mut claimed = self.claim_schedule(self.schedule(name).await?, now).await?;
        let live = self.last_run_live(&claimed).await?;
        let decision = claimed.decide_one(now, live);
        let fires = self.carry_out(&mut claimed, decision, now, true).await?;
        self.release_schedule(claimed).await?;
        Ok(fires.into_iter().next().expect("one decision, one fire"))
    }

    /// Starts a run for every nominal time of the schedule in
    /// `[from_ms, to_ms]`, each with its derived run ID, whatever is live
    /// (a time fired before is found, not started again). Returns the
    /// fires, oldest first.
    pub async fn backfill_schedule(
        &self,
        name: &str,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<Vec<Fire>> {
        let record = self.schedule(name).await?;
        let times = record
            .settings
            .spec
            .times_between(from_ms, to_ms, MAX_BACKFILL + 1);
        if times.len() > MAX_BACKFILL {
            return Err(Error::InvalidSchedule {
                name: name.into(),
                reason: format!(
                    "the range holds more than {MAX_BACKFILL} fire times; backfill it in parts"
                ),
            });
        }
        let now = self.now_ms();
        let mut claimed = self.claim_schedule(record, now).await?;
        let decision = keel_core::schedule::Decision {
            starts: times,
            recorded: Vec::new(),
        };
        let fires = self.carry_out(&mut claimed, decision, now, false).await;
        let released = self.release_schedule(claimed).await;
        let fires = fires?;
        released?;
        Ok(fires)
    }

    /// The schedules `manifest` declares when deployed as `name`
    /// (`NAME.WORKFLOW`), each checked as a creation is: a deploy refuses
    /// before it stores anything if one is invalid.
    pub(super) fn declared_schedules(
        &self,
        name: &str,
        manifest: &keel_core::manifest::Manifest,
    ) -> Result<Vec<ScheduleSpec>> {
        let mut declared = Vec::new();
        for w in &manifest.workflows {
            let Some(declaration) = &w.schedule else {
                continue;
            };
            let schedule = format!("{name}.{}", w.name);
            let settings = declaration
                .settings(&schedule, &w.name, name)
                .map_err(|e| Error::InvalidSchedule {
                    name: schedule.clone(),
                    reason: e.to_string(),
                })?;
            self.check_schedule_settings(&settings)?;
            declared.push(settings);
        }
        Ok(declared)
    }

    /// Makes the schedules the deployment `name` holds those `declared`
    /// (checked by [`Keel::declared_schedules`]): each is created, or
    /// updated (keeping its fires and whether it is paused), and one the
    /// deployment declared before and no longer does is deleted. Runtime
    /// schedules are never touched.
    pub(super) async fn declare_schedules(
        &self,
        name: &str,
        declared: Vec<ScheduleSpec>,
    ) -> Result<()> {
        for settings in &declared {
            let schedule = settings.name.clone();
            let created = match self.store().schedule(&schedule).await? {
                Some(_) => false,
                None => match self.create_schedule(settings.clone()).await {
                    Ok(_) => true,
                    // Another process deploying the same code created it
                    // between the read and the create: update it instead.
                    Err(Error::ScheduleExists { .. }) => false,
                    Err(e) => return Err(e),
                },
            };
            if !created {
                let now = self.now_ms();
                let mut changed = false;
                self.change_schedule(&schedule, |s| {
                    changed = s.redeclare(settings.clone(), now);
                    Ok(())
                })
                .await?;
                if changed {
                    tracing::info!(schedule, "declared schedule updated");
                }
            }
        }
        for s in self.store().list_schedules().await? {
            if s.settings.declared_by.as_deref() == Some(name)
                && !declared.iter().any(|d| d.name == s.settings.name)
            {
                self.delete_schedule(&s.settings.name).await?;
            }
        }
        Ok(())
    }

    /// The worker's pass over the schedules, made only once one may be due
    /// (the earliest fire it knows of, a schedule changed here, or a second
    /// since the last look), so that a busy worker's loop does not read
    /// them at every drive that ends. Returns the earliest next fire, as
    /// [`Keel::fire_schedules`] does.
    pub(super) async fn fire_schedules_when_due(&self) -> Result<Option<u64>> {
        let now = self.now_ms();
        let (look_at, next) = *lock(&self.inner.next_schedule_look_ms);
        if now < look_at {
            return Ok(next);
        }
        let next = self.fire_schedules().await?;
        let look_at = next.map_or(now + 1000, |at| at.min(now + 1000));
        *lock(&self.inner.next_schedule_look_ms) = (look_at, next);
        Ok(next)
    }

    /// Makes the worker look at the schedules at its next pass.
    fn schedules_changed(&self) {
        lock(&self.inner.next_schedule_look_ms).0 = 0;
        self.inner.progress.notify_waiters();
        self.due_changed();
    }

    /// The worker's pass over the schedules: fires every one that is due
    /// (claimed, decided, started, recorded). Returns the earliest next
    /// fire time among all schedules, for the worker to wake then.
    pub async fn fire_schedules(&self) -> Result<Option<u64>> {
        let now = self.now_ms();
        for record in self.store().due_schedules(now, DUE_BATCH).await? {
            let name = record.settings.name.clone();
            match self.fire_due(record, now).await {
                Ok(()) => {}
                // Another worker took it first: it fires it.
                Err(Error::ScheduleConflict { .. } | Error::ScheduleNotFound { .. }) => {}
                Err(e) => tracing::warn!(schedule = %name, "firing the schedule failed: {e}"),
            }
        }
        Ok(self
            .store()
            .list_schedules()
            .await?
            .iter()
            .filter(|s| !s.settings.paused)
            .filter_map(|s| {
                let next = s.next_fire_ms;
                // A fire a claim holds back is looked at once the claim ends.
                let claim = s.claim.as_ref().map(|c| c.until_ms + 1);
                match (next, claim) {
                    (Some(n), Some(c)) => Some(n.max(c)),
                    (n, None) => n,
                    (None, Some(_)) => None,
                }
            })
            .min())
    }

    async fn fire_due(&self, record: ScheduleRecord, now: u64) -> Result<()> {
        let mut claimed = self.claim_schedule(record, now).await?;
        let live = self.last_run_live(&claimed).await?;
        let decision = claimed.decide(now, live);
        let fired = self.carry_out(&mut claimed, decision, now, true).await;
        // What was decided and started is recorded even if a later start
        // failed; that failure leaves the claim to expire and be retried.
        match fired {
            Ok(_) => self.release_schedule(claimed).await,
            Err(e) => Err(e),
        }
    }

    /// Takes `record` for this worker until its lease time passes; refused
    /// with `ScheduleConflict` if another writer came first.
    async fn claim_schedule(&self, mut record: ScheduleRecord, now: u64) -> Result<ScheduleRecord> {
        if let Some(claim) = &record.claim
            && claim.until_ms >= now
            && claim.owner != self.inner.config.worker_id
        {
            return Err(Error::ScheduleConflict {
                name: record.settings.name,
            });
        }
        record.claim = Some(Claim {
            owner: self.inner.config.worker_id.clone(),
            until_ms: now + self.inner.config.lease_ttl.as_millis() as u64,
        });
        record.revision = self.store().update_schedule(&record).await?;
        Ok(record)
    }

    /// Drops this worker's claim and stores what it decided; if another
    /// writer changed the schedule meanwhile (an operator paused it, say),
    /// what it decided is kept in that writer's record, so no fire it
    /// started goes unrecorded.
    async fn release_schedule(&self, mut record: ScheduleRecord) -> Result<()> {
        let name = record.settings.name.clone();
        for _ in 0..CHANGE_TRIES {
            record.claim = None;
            record.updated_at_ms = self.now_ms();
            match self.store().update_schedule(&record).await {
                Ok(_) => return Ok(()),
                Err(StoreError::ScheduleConflict { .. }) => {
                    let Some(mut fresh) = self.store().schedule(&name).await? else {
                        // Deleted meanwhile: nothing to record it in.
                        return Ok(());
                    };
                    fresh.keep_fires_of(&record);
                    record = fresh;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::ScheduleConflict { name })
    }

    /// Whether the run of the schedule's latest started fire is live.
    async fn last_run_live(&self, record: &ScheduleRecord) -> Result<bool> {
        let Some(run_id) = &record.last_run_id else {
            return Ok(false);
        };
        match self.store().get_run(run_id).await {
            Ok(run) => Ok(!run.status.is_final()),
            Err(StoreError::RunNotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Starts the decided fires in order and records every outcome in
    /// `record` (their lag reported if `on_time`); returns the fires. A start whose outcome is unknown stops
    /// here with its error: the claim expires and the fire is decided again,
    /// finding its run if it was admitted.
    async fn carry_out(
        &self,
        record: &mut ScheduleRecord,
        decision: keel_core::schedule::Decision,
        now: u64,
        on_time: bool,
    ) -> Result<Vec<Fire>> {
        let lag = |nominal: u64| on_time.then(|| now.saturating_sub(nominal));
        let mut fires = Vec::with_capacity(decision.starts.len() + decision.recorded.len());
        for nominal in decision.starts {
            let fire = self.start_fire(record, nominal, now).await?;
            if matches!(
                fire.outcome,
                FireOutcome::Started | FireOutcome::AlreadyFired
            ) {
                record.last_run_id = fire.run_id.clone();
            }
            self.inner.config.observer.schedule_fired(
                &record.settings.name,
                fire.outcome,
                lag(nominal),
            );
            fires.push(fire);
        }
        for (nominal, outcome) in decision.recorded {
            self.inner
                .config
                .observer
                .schedule_fired(&record.settings.name, outcome, lag(nominal));
            fires.push(Fire {
                nominal_ms: nominal,
                at_ms: now,
                outcome,
                run_id: None,
                error: None,
            });
        }
        // Remembered in the order of their nominal times.
        fires.sort_by_key(|f| f.nominal_ms);
        for fire in &fires {
            record.remember(fire.clone());
        }
        Ok(fires)
    }

    /// Admits the fire of `record` at `nominal_ms`.
    async fn start_fire(&self, record: &ScheduleRecord, nominal_ms: u64, now: u64) -> Result<Fire> {
        let run_id = record.run_id_of(nominal_ms);
        let options = StartOptions {
            driven_here: false,
            carried: Vec::new(),
            additional_metadata: record
                .settings
                .additional_metadata
                .as_deref()
                .and_then(|m| serde_json::from_str(m).ok()),
            hook: None,
            run_id: Some(run_id.clone()),
            start_at_ms: None,
            delay: None,
            priority: None,
            timeout: None,
            attributes: [("schedule".to_string(), record.settings.name.clone())].into(),
            traceparent: None,
        };
        let started = self
            .start_workflow(
                &record.settings.workflow,
                target(&record.settings.deployment),
                &record.settings.input,
                &options,
            )
            .await;
        let fire = |outcome, run_id: Option<RunId>, error: Option<String>| Fire {
            nominal_ms,
            at_ms: now,
            outcome,
            run_id,
            error,
        };
        Ok(match started {
            Ok(run) => {
                tracing::info!(schedule = %record.settings.name, run_id = %run.run_id, nominal_ms, "schedule fired");
                fire(FireOutcome::Started, Some(run.run_id), None)
            }
            Err(Error::RunExists { run_id }) => fire(FireOutcome::AlreadyFired, Some(run_id), None),
            Err(e) if e.is_storage() || e.kind() == keel_core::ErrorKind::StartOutcomeUnknown => {
                return Err(e);
            }
            Err(e) => {
                tracing::warn!(schedule = %record.settings.name, nominal_ms, "the fire's start was refused: {e}");
                fire(FireOutcome::Failed, None, Some(e.to_string()))
            }
        })
    }
}

/// The deployment a schedule's fires start on.
fn target(deployment: &Option<String>) -> Target<'_> {
    match deployment {
        Some(name) => Target::Name(name),
        None => Target::Latest,
    }
}
