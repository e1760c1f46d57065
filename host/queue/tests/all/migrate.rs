//! Concurrent migrations: several processes starting at the same moment on
//! one new database must all come up (each store instance below has its own
//! connections, as a separate process would).

use std::time::Duration;

use boxcar_queue::connect;

use crate::support::database_url;

/// Store instances migrating at once.
const N: usize = 8;
/// Fresh databases per test (the race is timing-dependent).
const ROUNDS: usize = 4;

async fn connect_all(url: &str) {
    let tasks: Vec<_> = (0..N)
        .map(|_| {
            let url = url.to_string();
            tokio::spawn(async move { connect(&url).await.map(|s| s.backend()) })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let res = tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("connect did not finish in 60 s")
            .expect("connect task");
        if let Err(e) = res {
            panic!("connect {i} of {N} failed: {e}");
        }
    }
    let store = connect(url).await.expect("connect after the race");
    assert_eq!(store.count_by_status().await.expect("count").pending, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_connects_on_a_new_sqlite_file_all_succeed() {
    for _ in 0..ROUNDS {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("new.db").display());
        connect_all(&url).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_connects_on_a_new_postgres_schema_all_succeed() {
    let Some(base) = database_url() else { return };
    let sep = if base.contains('?') { '&' } else { '?' };
    for _ in 0..ROUNDS {
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let url = format!("{base}{sep}schema={schema}");
        connect_all(&url).await;
        let pool = sqlx::PgPool::connect(&base).await.expect("pg");
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&pool)
            .await
            .expect("drop schema");
    }
}

/// The race behind "database is locked" at start-up, made deterministic:
/// another process holds the write lock on a file that is not in WAL mode
/// yet (as while it sets a new file up). Switching to WAL reads the header,
/// then upgrades to a write lock; SQLite refuses that upgrade at once
/// (`SQLITE_BUSY`, no busy handler), so opening must retry, not fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_open_retries_while_another_process_sets_the_file_up() {
    use sqlx::{Connection, Executor};

    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("new.db").display());
    let opts = <sqlx::sqlite::SqliteConnectOptions as std::str::FromStr>::from_str(&url)
        .expect("options")
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Delete);
    let mut holder = sqlx::SqliteConnection::connect_with(&opts)
        .await
        .expect("holder");
    holder
        .execute("CREATE TABLE setup (x INTEGER)")
        .await
        .expect("table");
    holder.execute("BEGIN IMMEDIATE").await.expect("write lock");
    let opening = tokio::spawn({
        let url = url.clone();
        async move { connect(&url).await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !opening.is_finished(),
        "open gave up while the file was locked"
    );
    holder.execute("COMMIT").await.expect("commit");
    drop(holder);
    tokio::time::timeout(Duration::from_secs(30), opening)
        .await
        .expect("open did not finish")
        .expect("open task")
        .expect("open waits for the set-up, then succeeds");
}

/// A file already at this build's schema opens and answers reads while
/// another process holds its write lock (as one stopped mid-write does until
/// it resumes): opening must not take the write lock just to find that
/// every migration is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrated_sqlite_file_opens_and_reads_while_another_process_holds_the_write_lock() {
    use sqlx::{Connection, Executor};

    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("held.db").display());
    connect(&url).await.expect("first connect migrates");
    let opts = <sqlx::sqlite::SqliteConnectOptions as std::str::FromStr>::from_str(&url)
        .expect("options")
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
    let mut holder = sqlx::SqliteConnection::connect_with(&opts)
        .await
        .expect("holder");
    holder.execute("BEGIN IMMEDIATE").await.expect("write lock");
    let reading = async {
        let store = connect(&url).await?;
        store.count_by_status().await
    };
    let counts = tokio::time::timeout(Duration::from_secs(5), reading)
        .await
        .expect("a connect and a read waited for another process's write lock")
        .expect("connect and count");
    assert_eq!(counts.pending, 0);
    holder.execute("ROLLBACK").await.expect("release");
}
