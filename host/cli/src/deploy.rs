//! Hot deploy: keeps the registry in step with a handlers directory.
//!
//! A handler is a pair `name.wasm` + `name.toml` in the directory. Each
//! reconcile pass scans the directory ([`scan`]) and compares every pair's
//! fingerprint (digest of the module bytes, hashed once per change of the
//! file, and of the manifest text) with what is deployed: new or changed pairs are validated (manifest, pin, world),
//! compiled through the sandbox's cache and swapped into the registry;
//! pairs that disappeared are undeployed. File-system events only trigger a
//! pass (debounced), and a slow periodic pass catches anything missed, so
//! the directory is the single source of truth.
//!
//! Compiling runs outside the deploy lock, each changed pair in its own
//! budgeted child process ([`compile`]), all at once: a slow or hostile
//! module delays only itself. Only scanning and the swap into the registry
//! hold the lock (`pass`).
//!
//! Invariants:
//! - A rejected pair never disturbs the version already serving its types.
//! - A compile whose pair changed or disappeared meanwhile is discarded:
//!   only the newest content of a name is installed or rejected.
//! - A pair's types are deployed, replaced and undeployed in one registry
//!   swap: all of them or none; in-flight jobs keep the `Arc` of the
//!   version that started them.
//! - Every deploy, rejection and removal is recorded in the store, and
//!   after every deploy and removal the store's deployed types hold this
//!   host's served set (before the deploy is logged).
//! - One job type is served by one pair; a second pair claiming it is rejected.
//! - A pair reserves concurrency × types instances of the sandbox's pool.

pub mod compile;
mod prepare;
pub mod scan;

pub use prepare::{prepare, prepare_read, DeployError, Prepared};

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use boxcar_queue::{HandlerEventKind, Queue, Registry};
use boxcar_sandbox::{ModuleBytes, Sandbox};
use chrono::Utc;
use parking_lot::Mutex;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::{manifest::Manifest, protected::ProtectedPaths, views::time};

/// How long file-system events are gathered before a pass runs.
const DEBOUNCE: Duration = Duration::from_millis(150);
/// A pass runs at least this often even without events.
const RESCAN_INTERVAL: Duration = Duration::from_secs(5);

/// One deployed pair on this host.
#[derive(Clone, Debug, Serialize)]
pub struct DeployedPair {
    /// The pair's name (file stem).
    pub name: String,
    /// Job types it serves.
    pub job_types: Vec<String>,
    /// sha256 of the module.
    pub digest: String,
    /// When it was deployed (RFC 3339).
    pub deployed_at: String,
    /// Concurrency per type.
    pub concurrency: usize,
    /// Timeout per job, in milliseconds.
    pub timeout_ms: u128,
    /// Granted: types it may enqueue.
    pub may_enqueue: Vec<String>,
    /// Granted: origins outbound HTTP may reach (`scheme://host:port`).
    pub http: Vec<String>,
    /// Granted: preopened directories.
    pub dirs: Vec<DeployedDir>,
    /// Granted: size cap of the per-job scratch `/tmp`, in bytes.
    pub scratch: Option<u64>,
    /// Granted: environment variable names (values are never shown).
    pub env: Vec<String>,
}

/// A granted directory as shown by `boxcar handlers` and the API.
#[derive(Clone, Debug, Serialize)]
pub struct DeployedDir {
    /// Host path.
    pub host: String,
    /// Path in the guest.
    pub guest: String,
    /// `ro` or `rw`.
    pub mode: &'static str,
}

/// The last refusal of a file on this host.
#[derive(Clone, Debug, Serialize)]
pub struct Rejection {
    /// The pair's name (file stem).
    pub name: String,
    /// When (RFC 3339).
    pub at: String,
    /// Why.
    pub reason: String,
}

/// A pair claimed by a pass, to prepare and install.
struct Work {
    name: String,
    pair: scan::Pair,
    fingerprint: String,
    generation: u64,
    /// The module, when the pass read it (absent when it is over the size
    /// limit or could not be read: preparing says why).
    bytes: Option<ModuleBytes>,
}

#[derive(Default)]
struct State {
    /// name → (fingerprint, pair)
    deployed: BTreeMap<String, (String, DeployedPair)>,
    /// name → fingerprint of the last rejected content, and the rejection.
    rejected: BTreeMap<String, (String, Rejection)>,
}

