//! Schedule reconcile, once for every store: the diff between an owner's
//! declared schedules and the stored ones ([`plan`]), applied through a
//! few primitive writes inside the store's transaction ([`reconcile`]).
//!
//! Rules: a declared schedule that is not stored is created with its first
//! tick; one whose definition changed is redefined in place (new
//! `next_run_at`, owner taken over); one stored unchanged under another
//! owner is adopted (owner only, `next_run_at` kept); an unchanged one is
//! left alone, keeping its `next_run_at`; the owner's stored schedules
//! that are no longer declared are removed. Report ids are sorted.

use std::collections::HashMap;
use std::future::Future;

use crate::schedule::ScheduleRecord;
use crate::store::schedules::{DeclaredSchedule, ReconcileReport, ReconcileSchedules};
use crate::store::StoreError;

/// The primitive reads and writes of a reconcile, inside one transaction
/// that serializes reconciles of several hosts.
pub(crate) trait ScheduleTx: Send {
    /// The stored schedules among `ids`.
    fn stored(
        &mut self,
        ids: &[String],
    ) -> impl Future<Output = Result<Vec<ScheduleRecord>, StoreError>> + Send;

    /// Stores a new schedule owned by `owner`, first tick `d.first_run`.
    fn create(
        &mut self,
        owner: &str,
        d: &DeclaredSchedule,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Replaces a stored schedule's definition, owner and `next_run_at`.
    fn redefine(
        &mut self,
        owner: &str,
        d: &DeclaredSchedule,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Makes `owner` the owner of schedule `id`, nothing else changed.
    fn adopt(
        &mut self,
        owner: &str,
        id: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes `owner`'s schedules whose ids are not in `keep`; returns the
    /// deleted ids.
    fn remove_undeclared(
        &mut self,
        owner: &str,
        keep: &[String],
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;
}

/// One change a reconcile makes to a declared schedule.
#[derive(Debug, PartialEq)]
pub(crate) enum Change<'a> {
    /// Not stored yet.
    Create(&'a DeclaredSchedule),
    /// Definition changed.
    Redefine(&'a DeclaredSchedule),
    /// Unchanged, stored under another owner.
    Adopt(&'a str),
}

/// The changes that make `owner`'s stored schedules match `declared`
/// (removals aside, which the store selects by owner).
pub(crate) fn plan<'a>(
    owner: &str,
    declared: &'a [DeclaredSchedule],
    stored: &[ScheduleRecord],
) -> Vec<Change<'a>> {
    let stored: HashMap<&str, &ScheduleRecord> =
        stored.iter().map(|r| (r.def.id.as_str(), r)).collect();
    declared
        .iter()
        .filter_map(|d| match stored.get(d.def.id.as_str()) {
            None => Some(Change::Create(d)),
            Some(existing) if existing.def != d.def => Some(Change::Redefine(d)),
            Some(existing) if existing.owner.as_deref() != Some(owner) => {
                Some(Change::Adopt(d.def.id.as_str()))
            }
            Some(_) => None,
        })
        .collect()
}

/// Makes `p.owner`'s stored schedules equal to `p.declared` inside `tx`.
pub(crate) async fn reconcile<T: ScheduleTx>(
    tx: &mut T,
    p: &ReconcileSchedules,
) -> Result<ReconcileReport, StoreError> {
    let ids: Vec<String> = p.declared.iter().map(|d| d.def.id.clone()).collect();
    let stored = tx.stored(&ids).await?;
    let mut report = ReconcileReport::default();
    for change in plan(&p.owner, &p.declared, &stored) {
        match change {
            Change::Create(d) => {
                tx.create(&p.owner, d).await?;
                report.created.push(d.def.id.clone());
            }
            Change::Redefine(d) => {
                tx.redefine(&p.owner, d).await?;
                report.updated.push(d.def.id.clone());
            }
            Change::Adopt(id) => tx.adopt(&p.owner, id).await?,
        }
    }
    report.removed = tx.remove_undeclared(&p.owner, &ids).await?;
    report.created.sort();
    report.updated.sort();
    report.removed.sort();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::schedule::ScheduleDef;

    fn def(id: &str, every_ms: i64) -> ScheduleDef {
        ScheduleDef {
            id: id.into(),
            job_type: "t".into(),
            payload: "{}".into(),
            every_ms: Some(every_ms),
            cron: None,
            tz: None,
            immediately: false,
            start_at: None,
            end_at: None,
        }
    }

    fn stored(id: &str, every_ms: i64, owner: &str) -> ScheduleRecord {
        ScheduleRecord {
            def: def(id, every_ms),
            next_run_at: None,
            last_run_at: None,
            owner: Some(owner.into()),
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    #[test]
    fn the_plan_creates_redefines_adopts_and_keeps() {
        let declared: Vec<DeclaredSchedule> =
            [("new", 1), ("edited", 2), ("moved", 3), ("same", 4)]
                .into_iter()
                .map(|(id, every)| DeclaredSchedule {
                    def: def(id, every),
                    first_run: None,
                })
                .collect();
        let stored = vec![
            stored("edited", 99, "me"),
            stored("moved", 3, "someone-else"),
            stored("same", 4, "me"),
        ];
        assert_eq!(
            plan("me", &declared, &stored),
            vec![
                Change::Create(&declared[0]),
                Change::Redefine(&declared[1]),
                Change::Adopt("moved"),
            ]
        );
    }
}
