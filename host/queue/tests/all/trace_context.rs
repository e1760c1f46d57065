//! The producer's `traceparent` through the Postgres `add_job` SQL
//! function: stored as given, optional, and a malformed one refused with
//! the W3C format in the error.

use std::sync::Arc;

use boxcar_queue::store::postgres::PostgresStore;

use crate::support::{Backend, Fixture};

const PRODUCER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test]
async fn postgres_add_job_stores_and_checks_the_traceparent() {
    let Some(fx) = Fixture::new(Backend::Postgres).await else {
        return;
    };
    let pg: &Arc<PostgresStore> = fx.postgres().unwrap();
    let pool = pg.pool().clone();
    let schema = pg.schema().to_string();
    let add = |args: &str| format!("SELECT id FROM {schema}.add_job({args})");

    let traced: String = sqlx::query_scalar(&add("'t', '{}'::jsonb, traceparent => $1"))
        .bind(PRODUCER)
        .fetch_one(&pool)
        .await
        .unwrap();
    let positional: String = sqlx::query_scalar(&add(
        "'t', '{}'::jsonb, NULL, NULL, NULL, NULL, NULL, 0, NULL, $1",
    ))
    .bind(PRODUCER)
    .fetch_one(&pool)
    .await
    .unwrap();
    let plain: String = sqlx::query_scalar(&add("'t', '{}'::jsonb"))
        .fetch_one(&pool)
        .await
        .unwrap();
    let q = fx.queue();
    for (id, expected) in [
        (traced, Some(PRODUCER)),
        (positional, Some(PRODUCER)),
        (plain, None),
    ] {
        let job = q.get(&id).await.unwrap().unwrap();
        assert_eq!(job.traceparent.as_deref(), expected, "job {id}");
    }

    for bad in [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-00",
        "",
    ] {
        let error = sqlx::query_scalar::<_, String>(&add("'t', '{}'::jsonb, traceparent => $1"))
            .bind(bad)
            .fetch_one(&pool)
            .await
            .expect_err(bad)
            .to_string();
        assert!(
            error.contains("traceparent is not a W3C trace context"),
            "{bad:?}: {error}"
        );
    }
    assert_eq!(
        q.count_by_status().await.unwrap().pending,
        3,
        "refused calls write nothing"
    );
}
