//! The dynamic handler registry the engine reads at every claim.
//!
//! Invariants:
//! - A deploy replaces one `Arc<HandlerEntry>` atomically; jobs already
//!   claimed keep the entry they were claimed with, so in-flight work
//!   finishes on the old version.
//! - A `waits_for` cycle among registered handlers is refused at
//!   [`Registry::register`]; a one-sided `not_while_running` is warned about.
//! - Known types are the registered ones, the ones declared as handled
//!   elsewhere, and the ones some live host serves per the store's deployed
//!   types (see `crate::deployed`; replaced wholesale on each refresh).
//! - The registry is one host's served set: [`Registry::host_id`] is the id
//!   its rows in the deployed-types table carry.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::bounds::{at_most, EnqueueBounds, MAX_HANDLER_TIMEOUT, MAX_LEASE_DURATION};
use crate::guards::{ClaimGuards, PoolGuard};
use crate::handler::Handler;
use crate::store::deployed_types::DeployedType;

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

/// A resource pool shared by several types, from configuration
/// ([`PoolConfig::new`], then set the limits and costs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Pool name.
    pub name: String,
    /// Slots held while running.
    pub concurrency: Option<u32>,
    /// Starts per fixed one-minute window.
    pub rate_per_minute: Option<u32>,
    /// Member types (including types handled elsewhere).
    pub types: Vec<String>,
    /// Slot cost per type (default 1).
    pub costs: BTreeMap<String, u32>,
    /// Rate cost per type (default 1).
    pub rate_costs: BTreeMap<String, u32>,
}

impl PoolConfig {
    /// Pool `name` over the member `types`, unbounded until its
    /// `concurrency` or `rate_per_minute` is set; every cost 1.
    pub fn new(
        name: impl Into<String>,
        types: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            types: types.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Every member type with its slot cost (default 1).
    pub fn member_costs(&self) -> Vec<(String, u32)> {
        self.types
            .iter()
            .map(|t| (t.clone(), self.costs.get(t).copied().unwrap_or(1)))
            .collect()
    }

    /// The pool as a guard not tied to a claiming type (for status reads).
    pub(crate) fn status_guard(&self) -> PoolGuard {
        PoolGuard {
            name: self.name.clone(),
            concurrency: self.concurrency,
            rate_per_minute: self.rate_per_minute,
            member_costs: self.member_costs(),
            cost: 0,
            rate_cost: 0,
        }
    }
}

/// A registration or pool declaration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A setting is out of range.
    #[error("handler `{job_type}`: {setting} {reason}")]
    BadSetting {
        /// The job type.
        job_type: String,
        /// The setting name.
        setting: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// `waits_for` forms a cycle.
    #[error("waits_for cycle refused: {0} — two types that wait for each other could never start")]
    WaitsForCycle(String),
    /// A pool declaration is invalid.
    #[error("pool `{pool}`: {reason}")]
    BadPool {
        /// Pool name.
        pool: String,
        /// What is wrong.
        reason: String,
    },
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

#[derive(Default)]
struct Inner {
    handlers: BTreeMap<String, Arc<HandlerEntry>>,
    elsewhere: HashSet<String>,
    /// Types some live host serves, from the store.
    deployed_elsewhere: HashSet<String>,
    validators: HashMap<String, Arc<dyn PayloadValidator>>,
    pools: Vec<PoolConfig>,
}

/// Job types → handler versions, swapped atomically on deploy.
pub struct Registry {
    inner: RwLock<Inner>,
    /// The id this host's deployed types are recorded under.
    host_id: RwLock<String>,
    /// One record of the served set at a time, so a heartbeat that read
    /// the set before a deploy cannot overwrite the deploy's record.
    recording: tokio::sync::Mutex<()>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            inner: RwLock::default(),
            host_id: RwLock::new(uuid::Uuid::new_v4().to_string()),
            recording: tokio::sync::Mutex::new(()),
        }
    }
}

fn waits_for_cycle(handlers: &BTreeMap<String, Arc<HandlerEntry>>) -> Option<String> {
    fn visit(
        t: &str,
        h: &BTreeMap<String, Arc<HandlerEntry>>,
        path: &mut Vec<String>,
        done: &mut HashSet<String>,
    ) -> Option<String> {
        if let Some(pos) = path.iter().position(|p| p == t) {
            let mut cycle = path[pos..].to_vec();
            cycle.push(t.to_string());
            return Some(cycle.join(" -> "));
        }
        if done.contains(t) {
            return None;
        }
        path.push(t.to_string());
        if let Some(e) = h.get(t) {
            for next in &e.settings.waits_for {
                if let Some(c) = visit(next, h, path, done) {
                    return Some(c);
                }
            }
        }
        path.pop();
        done.insert(t.to_string());
        None
    }
    let mut done = HashSet::new();
    handlers
        .keys()
        .find_map(|t| visit(t, handlers, &mut Vec::new(), &mut done))
}

