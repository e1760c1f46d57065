//! Known types and job defaults come from store state, not from whoever
//! enqueues: a type deployed once is still known to `boxcar enqueue` after
//! more than 10,000 later handler events, and a job of a type whose
//! manifest says `max_attempts = 1` runs at most once whether the CLI in
//! another process, the SQL function, the Rust API or the HTTP API of a
//! host that does not serve the type enqueued it.

use std::time::Duration;

use boxcar_queue::{connect, HandlerEventKind, NewJob, Queue, QueueOptions};
use serde_json::{json, Value};

use crate::{
    api::http,
    harness::{describe, eventually, postgres_schema, Env},
};

/// Retryable on every attempt: a second attempt would be a retry.
const ALWAYS_RETRY: &str = r#"{"succeed_on": 99}"#;

const ONCE: &str = "[handler]\njob_type = \"once\"\ntimeout = \"10s\"\nmax_attempts = 1\n";

#[test]
fn a_type_deployed_once_stays_known_after_ten_thousand_handler_events() {
    let env = Env::sqlite();
    env.fast_config("");
    env.deploy("echo", "echo", "[handler]\njob_type = \"echo\"\n");
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let queue = Queue::new(connect(&env.db).await.expect("connect"), Default::default())
            .expect("queue");
        for n in 0..10_001 {
            queue
                .record_handler_event(
                    HandlerEventKind::Rejected,
                    None,
                    Some(&format!("broken-{n}")),
                    None,
                    Some("not a component"),
                )
                .await
                .expect("event");
        }
    });

    env.ok(&["enqueue", "echo", "{}"]);
    let never = env.run(&["enqueue", "never.deployed", "{}"]);
    assert_eq!(never.status.code(), Some(2), "{}", describe(&never));
}

/// A job's final row once it is terminal.
fn finished(env: &Env, id: &str) -> Value {
    eventually(Duration::from_secs(30), "the job to finish", || {
        let job = env.json(&["job", id]);
        (job["status"] == "failed" || job["status"] == "succeeded").then_some(job)
    })
}

/// Host `a` serves `once`; host `b` (same database, no handlers) only
/// serves the API. Enqueues through every producer; returns the job ids.
fn enqueue_from_every_producer(env: &Env, sql_schema: Option<&str>) -> Vec<(&'static str, String)> {
    env.fast_config("");
    env.deploy("once", "flaky", ONCE);
    let a = env.serve("a", &[]);
    a.wait_for_log("handler deployed", Duration::from_secs(60));
    let elsewhere = Env::with_db(env.db.clone());
    elsewhere.fast_config("");
    let b = elsewhere.serve("b", &[]);
    b.wait_for_log("HTTP API listening", Duration::from_secs(60));

    let mut ids = Vec::new();
    let cli = env.ok(&["enqueue", "once", ALWAYS_RETRY]);
    ids.push(("cli", cli.trim().to_string()));

    let body = json!({"job_type": "once", "payload": {"succeed_on": 99}}).to_string();
    let (status, added) = http(&b.listen, "POST", "/jobs", Some(&body), None);
    assert_eq!(status, 201, "{added}");
    ids.push((
        "http elsewhere",
        added["id"].as_str().expect("id").to_string(),
    ));

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let queue = Queue::new(
            connect(&env.db).await.expect("connect"),
            QueueOptions::default(),
        )
        .expect("queue");
        let payload: Value = serde_json::from_str(ALWAYS_RETRY).expect("payload");
        let added = queue
            .add(NewJob::new("once", &payload))
            .await
            .expect("rust enqueue");
        ids.push(("rust", added.id));
        if let Some(schema) = sql_schema {
            let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
            let pool = sqlx::PgPool::connect(&base).await.expect("pg");
            let id: String = sqlx::query_scalar(&format!(
                "SELECT id FROM {schema}.add_job('once', '{ALWAYS_RETRY}'::jsonb)"
            ))
            .fetch_one(&pool)
            .await
            .expect("add_job");
            ids.push(("sql", id));
        }
    });
    for (producer, id) in &ids {
        let job = finished(env, id);
        assert_eq!(
            (&job["status"], &job["attempts"], &job["max_attempts"]),
            (&json!("failed"), &json!(1), &json!(1)),
            "enqueued by {producer}: {job}"
        );
    }
    ids
}

#[test]
fn the_manifests_max_attempts_holds_for_every_producer_on_sqlite() {
    let env = Env::sqlite();
    let ids = enqueue_from_every_producer(&env, None);
    assert_eq!(ids.len(), 3);
}

#[test]
fn the_manifests_max_attempts_holds_for_every_producer_on_postgres() {
    let Some((url, drop_schema)) = postgres_schema("defaults") else {
        return;
    };
    let env = Env::with_db(url);
    let ids = enqueue_from_every_producer(&env, Some(&drop_schema.schema));
    assert_eq!(ids.len(), 4);
}
