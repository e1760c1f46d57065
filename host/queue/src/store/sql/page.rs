//! The jobs list's page query, shared by SQLite and Postgres: one page of
//! [`JobFilter`]'s matches in (`created_at`, `id`) order, oldest or newest
//! first, after a keyset cursor and/or an offset.
//!
//! Invariant: every filter the list offers reads its page from an index in
//! sort order and stops after `limit + offset` rows per index range; no
//! matching row beyond the page is read and nothing is sorted but those
//! rows. The filter is split into "arms", one per index range whose
//! equality prefix is fixed, each already in sort order; several arms are
//! merged by `UNION ALL` and a final sort of at most `arms × (limit +
//! offset)` rows:
//! - parent: `(parent_id, created_at, id)`, one arm, other conditions
//!   filter it (a parent's children are few);
//! - id: the primary key, one arm of at most one row;
//! - scope: `(scope_type, scope_id, status, created_at, id)`, one arm per
//!   status (all five when none is given), types filter;
//! - types: `(job_type, status, created_at, id)`, one arm per type and
//!   status (all five when none is given);
//! - statuses, or nothing: `(status, created_at, id)`, one arm per status
//!   (all five when none is given; no index of `(created_at, id)` alone,
//!   which every insert and status change would have to write).
//!
//! A filter of more than [`MAX_ARMS`] arms is answered by one arm with `IN`
//! lists: still correct, no longer bounded by the page.

use chrono::{DateTime, Utc};

use super::JOB_COLS;
use crate::job::{JobFilter, JobStatus};

/// Above this many arms a page is one filtered scan instead.
const MAX_ARMS: usize = 64;

/// One bound value of a [`PageQuery`], in placeholder order (`$1`, `$2`…).
#[derive(Clone, Debug, PartialEq)]
pub(in crate::store) enum Bind {
    /// A text column's value.
    Text(String),
    /// An instant (`created_at`).
    Time(DateTime<Utc>),
    /// A count (limit, offset).
    Int(i64),
}

/// A page's statement and its binds.
#[derive(Clone, Debug)]
pub(in crate::store) struct PageQuery {
    /// The statement, with `$n` placeholders.
    pub sql: String,
    /// The values of `$1..`.
    pub binds: Vec<Bind>,
}

#[derive(Default)]
struct Binds(Vec<Bind>);

impl Binds {
    /// Binds `b` and returns its placeholder.
    fn push(&mut self, b: Bind) -> String {
        self.0.push(b);
        format!("${}", self.0.len())
    }

    /// `col IN (…)` over `values`, bound.
    fn in_list(&mut self, col: &str, values: &[String]) -> String {
        let marks: Vec<String> = values
            .iter()
            .map(|v| self.push(Bind::Text(v.clone())))
            .collect();
        format!("{col} IN ({})", marks.join(", "))
    }
}

fn dedup<T: Clone + PartialEq>(items: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(items.len());
    for i in items {
        if !out.contains(i) {
            out.push(i.clone());
        }
    }
    out
}

fn status_names(statuses: &[JobStatus]) -> Vec<String> {
    statuses.iter().map(|s| s.as_str().to_string()).collect()
}

