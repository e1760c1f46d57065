//! The engine's generic plans stay index reads when one job type holds the
//! whole table and the statistics say so (gathered while every job was
//! pending). Planned for a `$2` limit it cannot see, a claim once read and
//! sorted every pending job of the type (a seq scan or a full index range,
//! then a sort); completions, renewals and ownership checks walked the
//! partial lease index the statistics priced at one row, instead of
//! probing the primary key. Either slowed a backlog's drain in proportion
//! to its depth once `ANALYZE` had run.

use sqlx::Connection;

use super::due::claim_many_statement;
use super::writes::{claim_statement, complete_statement};
use super::{plan_once, PostgresStore};
use crate::engine::unstorable_tests::postgres;
use crate::job::NewJob;
use crate::options::QueueOptions;
use crate::queue::Queue;

/// Pending jobs of the one type in the table: enough that reading them
/// all costs the planner more than a handful of index probes.
const BACKLOG: usize = 5_000;

/// The generic plan of `statement` (parameter types `types`, or inferred
/// when empty) for `args`, as the store's engine connections make it.
async fn generic_plan(store: &PostgresStore, statement: &str, types: &str, args: &str) -> String {
    let mut conn = store.pool().acquire().await.expect("connection").detach();
    plan_once(&mut conn).await.expect("planner settings");
    let types = if types.is_empty() {
        String::new()
    } else {
        format!("({types})")
    };
    sqlx::query(&format!("PREPARE claim{types} AS {statement}"))
        .execute(&mut conn)
        .await
        .expect("prepare");
    let lines: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN EXECUTE claim({args})"))
        .fetch_all(&mut conn)
        .await
        .expect("explain");
    conn.close().await.expect("close");
    lines.join("\n")
}

/// A plan that reads only the jobs it claims: no scan of the whole table
/// and no sort of the type's pending jobs.
fn assert_index_reads(plan: &str) {
    assert!(
        !plan.contains("Seq Scan") && !plan.contains("Sort"),
        "the claim's generic plan reads the whole type:\n{plan}"
    );
}

/// A plan that finds its rows by primary key, not through the lease index.
fn assert_primary_key_reads(plan: &str) {
    assert!(
        plan.contains("jobs_pkey") && !plan.contains("jobs_lease") && !plan.contains("Seq Scan"),
        "the statement's generic plan does not probe the primary key:\n{plan}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_statements_read_only_their_rows_when_one_type_fills_the_table() {
    let Some(store) = postgres().await else {
        return;
    };
    let queue = Queue::new(store.clone(), QueueOptions::default()).expect("queue");
    for _ in 0..BACKLOG / 1_000 {
        let jobs = (0..1_000)
            .map(|i| NewJob::new("big", &serde_json::json!({ "i": i })))
            .collect();
        queue.add_many(jobs).await.expect("enqueue");
    }
    sqlx::query(&format!("ANALYZE {}", store.sql.jobs))
        .execute(store.pool())
        .await
        .expect("analyze");

    let one_type = generic_plan(
        &store,
        &claim_statement(&store),
        "text, int8, text, text, int8, text, text",
        "'big', 16, 'expired', 'worker', 30000, NULL, 'expired'",
    )
    .await;
    assert_index_reads(&one_type);
    let many_types = generic_plan(
        &store,
        &claim_many_statement(&store),
        "text[], int8[], int8[], text[], text, text, text",
        "ARRAY['big'], ARRAY[16]::int8[], ARRAY[30000]::int8[], ARRAY[NULL]::text[], \
         'expired', 'worker', 'expired'",
    )
    .await;
    assert_index_reads(&many_types);

    let figures = ", ARRAY[1]::int8[]".repeat(8);
    let completion = generic_plan(
        &store,
        &complete_statement(&store.sql),
        "",
        &format!("ARRAY['id'], ARRAY[NULL]::text[], 'worker', ARRAY[1], 'channel', '[]'{figures}"),
    )
    .await;
    assert_primary_key_reads(&completion);
    for fenced in [store.sql.renew(), store.sql.still_owned()] {
        let args = if fenced.contains("$4") {
            "30000, ARRAY['id'], ARRAY[1], 'worker'"
        } else {
            "ARRAY['id'], ARRAY[1], 'worker'"
        };
        assert_primary_key_reads(&generic_plan(&store, &fenced, "", args).await);
    }
    store.drop_schema().await.expect("drop schema");
}
