//! The guest's log: the `log` import and the guest's stdout/stderr, sharing
//! one per-job byte budget.
//!
//! Invariants:
//! - Lines go to `tracing` (target `boxcar::guest`) with the job's id and
//!   type; payload text is never added by the host.
//! - Nothing grows without bound: a line is cut at `max_log_line`, partial
//!   stdout/stderr lines are buffered up to that length, and once the job's
//!   total (`max_log`) is spent the write fails and the job ends with
//!   `LimitExceeded(LogVolume)`.
//! - The last bytes of stderr are kept (a few KiB) so a guest panic message
//!   can be reported in `Trapped`.

use std::{
    io,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll},
};

use bytes::Bytes;
use wasmtime_wasi::{
    cli::{IsTerminal, StdoutStream},
    p2::{OutputStream, Pollable, StreamError, StreamResult},
};

/// Bytes of stderr kept for trap messages.
const STDERR_TAIL: usize = 2048;

/// Severity of a guest log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Which stream a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Log,
    Stdout,
    Stderr,
}

/// Returned when the log budget is spent.
#[derive(Debug, thiserror::Error)]
#[error("log volume limit reached: more than {limit} bytes of log output")]
pub(crate) struct LogLimitReached {
    pub(crate) limit: usize,
}

/// One job's log state; shared by the host state and the stdio streams.
pub(crate) struct LogSink {
    job_id: Arc<str>,
    job_type: Arc<str>,
    max_log: usize,
    max_line: usize,
    state: Mutex<SinkState>,
}

#[derive(Default)]
struct SinkState {
    used: usize,
    exceeded: bool,
    stdout_line: Vec<u8>,
    stderr_line: Vec<u8>,
    stderr_tail: Vec<u8>,
}

