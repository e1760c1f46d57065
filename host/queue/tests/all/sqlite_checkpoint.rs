//! The SQLite store checkpoints its WAL beside its writers, not inside
//! their commits: after a burst of writes every frame is copied back
//! within moments, and under continuous writes the WAL still starts over.
//! Read from the WAL-index header in the `-shm` file (SQLite's documented
//! format, native byte order): `mxFrame` (frames in the WAL) at byte 16,
//! `nBackfill` (frames copied back) at byte 96.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use boxcar_queue::store::sqlite::SqliteStore;
use boxcar_queue::{JobStore, NewJob, Queue, QueueOptions};
use serde_json::json;

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(word)
}

/// `(mxFrame, nBackfill)` of the database at `db`.
fn wal_frames(db: &Path) -> (u32, u32) {
    let mut shm = db.as_os_str().to_owned();
    shm.push("-shm");
    let bytes = std::fs::read(PathBuf::from(shm)).expect("read the -shm file");
    (u32_at(&bytes, 16), u32_at(&bytes, 96))
}

async fn open(dir: &tempfile::TempDir) -> (PathBuf, SqliteStore, Queue) {
    let db = dir.path().join("boxcar.db");
    let store = SqliteStore::open(&format!("sqlite://{}", db.display()))
        .await
        .expect("open");
    store.migrate().await.expect("migrate");
    let queue = Queue::new(Arc::new(store.clone()), QueueOptions::default()).expect("queue");
    (db, store, queue)
}

async fn add_batch(queue: &Queue, n: usize) {
    let jobs = (0..n)
        .map(|i| NewJob::new("t", &json!({ "n": i, "pad": "x".repeat(200) })))
        .collect();
    queue.add_many(jobs).await.expect("add_many");
}

/// A burst of writes leaves frames in the WAL (no commit copied them back);
/// the store's task copies every one back shortly after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_writes_is_checkpointed_beside_the_writers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, _store, queue) = open(&dir).await;
    for _ in 0..5 {
        add_batch(&queue, 500).await;
    }
    queue
        .add(NewJob::new("t", &json!({ "last": true })))
        .await
        .expect("add");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (frames, copied) = wal_frames(&db);
        assert!(frames > 0, "the writes went to the WAL");
        if copied == frames {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "5 s after the last write only {copied} of {frames} WAL frames were copied back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes that never pause still let the WAL start over (its frame count
/// falls back), so it does not grow without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_starts_over_under_continuous_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, _store, queue) = open(&dir).await;
    let mut highest = 0;
    let mut restarted = false;
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until && !restarted {
        add_batch(&queue, 200).await;
        let (frames, _) = wal_frames(&db);
        restarted = frames < highest;
        highest = highest.max(frames);
    }
    assert!(
        restarted,
        "the WAL never started over in 20 s of writes; it reached {highest} frames"
    );
}
