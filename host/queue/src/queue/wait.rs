//! Waiting for a job to end (request/reply), woken by the store's events
//! rather than a poll tick.
//!
//! - `Finished(id)` of the job (memory, Postgres's LISTEN relay, this
//!   process's SQLite writes) ends the wait at once.
//! - `Changed` (another process committed to a shared SQLite file) makes
//!   the waiter read its job again — at most once per pause, which starts at
//!   [`FIRST_PAUSE`] and doubles with each such read up to [`RECHECK`], so
//!   a short job is seen within a millisecond or two of its end while many
//!   waiters beside a busy neighbour cost a bounded number of reads.
//! - Without any event the job is read again every [`RECHECK`] (a missed
//!   notification costs at most that).

use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::{Queue, WaitError};
use crate::job::Job;
use crate::store::StoreEvent;

/// The shortest pause between two reads prompted by `Changed`.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest time between two reads of the job.
const RECHECK: Duration = Duration::from_millis(100);

impl Queue {
    /// Waits until the job is terminal and returns it (see the module
    /// docs for what wakes it).
    ///
    /// # Errors
    /// [`WaitError::Timeout`], [`WaitError::NotFound`] or a store error.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<Job, WaitError> {
        // A timeout too long to represent waits for as long as one can.
        let deadline = crate::time::instant_after(timeout);
        let store = self.store();
        let mut events = store.subscribe();
        let mut pause = FIRST_PAUSE;
        loop {
            match store.get(id).await? {
                None => return Err(WaitError::NotFound(id.to_string())),
                Some(j) if j.status.is_terminal() => return Ok(j),
                Some(_) => {}
            }
            let now = Instant::now();
            let recheck = (now + RECHECK).min(deadline);
            let earliest = now + pause;
            let mut changed = false;
            loop {
                let wake = if changed {
                    earliest.min(recheck)
                } else {
                    recheck
                };
                tokio::select! {
                    ev = events.recv() => match ev {
                        Ok(StoreEvent::Finished(done)) if done == id => break,
                        Ok(StoreEvent::Changed) => {
                            changed = true;
                            if Instant::now() >= earliest {
                                break;
                            }
                        }
                        Ok(_) => {}
                        Err(RecvError::Lagged(_)) => break,
                        Err(RecvError::Closed) => {
                            events = store.subscribe();
                            break;
                        }
                    },
                    () = tokio::time::sleep_until(wake) => break,
                }
            }
            if changed {
                pause = (pause * 2).min(RECHECK);
            }
            if Instant::now() >= deadline {
                return match store.get(id).await? {
                    Some(j) if j.status.is_terminal() => Ok(j),
                    Some(_) => Err(WaitError::Timeout(id.to_string())),
                    None => Err(WaitError::NotFound(id.to_string())),
                };
            }
        }
    }
}
