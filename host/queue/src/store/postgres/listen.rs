//! The LISTEN relay: one task per store that turns the schema's
//! `<schema>_jobs_inserted` notifications (sent by every inserting
//! statement of boxcar and by the SQL function `add_job`) and
//! `<schema>_jobs_finished` ones (a trigger) into [`StoreEvent`]s for local
//! subscribers.
//!
//! An insert notification carries the inserted job type (one per type and
//! statement), relayed as `Inserted(type)`; an empty type means "any type".
//!
//! Invariant: after a reconnect (notifications may have been missed) the
//! relay sends one `Inserted` wake-up for any type, so dispatchers ask
//! which of their types are due at once; a failing listener is retried
//! every second and never ends the task.

use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::store::{StoreError, StoreEvent};

/// The channel `schema`'s inserts are notified on.
pub(super) fn inserted_channel(schema: &str) -> String {
    format!("{schema}_jobs_inserted")
}

/// Starts listening on `pool` for `schema`'s channels and relays to
/// `events` until the returned task is aborted.
pub(super) async fn relay(
    pool: &PgPool,
    schema: &str,
    events: broadcast::Sender<StoreEvent>,
) -> Result<JoinHandle<()>, StoreError> {
    let mut listener = PgListener::connect_with(pool).await?;
    let inserted = inserted_channel(schema);
    let finished = format!("{schema}_jobs_finished");
    listener
        .listen_all([inserted.as_str(), finished.as_str()])
        .await?;
    Ok(tokio::spawn(async move {
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) => {
                    let ev = if n.channel() == finished {
                        StoreEvent::Finished(n.payload().to_string())
                    } else {
                        StoreEvent::Inserted(n.payload().to_string())
                    };
                    let _ = events.send(ev);
                }
                Ok(None) => {
                    let _ = events.send(StoreEvent::Inserted(String::new()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "postgres listener failed; retrying in 1s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }))
}
