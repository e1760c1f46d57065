//! Known types from store state: a type some host recorded recently is
//! known at enqueue however many handler events followed its deploy; it
//! stops being known once no host recorded it within `LIVE_WITHIN` (its
//! defaults still apply until `FORGET_AFTER`), and at once on undeploy.
//! The SQL function `add_job` and a caller's transaction take a type's
//! default attempt budget from the same state.

use std::sync::Arc;
use std::time::Duration;

use boxcar_queue::bench::NoopHandler;
use boxcar_queue::deployed::{FORGET_AFTER, LIVE_WITHIN};
use boxcar_queue::store::memory::MemoryStore;
use boxcar_queue::store::sqlite::SqliteStore;
use boxcar_queue::{
    EnqueueError, HandlerEventKind, HandlerSettings, ManualClock, NewJob, Queue, QueueError,
    QueueOptions, Registry,
};
use serde_json::json;

use crate::support::{Backend, Fixture};

/// A host registry serving `job_type` with `max_attempts`, recorded under `host`.
fn serving(host: &str, job_type: &str, max_attempts: Option<u32>) -> Arc<Registry> {
    let registry = Registry::new();
    registry.set_host_id(host);
    let mut settings = HandlerSettings::default();
    settings.max_attempts = max_attempts;
    registry
        .register(job_type, Arc::new(NoopHandler), settings)
        .unwrap();
    registry
}

fn unknown(result: Result<boxcar_queue::AddResult, QueueError>) -> bool {
    matches!(
        result,
        Err(QueueError::Enqueue(EnqueueError::UnknownJobType { .. }))
    )
}

#[tokio::test]
async fn a_type_deployed_once_stays_known_after_more_than_ten_thousand_handler_events() {
    let clock = ManualClock::new(chrono::Utc::now());
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let host = Queue::new(store.clone(), QueueOptions::default()).unwrap();
    let registry = serving("host-1", "report", Some(1));
    host.record_deployed_types(&registry).await.unwrap();
    for n in 0..10_001 {
        host.record_handler_event(
            HandlerEventKind::Rejected,
            None,
            Some(&format!("broken-{n}.wasm")),
            None,
            Some("not a component"),
        )
        .await
        .unwrap();
    }

    let producer = Queue::new(store.clone(), QueueOptions::default()).unwrap();
    let known = Registry::new();
    producer.refresh_known_types(&known).await.unwrap();
    producer.attach_registry(known.clone());
    let added = producer
        .add(NewJob::new("report", &json!({})))
        .await
        .expect("the deployed type is known");
    let job = producer.get(&added.id).await.unwrap().unwrap();
    assert_eq!(job.max_attempts, 1, "with its manifest's defaults");
    assert!(unknown(
        producer.add(NewJob::new("never", &json!({}))).await
    ));

    clock.advance(LIVE_WITHIN + Duration::from_secs(1));
    producer.refresh_known_types(&known).await.unwrap();
    assert!(
        unknown(producer.add(NewJob::new("report", &json!({}))).await),
        "no host recorded it within LIVE_WITHIN"
    );
    let unchecked = Queue::new(store.clone(), QueueOptions::default()).unwrap();
    let id = unchecked
        .add(NewJob::new("report", &json!({})))
        .await
        .unwrap()
        .id;
    assert_eq!(
        unchecked.get(&id).await.unwrap().unwrap().max_attempts,
        1,
        "its defaults outlive its liveness"
    );

    host.record_deployed_types(&registry).await.unwrap();
    producer.refresh_known_types(&known).await.unwrap();
    producer
        .add(NewJob::new("report", &json!({})))
        .await
        .expect("a heartbeat makes it live again");

    registry.remove("report");
    host.record_deployed_types(&registry).await.unwrap();
    producer.refresh_known_types(&known).await.unwrap();
    assert!(
        unknown(producer.add(NewJob::new("report", &json!({}))).await),
        "an undeploy makes it unknown at once"
    );
}

#[tokio::test]
async fn rows_of_a_host_gone_for_forget_after_are_deleted_by_any_record() {
    let clock = ManualClock::new(chrono::Utc::now());
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let queue = Queue::new(store, QueueOptions::default()).unwrap();
    queue
        .record_deployed_types(&serving("dead", "report", Some(1)))
        .await
        .unwrap();
    clock.advance(FORGET_AFTER - Duration::from_secs(1));
    let other = serving("alive", "mail", None);
    queue.record_deployed_types(&other).await.unwrap();
    assert_eq!(queue.store().deployed_types().await.unwrap().len(), 2);
    clock.advance(Duration::from_secs(2));
    queue.record_deployed_types(&other).await.unwrap();
    let left = queue.store().deployed_types().await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].host, "alive");
}

#[tokio::test]
async fn the_sql_function_and_a_callers_transaction_take_the_types_default() {
    let Some(fx) = Fixture::new(Backend::Postgres).await else {
        return;
    };
    let pg = fx.postgres().unwrap().clone();
    let schema = pg.schema().to_string();
    let q = fx.queue();
    q.record_deployed_types(&serving("host-1", "report", Some(1)))
        .await
        .unwrap();
    let pool = pg.pool();
    let sql = |args: &str| format!("SELECT id FROM {schema}.add_job({args})");
    let budget_of = |args: &'static str| {
        let (q, statement) = (q.clone(), sql(args));
        async move {
            let id: String = sqlx::query_scalar(&statement)
                .fetch_one(pool)
                .await
                .unwrap();
            q.get(&id).await.unwrap().unwrap().max_attempts
        }
    };
    let cases = [
        ("'report', '{}'::jsonb", 1, "the manifest's max_attempts"),
        (
            "'report', '{}'::jsonb, max_attempts => NULL",
            1,
            "NULL asks for the type's default",
        ),
        (
            "'report', '{}'::jsonb, max_attempts => 5",
            5,
            "the caller's value wins",
        ),
        (
            "'unserved', '{}'::jsonb",
            3,
            "no deploy: the built-in default",
        ),
    ];
    for (args, expected, why) in cases {
        assert_eq!(budget_of(args).await, expected, "{why}");
    }
    let refused = sqlx::query(&sql("'report', '{}'::jsonb, max_attempts => 0"))
        .fetch_one(pool)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("positive integer"),
        "{refused}"
    );

    let mut tx = pool.begin().await.unwrap();
    let id = q
        .add_in_tx(&mut *tx, NewJob::new("report", &json!({})))
        .await
        .unwrap()
        .id;
    tx.commit().await.unwrap();
    assert_eq!(
        q.get(&id).await.unwrap().unwrap().max_attempts,
        1,
        "through the caller's transaction"
    );
    fx.finish().await;
}

#[tokio::test]
async fn a_sqlite_callers_transaction_takes_the_types_default() {
    let fx = Fixture::new(Backend::Sqlite).await.unwrap();
    let sqlite = SqliteStore::open(&fx.url).await.unwrap();
    let pool = sqlite.pool().clone();
    let q = Queue::new(Arc::new(sqlite), QueueOptions::default()).unwrap();
    q.record_deployed_types(&serving("host-1", "report", Some(1)))
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let id = q
        .add_in_tx(&mut *tx, NewJob::new("report", &json!({})))
        .await
        .unwrap()
        .id;
    tx.commit().await.unwrap();
    assert_eq!(q.get(&id).await.unwrap().unwrap().max_attempts, 1);
}