/// The conditions of each arm (each a list joined by `AND`).
fn arms(f: &JobFilter, b: &mut Binds) -> Vec<Vec<String>> {
    let types = dedup(&f.types);
    let given = dedup(&f.statuses);
    let statuses = if given.is_empty() {
        JobStatus::ALL.to_vec()
    } else {
        given.clone()
    };
    let mut common = Vec::new();
    if let Some(p) = &f.parent_id {
        common.push(format!("parent_id = {}", b.push(Bind::Text(p.clone()))));
    }
    if let Some(id) = &f.id {
        common.push(format!("id = {}", b.push(Bind::Text(id.clone()))));
    }
    if let Some(s) = &f.scope {
        let t = b.push(Bind::Text(s.scope_type.clone()));
        let i = b.push(Bind::Text(s.scope_id.clone()));
        common.push(format!("scope_type = {t} AND scope_id = {i}"));
    }
    let one_arm = |b: &mut Binds, mut common: Vec<String>| {
        if !types.is_empty() {
            common.push(b.in_list("job_type", &types));
        }
        if !given.is_empty() {
            common.push(b.in_list("status", &status_names(&given)));
        }
        vec![common]
    };
    let by_status = |b: &mut Binds, conds: &[String]| -> Vec<Vec<String>> {
        statuses
            .iter()
            .map(|s| {
                let mut c = conds.to_vec();
                c.push(format!(
                    "status = {}",
                    b.push(Bind::Text(s.as_str().into()))
                ));
                c
            })
            .collect()
    };
    if f.parent_id.is_some() || f.id.is_some() {
        one_arm(b, common)
    } else if f.scope.is_some() {
        if !types.is_empty() {
            common.push(b.in_list("job_type", &types));
        }
        by_status(b, &common)
    } else if !types.is_empty() {
        if types.len() * statuses.len() > MAX_ARMS {
            return one_arm(b, common);
        }
        types
            .iter()
            .flat_map(|t| {
                let ty = format!("job_type = {}", b.push(Bind::Text(t.clone())));
                by_status(b, &[ty])
            })
            .collect()
    } else {
        by_status(b, &[])
    }
}

/// The page of `f` from the jobs table `jobs`.
pub(in crate::store) fn page_query(jobs: &str, f: &JobFilter) -> PageQuery {
    let mut b = Binds::default();
    let limit = i64::from(f.limit.unwrap_or(JobFilter::DEFAULT_LIMIT));
    let offset = i64::from(f.offset.unwrap_or(0));
    let (dir, cmp) = if f.newest_first {
        (" DESC", "<")
    } else {
        ("", ">")
    };
    let order = format!("ORDER BY created_at{dir}, id{dir}");
    let mut arms = arms(f, &mut b);
    if let Some(after) = &f.after {
        let c = b.push(Bind::Time(after.created_at));
        let i = b.push(Bind::Text(after.id.clone()));
        for arm in &mut arms {
            arm.push(format!("(created_at, id) {cmp} ({c}, {i})"));
        }
    }
    let select = |conds: &[String], limit: &str| {
        let w = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        format!(
            "SELECT {cols} FROM {jobs}{w} {order} LIMIT {limit}",
            cols = *JOB_COLS
        )
    };
    let sql = if let [only] = arms.as_slice() {
        let l = b.push(Bind::Int(limit));
        let o = b.push(Bind::Int(offset));
        format!("{} OFFSET {o}", select(only, &l))
    } else {
        let each = b.push(Bind::Int(limit.saturating_add(offset)));
        let l = b.push(Bind::Int(limit));
        let o = b.push(Bind::Int(offset));
        let union = arms
            .iter()
            .enumerate()
            .map(|(n, conds)| format!("SELECT * FROM ({}) AS a{n}", select(conds, &each)))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        format!("{union} {order} LIMIT {l} OFFSET {o}")
    };
    PageQuery { sql, binds: b.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::Scope;

    fn arm_count(f: &JobFilter) -> usize {
        page_query("jobs", f)
            .sql
            .matches("SELECT * FROM (")
            .count()
            .max(1)
    }

    #[test]
    fn each_filter_splits_into_index_ranges() {
        let mut f = JobFilter::default();
        assert_eq!(arm_count(&f), 5);
        f.statuses = vec![JobStatus::Failed, JobStatus::Failed];
        assert_eq!(arm_count(&f), 1);
        f.statuses.push(JobStatus::Pending);
        assert_eq!(arm_count(&f), 2);
        f.types = vec!["a".into(), "b".into()];
        assert_eq!(arm_count(&f), 4);
        f.statuses.clear();
        assert_eq!(arm_count(&f), 10);
        f.scope = Some(Scope::new("acct", "1"));
        assert_eq!(arm_count(&f), 5);
        f.parent_id = Some("p".into());
        assert_eq!(arm_count(&f), 1);
        let many = JobFilter {
            types: (0..20).map(|n| n.to_string()).collect(),
            ..JobFilter::default()
        };
        let q = page_query("jobs", &many);
        assert_eq!(arm_count(&many), 1);
        assert!(q.sql.contains("job_type IN ("), "{}", q.sql);
    }
}
