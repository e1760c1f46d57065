//! Two store instances on one SQLite file stand for two processes: one
//! learns of the other's commits at once (not on a poll tick), and never
//! of its own.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use boxcar_queue::store::sqlite::SqliteStore;
use boxcar_queue::store::{RescueParams, StoreEvent};
use boxcar_queue::{JobStore, NewJob, Queue, QueueOptions};
use serde_json::json;

use crate::support::eventually;

async fn two_stores() -> (tempfile::TempDir, SqliteStore, SqliteStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("boxcar.db").display());
    let first = SqliteStore::open(&url).await.expect("open");
    first.migrate().await.expect("migrate");
    let second = SqliteStore::open(&url).await.expect("open again");
    (dir, first, second)
}

/// `store`'s events, past the `Changed` its watch's first poll always
/// publishes (it has nothing to compare with yet).
async fn subscribed(store: &SqliteStore) -> tokio::sync::broadcast::Receiver<StoreEvent> {
    let mut events = store.subscribe();
    let first = tokio::time::timeout(Duration::from_secs(2), events.recv()).await;
    assert!(matches!(first, Ok(Ok(StoreEvent::Changed))), "{first:?}");
    events
}

/// The watch publishes the other instance's commits, not its own writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_other_instances_commits_are_published() {
    let (_dir, mine, other) = two_stores().await;
    let mut events = subscribed(&mine).await;

    let my_queue = Queue::new(Arc::new(mine.clone()), QueueOptions::default()).expect("queue");
    for n in 0..20 {
        my_queue
            .add(NewJob::new("t", &json!({ "n": n })))
            .await
            .expect("add");
    }
    let quiet = Instant::now() + Duration::from_millis(200);
    while let Ok(event) = tokio::time::timeout_at(quiet.into(), events.recv()).await {
        let event = event.expect("event");
        assert!(
            matches!(event, StoreEvent::Inserted(_)),
            "own writes publish no Changed: {event:?}"
        );
    }

    let queue = Queue::new(Arc::new(other), QueueOptions::default()).expect("queue");
    let start = Instant::now();
    queue.add(NewJob::new("t", &json!({}))).await.expect("add");
    let seen = tokio::time::timeout(Duration::from_secs(2), events.recv()).await;
    assert!(matches!(seen, Ok(Ok(StoreEvent::Changed))), "{seen:?}");
    println!(
        "the other instance's insert was published after {:?}",
        start.elapsed()
    );
    assert!(start.elapsed() < Duration::from_millis(100));
}

/// Writes of ours that changed nothing (an idle host's rescues, here one
/// every millisecond, so every poll of the watch sees one) hide no other
/// instance's commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_beside_our_empty_rescues_is_published() {
    let (_dir, mine, other) = two_stores().await;
    let mut events = subscribed(&mine).await;

    let rescuing = Arc::new(AtomicBool::new(true));
    let rescues = Arc::new(AtomicU32::new(0));
    let rescuer = {
        let (mine, rescuing, rescues) = (mine.clone(), rescuing.clone(), rescues.clone());
        tokio::spawn(async move {
            while rescuing.load(Ordering::Relaxed) {
                let found = mine
                    .rescue(RescueParams { limit: 100 })
                    .await
                    .expect("rescue");
                assert!(found.is_empty());
                rescues.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let queue = Queue::new(Arc::new(other), QueueOptions::default()).expect("queue");
    for n in 0..10 {
        // Each insert comes after at least two more empty rescues, however
        // slowly a loaded machine runs the rescuer.
        let seen_rescues = rescues.load(Ordering::Relaxed);
        assert!(
            eventually(Duration::from_secs(5), || {
                let rescues = rescues.clone();
                async move { rescues.load(Ordering::Relaxed) >= seen_rescues + 2 }
            })
            .await,
            "the rescuer stalled"
        );
        while events.try_recv().is_ok() {}
        queue
            .add(NewJob::new("t", &json!({ "n": n })))
            .await
            .expect("add");
        // Published within the watch's polls (milliseconds); the margin is
        // for a loaded machine. A hidden commit is never published.
        let seen = tokio::time::timeout(Duration::from_secs(1), events.recv()).await;
        assert!(
            matches!(seen, Ok(Ok(StoreEvent::Changed))),
            "insert {n}: {seen:?}"
        );
    }
    rescuing.store(false, Ordering::Relaxed);
    rescuer.await.expect("rescuer");
}

/// A watch that has seen no commit for a while polls less often, and still
/// publishes the other instance's next commit within its quiet interval
/// (32 ms), then polls fast again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_still_publishes_the_next_commit_soon() {
    let (_dir, mine, other) = two_stores().await;
    let mut events = subscribed(&mine).await;
    let queue = Queue::new(Arc::new(other), QueueOptions::default()).expect("queue");
    for n in 0..2 {
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        while events.try_recv().is_ok() {}
        let start = Instant::now();
        queue
            .add(NewJob::new("t", &json!({ "n": n })))
            .await
            .expect("add");
        let seen = tokio::time::timeout(Duration::from_secs(2), events.recv()).await;
        assert!(matches!(seen, Ok(Ok(StoreEvent::Changed))), "{seen:?}");
        println!(
            "after 2.5 s of quiet, the other instance's insert was published after {:?}",
            start.elapsed()
        );
        assert!(start.elapsed() < Duration::from_millis(150));
    }
}
