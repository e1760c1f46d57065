//! The SQLite store's pool hands out connections outside any transaction,
//! whatever the previous user left open on them.

use std::sync::Arc;
use std::time::Duration;

use boxcar_queue::store::sqlite::SqliteStore;
use boxcar_queue::{JobStore, NewJob, Queue, QueueOptions};
use serde_json::json;

/// A connection given back inside a transaction its user began by hand (and
/// wrote in) is rolled back before anyone else gets it: the store's next
/// writes neither fail inside that transaction nor wait on its write lock,
/// they commit, and the abandoned write is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_returned_inside_a_transaction_is_rolled_back_before_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("boxcar.db").display());
    let store = SqliteStore::open(&url).await.unwrap();
    store.migrate().await.unwrap();
    {
        let mut conn = store.pool().acquire().await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO boxcar_handler_events (job_type, file, digest, kind, reason, at) \
             VALUES ('abandoned', 'f', 'd', 'deployed', NULL, 0)",
        )
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    let queue = Queue::new(Arc::new(store.clone()), QueueOptions::default()).unwrap();
    for n in 0..3 {
        let add = queue.add(NewJob::new("t", &json!({ "n": n })));
        let added = tokio::time::timeout(Duration::from_secs(10), add)
            .await
            .expect("the write does not wait on the abandoned transaction's lock")
            .expect("the write does not run inside the abandoned transaction");
        let elsewhere = SqliteStore::open(&url).await.unwrap();
        assert!(
            elsewhere.get(&added.id).await.unwrap().is_some(),
            "the job is committed, visible to another connection"
        );
    }
    let events = store.handler_events(100).await.unwrap();
    assert!(
        events
            .iter()
            .all(|e| e.job_type.as_deref() != Some("abandoned")),
        "the abandoned write was rolled back: {events:?}"
    );
}
