//! Schedules in memory (see [`crate::store::schedules`] for the invariants).
//!
//! Reconcile runs the shared diff (`store::policy::schedules`) on the state
//! under its mutex. The compare-and-set of a fire happens under the mutex;
//! the job is then inserted by `add_many`, which cannot fail for a
//! schedule's job (no parent, no dedupe key), so the pair behaves as one
//! step.

use chrono::{DateTime, Utc};

use super::tx::MemTx;
use super::MemoryStore;
use crate::job::AddResult;
use crate::schedule::ScheduleRecord;
use crate::store::policy::schedules::reconcile as reconcile_policy;
use crate::store::schedules::{FireSchedule, ReconcileReport, ReconcileSchedules};
use crate::store::{JobStore, StoreError};

pub(super) async fn reconcile(
    store: &MemoryStore,
    p: ReconcileSchedules,
) -> Result<ReconcileReport, StoreError> {
    let mut st = store.state.lock().await;
    reconcile_policy(&mut MemTx::new(&mut st, store.clock.now()), &p).await
}

pub(super) async fn list(store: &MemoryStore) -> Vec<ScheduleRecord> {
    store
        .state
        .lock()
        .await
        .schedules
        .values()
        .cloned()
        .collect()
}

pub(super) async fn due(
    store: &MemoryStore,
    now: DateTime<Utc>,
    limit: u32,
) -> Vec<ScheduleRecord> {
    let st = store.state.lock().await;
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

pub(super) async fn fire(
    store: &MemoryStore,
    p: FireSchedule,
) -> Result<Option<AddResult>, StoreError> {
    {
        let now = store.clock.now();
        let mut st = store.state.lock().await;
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
    Ok(store.add_many(vec![p.job]).await?.into_iter().next())
}
