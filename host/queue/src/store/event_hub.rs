//! A store's local event channels: one with every event, for waiters, and
//! one with the wake-ups alone (inserts and other processes' commits, no
//! [`StoreEvent::Finished`]), for dispatchers.
//!
//! Why two: a drain finishes thousands of jobs a second, one event each.
//! A dispatcher has no use for them, but on a shared channel they filled
//! its receiver while it was busy claiming, and a receiver that lagged
//! must assume it missed an insert: it asked the store which of its types
//! were due, one query over every registered type. That happened 140
//! times in one 19,800-job Postgres drain and 368 times in a SQLite one
//! with 500 types registered, where each query took about 1.5 ms. The
//! wake-up channel carries only events that can make a job due, so a
//! dispatcher lags only when those come faster than it reads them.
//!
//! Invariant: every event goes to the full channel, and every event but
//! `Finished` also to the wake-up channel, in the same order.

use tokio::sync::broadcast;

use super::StoreEvent;

/// The two channels; cheap to clone (both are shared senders).
#[derive(Clone, Debug)]
pub(crate) struct EventHub {
    all: broadcast::Sender<StoreEvent>,
    wakeups: broadcast::Sender<StoreEvent>,
}

impl EventHub {
    /// Channels that each hold `capacity` events a slow receiver has not
    /// read before it lags.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            all: broadcast::channel(capacity).0,
            wakeups: broadcast::channel(capacity).0,
        }
    }

    /// Publishes `event` to the subscribers of the channels it belongs to.
    pub(crate) fn send(&self, event: StoreEvent) {
        if !matches!(event, StoreEvent::Finished(_)) && self.wakeups.receiver_count() > 0 {
            let _ = self.wakeups.send(event.clone());
        }
        let _ = self.all.send(event);
    }

    /// Every event.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.all.subscribe()
    }

    /// Every event but [`StoreEvent::Finished`].
    pub(crate) fn subscribe_wakeups(&self) -> broadcast::Receiver<StoreEvent> {
        self.wakeups.subscribe()
    }

    /// Receivers of either channel.
    pub(crate) fn receiver_count(&self) -> usize {
        self.all.receiver_count() + self.wakeups.receiver_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakeups_get_every_event_but_finished_in_order() {
        let hub = EventHub::new(8);
        let mut all = hub.subscribe();
        let mut wakeups = hub.subscribe_wakeups();
        assert_eq!(hub.receiver_count(), 2);
        hub.send(StoreEvent::Inserted("a".into()));
        hub.send(StoreEvent::Finished("id-1".into()));
        hub.send(StoreEvent::Changed);
        let mut seen = Vec::new();
        while let Ok(event) = all.try_recv() {
            seen.push(event);
        }
        assert_eq!(
            seen,
            vec![
                StoreEvent::Inserted("a".into()),
                StoreEvent::Finished("id-1".into()),
                StoreEvent::Changed
            ]
        );
        let mut woken = Vec::new();
        while let Ok(event) = wakeups.try_recv() {
            woken.push(event);
        }
        assert_eq!(
            woken,
            vec![StoreEvent::Inserted("a".into()), StoreEvent::Changed]
        );
    }
}
