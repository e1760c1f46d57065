//! How a handler says it failed: [`retry`] or [`terminal`], both becoming an
//! [`Error`] that the runtime turns into the WIT `job-error`.
//!
//! Any `std::error::Error` converts into a retryable [`Error`] that consumes
//! an attempt, so `?` works on I/O, parse and similar errors.

use std::{fmt, time::Duration};

use crate::bindings::boxcar::handler::types::{JobError, RetryableError, TerminalError};

/// A handler failure: retry later, or fail now.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// Try again later (see [`retry`]).
    Retry(Retry),
    /// Fail now, no retry (see [`terminal`]).
    Terminal(Terminal),
}

/// Builder for a retryable failure; see [`retry`].
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    message: String,
    retry_after: Option<Duration>,
    consumes_attempt: bool,
}

/// Builder for a terminal failure; see [`terminal`].
#[derive(Debug, Clone, PartialEq)]
pub struct Terminal {
    message: String,
    code: Option<String>,
    details: Option<String>,
}

/// A retryable failure: the job runs again after the backoff.
///
/// ```
/// use std::time::Duration;
/// let e: boxcar_guest::Error = boxcar_guest::retry("rate limited")
///     .after(Duration::from_secs(30))
///     .keep_attempt()
///     .into();
/// ```
pub fn retry(message: impl Into<String>) -> Retry {
    Retry {
        message: message.into(),
        retry_after: None,
        consumes_attempt: true,
    }
}

/// A terminal failure: the job fails now without retrying.
///
/// ```
/// let e: boxcar_guest::Error = boxcar_guest::terminal("image refused")
///     .code("content-refused")
///     .details(&serde_json::json!({ "reason": "nsfw" }))
///     .into();
/// ```
pub fn terminal(message: impl Into<String>) -> Terminal {
    Terminal {
        message: message.into(),
        code: None,
        details: None,
    }
}

impl Retry {
    /// Do not retry sooner than `delay` (a floor on the host's backoff).
    #[must_use]
    pub fn after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    /// Give the attempt back: use it for capacity and rate limits, where the
    /// job itself did nothing wrong.
    #[must_use]
    pub fn keep_attempt(mut self) -> Self {
        self.consumes_attempt = false;
        self
    }

    /// The message stored as the job's last error.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl Terminal {
    /// A machine-readable code a waiting caller can match on.
    #[must_use]
    pub fn code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// Machine-readable details, stored as JSON. A value that cannot be
    /// serialized is dropped (the failure itself is still reported).
    #[must_use]
    pub fn details(mut self, details: &impl serde::Serialize) -> Self {
        self.details = serde_json::to_string(details).ok();
        self
    }

    /// The message stored as the job's last error.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<Retry> for Error {
    fn from(r: Retry) -> Self {
        Self::Retry(r)
    }
}

impl From<Terminal> for Error {
    fn from(t: Terminal) -> Self {
        Self::Terminal(t)
    }
}

impl<E: std::error::Error> From<E> for Error {
    fn from(e: E) -> Self {
        Self::Retry(retry(e.to_string()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Retry(r) => write!(f, "retryable: {}", r.message),
            Self::Terminal(t) => write!(f, "terminal: {}", t.message),
        }
    }
}

impl Error {
    pub(crate) fn into_wit(self) -> JobError {
        match self {
            Self::Retry(r) => JobError::Retryable(RetryableError {
                message: r.message,
                retry_after_ms: r
                    .retry_after
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                consumes_attempt: r.consumes_attempt,
            }),
            Self::Terminal(t) => JobError::Terminal(TerminalError {
                message: t.message,
                code: t.code,
                details: t.details,
            }),
        }
    }
}
