//! Commits of other processes, noticed. SQLite tells no process about
//! another's writes, so while anyone in this process subscribes to the
//! store's events, a task polls the file and publishes
//! [`StoreEvent::Changed`] when another process committed: dispatchers then
//! ask which types are due, waiters read their job again.
//!
//! A poll reads the WAL-index header, the first 48 bytes of the `-shm`
//! file, which every commit rewrites (its change counter, frame count and
//! salts; SQLite's documented WAL-index format). That is one `pread` on the
//! task's own thread; the `PRAGMA data_version` it replaced was a round
//! trip to a connection's worker thread, two thread wake-ups per poll, and
//! kept an idle host at about 3 % of a core. A torn read (a commit writing
//! the header meanwhile) only looks like a change: one needless `Changed`.
//! The task keeps a dedicated connection open, which keeps the WAL and its
//! index in place. Where there is no `-shm` file to read (an in-memory
//! database) the poll asks `PRAGMA data_version` on that connection.
//!
//! Invariants and costs:
//! - This process's own writes all go through [`WriteLock`], which counts
//!   each acquisition and release. A poll that finds a write of ours in
//!   progress (the count odd, or moving while it read) decides nothing and
//!   looks again after [`FIRST_POLL`]. A change seen after the count moved
//!   may be our own and is not published: a foreign commit that coincides
//!   with a changing write of ours is left to the periodic polls (the
//!   dispatcher's `poll_interval`, the waiter's re-check), as before this
//!   watch existed. A write that committed no change (an idle host's
//!   periodic rescue finding nothing) takes its count back on release, so
//!   it hides no foreign commit — before it did, it hid about one enqueue
//!   in thirty from an idle host until the host's next poll.
//! - The first poll after the task starts (or wakes from idle, or
//!   reconnects) has nothing to compare with and always publishes, so a
//!   subscriber that read the store before that poll looks once more.
//! - The poll interval starts at [`FIRST_POLL`] whenever someone subscribes
//!   (a wait begins) and doubles up to [`STEADY_POLL`], and up to
//!   [`QUIET_POLL`] once the file (any commit, ours included) has not
//!   changed for [`QUIET_AFTER`]; with no subscriber the task sleeps until
//!   one comes. So a busy host notices another process's commit within
//!   8 ms, an idle one within 32 ms, and an idle host wakes about 30 times
//!   a second, not 125 (each wake-up is a thread switch, which is what an
//!   idle host's CPU went on). At most one event per poll is sent, so a
//!   busy neighbour costs this process at most one wake-up per poll.
//! - The task ends within [`IDLE_RECHECK`] of the store being dropped; a
//!   connection or query failure is retried after [`RETRY_AFTER`].

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, SqliteConnection};
use tokio::sync::{MutexGuard, Notify};

use crate::store::event_hub::EventHub;
use crate::store::StoreEvent;

/// The first poll after a subscription.
pub(super) const FIRST_POLL: Duration = Duration::from_millis(1);
/// The longest interval between polls while someone subscribes.
pub(super) const STEADY_POLL: Duration = Duration::from_millis(8);
/// The longest interval between polls once the file has been quiet for
/// [`QUIET_AFTER`].
pub(super) const QUIET_POLL: Duration = Duration::from_millis(32);
/// How long the file stays unchanged before polls slow to [`QUIET_POLL`].
const QUIET_AFTER: Duration = Duration::from_secs(2);
/// How often an idle task checks that its store still exists.
const IDLE_RECHECK: Duration = Duration::from_secs(1);
/// The pause after a failed connection or poll.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The WAL-index header's length: the first of its two copies.
const WAL_INDEX_HEADER: usize = 48;

/// This process's writers' mutex, counting each acquisition and release.
#[derive(Default)]
pub(crate) struct WriteLock {
    mutex: tokio::sync::Mutex<()>,
    count: AtomicU64,
}

/// A held [`WriteLock`].
pub(crate) struct WriteGuard<'a> {
    _held: MutexGuard<'a, ()>,
    count: &'a AtomicU64,
    changed_nothing: bool,
}

