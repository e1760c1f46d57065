//! Schedules in memory (see [`crate::store::schedules`] for the invariants).
//!
//! The compare-and-set of a fire happens under the state mutex; the job is
//! then inserted by `add_many`, which cannot fail for a schedule's job (no
//! parent, no dedupe key), so the pair behaves as one step.

use chrono::{DateTime, Utc};

use crate::job::AddResult;
use crate::schedule::ScheduleRecord;
use crate::store::schedules::{FireSchedule, ReconcileReport, ReconcileSchedules};
use crate::store::{JobStore, StoreError};

use super::MemoryStore;

impl MemoryStore {
    pub(super) fn reconcile_schedules_mem(&self, p: ReconcileSchedules) -> ReconcileReport {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let mut report = ReconcileReport::default();
        for d in &p.declared {
            match st.schedules.get_mut(&d.def.id) {
                None => {
                    st.schedules.insert(
                        d.def.id.clone(),
                        ScheduleRecord {
                            def: d.def.clone(),
                            next_run_at: d.first_run,
                            last_run_at: None,
                            owner: Some(p.owner.clone()),
                            created_at: now,
                            updated_at: now,
                        },
                    );
                    report.created.push(d.def.id.clone());
                }
                Some(existing) => {
                    if existing.def != d.def {
                        existing.def = d.def.clone();
                        existing.next_run_at = d.first_run;
                        existing.updated_at = now;
                        report.updated.push(d.def.id.clone());
                    }
                    if existing.owner.as_deref() != Some(p.owner.as_str()) {
                        existing.owner = Some(p.owner.clone());
                        existing.updated_at = now;
                    }
                }
            }
        }
        let gone: Vec<String> = st
            .schedules
            .values()
            .filter(|s| s.owner.as_deref() == Some(p.owner.as_str()))
            .filter(|s| !p.declared.iter().any(|d| d.def.id == s.def.id))
            .map(|s| s.def.id.clone())
            .collect();
        for id in &gone {
            st.schedules.remove(id);
        }
        report.removed = gone;
        report.created.sort();
        report.updated.sort();
        report
    }

    pub(super) fn list_schedules_mem(&self) -> Vec<ScheduleRecord> {
        self.state.lock().schedules.values().cloned().collect()
    }

    pub(super) fn due_schedules_mem(&self, now: DateTime<Utc>, limit: u32) -> Vec<ScheduleRecord> {
        let st = self.state.lock();
        let mut due: Vec<ScheduleRecord> = st
            .schedules
            .values()
            .filter(|r| r.next_run_at.is_some_and(|t| t <= now))
            .cloned()
            .collect();
        due.sort_by(|a, b| (a.next_run_at, &a.def.id).cmp(&(b.next_run_at, &b.def.id)));
        due.truncate(limit as usize);
        due
    }

    pub(super) async fn fire_schedule_mem(
        &self,
        p: FireSchedule,
    ) -> Result<Option<AddResult>, StoreError> {
        {
            let now = self.clock.now();
            let mut st = self.state.lock();
            let Some(s) = st.schedules.get_mut(&p.schedule_id) else {
                return Ok(None);
            };
            if s.next_run_at != Some(p.tick) {
                return Ok(None);
            }
            s.next_run_at = p.next_run_at;
            s.last_run_at = Some(p.tick);
            s.updated_at = now;
        }
        Ok(self.add_many(vec![p.job]).await?.into_iter().next())
    }
}
