//! Hot deploy: keeps the registry in step with a handlers directory.
//!
//! A handler is a pair `name.wasm` + `name.toml` in the directory. Each
//! reconcile pass scans the directory and compares every pair's fingerprint
//! (digest of the module bytes and of the manifest text) with what is
//! deployed: new or changed pairs are validated (manifest, pin, world),
//! compiled through the sandbox's cache and swapped into the registry;
//! pairs that disappeared are undeployed. File-system events only trigger a
//! pass (debounced), and a slow periodic pass catches anything missed, so
//! the directory is the single source of truth.
//!
//! Invariants:
//! - A rejected pair never disturbs the version already serving its types.
//! - The registry swap is per type and atomic; in-flight jobs keep the
//!   `Arc` of the version that started them.
//! - Every deploy, rejection and removal is recorded in the store.
//! - One job type is served by one pair; a second pair claiming it is rejected.
//! - A pair reserves concurrency × types instances of the sandbox's pool.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use boxcar_queue::{HandlerEventKind, HandlerSettings, PayloadValidator, Queue, Registry};
use boxcar_sandbox::{LoadedHandler, Sandbox};
use chrono::Utc;
use parking_lot::Mutex;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::{
    manifest::Manifest, protected::ProtectedPaths, schema::JsonSchemaValidator, views::time,
};

/// How long file-system events are gathered before a pass runs.
const DEBOUNCE: Duration = Duration::from_millis(150);
/// A pass runs at least this often even without events.
const RESCAN_INTERVAL: Duration = Duration::from_secs(5);

/// A pair that passed every check and can be registered.
pub struct Prepared {
    /// The validated manifest.
    pub manifest: Manifest,
    /// The compiled, linked module.
    pub handler: Arc<LoadedHandler>,
    /// sha256 of the module bytes (hex).
    pub digest: String,
}

/// Why a pair was refused.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The module file could not be read.
    #[error("{path}: cannot read the module")]
    ReadModule {
        /// The module file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    /// The bytes do not match the manifest's `sha256` pin.
    #[error("{path}: module digest {actual} does not match the pinned handler.sha256 {pinned}; update the pin or deploy the pinned module")]
    PinMismatch {
        /// The module file.
        path: PathBuf,
        /// The digest of the bytes found.
        actual: String,
        /// The pinned digest.
        pinned: String,
    },
    /// The sandbox refused the module (not a component, wrong world, ...).
    #[error("{path}: the sandbox refused the module")]
    Sandbox {
        /// The module file.
        path: PathBuf,
        /// The sandbox's error.
        source: boxcar_sandbox::SandboxError,
    },
    /// The registry refused the settings (e.g. a `waits_for` cycle).
    #[error("{path}: {message}")]
    Registry {
        /// The manifest file.
        path: PathBuf,
        /// The registry's message.
        message: String,
    },
    /// A `dirs` grant reaches a path the host must keep from guests.
    #[error("{path}: {source}")]
    ProtectedPath {
        /// The manifest file.
        path: PathBuf,
        /// Which grant and which protected path.
        source: crate::protected::GrantOverlap,
    },
    /// Another pair already serves one of the types.
    #[error(
        "{path}: job type `{job_type}` is already served by {other}; one job type has one handler"
    )]
    TypeTaken {
        /// The manifest file.
        path: PathBuf,
        /// The contested type.
        job_type: String,
        /// The pair that serves it.
        other: String,
    },
}

/// Validates a module + manifest and compiles it, without deploying.
///
/// # Errors
/// [`DeployError`] naming the file and the reason.
pub async fn prepare(
    sandbox: &Arc<Sandbox>,
    module: &Path,
    manifest: &Path,
) -> Result<Prepared, DeployError> {
    let manifest = Manifest::load(manifest)?;
    let bytes = tokio::fs::read(module)
        .await
        .map_err(|source| DeployError::ReadModule {
            path: module.to_path_buf(),
            source,
        })?;
    let digest = hex::encode(Sha256::digest(&bytes));
    if let Some(pinned) = &manifest.sha256 {
        if *pinned != digest {
            return Err(DeployError::PinMismatch {
                path: module.to_path_buf(),
                actual: digest,
                pinned: pinned.clone(),
            });
        }
    }
    let limits = crate::sandbox_glue::limits(&manifest);
    let capabilities = crate::sandbox_glue::capabilities(&manifest);
    let sandbox = sandbox.clone();
    let handler = tokio::task::spawn_blocking(move || sandbox.load(&bytes, limits, capabilities))
        .await
        .map_err(|join| DeployError::Registry {
            path: module.to_path_buf(),
            message: format!("compilation task failed: {join}"),
        })?
        .map_err(|source| DeployError::Sandbox {
            path: module.to_path_buf(),
            source,
        })?;
    Ok(Prepared {
        manifest,
        handler,
        digest,
    })
}

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
    state: Mutex<State>,
    pass: tokio::sync::Mutex<()>,
    protected: Mutex<ProtectedPaths>,
}

