//! The LISTEN relay: one task per store that turns the schema's
//! `<schema>_jobs_inserted` notifications (sent by every inserting
//! statement of boxcar and by the SQL function `add_job`) and
//! `<schema>_jobs_finished` ones (a trigger) into [`StoreEvent`]s for local
//! subscribers.
//!
//! An insert notification carries the inserted job type (one per type and
//! statement), relayed as `Inserted(type)`; an empty type means "any type".
//! A finished notification carries one or more job ids separated by spaces
//! (the failure trigger sends one, a completion batch up to 32), each
//! relayed as its own `Finished(id)`.
//!
//! Invariant: after a reconnect (notifications may have been missed) the
//! relay sends one `Inserted` wake-up for any type, so dispatchers ask
//! which of their types are due at once; a failing listener is retried
//! every second and never ends the task.

use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::task::JoinHandle;

use crate::store::event_hub::EventHub;
use crate::store::{StoreError, StoreEvent};

/// The channel `schema`'s inserts are notified on.
pub(super) fn inserted_channel(schema: &str) -> String {
    format!("{schema}_jobs_inserted")
}

/// The channel `schema`'s terminal transitions are notified on.
pub(super) fn finished_channel(schema: &str) -> String {
    format!("{schema}_jobs_finished")
}

/// Starts listening on `pool` for `schema`'s channels and relays to
/// `events` until the returned task is aborted.
pub(super) async fn relay(
    pool: &PgPool,
    schema: &str,
    events: EventHub,
) -> Result<JoinHandle<()>, StoreError> {
    let mut listener = PgListener::connect_with(pool).await?;
    let inserted = inserted_channel(schema);
    let finished = finished_channel(schema);
    listener
        .listen_all([inserted.as_str(), finished.as_str()])
        .await?;
    Ok(tokio::spawn(async move {
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) if n.channel() == finished => {
                    for id in n.payload().split(' ').filter(|id| !id.is_empty()) {
                        events.send(StoreEvent::Finished(id.to_string()));
                    }
                }
                Ok(Some(n)) => {
                    events.send(StoreEvent::Inserted(n.payload().to_string()));
                }
                Ok(None) => {
                    events.send(StoreEvent::Inserted(String::new()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "postgres listener failed; retrying in 1s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }))
}
