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
//! - Every line costs [`LINE_OVERHEAD`] bytes on top of its text (a `log`
//!   call, or a `\n` on stdout/stderr), and a job emits at most
//!   `max_log_lines` lines: empty lines cannot flood the host's log.
//! - What reaches `tracing` is one line per guest line: control characters
//!   (CR, LF, ESC, …) and Unicode line/paragraph separators are escaped, so
//!   a guest cannot forge host log lines or terminal sequences.
//! - The last bytes of stderr are kept (a few KiB) so a guest panic message
//!   can be reported in `Trapped`.
//! - Every emitted line (as escaped for the host's log) is also kept in the
//!   run's [`RunRecord`], which the engine stores with the attempt; the
//!   write that breaks the budget is replaced there by one marker line
//!   saying how many bytes were dropped.

use std::{
    borrow::Cow,
    io,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll},
};

use boxcar_queue::RunRecord;
use bytes::Bytes;
use wasmtime_wasi::{
    cli::{IsTerminal, StdoutStream},
    p2::{OutputStream, Pollable, StreamError, StreamResult},
};

/// Bytes of stderr kept for trap messages.
const STDERR_TAIL: usize = 2048;

/// Bytes each emitted line costs against `max_log` besides its text: the
/// host's own fields (time, level, job id and type) make every line cost
/// about this much in the host's log.
pub(crate) const LINE_OVERHEAD: usize = 128;

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

/// Returned when the log budget (bytes or lines) is spent.
#[derive(Debug, thiserror::Error)]
#[error("log volume limit reached: more than {limit} bytes or {max_lines} lines of log output")]
pub(crate) struct LogLimitReached {
    pub(crate) limit: usize,
    pub(crate) max_lines: usize,
}

/// One job's log state; shared by the host state and the stdio streams.
pub(crate) struct LogSink {
    job_id: Arc<str>,
    job_type: Arc<str>,
    max_log: usize,
    max_line: usize,
    max_lines: usize,
    state: Mutex<SinkState>,
    record: Option<Arc<RunRecord>>,
}

