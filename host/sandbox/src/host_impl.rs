//! The `boxcar:handler/host` imports, each bounded per job.
//!
//! - `log`: counted against `max_log` (shared with stdout/stderr); past it
//!   the guest is stopped (`LimitExceeded(LogVolume)`).
//! - `progress`: reports over `max_progress` are refused (`limit-reached`).
//! - `enqueue`: calls past `max_enqueues` are refused (`limit-reached`)
//!   without reaching the queue; every other call is forwarded as it is to
//!   the run's `JobServices`, which alone decides what may be enqueued
//!   (`may_enqueue`, priority/attempt/delay bounds, dedupe namespacing).
//! - `cancelled`: true once cancel fired, the lease lapsed or the deadline
//!   passed.

use std::time::{Duration, Instant};

use boxcar_queue::{ChildJobRequest, Scope, ServiceError};

use crate::{
    bindings::boxcar::handler::{host, types},
    output::Level,
    state::HostState,
};

impl types::Host for HostState {}

/// The queue's request for a guest's `enqueue` call, as the guest gave it.
pub(crate) fn child_request(
    job_type: String,
    payload: String,
    options: types::EnqueueOptions,
) -> ChildJobRequest {
    ChildJobRequest {
        job_type,
        payload,
        scope: options.scope.map(|s| Scope::new(s.scope_type, s.scope_id)),
        dedupe_key: options.dedupe_key,
        delay: options.delay_ms.map(Duration::from_millis),
        priority: options.priority,
        max_attempts: options.max_attempts,
    }
}

/// What the guest is told when the queue refuses a call.
pub(crate) fn host_error(e: ServiceError) -> types::HostError {
    match e {
        ServiceError::NotAllowed(job_type) => types::HostError::NotAllowed(
            ServiceError::NotAllowed(crate::output::truncate(&job_type, 200).to_string())
                .to_string(),
        ),
        ServiceError::LimitReached(m) => types::HostError::LimitReached(m),
        ServiceError::Invalid(m) => types::HostError::Invalid(m),
        ServiceError::Host(m) => types::HostError::Unavailable(m),
        other => types::HostError::Unavailable(other.to_string()),
    }
}

impl host::Host for HostState {
    async fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        let level = match level {
            types::LogLevel::Trace => Level::Trace,
            types::LogLevel::Debug => Level::Debug,
            types::LogLevel::Info => Level::Info,
            types::LogLevel::Warn => Level::Warn,
            types::LogLevel::Error => Level::Error,
        };
        self.log.log(level, &message).map_err(wasmtime::Error::new)
    }

    async fn progress(&mut self, json: String) -> wasmtime::Result<Result<(), types::HostError>> {
        if json.len() > self.limits.max_progress {
            return Ok(Err(types::HostError::LimitReached(format!(
                "progress report of {} bytes exceeds max_progress ({} bytes)",
                json.len(),
                self.limits.max_progress
            ))));
        }
        let services = self.services.clone();
        Ok(services.progress(json).await.map_err(host_error))
    }

    async fn cancelled(&mut self) -> wasmtime::Result<bool> {
        Ok(self.must_stop() || Instant::now() >= self.deadline)
    }

    async fn enqueue(
        &mut self,
        job_type: String,
        payload: String,
        options: types::EnqueueOptions,
    ) -> wasmtime::Result<Result<String, types::HostError>> {
        if self.enqueues >= self.limits.max_enqueues {
            return Ok(Err(types::HostError::LimitReached(format!(
                "at most {} enqueue calls per job (max_enqueues)",
                self.limits.max_enqueues
            ))));
        }
        self.enqueues += 1;
        let request = child_request(job_type, payload, options);
        let services = self.services.clone();
        let enqueued = services.enqueue(request).await;
        if enqueued.is_ok() {
            if let Some(record) = self.log.record() {
                record.note_enqueue();
            }
        }
        Ok(enqueued.map_err(host_error))
    }

    async fn children(&mut self) -> wasmtime::Result<Result<Vec<types::Child>, types::HostError>> {
        let services = self.services.clone();
        Ok(services
            .children()
            .await
            .map(|children| {
                children
                    .into_iter()
                    .map(|c| types::Child {
                        id: c.id,
                        job_type: c.job_type,
                        status: c.status,
                        result: c.result,
                        error: c.error,
                    })
                    .collect()
            })
            .map_err(host_error))
    }
}
