//! Commits of other processes, noticed. SQLite tells no process about
//! another's writes, so while anyone in this process subscribes to the
//! store's events, a task polls `PRAGMA data_version` on a dedicated
//! connection (a read of the WAL index, no table is touched) and publishes
//! [`StoreEvent::Changed`] when another process committed: dispatchers then
//! ask which types are due, waiters read their job again.
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
//!   (a wait begins) and doubles up to [`STEADY_POLL`]; with no subscriber
//!   the task sleeps until one comes. At most one event per
//!   [`STEADY_POLL`]-bounded poll is sent, so a busy neighbour costs this
//!   process at most one wake-up per poll.
//! - The task ends within [`IDLE_RECHECK`] of the store being dropped; a
//!   connection or query failure is retried after [`RETRY_AFTER`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, SqliteConnection};
use tokio::sync::{broadcast, MutexGuard, Notify};

use crate::store::StoreEvent;

/// The first poll after a subscription.
pub(super) const FIRST_POLL: Duration = Duration::from_millis(1);
/// The longest interval between polls while someone subscribes.
pub(super) const STEADY_POLL: Duration = Duration::from_millis(8);
/// How often an idle task checks that its store still exists.
const IDLE_RECHECK: Duration = Duration::from_secs(1);
/// The pause after a failed connection or poll.
const RETRY_AFTER: Duration = Duration::from_secs(1);

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
    fn count(&self) -> u64 {
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
    events: broadcast::Sender<StoreEvent>,
    writes: Arc<WriteLock>,
    started: AtomicBool,
    hurry: Notify,
}

impl Watch {
    pub(super) fn new(
        opts: SqliteConnectOptions,
        events: broadcast::Sender<StoreEvent>,
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

/// What the last poll saw: the data version and our write count.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Seen {
    version: i64,
    writes: u64,
}

async fn run(watch: Weak<Watch>) {
    let mut conn: Option<SqliteConnection> = None;
    let mut last: Option<Seen> = None;
    let mut interval = FIRST_POLL;
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
            }
            Ok((_, version, writes)) => {
                // The first poll has nothing to compare with: anything may
                // have changed since the subscriber last looked.
                let foreign = last.is_none_or(|l| l.version != version && l.writes == writes);
                if foreign {
                    let _ = w.events.send(StoreEvent::Changed);
                }
                last = Some(Seen { version, writes });
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
                interval = (interval * 2).min(STEADY_POLL);
            },
            () = &mut hurried => interval = FIRST_POLL,
        }
    }
}

/// One look at the file: our write count before, the data version, our
/// write count after. Connects first when there is no connection; a
/// connection that failed is dropped.
async fn poll(
    conn: &mut Option<SqliteConnection>,
    watch: &Watch,
) -> Result<(u64, i64, u64), sqlx::Error> {
    let mut c = match conn.take() {
        Some(c) => c,
        None => watch.opts.connect().await?,
    };
    let before = watch.writes.count();
    let version: i64 = sqlx::query_scalar("PRAGMA data_version")
        .fetch_one(&mut c)
        .await?;
    let after = watch.writes.count();
    *conn = Some(c);
    Ok((before, version, after))
}
