//! What one registration is: a handler's settings ([`HandlerSettings`],
//! with the payload check it may carry) and the deployed version the engine
//! runs ([`HandlerEntry`]), and the checks a registration passes on its own.
//!
//! Invariants: a registered type has a non-empty name, concurrency of at
//! least 1, positive durations no longer than the queue's caps, a positive
//! attempt budget when it sets one, and valid enqueue bounds; its version
//! is captured once, at registration.

use std::sync::Arc;
use std::time::Duration;

use super::RegistryError;
use crate::bounds::{at_most, EnqueueBounds, MAX_HANDLER_TIMEOUT, MAX_LEASE_DURATION};
use crate::handler::Handler;

/// One payload JSON Schema failure: where, and which rule (never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaFailure {
    /// JSON pointer of the failing value.
    pub pointer: String,
    /// The rule that failed (schema keyword), without the value.
    pub reason: String,
}

/// Validates payloads of one job type (the CLI supplies a JSON-Schema impl).
pub trait PayloadValidator: Send + Sync + 'static {
    /// Checks a parsed payload.
    ///
    /// # Errors
    /// The first failing location.
    fn validate(&self, payload: &serde_json::Value) -> Result<(), SchemaFailure>;
}

/// How the engine runs one job type on this host. Start from
/// `HandlerSettings::default()` and set fields; more settings may come.
#[derive(Clone)]
#[non_exhaustive]
pub struct HandlerSettings {
    /// Most jobs of the type running at once on this host. Default 4 (a
    /// manifest without `concurrency` gets the same).
    pub concurrency: u32,
    /// Wall-clock limit per run.
    pub timeout: Duration,
    /// Renewed lease length; `None` = lease is `timeout + lease_grace`.
    pub lease_duration: Option<Duration>,
    /// Renewal period; `None` = a third of `lease_duration`.
    pub lease_renew_interval: Option<Duration>,
    /// Default attempt budget for jobs of this type.
    pub max_attempts: Option<u32>,
    /// Types this handler may enqueue while running (exact names; there is
    /// no wildcard).
    pub may_enqueue: Vec<String>,
    /// Priority, attempt and delay bounds on what this handler enqueues.
    pub enqueue_bounds: EnqueueBounds,
    /// Guard: one live job per scope.
    pub serialize_by_scope: bool,
    /// Guard: not while these types hold live leases.
    pub not_while_running: Vec<String>,
    /// Guard: not while these types have due or live work.
    pub waits_for: Vec<String>,
    /// Payload schema check at enqueue.
    pub payload_validator: Option<Arc<dyn PayloadValidator>>,
}

impl Default for HandlerSettings {
    fn default() -> Self {
        Self {
            concurrency: 4,
            timeout: Duration::from_secs(60),
            lease_duration: None,
            lease_renew_interval: None,
            max_attempts: None,
            may_enqueue: Vec::new(),
            enqueue_bounds: EnqueueBounds::default(),
            serialize_by_scope: false,
            not_while_running: Vec::new(),
            waits_for: Vec::new(),
            payload_validator: None,
        }
    }
}

impl std::fmt::Debug for HandlerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerSettings")
            .field("concurrency", &self.concurrency)
            .field("timeout", &self.timeout)
            .field("lease_duration", &self.lease_duration)
            .field("max_attempts", &self.max_attempts)
            .field("serialize_by_scope", &self.serialize_by_scope)
            .field("not_while_running", &self.not_while_running)
            .field("waits_for", &self.waits_for)
            .finish_non_exhaustive()
    }
}

/// A deployed handler version.
pub struct HandlerEntry {
    /// The job type.
    pub job_type: String,
    /// Runs the jobs.
    pub handler: Arc<dyn Handler>,
    /// How to run them.
    pub settings: HandlerSettings,
    /// `handler.version()`, captured at registration.
    pub version: String,
}

/// A registration checked on its own (the checks that need no other type).
pub(super) fn entry(
    job_type: String,
    handler: Arc<dyn Handler>,
    settings: HandlerSettings,
) -> Result<Arc<HandlerEntry>, RegistryError> {
    let bad = |setting, reason: &str| RegistryError::BadSetting {
        job_type: job_type.clone(),
        setting,
        reason: reason.to_string(),
    };
    if job_type.trim().is_empty() {
        return Err(bad("job_type", "must not be empty"));
    }
    if settings.concurrency == 0 {
        return Err(bad("concurrency", "must be at least 1"));
    }
    if settings.timeout.is_zero() {
        return Err(bad("timeout", "must be positive"));
    }
    if settings.lease_duration.is_some_and(|d| d.is_zero()) {
        return Err(bad("lease_duration", "must be positive"));
    }
    if settings.lease_renew_interval.is_some_and(|d| d.is_zero()) {
        return Err(bad("lease_renew_interval", "must be positive"));
    }
    if settings.max_attempts == Some(0) {
        return Err(bad("max_attempts", "must be a positive integer"));
    }
    let durations = [
        ("timeout", Some(settings.timeout), MAX_HANDLER_TIMEOUT),
        (
            "lease_duration",
            settings.lease_duration,
            MAX_LEASE_DURATION,
        ),
        (
            "lease_renew_interval",
            settings.lease_renew_interval,
            MAX_LEASE_DURATION,
        ),
    ];
    for (setting, value, max) in durations {
        if let Some(Err(reason)) = value.map(|d| at_most(d, max)) {
            return Err(bad(setting, &reason));
        }
    }
    if let Err((setting, reason)) = settings.enqueue_bounds.validate() {
        return Err(bad(setting, &reason));
    }
    let version = handler.version();
    Ok(Arc::new(HandlerEntry {
        job_type,
        handler,
        settings,
        version,
    }))
}
