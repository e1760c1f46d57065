//! Inserts wake the other hosts on Postgres: every way a job gets in (the
//! Rust insert with and without dedupe keys, a batch of
//! several types, the SQL function `add_job`) notifies its job type on the
//! schema's insert channel when it commits, and a rolled-back insert
//! notifies nothing. Every way a job ends (a completion batch, a failure,
//! a cancellation) announces its id on the finished channel.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use boxcar_queue::store::{ClaimParams, CompleteParams, FailParams, StoreEvent};
use boxcar_queue::{ClaimGuards, NewJob, Queue, QueueOptions};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::broadcast::Receiver;

use crate::support::{success, Backend, Fixture};

/// What `pick` takes from the events `events` relays until `enough` holds
/// for it (or 10 s pass).
async fn relayed_until(
    events: &mut Receiver<StoreEvent>,
    pick: fn(StoreEvent) -> Option<String>,
    enough: impl Fn(&HashSet<String>) -> bool,
) -> HashSet<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = HashSet::new();
    while !enough(&seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.recv()).await {
            Ok(Ok(ev)) => seen.extend(pick(ev)),
            Ok(Err(RecvError::Lagged(_))) => {}
            Ok(Err(RecvError::Closed)) | Err(_) => break,
        }
    }
    seen
}

/// The insert notifications `events` relays until `last` arrives.
async fn inserted_until(events: &mut Receiver<StoreEvent>, last: &str) -> HashSet<String> {
    let inserted = |ev| match ev {
        StoreEvent::Inserted(t) => Some(t),
        _ => None,
    };
    relayed_until(events, inserted, |seen| seen.contains(last)).await
}

/// The finished announcements `events` relays until every id of `ids` was
/// seen.
async fn finished_until(
    events: &mut Receiver<StoreEvent>,
    ids: &HashSet<String>,
) -> HashSet<String> {
    let finished = |ev| match ev {
        StoreEvent::Finished(id) => Some(id),
        _ => None,
    };
    relayed_until(events, finished, |seen| ids.is_subset(seen)).await
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

/// A completion batch announces each of its ids (70 jobs: more than one
/// notification carries, so several), and a failure and a cancellation
/// theirs; another host's relay hears all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_finished_job_is_announced_by_its_id() {
    let Some(fx) = Fixture::new(Backend::Postgres).await else {
        return;
    };
    let mut events = fx.store.subscribe();
    let worker = fx.reopen().await;
    let queue = Queue::new(worker.clone(), QueueOptions::default()).unwrap();
    let payload = serde_json::json!({});
    queue
        .add_many((0..71).map(|_| NewJob::new("ends", &payload)).collect())
        .await
        .unwrap();
    let claimed = worker
        .claim_batch(ClaimParams {
            worker_id: "w1".into(),
            job_type: "ends".into(),
            limit: 100,
            lease: Duration::from_secs(60),
            handler_version: None,
            guards: ClaimGuards::default(),
        })
        .await
        .unwrap()
        .claimed;
    assert_eq!(claimed.len(), 71);
    let (succeeding, failing) = claimed.split_at(70);
    let completed = worker
        .complete(CompleteParams {
            worker_id: "w1".into(),
            jobs: succeeding.iter().map(|j| success(j, None)).collect(),
        })
        .await
        .unwrap();
    assert_eq!(completed.len(), 70);
    let failed = &failing[0];
    assert!(worker
        .fail(FailParams {
            worker_id: "w1".into(),
            id: failed.id.clone(),
            attempt: failed.attempts,
            error: "no".into(),
            code: None,
            details: None,
            ending: Default::default(),
        })
        .await
        .unwrap());
    let cancelled = queue.add(NewJob::new("ends", &payload)).await.unwrap().id;
    assert!(queue.cancel(&cancelled, "not wanted").await.unwrap());

    let mut expected: HashSet<String> = claimed.iter().map(|j| j.id.clone()).collect();
    expected.insert(cancelled);
    let seen = finished_until(&mut events, &expected).await;
    let missing: Vec<&String> = expected.difference(&seen).collect();
    assert!(missing.is_empty(), "not announced: {missing:?}");
    fx.finish().await;
}