impl LogSink {
    pub(crate) fn new(
        job_id: Arc<str>,
        job_type: Arc<str>,
        max_log: usize,
        max_line: usize,
    ) -> Self {
        Self {
            job_id,
            job_type,
            max_log,
            max_line,
            state: Mutex::new(SinkState::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True once the budget was exceeded.
    pub(crate) fn exceeded(&self) -> bool {
        self.lock().exceeded
    }

    /// Bytes of log output accepted so far.
    pub(crate) fn used(&self) -> usize {
        self.lock().used
    }

    /// The budget.
    pub(crate) fn limit(&self) -> usize {
        self.max_log
    }

    /// The end of stderr, lossily decoded.
    pub(crate) fn stderr_tail(&self) -> String {
        String::from_utf8_lossy(&self.lock().stderr_tail)
            .trim()
            .to_string()
    }

    fn charge(&self, state: &mut SinkState, len: usize) -> Result<(), LogLimitReached> {
        if state.exceeded || state.used.saturating_add(len) > self.max_log {
            state.exceeded = true;
            return Err(LogLimitReached {
                limit: self.max_log,
            });
        }
        state.used += len;
        Ok(())
    }

    /// A line from the `log` import.
    pub(crate) fn log(&self, level: Level, message: &str) -> Result<(), LogLimitReached> {
        {
            let mut state = self.lock();
            self.charge(&mut state, message.len())?;
        }
        self.emit(level, Source::Log, truncate(message, self.max_line));
        Ok(())
    }

    /// Bytes written to stdout or stderr.
    fn write(&self, stderr: bool, bytes: &[u8]) -> Result<(), LogLimitReached> {
        let mut lines = Vec::new();
        {
            let mut state = self.lock();
            self.charge(&mut state, bytes.len())?;
            if stderr {
                let tail = &mut state.stderr_tail;
                tail.extend_from_slice(&bytes[bytes.len().saturating_sub(STDERR_TAIL)..]);
                if tail.len() > STDERR_TAIL {
                    let cut = tail.len() - STDERR_TAIL;
                    tail.drain(..cut);
                }
            }
            let max = self.max_line;
            let buf = if stderr {
                &mut state.stderr_line
            } else {
                &mut state.stdout_line
            };
            for chunk in bytes.split_inclusive(|b| *b == b'\n') {
                let (body, ends) = match chunk.split_last() {
                    Some((b'\n', body)) => (body, true),
                    _ => (chunk, false),
                };
                let room = max.saturating_sub(buf.len());
                buf.extend_from_slice(&body[..body.len().min(room)]);
                if ends {
                    lines.push(std::mem::take(buf));
                }
            }
        }
        let source = if stderr {
            Source::Stderr
        } else {
            Source::Stdout
        };
        for line in lines {
            self.emit(Level::Info, source, &String::from_utf8_lossy(&line));
        }
        Ok(())
    }

    /// Emits buffered partial stdout/stderr lines; call when the job ends.
    pub(crate) fn flush(&self) {
        let (out, err) = {
            let mut state = self.lock();
            (
                std::mem::take(&mut state.stdout_line),
                std::mem::take(&mut state.stderr_line),
            )
        };
        if !out.is_empty() {
            self.emit(Level::Info, Source::Stdout, &String::from_utf8_lossy(&out));
        }
        if !err.is_empty() {
            self.emit(Level::Info, Source::Stderr, &String::from_utf8_lossy(&err));
        }
    }

    fn emit(&self, level: Level, source: Source, line: &str) {
        let (id, ty) = (&*self.job_id, &*self.job_type);
        let stream = match source {
            Source::Log => "log",
            Source::Stdout => "stdout",
            Source::Stderr => "stderr",
        };
        macro_rules! ev {
            ($lvl:ident) => {
                tracing::$lvl!(target: "boxcar::guest", job_id = id, job_type = ty, stream, "{line}")
            };
        }
        match level {
            Level::Trace => ev!(trace),
            Level::Debug => ev!(debug),
            Level::Info => ev!(info),
            Level::Warn => ev!(warn),
            Level::Error => ev!(error),
        }
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A guest's stdout or stderr, feeding a [`LogSink`].
#[derive(Clone)]
pub(crate) struct GuestOutput {
    sink: Arc<LogSink>,
    stderr: bool,
}

impl GuestOutput {
    pub(crate) fn stdout(sink: Arc<LogSink>) -> Self {
        Self {
            sink,
            stderr: false,
        }
    }

    pub(crate) fn stderr(sink: Arc<LogSink>) -> Self {
        Self { sink, stderr: true }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.sink
            .write(self.stderr, &bytes)
            .map_err(|e| StreamError::Trap(wasmtime::Error::new(e)))
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(
            self.sink
                .write(self.stderr, buf)
                .map(|()| buf.len())
                .map_err(io::Error::other),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(max_log: usize, max_line: usize) -> LogSink {
        LogSink::new(Arc::from("j"), Arc::from("t"), max_log, max_line)
    }

    #[test]
    fn budget_is_shared_and_sticky() {
        let s = sink(10, 10);
        assert!(s.log(Level::Info, "12345").is_ok());
        assert!(s.write(false, b"123\n").is_ok());
        assert!(s.write(true, b"abc").is_err());
        assert!(s.exceeded());
        assert!(s.log(Level::Info, "").is_err(), "stays exceeded");
        assert_eq!(s.used(), 9);
    }

    #[test]
    fn partial_lines_are_bounded_by_the_line_limit() {
        let s = sink(1 << 20, 4);
        for _ in 0..1000 {
            assert!(s.write(false, b"xxxxxxxxxx").is_ok());
        }
        assert!(s.lock().stdout_line.len() <= 4);
        s.flush();
        assert!(s.lock().stdout_line.is_empty());
    }

    #[test]
    fn stderr_tail_keeps_the_end() {
        let s = sink(1 << 20, 100);
        let big = vec![b'a'; 10_000];
        assert!(s.write(true, &big).is_ok());
        assert!(s.write(true, b"\npanicked at boom\n").is_ok());
        let tail = s.stderr_tail();
        assert!(tail.len() <= STDERR_TAIL);
        assert!(tail.ends_with("panicked at boom"), "{tail}");
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
