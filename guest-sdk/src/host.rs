//! The host calls a handler may make: logging, progress, cancellation,
//! enqueueing follow-up jobs and reading a flow's children.
//!
//! Every call is bounded per job by the host (see the operator's manifest);
//! a refused call returns a [`HostError`] rather than trapping.

use std::time::Duration;

use crate::bindings::boxcar::handler::{host as wit_host, types as wit};
use crate::job::Scope;

pub use wit::HostError;

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected but handled.
    Warn,
    /// A failure.
    Error,
}

/// Writes one log line attributed to the job. Prefer the macros
/// ([`info!`](crate::info!) etc.). Lines beyond the job's log budget are
/// dropped by the host.
pub fn log(level: Level, message: &str) {
    let level = match level {
        Level::Trace => wit::LogLevel::Trace,
        Level::Debug => wit::LogLevel::Debug,
        Level::Info => wit::LogLevel::Info,
        Level::Warn => wit::LogLevel::Warn,
        Level::Error => wit::LogLevel::Error,
    };
    wit_host::log(level, message);
}

/// Reports progress; stored and visible when inspecting the job.
///
/// # Errors
/// [`HostError::LimitReached`] when the report is larger than the job's
/// progress bound; [`HostError::Invalid`] if `value` cannot be serialized.
pub fn progress(value: &impl serde::Serialize) -> Result<(), HostError> {
    let json = serde_json::to_string(value).map_err(|e| HostError::Invalid(e.to_string()))?;
    wit_host::progress(&json)
}

/// True once the host wants this run to stop (cancel, shutdown, deadline).
/// Long loops should check it and return early; the host stops the guest at
/// the deadline either way.
pub fn cancelled() -> bool {
    wit_host::cancelled()
}

/// Options for [`enqueue`]; `EnqueueOptions::default()` means none.
#[derive(Debug, Clone, Default)]
pub struct EnqueueOptions {
    /// Scope of the new job.
    pub scope: Option<Scope>,
    /// Dedupe key of the new job.
    pub dedupe_key: Option<String>,
    /// Delay before the new job is due.
    pub delay: Option<Duration>,
    /// Priority; lower runs first.
    pub priority: Option<i32>,
    /// Attempt budget; default is the target handler's.
    pub max_attempts: Option<u32>,
}

/// Enqueues a follow-up job of a type the manifest allows
/// (`capabilities.may_enqueue`); returns the new job's id.
///
/// # Errors
/// [`HostError::NotAllowed`] for a type not granted, [`HostError::LimitReached`]
/// past the per-job enqueue bound, [`HostError::Invalid`] for a payload that
/// is not a JSON object, [`HostError::Unavailable`] when the store failed.
pub fn enqueue(
    job_type: &str,
    payload: &impl serde::Serialize,
    options: EnqueueOptions,
) -> Result<String, HostError> {
    let payload = serde_json::to_string(payload).map_err(|e| HostError::Invalid(e.to_string()))?;
    let options = wit::EnqueueOptions {
        scope: options.scope.map(Scope::into_wit),
        dedupe_key: options.dedupe_key,
        delay_ms: options
            .delay
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        priority: options.priority,
        max_attempts: options.max_attempts,
    };
    wit_host::enqueue(job_type, &payload, &options)
}

/// A child of a flow, as its parent sees it.
pub type Child = wit::Child;

/// The children of this job (flows), with their results and errors.
///
/// # Errors
/// [`HostError::Unavailable`] when the store failed.
pub fn children() -> Result<Vec<Child>, HostError> {
    wit_host::children()
}

/// Logs at trace level: `trace!("x = {}", x)`.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => { $crate::log($crate::Level::Trace, &::std::format!($($arg)*)) };
}

/// Logs at debug level: `debug!("x = {}", x)`.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log($crate::Level::Debug, &::std::format!($($arg)*)) };
}

/// Logs at info level: `info!("x = {}", x)`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log($crate::Level::Info, &::std::format!($($arg)*)) };
}

/// Logs at warn level: `warn!("x = {}", x)`.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log($crate::Level::Warn, &::std::format!($($arg)*)) };
}

/// Logs at error level: `error!("x = {}", x)`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log($crate::Level::Error, &::std::format!($($arg)*)) };
}