/// Keeps a registry in step with a handlers directory.
pub struct Deployer {
    dir: PathBuf,
    sandbox: Arc<Sandbox>,
    registry: Arc<Registry>,
    queue: Queue,
    budget: compile::CompileBudget,
    state: Mutex<State>,
    /// Held to scan and to swap; never while compiling.
    pass: tokio::sync::Mutex<()>,
    /// name → (fingerprint, generation) of the newest compile started.
    in_flight: Mutex<BTreeMap<String, (String, u64)>>,
    generation: AtomicU64,
    protected: Mutex<ProtectedPaths>,
    /// Module digests, each computed once per change of its file.
    digests: Mutex<scan::ModuleDigests>,
}

impl Deployer {
    /// The sandbox the deployed handlers run in.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// A deployer for `dir`; call [`Deployer::reconcile`] or [`Deployer::watch`].
    pub fn new(
        dir: PathBuf,
        sandbox: Arc<Sandbox>,
        registry: Arc<Registry>,
        queue: Queue,
        budget: compile::CompileBudget,
    ) -> Arc<Self> {
        let mut protected = ProtectedPaths::default();
        protected.protect("handlers directory", &dir);
        protected.protect("scratch root", &sandbox.scratch_root());
        if let Some(cache) = &sandbox.config().cache_dir {
            protected.protect("compile cache", cache);
        }
        Arc::new(Self {
            dir,
            sandbox,
            registry,
            queue,
            budget,
            state: Mutex::new(State::default()),
            pass: tokio::sync::Mutex::new(()),
            in_flight: Mutex::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
            protected: Mutex::new(protected),
            digests: Mutex::new(scan::ModuleDigests::default()),
        })
    }

    /// Also keeps `dirs` grants away from the database file of `db_url`
    /// (a `sqlite://` URL; other stores hold nothing on this host).
    pub fn protect_database(&self, db_url: &str) {
        self.protected.lock().protect_database(db_url);
    }

    /// Deployed pairs on this host.
    pub fn deployed(&self) -> Vec<DeployedPair> {
        self.state
            .lock()
            .deployed
            .values()
            .map(|(_, pair)| pair.clone())
            .collect()
    }

