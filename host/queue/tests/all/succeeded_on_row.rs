//! A succeeded attempt lives on its job's row (SQL stores): a completion
//! writes no attempt row, the history still lists that attempt once with
//! its worker and figures, and a success recorded as an attempt row (as
//! before the job row kept it) is listed once, not twice.

use std::time::Duration;

use boxcar_queue::attempt::AttemptEnd;
use boxcar_queue::store::{ClaimParams, CompleteParams, Completed};
use boxcar_queue::{AttemptOutcome, AttemptUsage, ClaimGuards, NewJob};
use serde_json::json;

use crate::support::{Backend, Fixture};

/// Runs `sql` (with `{jobs}` and `{attempts}` standing for the fixture's
/// tables) on the fixture's database; answers the first column of the
/// first row, if the statement returns one.
async fn raw(fx: &Fixture, sql: &str) -> Option<i64> {
    match fx.backend {
        Backend::Sqlite => {
            let sql = sql
                .replace("{jobs}", "boxcar_jobs")
                .replace("{attempts}", "boxcar_job_attempts");
            let pool = sqlx::SqlitePool::connect(&fx.url).await.expect("sqlite");
            let got = sqlx::query_scalar(&sql)
                .fetch_optional(&pool)
                .await
                .expect("raw sqlite");
            pool.close().await;
            got
        }
        Backend::Postgres => {
            let pg = fx.postgres().expect("postgres fixture");
            let schema = pg.schema();
            let sql = sql
                .replace("{jobs}", &format!("{schema}.jobs"))
                .replace("{attempts}", &format!("{schema}.job_attempts"));
            sqlx::query_scalar(&sql)
                .fetch_optional(pg.pool())
                .await
                .expect("raw postgres")
        }
        Backend::Memory => unreachable!("SQL stores only"),
    }
}

async fn completed_once(fx: &Fixture) {
    let q = fx.queue();
    let id = q.add(NewJob::new("t", &json!({}))).await.unwrap().id;
    let claimed = fx
        .store
        .claim_batch(ClaimParams {
            worker_id: "w1".into(),
            job_type: "t".into(),
            limit: 1,
            lease: Duration::from_secs(60),
            handler_version: Some("sha-a".into()),
            guards: ClaimGuards::default(),
        })
        .await
        .unwrap()
        .claimed;
    assert_eq!(claimed.len(), 1);
    let usage = AttemptUsage {
        wall_ms: Some(3),
        peak_memory_bytes: Some(65_536),
        fuel: Some(u64::MAX),
        log_bytes: None,
        result_bytes: Some(4),
        http_requests: Some(0),
        http_bytes: None,
        enqueues: Some(1),
    };
    let done = fx
        .store
        .complete(CompleteParams {
            worker_id: "w1".into(),
            jobs: vec![Completed {
                id: id.clone(),
                attempt: 1,
                result: Some("true".into()),
                ending: AttemptEnd {
                    outcome: Some(AttemptOutcome::TimedOut),
                    usage: usage.clone(),
                    logs: Vec::new(),
                },
            }],
        })
        .await
        .unwrap();
    assert_eq!(done, vec![id.clone()]);
    let rows = raw(
        fx,
        &format!("SELECT count(*) FROM {{attempts}} WHERE job_id = '{id}'"),
    )
    .await;
    assert_eq!(rows, Some(0), "a completion writes no attempt row");
    let attempts = fx.store.attempts(&id).await.unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    let a = &attempts[0];
    assert_eq!(
        (
            a.attempt,
            a.outcome,
            a.worker.as_deref(),
            a.digest.as_deref()
        ),
        (1, AttemptOutcome::Succeeded, Some("w1"), Some("sha-a")),
        "a completion's attempt is a success, whatever outcome its ending names"
    );
    let expected = AttemptUsage {
        fuel: Some(i64::MAX as u64),
        ..usage
    };
    assert_eq!(a.usage, expected, "figures saturate at the column's range");
    assert!(a.started_at.is_some() && a.finished_at.is_some());
    assert_eq!((a.error.as_deref(), a.error_code.as_deref()), (None, None));

    // The same success as a store written before the job row kept it: an
    // attempt row, and no worker on the job row.
    raw(
        fx,
        &format!("UPDATE {{jobs}} SET finished_by = NULL, wall_ms = NULL WHERE id = '{id}'"),
    )
    .await;
    raw(
        fx,
        &format!(
            "INSERT INTO {{attempts}} (job_id, attempt, worker, digest, started_at, finished_at, \
               outcome, wall_ms) \
             SELECT id, attempts, 'w0', handler_version, started_at, finished_at, 'succeeded', 9 \
             FROM {{jobs}} WHERE id = '{id}'"
        ),
    )
    .await;
    let attempts = fx.store.attempts(&id).await.unwrap();
    assert_eq!(attempts.len(), 1, "listed once: {attempts:?}");
    assert_eq!(
        (attempts[0].worker.as_deref(), attempts[0].usage.wall_ms),
        (Some("w0"), Some(9))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keeps_a_succeeded_attempt_on_the_job_row() {
    let fx = Fixture::new(Backend::Sqlite).await.expect("sqlite fixture");
    completed_once(&fx).await;
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_a_succeeded_attempt_on_the_job_row() {
    let Some(fx) = Fixture::new(Backend::Postgres).await else {
        return;
    };
    completed_once(&fx).await;
    fx.finish().await;
}
