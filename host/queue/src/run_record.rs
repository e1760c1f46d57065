//! [`RunRecord`]: what the host learns about one run while it happens —
//! the guest's log lines and the figures of [`AttemptUsage`] — shared by
//! the engine (which owns the run) and the handler (the sandbox, which
//! measures).
//!
//! Invariants and costs:
//! - Counters are relaxed atomics the handler bumps where it already does
//!   the work (a memory growth, an HTTP response, an enqueue); nothing is
//!   measured per instruction. Peak memory is a `fetch_max`.
//! - Log lines wait here, in memory, until the engine takes them: a
//!   periodic flush for a long run (so `logs --follow` sees them) and the
//!   rest with the attempt's transition, in its transaction. The buffer is
//!   bounded by the handler's log budget (`max_log`, enforced by the
//!   sandbox, which also writes the marker line when it cuts the log).
//! - A figure never set reads `None`.
//! - The guest time is the handler's own measure of its call into the
//!   guest (a sandbox sets it; a native handler need not): the engine's
//!   wall time less it is the host's per-run overhead.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use chrono::Utc;

use crate::attempt::{AttemptUsage, LogLine};

/// `None` in an atomic figure.
const UNSET: u64 = u64::MAX;

/// The live record of one run.
#[derive(Debug)]
pub struct RunRecord {
    job_id: String,
    attempt: u32,
    next_seq: AtomicU32,
    log_bytes: AtomicU64,
    peak_memory: AtomicU64,
    fuel: AtomicU64,
    http_requests: AtomicU64,
    http_bytes: AtomicU64,
    enqueues: AtomicU64,
    guest_nanos: AtomicU64,
    pending: Mutex<Vec<LogLine>>,
}

impl RunRecord {
    /// An empty record of attempt `attempt` of job `job_id`.
    pub fn new(job_id: impl Into<String>, attempt: u32) -> Self {
        Self {
            job_id: job_id.into(),
            attempt,
            next_seq: AtomicU32::new(0),
            log_bytes: AtomicU64::new(0),
            peak_memory: AtomicU64::new(UNSET),
            fuel: AtomicU64::new(UNSET),
            http_requests: AtomicU64::new(0),
            http_bytes: AtomicU64::new(0),
            enqueues: AtomicU64::new(0),
            guest_nanos: AtomicU64::new(UNSET),
            pending: Mutex::new(Vec::new()),
        }
    }

    fn lines(&self) -> MutexGuard<'_, Vec<LogLine>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a line the guest logged (`level` as [`LogLine::level`]).
    /// A NUL is stored as `\0` (databases refuse it in text).
    pub fn log(&self, level: &str, message: &str) {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.log_bytes
            .fetch_add(message.len() as u64, Ordering::Relaxed);
        let message = if message.contains('\0') {
            message.replace('\0', "\\0")
        } else {
            message.to_string()
        };
        let line = LogLine {
            job_id: self.job_id.clone(),
            attempt: self.attempt,
            seq,
            at: Utc::now(),
            level: level.to_string(),
            message,
        };
        self.lines().push(line);
    }

    /// Records the host's marker line after `dropped` bytes of log output
    /// were refused (not counted in the guest's log bytes).
    pub fn log_cut(&self, limit: usize, dropped: usize) {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.lines().push(LogLine {
            job_id: self.job_id.clone(),
            attempt: self.attempt,
            seq,
            at: Utc::now(),
            level: "host".into(),
            message: format!(
                "… {dropped} bytes dropped: the log reached max_log ({limit} bytes) and the run was stopped"
            ),
        });
    }

    /// The lines logged since the last take.
    pub fn take_logs(&self) -> Vec<LogLine> {
        std::mem::take(&mut *self.lines())
    }

    /// Whether lines wait to be taken.
    pub fn has_logs(&self) -> bool {
        !self.lines().is_empty()
    }

    /// Raises the peak linear memory to `bytes` if higher.
    pub fn note_memory(&self, bytes: u64) {
        let _ = self
            .peak_memory
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                (old == UNSET || bytes > old).then_some(bytes)
            });
    }

    /// Sets the fuel the run consumed.
    pub fn set_fuel(&self, fuel: u64) {
        self.fuel.store(fuel.min(UNSET - 1), Ordering::Relaxed);
    }

    /// Counts one outbound HTTP request.
    pub fn note_http_request(&self) {
        self.http_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts outbound HTTP body bytes received.
    pub fn note_http_bytes(&self, bytes: u64) {
        self.http_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts one enqueue made by the run.
    pub fn note_enqueue(&self) {
        self.enqueues.fetch_add(1, Ordering::Relaxed);
    }

    /// Sets the time spent in the call into the guest's handler
    /// (instantiation excluded; host calls the guest makes included).
    pub fn set_guest_time(&self, time: Duration) {
        let nanos = u64::try_from(time.as_nanos()).unwrap_or(UNSET - 1);
        self.guest_nanos
            .store(nanos.min(UNSET - 1), Ordering::Relaxed);
    }

    /// The time set by [`set_guest_time`](Self::set_guest_time), if any.
    pub fn guest_time(&self) -> Option<Duration> {
        let nanos = self.guest_nanos.load(Ordering::Relaxed);
        (nanos != UNSET).then(|| Duration::from_nanos(nanos))
    }

    /// The figures so far; wall time and result size are the engine's.
    pub fn usage(&self) -> AttemptUsage {
        let opt = |a: &AtomicU64| Some(a.load(Ordering::Relaxed)).filter(|v| *v != UNSET);
        AttemptUsage {
            wall_ms: None,
            peak_memory_bytes: opt(&self.peak_memory),
            fuel: opt(&self.fuel),
            log_bytes: Some(self.log_bytes.load(Ordering::Relaxed)),
            result_bytes: None,
            http_requests: Some(self.http_requests.load(Ordering::Relaxed)),
            http_bytes: Some(self.http_bytes.load(Ordering::Relaxed)),
            enqueues: Some(self.enqueues.load(Ordering::Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_and_taken_once() {
        let r = RunRecord::new("j", 2);
        r.log("info", "one");
        r.log("warn", "three");
        let lines = r.take_logs();
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].seq, lines[1].seq), (0, 1));
        assert_eq!(lines[1].attempt, 2);
        assert!(!r.has_logs());
        r.log("info", "x");
        assert_eq!(r.take_logs()[0].seq, 2);
        assert_eq!(r.usage().log_bytes, Some(9));
    }

    #[test]
    fn guest_time_is_none_until_set() {
        let r = RunRecord::new("j", 1);
        assert_eq!(r.guest_time(), None);
        r.set_guest_time(Duration::from_micros(1500));
        assert_eq!(r.guest_time(), Some(Duration::from_micros(1500)));
    }

    #[test]
    fn a_nul_is_escaped() {
        let r = RunRecord::new("j", 1);
        r.log("info", "a\0b");
        assert_eq!(r.take_logs()[0].message, "a\\0b");
    }

    #[test]
    fn peak_memory_keeps_the_highest_and_unset_is_none() {
        let r = RunRecord::new("j", 1);
        assert_eq!(r.usage().peak_memory_bytes, None);
        assert_eq!(r.usage().fuel, None);
        r.note_memory(10);
        r.note_memory(5);
        r.note_memory(20);
        assert_eq!(r.usage().peak_memory_bytes, Some(20));
    }
}