    /// The latest rejection per pair that is still current.
    pub fn rejections(&self) -> Vec<Rejection> {
        self.state
            .lock()
            .rejected
            .values()
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// One pass: deploy new and changed pairs, undeploy removed ones.
    /// Returns when every compile this pass started is settled; compiles
    /// run concurrently and without the lock, so passes may overlap.
    pub async fn reconcile(&self) {
        let work = self.plan().await;
        futures::future::join_all(work.into_iter().map(|work| async move {
            let Work {
                name,
                pair,
                fingerprint,
                generation,
                bytes,
            } = work;
            let prepared = match bytes {
                Some(bytes) => {
                    prepare_read(
                        &self.sandbox,
                        &self.budget,
                        &pair.module,
                        &pair.manifest,
                        bytes,
                    )
                    .await
                }
                None => prepare(&self.sandbox, &self.budget, &pair.module, &pair.manifest).await,
            };
            let _swap = self.pass.lock().await;
            {
                let mut in_flight = self.in_flight.lock();
                if in_flight.get(&name).map(|(_, g)| *g) != Some(generation) {
                    return;
                }
                in_flight.remove(&name);
            }
            let outcome = match prepared {
                Ok(prepared) => self.install(&name, prepared).await,
                Err(error) => Err(error),
            };
            self.settle(name, fingerprint, outcome).await;
        }))
        .await;
    }

    /// Under the lock: scans, undeploys removed pairs, and claims the new
    /// and changed ones. A module is read only when it is new or its file
    /// changed, or when its pair is claimed (to compile it).
    async fn plan(&self) -> Vec<Work> {
        let _one_pass_at_a_time = self.pass.lock().await;
        let pairs = match scan::pairs(&self.dir) {
            Ok(pairs) => pairs,
            Err(error) => {
                tracing::error!(dir = %self.dir.display(), %error, "cannot read the handlers directory");
                return Vec::new();
            }
        };
        self.digests.lock().retain(&pairs);
        self.in_flight
            .lock()
            .retain(|name, _| pairs.contains_key(name));
        let gone: Vec<String> = {
            let state = self.state.lock();
            state
                .deployed
                .keys()
                .filter(|name| !pairs.contains_key(*name))
                .cloned()
                .collect()
        };
        for name in gone {
            self.undeploy(&name).await;
        }
        let mut work = Vec::new();
        for (name, pair) in pairs {
            let max_module = self.budget.max_module;
            let seen = self.digests.lock().look(&name, &pair.module, max_module);
            let (fingerprint, read) =
                match seen.and_then(|seen| Ok((fingerprint(&seen.key, &pair.manifest)?, seen))) {
                    Ok((fingerprint, seen)) => (fingerprint, seen.read),
                    Err(error) => {
                        tracing::debug!(%name, %error, "pair not readable yet");
                        continue;
                    }
                };
            {
                let state = self.state.lock();
                let same_deployed = state
                    .deployed
                    .get(&name)
                    .is_some_and(|(f, _)| *f == fingerprint);
                let same_rejected = state
                    .rejected
                    .get(&name)
                    .is_some_and(|(f, _)| *f == fingerprint);
                let same_compiling = self
                    .in_flight
                    .lock()
                    .get(&name)
                    .is_some_and(|(f, _)| *f == fingerprint);
                if same_deployed || same_rejected || same_compiling {
                    continue;
                }
            }
            let bytes = match read {
                Some(bytes) => Some(bytes),
                None => self.digests.lock().read(&name, &pair.module, max_module),
            };
            let generation = self.generation.fetch_add(1, Ordering::Relaxed);
            self.in_flight
                .lock()
                .insert(name.clone(), (fingerprint.clone(), generation));
            work.push(Work {
                name,
                pair,
                fingerprint,
                generation,
                bytes,
            });
        }
        work
    }

    /// Records how a pair's deploy ended. Either ending is logged last, once
    /// it is stored and listed, so whoever sees the log line also finds it
    /// in `boxcar handlers` and the API.
    async fn settle(
        &self,
        name: String,
        fingerprint: String,
        outcome: Result<DeployedPair, DeployError>,
    ) {
        match outcome {
            Ok(pair) => {
                let (types, digest) = (pair.job_types.clone(), pair.digest.clone());
                {
                    let mut state = self.state.lock();
                    state.rejected.remove(&name);
                    state.deployed.insert(name.clone(), (fingerprint, pair));
                }
                tracing::info!(handler = %name, ?types, %digest, "handler deployed");
            }
            Err(error) => {
                let reason = with_causes(&error);
                let _ = self
                    .queue
                    .record_handler_event(
                        HandlerEventKind::Rejected,
                        None,
                        Some(&name),
                        None,
                        Some(&reason),
                    )
                    .await
                    .map_err(|e| tracing::warn!(error = %e, "could not record the rejection"));
                let rejection = Rejection {
                    name: name.clone(),
                    at: time(Utc::now()),
                    reason: reason.clone(),
                };
                self.state
                    .lock()
                    .rejected
                    .insert(name.clone(), (fingerprint, rejection));
                tracing::error!(handler = %name, %reason, "handler rejected; the previous version keeps serving");
            }
        }
    }

    /// Swaps a prepared pair into the registry (under the lock).
    async fn install(&self, name: &str, prepared: Prepared) -> Result<DeployedPair, DeployError> {
        let manifest = &prepared.manifest;
        let grants = &manifest.capabilities.dirs;
        self.protected
            .lock()
            .check(grants)
            .map_err(|source| DeployError::ProtectedPath {
                path: manifest.path.clone(),
                source,
            })?;
        let previous_types: Vec<String> = self
            .state
            .lock()
            .deployed
            .get(name)
            .map(|(_, pair)| pair.job_types.clone())
            .unwrap_or_default();
        {
            let state = self.state.lock();
            for job_type in &manifest.job_types {
                if let Some((other, _)) = state.deployed.iter().find(|(other, (_, pair))| {
                    other.as_str() != name && pair.job_types.contains(job_type)
                }) {
                    return Err(DeployError::TypeTaken {
                        path: manifest.path.clone(),
                        job_type: job_type.clone(),
                        other: format!("{other}.wasm"),
                    });
                }
            }
        }
        let reservation = self
            .sandbox
            .reserve_instances(name, manifest.concurrency(), manifest.job_types.len())
            .map_err(|source| DeployError::Sandbox {
                path: manifest.path.clone(),
                source,
            })?;
        let handler: Arc<dyn boxcar_queue::Handler> = prepared.handler.clone();
        let register = manifest
            .job_types
            .iter()
            .map(|job_type| (job_type.clone(), handler.clone(), manifest.settings.clone()))
            .collect();
        let stale: Vec<String> = previous_types
            .into_iter()
            .filter(|t| !manifest.job_types.contains(t))
            .collect();
        self.registry
            .swap(register, &stale)
            .map_err(|error| DeployError::Registry {
                path: manifest.path.clone(),
                message: error.to_string(),
            })?;
        reservation.keep();
        for job_type in &manifest.job_types {
            if let Err(error) = self
                .queue
                .record_handler_event(
                    HandlerEventKind::Deployed,
                    Some(job_type),
                    Some(name),
                    Some(&prepared.digest),
                    Some(&format!("grants: {}", manifest.grants_summary())),
                )
                .await
            {
                tracing::warn!(%error, "could not record the deploy");
            }
        }
        if let Err(error) = self.queue.record_deployed_types(&self.registry).await {
            tracing::warn!(%error, "could not record the deployed job types");
        }
        Ok(DeployedPair {
            name: name.to_string(),
            job_types: manifest.job_types.clone(),
            digest: prepared.digest.clone(),
            deployed_at: time(Utc::now()),
            concurrency: manifest.concurrency(),
            timeout_ms: manifest.settings.timeout.as_millis(),
            may_enqueue: manifest.settings.may_enqueue.clone(),
            http: manifest
                .capabilities
                .http
                .iter()
                .map(ToString::to_string)
                .collect(),
            dirs: manifest
                .capabilities
                .dirs
                .iter()
                .map(|d| DeployedDir {
                    host: d.host.display().to_string(),
                    guest: d.guest.clone(),
                    mode: d.mode.as_str(),
                })
                .collect(),
            scratch: manifest.capabilities.scratch,
            env: manifest.capabilities.env.keys().cloned().collect(),
        })
    }

    async fn undeploy(&self, name: &str) {
        let Some((_, pair)) = self.state.lock().deployed.remove(name) else {
            return;
        };
        if let Err(error) = self.registry.swap(Vec::new(), &pair.job_types) {
            tracing::error!(handler = %name, %error, "could not remove the handler's types");
        }
        self.sandbox.release_instances(name);
        for job_type in &pair.job_types {
            if let Err(error) = self
                .queue
                .record_handler_event(
                    HandlerEventKind::Removed,
                    Some(job_type),
                    Some(name),
                    Some(&pair.digest),
                    None,
                )
                .await
            {
                tracing::warn!(%error, "could not record the removal");
            }
        }
        if let Err(error) = self.queue.record_deployed_types(&self.registry).await {
            tracing::warn!(%error, "could not record the deployed job types");
        }
        tracing::info!(handler = %name, types = ?pair.job_types, "handler removed");
    }

    /// Watches the directory until `stop` fires: a pass after every burst of
    /// file-system events, and one every few seconds regardless.
    pub async fn watch(self: Arc<Self>, stop: CancellationToken) {
        use notify::Watcher;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok() {
                let _ = tx.send(());
            }
        });
        let _watcher = match watcher {
            Ok(mut watcher) => {
                match watcher.watch(&self.dir, notify::RecursiveMode::NonRecursive) {
                    Ok(()) => Some(watcher),
                    Err(error) => {
                        tracing::warn!(%error, "cannot watch the handlers directory; rescanning every few seconds instead");
                        None
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "no file watcher; rescanning every few seconds instead");
                None
            }
        };
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                Some(()) = rx.recv() => {
                    tokio::time::sleep(DEBOUNCE).await;
                    while rx.try_recv().is_ok() {}
                }
                () = tokio::time::sleep(RESCAN_INTERVAL) => {}
            }
            // A pass returns only when its compiles are settled: run it
            // beside the watch so the next change starts its own.
            let deployer = Arc::clone(&self);
            tokio::spawn(async move { deployer.reconcile().await });
        }
    }
}

/// An error and its chain of causes on one line, e.g. for a rejection record.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let next = inner.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = inner.source();
    }
    text
}

/// Digest of a pair's content: its module's identity ([`scan::Seen::key`]),
/// the manifest text and the payload schema it names.
fn fingerprint(module: &str, manifest: &Path) -> std::io::Result<String> {
    let text = std::fs::read(manifest)?;
    let mut hasher = Sha256::new();
    hasher.update(module);
    hasher.update([0u8]);
    hasher.update(&text);
    if let Ok(text) = std::str::from_utf8(&text) {
        if let Ok(m) = Manifest::parse(manifest, text) {
            if let Some(schema) = &m.payload_schema {
                hasher.update(schema.to_string());
            }
        }
    }
    Ok(hex::encode(hasher.finalize()))
}
