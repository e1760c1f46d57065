//! WAL checkpoints off the write path. SQLite's automatic checkpoint runs
//! inside the commit that pushes the WAL past 1,000 pages, on the thread
//! that runs every write of the store: that commit (a claim, an enqueue, a
//! completion batch) then copies the WAL back into the database file
//! before it returns, the slowest pickups of a busy host, and the drain's
//! serial part pays for all of the copying. The store's own connections
//! turn it off (`wal_autocheckpoint = 0`) and this task checkpoints
//! beside the writers instead.
//!
//! Invariants:
//! - Every [`INTERVAL`] in which this process wrote (the [`WriteLock`]'s
//!   count moved), one `PRAGMA wal_checkpoint(PASSIVE)` runs on a pool
//!   connection, concurrently with writers (a passive checkpoint takes no
//!   writer's lock and waits for nobody). A store that writes nothing runs
//!   no statement, and its task wakes at most once per [`IDLE_INTERVAL`];
//!   after a quiet spell the first writes are checkpointed within it.
//! - The WAL stays bounded under continuous writes. SQLite starts the WAL
//!   file over only when a write transaction begins with every frame
//!   copied back, which a checkpoint racing writers never sees: some write
//!   has always begun before it finished. So when the WAL holds more than
//!   [`WAL_LIMIT`] frames, the task checkpoints again holding the
//!   [`WriteLock`] (this process's writers wait, while only the frames
//!   written since the first pass are copied), and the next write starts
//!   the WAL over.
//! - The users' pool ([`SqliteStore::pool`](super::SqliteStore::pool)) and
//!   other processes keep SQLite's automatic checkpoint: their commits are
//!   not counted here.
//! - The task ends when the store's last clone is dropped.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Row, SqlitePool};

use super::changes::WriteLock;

/// How often the task looks for writes to checkpoint while there are some.
pub(super) const INTERVAL: Duration = Duration::from_millis(50);

/// The longest pause between looks once no write has come for a while (the
/// pause doubles from [`INTERVAL`] each time it finds none), so an idle
/// store wakes the task about once a second.
pub(super) const IDLE_INTERVAL: Duration = Duration::from_secs(1);

/// WAL frames (pages) past which a checkpoint is repeated behind this
/// process's writers so that the WAL starts over: SQLite's own automatic
/// checkpoint threshold.
pub(super) const WAL_LIMIT: i64 = 1_000;

/// The `wal_autocheckpoint` the store's own connections are opened with.
pub(super) const AUTOCHECKPOINT_OFF: &str = "0";

/// The running checkpoint task; stops it when dropped.
pub(super) struct Checkpointer {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `(frames in the WAL, frames copied back)` after one passive
/// checkpoint; `(-1, -1)` when the database is not in WAL mode.
///
/// Read to the end (`fetch_all`), so the statement finishes and its
/// connection holds no read transaction afterwards: a statement left
/// mid-way keeps its snapshot, and with it frames the next checkpoint may
/// not copy and a WAL that cannot start over.
async fn passive(pool: &SqlitePool) -> Result<(i64, i64), sqlx::Error> {
    let rows = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_all(pool)
        .await?;
    match rows.first() {
        Some(row) => Ok((row.try_get(1)?, row.try_get(2)?)),
        None => Ok((-1, -1)),
    }
}

impl Checkpointer {
    /// Starts checkpointing the writes counted by `writes` through `pool`.
    pub(super) fn start(pool: SqlitePool, writes: Arc<WriteLock>) -> Self {
        let task = tokio::spawn(async move {
            let mut checkpointed_at = writes.count();
            let mut pause = INTERVAL;
            loop {
                tokio::time::sleep(pause).await;
                let seen = writes.count();
                if seen == checkpointed_at {
                    pause = (pause * 2).min(IDLE_INTERVAL);
                    continue;
                }
                pause = INTERVAL;
                let checkpointed = match passive(&pool).await {
                    Ok((frames, _)) if frames > WAL_LIMIT => {
                        let mut held = writes.lock().await;
                        // A checkpoint changes no row: the watch still
                        // sees a foreign commit beside it as foreign.
                        held.changed_nothing();
                        passive(&pool).await
                    }
                    other => other,
                };
                match checkpointed {
                    Ok(_) => checkpointed_at = seen,
                    Err(e) => tracing::debug!(
                        error = %e,
                        "SQLite WAL checkpoint failed; retried at the next interval"
                    ),
                }
            }
        });
        Self { task }
    }
}
