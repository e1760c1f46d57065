//! The epoch ticker: one thread per sandbox advancing the engine epoch every
//! `epoch_tick` while some guest code may run, and parked otherwise.
//!
//! Invariants:
//! - While any [`Ticking`] guard is alive the epoch advances every tick, so
//!   every running guest reaches its epoch callback (where timeouts,
//!   cancellation and yielding are decided) within about one tick. Each run
//!   holds a guard from before its store is created until the store is
//!   dropped; nothing else executes guest code.
//! - With no guard alive the thread sleeps on a condition variable: an idle
//!   host pays no wake-ups for the ticker (a 1 ms tick would otherwise wake
//!   it 1,000 times a second with nothing to interrupt).
//! - Stopped (and joined) when dropped.

use std::{
    sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError},
    thread::JoinHandle,
    time::Duration,
};

/// What the ticker thread and the guards share.
#[derive(Default)]
struct State {
    /// Guards alive (runs that may execute guest code).
    active: usize,
    /// Set once, when the ticker is dropped.
    stop: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    /// The state; a poisoned lock still holds consistent counters (every
    /// critical section is a few integer updates), so it is used as is.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Advances `engine`'s epoch while some [`Ticking`] guard is alive, until
/// dropped.
pub(crate) struct Ticker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    pub(crate) fn start(engine: wasmtime::Engine, tick: Duration) -> std::io::Result<Self> {
        Self::start_with(move || engine.increment_epoch(), tick)
    }

    /// A ticker calling `advance` once per tick while active.
    fn start_with(advance: impl Fn() + Send + 'static, tick: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("boxcar-epoch".into())
            .spawn(move || loop {
                {
                    let mut state = theirs.lock();
                    while state.active == 0 && !state.stop {
                        state = theirs
                            .wake
                            .wait(state)
                            .unwrap_or_else(PoisonError::into_inner);
                    }
                    if state.stop {
                        return;
                    }
                }
                std::thread::sleep(tick);
                advance();
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Keeps the epoch advancing until the guard is dropped.
    pub(crate) fn ticking(&self) -> Ticking {
        let mut state = self.shared.lock();
        state.active += 1;
        if state.active == 1 {
            self.shared.wake.notify_one();
        }
        Ticking {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A run that may execute guest code: the epoch advances while it lives.
pub(crate) struct Ticking {
    shared: Arc<Shared>,
}

impl Drop for Ticking {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.active = state.active.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{
            atomic::{AtomicU64, Ordering},
            Arc,
        },
        time::Duration,
    };

    use super::Ticker;

    fn counting() -> (Ticker, Arc<AtomicU64>) {
        let advanced = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&advanced);
        let ticker = Ticker::start_with(
            move || {
                seen.fetch_add(1, Ordering::Relaxed);
            },
            Duration::from_millis(1),
        )
        .expect("ticker thread");
        (ticker, advanced)
    }

    #[test]
    fn an_idle_ticker_does_not_tick_and_a_guard_makes_it_tick() {
        let (ticker, advanced) = counting();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(advanced.load(Ordering::Relaxed), 0, "no guard: no ticks");

        let first = ticker.ticking();
        let second = ticker.ticking();
        std::thread::sleep(Duration::from_millis(100));
        drop(first);
        std::thread::sleep(Duration::from_millis(100));
        let while_one_left = advanced.load(Ordering::Relaxed);
        assert!(
            while_one_left >= 20,
            "two guards then one: ticks every 1 ms, saw {while_one_left} in 200 ms"
        );

        drop(second);
        // The tick under way when the last guard went still lands: give a
        // loaded machine time for it before taking the parked count.
        std::thread::sleep(Duration::from_millis(100));
        let parked_at = advanced.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            advanced.load(Ordering::Relaxed),
            parked_at,
            "every guard dropped: the ticker parks"
        );

        let again = ticker.ticking();
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            advanced.load(Ordering::Relaxed) > parked_at,
            "a new guard wakes the parked ticker"
        );
        drop(again);
    }

    #[test]
    fn dropping_the_ticker_stops_its_thread_parked_or_ticking() {
        let (parked, _) = counting();
        drop(parked);
        let (ticking, _) = counting();
        let guard = ticking.ticking();
        drop(ticking);
        drop(guard);
    }
}