impl Deployer {
    /// A deployer for `dir`; call [`Deployer::reconcile`] or [`Deployer::watch`].
    pub fn new(
        dir: PathBuf,
        sandbox: Arc<Sandbox>,
        registry: Arc<Registry>,
        queue: Queue,
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
            state: Mutex::new(State::default()),
            pass: tokio::sync::Mutex::new(()),
            protected: Mutex::new(protected),
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
    pub async fn reconcile(&self) {
        let _one_pass_at_a_time = self.pass.lock().await;
        let pairs = match scan(&self.dir) {
            Ok(pairs) => pairs,
            Err(error) => {
                tracing::error!(dir = %self.dir.display(), %error, "cannot read the handlers directory");
                return;
            }
        };
        let present: BTreeSet<String> = pairs.keys().cloned().collect();
        let gone: Vec<String> = {
            let state = self.state.lock();
            state
                .deployed
                .keys()
                .filter(|name| !present.contains(*name))
                .cloned()
                .collect()
        };
        for name in gone {
            self.undeploy(&name).await;
        }
        for (name, (module, manifest)) in pairs {
            let fingerprint = match fingerprint(&module, &manifest) {
                Ok(f) => f,
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
                if same_deployed || same_rejected {
                    continue;
                }
            }
            match self.deploy(&name, &module, &manifest).await {
                Ok(pair) => {
                    let mut state = self.state.lock();
                    state.rejected.remove(&name);
                    state.deployed.insert(name, (fingerprint, pair));
                }
                Err(error) => {
                    let reason = with_causes(&error);
                    tracing::error!(handler = %name, %reason, "handler rejected; the previous version keeps serving");
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
                        reason,
                    };
                    self.state
                        .lock()
                        .rejected
                        .insert(name, (fingerprint, rejection));
                }
            }
        }
    }

    async fn deploy(
        &self,
        name: &str,
        module: &Path,
        manifest: &Path,
    ) -> Result<DeployedPair, DeployError> {
        let prepared = prepare(&self.sandbox, module, manifest).await?;
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
        let validator: Option<Arc<dyn PayloadValidator>> = match &manifest.payload_schema {
            None => None,
            Some(schema) => Some(Arc::new(JsonSchemaValidator::new(schema).map_err(
                |message| DeployError::Registry {
                    path: manifest.path.clone(),
                    message,
                },
            )?)),
        };
        let reservation = self
            .sandbox
            .reserve_instances(name, manifest.concurrency, manifest.job_types.len())
            .map_err(|source| DeployError::Sandbox {
                path: manifest.path.clone(),
                source,
            })?;
        let handler: Arc<dyn boxcar_queue::Handler> = prepared.handler.clone();
        for job_type in &manifest.job_types {
            let mut settings = HandlerSettings::default();
            settings.concurrency = u32::try_from(manifest.concurrency).unwrap_or(u32::MAX);
            settings.timeout = manifest.timeout;
            settings.lease_duration = manifest.lease_duration;
            settings.lease_renew_interval = None;
            settings.max_attempts = manifest.max_attempts;
            settings.may_enqueue = manifest.capabilities.may_enqueue.clone();
            settings.enqueue_bounds = manifest.limits.enqueue.clone();
            settings.serialize_by_scope = manifest.serialize_by_scope;
            settings.not_while_running = manifest.not_while_running.clone();
            settings.waits_for = manifest.waits_for.clone();
            settings.payload_validator = validator.clone();
            self.registry
                .register(job_type.clone(), handler.clone(), settings)
                .map_err(|error| DeployError::Registry {
                    path: manifest.path.clone(),
                    message: error.to_string(),
                })?;
        }
        reservation.keep();
        for stale in previous_types
            .iter()
            .filter(|t| !manifest.job_types.contains(t))
        {
            self.registry.remove(stale);
        }
        for job_type in &manifest.job_types {
            if let Err(error) = self
                .queue
                .record_handler_event(
                    HandlerEventKind::Deployed,
                    Some(job_type),
                    Some(name),
                    Some(&prepared.digest),
                    Some(&format!("grants: {}", manifest.capabilities.summary())),
                )
                .await
            {
                tracing::warn!(%error, "could not record the deploy");
            }
        }
        tracing::info!(handler = %name, types = ?manifest.job_types, digest = %prepared.digest, "handler deployed");
        Ok(DeployedPair {
            name: name.to_string(),
            job_types: manifest.job_types.clone(),
            digest: prepared.digest.clone(),
            deployed_at: time(Utc::now()),
            concurrency: manifest.concurrency,
            timeout_ms: manifest.timeout.as_millis(),
            may_enqueue: manifest.capabilities.may_enqueue.clone(),
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
        self.sandbox.release_instances(name);
        for job_type in &pair.job_types {
            self.registry.remove(job_type);
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
            self.reconcile().await;
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

/// Pairs in `dir`: name → (module path, manifest path). A module without a
/// manifest (or the reverse) is not a pair yet.
fn scan(dir: &Path) -> std::io::Result<BTreeMap<String, (PathBuf, PathBuf)>> {
    let mut pairs = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("wasm") {
            continue;
        }
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let manifest = path.with_extension("toml");
        if manifest.is_file() {
            pairs.insert(name.to_string(), (path.clone(), manifest));
        }
    }
    Ok(pairs)
}

fn fingerprint(module: &Path, manifest: &Path) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    hasher.update(std::fs::read(module)?);
    hasher.update([0u8]);
    hasher.update(std::fs::read(manifest)?);
    if let Ok(text) = std::fs::read_to_string(manifest) {
        if let Ok(m) = Manifest::parse(manifest, &text) {
            if let Some(schema) = &m.payload_schema {
                hasher.update(schema.to_string());
            }
        }
    }
    Ok(hex::encode(hasher.finalize()))
}
