//! Inserts wake the other hosts on Postgres: every way a job gets in (the
//! Rust insert with and without dedupe keys, a batch of
//! several types, the SQL function `add_job`) notifies its job type on the
//! schema's insert channel when it commits, and a rolled-back insert
//! notifies nothing.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use boxcar_queue::store::StoreEvent;
use boxcar_queue::{NewJob, Queue, QueueOptions};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::broadcast::Receiver;

use crate::support::{Backend, Fixture};

/// The insert notifications `events` relays until `last` arrives (or
/// 10 s pass).
async fn inserted_until(events: &mut Receiver<StoreEvent>, last: &str) -> HashSet<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = HashSet::new();
    while !seen.contains(last) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.recv()).await {
            Ok(Ok(StoreEvent::Inserted(t))) => {
                seen.insert(t);
            }
            Ok(Ok(_)) | Ok(Err(RecvError::Lagged(_))) => {}
            Ok(Err(RecvError::Closed)) | Err(_) => break,
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_insert_notifies_its_types_and_a_rolled_back_one_none() {
    let Some(fx) = Fixture::new(Backend::Postgres).await else {
        return;
    };
    let mut events = fx.store.subscribe();
    let producer = Queue::new(fx.reopen().await, QueueOptions::default()).unwrap();
    let payload = serde_json::json!({});

    producer
        .add_many(vec![
            NewJob::new("plain.a", &payload),
            NewJob::new("plain.b", &payload),
            NewJob::new("plain.a", &payload),
        ])
        .await
        .unwrap();
    let seen = inserted_until(&mut events, "plain.b").await;
    assert!(
        seen.contains("plain.a") && seen.contains("plain.b"),
        "{seen:?}"
    );

    producer
        .add(NewJob::new("keyed", &payload).dedupe_key("k"))
        .await
        .unwrap();
    let seen = inserted_until(&mut events, "keyed").await;
    assert!(seen.contains("keyed"), "a deduplicating insert: {seen:?}");

    let pg = fx.postgres().unwrap();
    let mut tx = pg.pool().begin().await.unwrap();
    producer
        .add_in_tx(&mut *tx, NewJob::new("rolled.back", &payload))
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let schema = fx.url.rsplit("schema=").next().unwrap().to_string();
    sqlx::query(&format!(
        "SELECT id FROM {schema}.add_job('by.sql', '{{}}'::jsonb)"
    ))
    .execute(pg.pool())
    .await
    .unwrap();
    let seen = inserted_until(&mut events, "by.sql").await;
    assert!(seen.contains("by.sql"), "add_job: {seen:?}");
    assert!(
        !seen.contains("rolled.back"),
        "a rolled-back insert wakes no one: {seen:?}"
    );
    fx.finish().await;
}
