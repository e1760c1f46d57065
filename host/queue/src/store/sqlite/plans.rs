//! Query plans of the hot statements on SQLite, checked: with the default
//! (statistics-free) planner, a claim walks `boxcar_jobs_claim` in claim
//! order and stops at its `LIMIT`. Offered `run_at <= now` as a usable
//! range, the planner preferred `boxcar_jobs_due` (`job_type, run_at`) for
//! the guarded claim's candidate read, then sorted every due job of the
//! type to find the first few: its cost grew with the backlog (13 ms per
//! claim with 22,000 jobs queued, against 0.2 ms walking the claim index),
//! so that read hides `run_at` from the planner.
//!
//! The reads that lost an index of their own to save writes are checked
//! too: a type's running jobs come from the `(job_type, status)` range of
//! `boxcar_jobs_type_created`, and the unfiltered jobs list from one range
//! of `boxcar_jobs_status_created` per status.

use std::time::Duration;

use sqlx::Row;

use super::SqliteStore;
use crate::store::sql::Dialect;
use crate::store::{JobStore, TypeClaim};

/// The plan lines of `sql` (bound with `binds` integers) on a migrated
/// store.
async fn plan(sql: &str, binds: usize) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(&dir.path().join("plans.db").display().to_string())
        .await
        .expect("open");
    store.migrate().await.expect("migrate");
    let explain = format!("EXPLAIN QUERY PLAN {sql}");
    let mut query = sqlx::query(&explain);
    for i in 0..binds {
        query = query.bind(i64::try_from(i).expect("small"));
    }
    query
        .fetch_all(&store.own)
        .await
        .expect("explain")
        .iter()
        .map(|r| r.get::<String, _>("detail"))
        .collect()
}

/// How many plan lines mention `needle`.
fn lines_with(lines: &[String], needle: &str) -> usize {
    lines.iter().filter(|l| l.contains(needle)).count()
}

fn assert_reads_no_whole_table(lines: &[String]) {
    assert_eq!(
        lines_with(lines, "SCAN boxcar_jobs"),
        0,
        "no scan of the jobs: {lines:?}"
    );
}

fn assert_walks_claim_index(lines: &[String]) {
    assert!(
        lines.iter().any(|l| l.contains("boxcar_jobs_claim")),
        "the claim index is used: {lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("TEMP B-TREE FOR ORDER BY")),
        "no sort of the type's due jobs: {lines:?}"
    );
}

#[tokio::test]
async fn a_guarded_claims_candidates_walk_the_claim_index() {
    assert_walks_claim_index(&plan(&Dialect::sqlite().candidates(), 3).await);
}

#[tokio::test]
async fn an_unguarded_claim_walks_the_claim_index() {
    let claim = TypeClaim {
        job_type: "t".into(),
        limit: 16,
        lease: Duration::from_secs(30),
        handler_version: None,
    };
    assert_walks_claim_index(&plan(&super::due::claim_sql(&[claim]), 6).await);
}

#[tokio::test]
async fn a_claims_busy_scopes_read_walks_the_running_jobs_only() {
    let lines = plan(&Dialect::sqlite().busy_scope_ids(), 3).await;
    assert!(
        !lines.iter().any(|l| l.contains("boxcar_jobs_scope")),
        "not every job of the scope type: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("boxcar_jobs_lease") || l.contains("boxcar_jobs_status_created")),
        "an index of the running jobs: {lines:?}"
    );
}

#[tokio::test]
async fn a_types_running_jobs_are_read_from_the_type_index() {
    for sql in [
        Dialect::sqlite().live_types(),
        Dialect::sqlite().waiting_types(),
        Dialect::sqlite().live_counts(),
    ] {
        let lines = plan(&sql, 2).await;
        assert!(
            lines_with(&lines, "boxcar_jobs_type_created (job_type=? AND status=?)") > 0,
            "the (type, running) range: {lines:?}"
        );
        assert_reads_no_whole_table(&lines);
    }
}

#[tokio::test]
async fn the_unfiltered_jobs_list_reads_one_status_range_per_status() {
    let page = crate::store::sql::page_query("boxcar_jobs", &crate::JobFilter::default());
    let lines = plan(&page.sql, page.binds.len()).await;
    assert_eq!(
        lines_with(&lines, "boxcar_jobs_status_created (status=?)"),
        5,
        "{lines:?}"
    );
    assert_reads_no_whole_table(&lines);
}

/// The fenced writes over a list of claims (renew, release, ownership)
/// walk the bound claims once and look each job up by its primary key;
/// a join of the ids' and the attempts' `json_each` on their keys was a
/// nested loop over both lists.
#[tokio::test]
async fn a_claims_list_is_walked_once() {
    let sql = Dialect::sqlite();
    for (statement, binds) in [(sql.renew(), 5), (sql.release(), 4), (sql.still_owned(), 3)] {
        let lines = plan(&statement, binds).await;
        assert_eq!(
            lines_with(&lines, "VIRTUAL TABLE"),
            lines_with(&lines, "LIST SUBQUERY"),
            "one json_each walk per list of claims: {lines:?}"
        );
        assert_reads_no_whole_table(&lines);
    }
}