/// A registration checked on its own (the checks that need no other type).
fn entry(
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

impl Registry {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Deploys (or replaces) the handler of `job_type`.
    ///
    /// # Errors
    /// A setting is out of range or the registration would close a
    /// `waits_for` cycle; the previous version keeps serving.
    pub fn register(
        &self,
        job_type: impl Into<String>,
        handler: Arc<dyn Handler>,
        settings: HandlerSettings,
    ) -> Result<(), RegistryError> {
        self.swap(vec![(job_type.into(), handler, settings)], &[])
    }

    /// Deploys (or replaces) every type of `register` and undeploys every
    /// type of `remove`, in one change: dispatch sees the registry before or
    /// after, never in between, and when any registration is refused
    /// nothing changes. A handler serving several types is deployed,
    /// replaced and undeployed this way, all its types or none.
    ///
    /// # Errors
    /// As [`Registry::register`], for the first refused type; the previous
    /// versions keep serving.
    pub fn swap(
        &self,
        register: Vec<(String, Arc<dyn Handler>, HandlerSettings)>,
        remove: &[String],
    ) -> Result<(), RegistryError> {
        let entries = register
            .into_iter()
            .map(|(job_type, handler, settings)| entry(job_type, handler, settings))
            .collect::<Result<Vec<_>, _>>()?;
        let mut inner = self.inner.write();
        let mut next = inner.handlers.clone();
        for job_type in remove {
            next.remove(job_type);
        }
        for entry in entries {
            next.insert(entry.job_type.clone(), entry);
        }
        if let Some(cycle) = waits_for_cycle(&next) {
            return Err(RegistryError::WaitsForCycle(cycle));
        }
        for w in one_sided(&next) {
            tracing::warn!("{w}");
        }
        inner.handlers = next;
        Ok(())
    }

    /// Undeploys a type: no new claims of it on this host.
    pub fn remove(&self, job_type: &str) -> bool {
        self.inner.write().handlers.remove(job_type).is_some()
    }

    /// Registered types, sorted.
    pub fn types(&self) -> Vec<String> {
        self.inner.read().handlers.keys().cloned().collect()
    }

    /// The current version serving `job_type`.
    pub fn get(&self, job_type: &str) -> Option<Arc<HandlerEntry>> {
        self.inner.read().handlers.get(job_type).cloned()
    }

    /// Declares types handled by other processes (known at enqueue).
    pub fn declare_elsewhere<I: IntoIterator<Item = String>>(&self, types: I) {
        self.inner.write().elsewhere.extend(types);
    }

    /// Sets a payload validator for a type handled elsewhere.
    pub fn set_validator(&self, job_type: impl Into<String>, v: Arc<dyn PayloadValidator>) {
        self.inner.write().validators.insert(job_type.into(), v);
    }

    /// Replaces the types known to be served by some live host (from the
    /// store's deployed types; see `Queue::refresh_known_types`).
    pub fn set_deployed_elsewhere<I: IntoIterator<Item = String>>(&self, types: I) {
        self.inner.write().deployed_elsewhere = types.into_iter().collect();
    }

    /// Whether enqueueing `job_type` is allowed.
    pub fn is_known(&self, job_type: &str) -> bool {
        let inner = self.inner.read();
        inner.handlers.contains_key(job_type)
            || inner.elsewhere.contains(job_type)
            || inner.deployed_elsewhere.contains(job_type)
    }

    /// The id this host's deployed types are recorded under (a random one
    /// until [`Registry::set_host_id`]; a host sets its worker id).
    pub fn host_id(&self) -> String {
        self.host_id.read().clone()
    }

    /// Sets the id this host's deployed types are recorded under.
    pub fn set_host_id(&self, id: impl Into<String>) {
        *self.host_id.write() = id.into();
    }

    /// What this host serves, with each manifest's job defaults.
    pub fn deployed_types(&self) -> Vec<DeployedType> {
        self.inner
            .read()
            .handlers
            .values()
            .map(|e| DeployedType {
                job_type: e.job_type.clone(),
                version: e.version.clone(),
                max_attempts: e.settings.max_attempts,
            })
            .collect()
    }

    /// Held while the served set is recorded.
    pub(crate) fn recording(&self) -> &tokio::sync::Mutex<()> {
        &self.recording
    }

    /// The payload validator for `job_type`, if any.
    pub fn validator(&self, job_type: &str) -> Option<Arc<dyn PayloadValidator>> {
        let inner = self.inner.read();
        inner
            .handlers
            .get(job_type)
            .and_then(|e| e.settings.payload_validator.clone())
            .or_else(|| inner.validators.get(job_type).cloned())
    }

    /// The default attempt budget of `job_type`.
    pub fn max_attempts(&self, job_type: &str) -> Option<u32> {
        self.inner
            .read()
            .handlers
            .get(job_type)
            .and_then(|e| e.settings.max_attempts)
    }

    /// Replaces the pool declarations.
    ///
    /// # Errors
    /// A pool has neither dimension, a non-positive number, no members, or a
    /// type is in two pools.
    pub fn set_pools(&self, pools: Vec<PoolConfig>) -> Result<(), RegistryError> {
        let mut seen: HashMap<&str, &str> = HashMap::new();
        for p in &pools {
            let bad = |reason: String| RegistryError::BadPool {
                pool: p.name.clone(),
                reason,
            };
            if p.concurrency.is_none() && p.rate_per_minute.is_none() {
                return Err(bad("declare concurrency, rate_per_minute or both".into()));
            }
            if p.concurrency == Some(0) || p.rate_per_minute == Some(0) {
                return Err(bad(
                    "concurrency and rate_per_minute must be positive".into()
                ));
            }
            if p.types.is_empty() {
                return Err(bad("list at least one member type".into()));
            }
            if p.costs
                .values()
                .chain(p.rate_costs.values())
                .any(|c| *c == 0)
            {
                return Err(bad("costs must be positive".into()));
            }
            if let Some(limit) = p.concurrency {
                if let Some((t, c)) = p.costs.iter().find(|(_, c)| **c > limit) {
                    return Err(bad(format!(
                        "type `{t}` costs {c} slots but the pool holds {limit}: its jobs could never start"
                    )));
                }
            }
            for t in &p.types {
                if let Some(other) = seen.insert(t, &p.name) {
                    return Err(bad(format!("type `{t}` is also in pool `{other}`")));
                }
            }
        }
        self.inner.write().pools = pools;
        Ok(())
    }

    /// The pool declarations in force.
    pub fn pools(&self) -> Vec<PoolConfig> {
        self.inner.read().pools.clone()
    }

    /// The guards claims of `job_type` carry.
    pub fn guards_for(&self, job_type: &str) -> ClaimGuards {
        let inner = self.inner.read();
        let mut g = ClaimGuards::default();
        if let Some(e) = inner.handlers.get(job_type) {
            g.serialize_by_scope = e.settings.serialize_by_scope;
            g.not_while_running = e.settings.not_while_running.clone();
            g.waits_for = e.settings.waits_for.clone();
        }
        for p in inner
            .pools
            .iter()
            .filter(|p| p.types.iter().any(|t| t == job_type))
        {
            g.pools.push(PoolGuard {
                name: p.name.clone(),
                concurrency: p.concurrency,
                rate_per_minute: p.rate_per_minute,
                member_costs: p.member_costs(),
                cost: p.costs.get(job_type).copied().unwrap_or(1),
                rate_cost: p.rate_costs.get(job_type).copied().unwrap_or(1),
            });
        }
        g
    }

    /// Warnings about one-sided `not_while_running` declarations.
    pub fn warnings(&self) -> Vec<String> {
        one_sided(&self.inner.read().handlers)
    }
}

fn one_sided(handlers: &BTreeMap<String, Arc<HandlerEntry>>) -> Vec<String> {
    let mut out = Vec::new();
    for (t, e) in handlers {
        for other in &e.settings.not_while_running {
            if let Some(o) = handlers.get(other) {
                if !o.settings.not_while_running.contains(t) {
                    out.push(format!(
                        "not_while_running is one-sided: `{t}` declares `{other}` but `{other}` does not declare `{t}`; declare it on both sides"
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{HandlerSettings, Registry, RegistryError};
    use crate::{bench::NoopHandler, Handler};

    fn waits_for(types: &[&str]) -> HandlerSettings {
        HandlerSettings {
            waits_for: types.iter().map(ToString::to_string).collect(),
            ..HandlerSettings::default()
        }
    }

    #[test]
    fn a_swap_changes_every_type_or_none() {
        let registry = Registry::new();
        let handler: Arc<dyn Handler> = Arc::new(NoopHandler);
        registry
            .register("c", handler.clone(), waits_for(&["b"]))
            .unwrap();
        let v1 = vec![
            ("a".to_string(), handler.clone(), waits_for(&[])),
            ("b".to_string(), handler.clone(), waits_for(&[])),
        ];
        registry.swap(v1, &[]).unwrap();
        // The second type closes a cycle (b -> c -> b): neither changes.
        let v2 = vec![
            ("a".to_string(), handler.clone(), waits_for(&["c"])),
            ("b".to_string(), handler.clone(), waits_for(&["c"])),
        ];
        let refused = registry.swap(v2, &[]).unwrap_err();
        assert!(
            matches!(&refused, RegistryError::WaitsForCycle(c) if c.contains('b')),
            "{refused}"
        );
        for job_type in ["a", "b"] {
            let entry = registry.get(job_type).expect("still served");
            assert!(entry.settings.waits_for.is_empty(), "{job_type} changed");
        }
        // A refused setting on the second type leaves the set as it was.
        let bad = HandlerSettings {
            concurrency: 0,
            ..HandlerSettings::default()
        };
        let removed_too = vec![("d".to_string(), handler.clone(), bad)];
        assert!(registry.swap(removed_too, &["a".to_string()]).is_err());
        assert!(registry.get("a").is_some() && registry.get("d").is_none());
        // Replacing and removing in one swap.
        registry
            .swap(
                vec![("d".to_string(), handler, waits_for(&[]))],
                &["a".to_string(), "b".to_string()],
            )
            .unwrap();
        assert_eq!(registry.types(), ["c", "d"]);
    }
}
