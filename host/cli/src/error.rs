//! The binary's failures that the exit code tells apart, and the mapping
//! from any failure to its exit code: 0 ok; 1 runtime failure; 2 bad usage
//! or input; 3 the job waited for failed or was cancelled (or a replay
//! did not succeed); 4 a wait timed out.

/// Bad usage or input: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The job waited for (or replayed) did not succeed: exit code 3.
#[derive(Debug, thiserror::Error)]
#[error(
    "job {id} {status}: {}{}",
    crate::output::printable(message),
    code.as_ref().map(|c| format!(" (code {})", crate::output::printable(c))).unwrap_or_default()
)]
pub struct JobFailed {
    pub id: String,
    pub status: String,
    pub message: String,
    /// The handler's machine-readable error code, when it gave one.
    pub code: Option<String>,
}

/// A wait ran out: exit code 4.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WaitTimedOut(pub String);

/// The exit code for a failure.
pub fn exit_code(error: &anyhow::Error) -> u8 {
    if error.downcast_ref::<UsageError>().is_some()
        || error
            .downcast_ref::<crate::toml_file::FileError>()
            .is_some()
        || error.downcast_ref::<crate::deploy::DeployError>().is_some()
        || error.downcast_ref::<boxcar_queue::EnqueueError>().is_some()
        || matches!(
            error.downcast_ref::<boxcar_queue::QueueError>(),
            Some(boxcar_queue::QueueError::Enqueue(_))
        )
    {
        2
    } else if error.downcast_ref::<JobFailed>().is_some() {
        3
    } else if error.downcast_ref::<WaitTimedOut>().is_some() {
        4
    } else {
        1
    }
}

/// Shorthand for a usage error.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}