#[derive(Default)]
struct SinkState {
    used: usize,
    lines: usize,
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
        max_lines: usize,
    ) -> Self {
        Self {
            job_id,
            job_type,
            max_log,
            max_line,
            max_lines,
            state: Mutex::new(SinkState::default()),
            record: None,
        }
    }

    /// Also keeps every line (and the marker of a cut) in `record`.
    pub(crate) fn recording(mut self, record: Arc<RunRecord>) -> Self {
        self.record = Some(record);
        self
    }

    /// The run's record, when there is one.
    pub(crate) fn record(&self) -> Option<&RunRecord> {
        self.record.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True once the budget was exceeded.
    pub(crate) fn exceeded(&self) -> bool {
        self.lock().exceeded
    }

    /// Bytes of log output accepted so far, line overheads included.
    pub(crate) fn used(&self) -> usize {
        self.lock().used
    }

    /// Lines accepted so far.
    pub(crate) fn lines(&self) -> usize {
        self.lock().lines
    }

    /// The byte budget.
    pub(crate) fn limit(&self) -> usize {
        self.max_log
    }

    /// The line budget.
    pub(crate) fn line_limit(&self) -> usize {
        self.max_lines
    }

    /// The end of stderr, lossily decoded.
    pub(crate) fn stderr_tail(&self) -> String {
        String::from_utf8_lossy(&self.lock().stderr_tail)
            .trim()
            .to_string()
    }

    /// Charges `len` bytes of text and `lines` new lines (each also
    /// costing [`LINE_OVERHEAD`]); all or nothing.
    fn charge(
        &self,
        state: &mut SinkState,
        len: usize,
        lines: usize,
    ) -> Result<(), LogLimitReached> {
        let cost = len.saturating_add(lines.saturating_mul(LINE_OVERHEAD));
        let used = state.used.saturating_add(cost);
        let count = state.lines.saturating_add(lines);
        if state.exceeded || used > self.max_log || count > self.max_lines {
            if !state.exceeded {
                if let Some(record) = &self.record {
                    record.log_cut(self.max_log, len);
                }
            }
            state.exceeded = true;
            return Err(LogLimitReached {
                limit: self.max_log,
                max_lines: self.max_lines,
            });
        }
        state.used = used;
        state.lines = count;
        Ok(())
    }

    /// A line from the `log` import.
    pub(crate) fn log(&self, level: Level, message: &str) -> Result<(), LogLimitReached> {
        {
            let mut state = self.lock();
            self.charge(&mut state, message.len(), 1)?;
        }
        self.emit(level, Source::Log, truncate(message, self.max_line));
        Ok(())
    }

    /// Bytes written to stdout or stderr.
    pub(crate) fn write(&self, stderr: bool, bytes: &[u8]) -> Result<(), LogLimitReached> {
        let mut lines = Vec::new();
        {
            let mut state = self.lock();
            let newlines = bytes.iter().filter(|b| **b == b'\n').count();
            self.charge(&mut state, bytes.len(), newlines)?;
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
        let line = escape_line(line);
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
        if let Some(record) = &self.record {
            let name = match (source, level) {
                (Source::Stdout, _) => "stdout",
                (Source::Stderr, _) => "stderr",
                (Source::Log, Level::Trace) => "trace",
                (Source::Log, Level::Debug) => "debug",
                (Source::Log, Level::Info) => "info",
                (Source::Log, Level::Warn) => "warn",
                (Source::Log, Level::Error) => "error",
            };
            record.log(name, &line);
        }
    }
}

/// `line` with every control character (C0, DEL, C1) and the Unicode line
/// and paragraph separators escaped (`\r`, `\n`, `\u{1b}`, …), so it
/// stays one line in the host's log and cannot drive a terminal.
pub(crate) fn escape_line(line: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || c == '\u{2028}' || c == '\u{2029}';
    if !line.chars().any(unsafe_char) {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 16);
    for c in line.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
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
        LogSink::new(Arc::from("j"), Arc::from("t"), max_log, max_line, 1000)
    }

    #[test]
    fn budget_is_shared_and_sticky() {
        let s = sink(2 * LINE_OVERHEAD + 10, 10);
        assert!(s.log(Level::Info, "12345").is_ok());
        assert!(s.write(false, b"123\n").is_ok());
        assert!(s.write(true, b"abc").is_err());
        assert!(s.exceeded());
        assert!(s.log(Level::Info, "").is_err(), "stays exceeded");
        assert_eq!(s.used(), 2 * LINE_OVERHEAD + 9);
        assert_eq!(s.lines(), 2);
    }

    #[test]
    fn every_line_costs_the_overhead_even_when_empty() {
        // Ten lines of one byte (`\n`) each, or ten empty log calls.
        let budget = 10 * (LINE_OVERHEAD + 1);
        let s = sink(budget, 10);
        for _ in 0..10 {
            assert!(s.log(Level::Info, "").is_ok());
        }
        assert!(s.log(Level::Info, "").is_err());
        let s = sink(budget, 10);
        assert!(s.write(false, &[b'\n'; 10]).is_ok());
        assert!(s.write(true, b"\n").is_err(), "stdout and stderr share it");
    }

    #[test]
    fn line_count_is_capped() {
        let s = LogSink::new(Arc::from("j"), Arc::from("t"), 1 << 30, 10, 3);
        assert!(s.write(false, b"a\nb\n").is_ok());
        assert!(s.log(Level::Info, "c").is_ok());
        assert!(s.log(Level::Info, "d").is_err());
        assert_eq!(s.lines(), 3);
        let s = LogSink::new(Arc::from("j"), Arc::from("t"), 1 << 30, 10, 3);
        assert!(s.write(false, b"\n\n\n\n").is_err(), "all or nothing");
        assert_eq!(s.lines(), 0);
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_line("ok\r\nFORGED"), "ok\\r\\nFORGED");
        assert_eq!(
            escape_line("a\u{1b}[2Jb\u{2028}c"),
            "a\\u{1b}[2Jb\\u{2028}c"
        );
        assert!(matches!(escape_line("plain é"), Cow::Borrowed("plain é")));
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