impl WriteGuard<'_> {
    /// The write committed no change (a periodic rescue or prune that
    /// found nothing, a claim that took no job): on release the count
    /// goes back to its value before the write, so a foreign commit
    /// beside it is still seen as foreign. A write marked so that did
    /// change something costs one needless `Changed`, nothing more.
    pub(crate) fn changed_nothing(&mut self) {
        self.changed_nothing = true;
    }
}

impl WriteLock {
    /// Waits for the lock.
    pub(crate) async fn lock(&self) -> WriteGuard<'_> {
        let held = self.mutex.lock().await;
        self.count.fetch_add(1, Ordering::SeqCst);
        WriteGuard {
            _held: held,
            count: &self.count,
            changed_nothing: false,
        }
    }

    /// Acquisitions plus releases so far: odd while a write is in progress.
    pub(super) fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        // Counted before the mutex is released (fields drop after this).
        if self.changed_nothing {
            self.count.fetch_sub(1, Ordering::SeqCst);
        } else {
            self.count.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The watch of one store; see the module docs.
pub(super) struct Watch {
    opts: SqliteConnectOptions,
    events: EventHub,
    writes: Arc<WriteLock>,
    started: AtomicBool,
    hurry: Notify,
}

impl Watch {
    pub(super) fn new(
        opts: SqliteConnectOptions,
        events: EventHub,
        writes: Arc<WriteLock>,
    ) -> Self {
        Self {
            opts,
            events,
            writes,
            started: AtomicBool::new(false),
            hurry: Notify::new(),
        }
    }

    /// Someone subscribed: starts the task on first use (inside a tokio
    /// runtime) and has it poll soon.
    pub(super) fn subscribed(self: &Arc<Self>) {
        if !self.started.swap(true, Ordering::SeqCst) {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(run(Arc::downgrade(self)));
                }
                Err(_) => self.started.store(false, Ordering::SeqCst),
            }
        }
        self.hurry.notify_one();
    }
}

/// What a poll read of the file: changes whenever another connection
/// commits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Version {
    /// The WAL-index header.
    Header([u8; WAL_INDEX_HEADER]),
    /// `PRAGMA data_version`, where there is no index file to read.
    DataVersion(i64),
}

/// What the last poll saw: the file's version and our write count.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Seen {
    version: Version,
    writes: u64,
}

/// The watch's connection, and the WAL index it reads when it can.
struct Watcher {
    /// Held open for the task's life: the WAL and its index stay in place.
    conn: SqliteConnection,
    index: Option<File>,
}

/// The WAL index of the database file `main` (as SQLite resolved it):
/// `<file>-shm`, or `None` for an in-memory database (no file).
fn index_path(main: &str) -> Option<PathBuf> {
    (!main.is_empty()).then(|| PathBuf::from(format!("{main}-shm")))
}

/// The first copy of the WAL-index header, or `None` when the file does
/// not hold one (yet).
#[cfg(unix)]
fn read_header(index: &File) -> Option<[u8; WAL_INDEX_HEADER]> {
    use std::os::unix::fs::FileExt;
    let mut header = [0u8; WAL_INDEX_HEADER];
    index.read_exact_at(&mut header, 0).ok()?;
    Some(header)
}

#[cfg(not(unix))]
fn read_header(_index: &File) -> Option<[u8; WAL_INDEX_HEADER]> {
    None
}

async fn run(watch: Weak<Watch>) {
    let mut conn: Option<Watcher> = None;
    let mut last: Option<Seen> = None;
    let mut interval = FIRST_POLL;
    let mut changed_at = Instant::now();
    loop {
        let Some(w) = watch.upgrade() else { return };
        if w.events.receiver_count() == 0 {
            last = None;
            let _ = tokio::time::timeout(IDLE_RECHECK, w.hurry.notified()).await;
            interval = FIRST_POLL;
            continue;
        }
        let mut settled = true;
        match poll(&mut conn, &w).await {
            // A write of ours was in progress: whether it changes anything
            // is not known yet, so `last` is kept and the file looked at
            // again shortly.
            Ok((before, _, after)) if before != after || !after.is_multiple_of(2) => {
                settled = false;
                changed_at = Instant::now();
            }
            Ok((_, version, writes)) => {
                // The first poll has nothing to compare with: anything may
                // have changed since the subscriber last looked.
                let foreign = last.is_none_or(|l| l.version != version && l.writes == writes);
                if foreign {
                    w.events.send(StoreEvent::Changed);
                }
                let seen = Seen { version, writes };
                if last != Some(seen) {
                    changed_at = Instant::now();
                }
                last = Some(seen);
            }
            Err(e) => {
                tracing::debug!(error = %e, "watching the SQLite file for other processes' commits failed; retrying");
                last = None;
                drop(w);
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        }
        let hurried = w.hurry.notified();
        tokio::pin!(hurried);
        let pause = if settled { interval } else { FIRST_POLL };
        tokio::select! {
            () = tokio::time::sleep(pause) => if settled {
                let longest = if changed_at.elapsed() >= QUIET_AFTER {
                    QUIET_POLL
                } else {
                    STEADY_POLL
                };
                interval = (interval * 2).min(longest);
            },
            () = &mut hurried => {
                interval = FIRST_POLL;
                changed_at = Instant::now();
            }
        }
    }
}

/// Opens the watch's connection and, for a file database, its WAL index.
async fn connect(watch: &Watch) -> Result<Watcher, sqlx::Error> {
    let mut conn = watch.opts.connect().await?;
    // A read maps the WAL index (and creates its file if no one had).
    sqlx::query("SELECT count(*) FROM sqlite_master")
        .execute(&mut conn)
        .await?;
    let main: String =
        sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
            .fetch_one(&mut conn)
            .await?;
    let index = index_path(&main).and_then(|path| File::open(path).ok());
    Ok(Watcher { conn, index })
}

/// One look at the file: our write count before, the file's version, our
/// write count after. Connects first when there is no connection; a
/// connection that failed is dropped.
async fn poll(
    conn: &mut Option<Watcher>,
    watch: &Watch,
) -> Result<(u64, Version, u64), sqlx::Error> {
    let mut w = match conn.take() {
        Some(w) => w,
        None => connect(watch).await?,
    };
    let before = watch.writes.count();
    let version = match w.index.as_ref().and_then(read_header) {
        Some(header) => Version::Header(header),
        None => Version::DataVersion(
            sqlx::query_scalar("PRAGMA data_version")
                .fetch_one(&mut w.conn)
                .await?,
        ),
    };
    let after = watch.writes.count();
    *conn = Some(w);
    Ok((before, version, after))
}

#[cfg(test)]
mod tests {
    use sqlx::sqlite::SqliteJournalMode;

    use super::*;

    #[test]
    fn the_index_of_a_file_is_its_shm_and_memory_has_none() {
        assert_eq!(
            index_path("/tmp/q/boxcar.db"),
            Some(PathBuf::from("/tmp/q/boxcar.db-shm"))
        );
        assert_eq!(index_path(""), None);
    }

    /// The header moves with every commit of another connection and holds
    /// still while nothing commits, and the watch reads it (no fallback to
    /// the pragma on a file database).
    #[tokio::test]
    async fn another_connections_commit_moves_the_header() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = SqliteConnectOptions::new()
            .filename(dir.path().join("boxcar.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        let mut writer = opts.connect().await.expect("writer");
        sqlx::query("CREATE TABLE t (n INTEGER)")
            .execute(&mut writer)
            .await
            .expect("create");
        let watch = Watch::new(opts, EventHub::new(4), Arc::default());
        let mut watcher = None;
        let (_, quiet, _) = poll(&mut watcher, &watch).await.expect("poll");
        assert!(matches!(quiet, Version::Header(_)), "reads the WAL index");
        let (_, still, _) = poll(&mut watcher, &watch).await.expect("poll");
        assert!(still == quiet, "nothing committed");
        let mut seen = quiet;
        for n in 0..3 {
            sqlx::query("INSERT INTO t VALUES (?)")
                .bind(n)
                .execute(&mut writer)
                .await
                .expect("insert");
            let (_, now, _) = poll(&mut watcher, &watch).await.expect("poll");
            assert!(now != seen, "commit {n} moved the header");
            seen = now;
        }
    }
}
