//! Shared fixtures: one sandbox for the whole binary, a recording
//! `JobServices` double, job builders.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use boxcar_queue::{ChildJobRequest, ChildSummary, JobContext, JobRun, JobServices, ServiceError};
use boxcar_sandbox::{Capabilities, HandlerLimits, LoadedHandler, Sandbox, SandboxConfig};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

/// Tests that keep a core busy (spinning guests, timing measurements) take
/// this lock so they do not skew each other's timings on small machines.
pub static CPU: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The compile cache shared by every test in this binary (and across runs).
pub fn cache_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sandbox-cache")
}

/// Where the shared sandbox creates per-job scratch directories (one per
/// test-binary process, so runs do not see each other's).
pub fn scratch_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sandbox-scratch-{}", std::process::id()))
}

/// The sandbox shared by all tests.
pub fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        Sandbox::new(SandboxConfig {
            cache_dir: Some(cache_dir()),
            scratch_dir: Some(scratch_dir()),
            ..SandboxConfig::default()
        })
        .expect("sandbox builds")
    })
}

/// Loads an example guest with default limits and no capabilities.
pub fn load(name: &str) -> Arc<LoadedHandler> {
    load_with(name, HandlerLimits::default(), Capabilities::default())
}

/// Loads an example guest, memoising per (name, limits, caps).
pub fn load_with(name: &str, limits: HandlerLimits, caps: Capabilities) -> Arc<LoadedHandler> {
    type Key = (String, String);
    static LOADED: OnceLock<Mutex<HashMap<Key, Arc<LoadedHandler>>>> = OnceLock::new();
    let key = (name.to_string(), format!("{limits:?}{caps:?}"));
    let map = LOADED.get_or_init(Default::default);
    if let Some(h) = map.lock().expect("lock").get(&key) {
        return Arc::clone(h);
    }
    let bytes = boxcar_examples::bytes(name);
    let h = sandbox().load(&bytes, limits, caps).expect("example loads");
    map.lock().expect("lock").insert(key, Arc::clone(&h));
    h
}

/// A job of `job_type` with `payload`, due to stop `timeout` from now.
pub fn job(job_type: &str, payload: &str, timeout: Duration) -> JobRun {
    JobRun {
        id: "job-1".into(),
        job_type: job_type.into(),
        payload: payload.into(),
        attempt: 1,
        max_attempts: 3,
        scope: None,
        schedule_id: None,
        parent_id: None,
        deadline: chrono::Utc::now() + chrono::Duration::from_std(timeout).expect("timeout fits"),
    }
}

/// Records what a job asked of the host.
#[derive(Default)]
pub struct Recorder {
    pub enqueued: Mutex<Vec<ChildJobRequest>>,
    pub progress: Mutex<Vec<String>>,
}

impl JobServices for Recorder {
    fn progress(&self, json: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        self.progress.lock().expect("lock").push(json);
        Box::pin(async { Ok(()) })
    }

    fn enqueue(&self, request: ChildJobRequest) -> BoxFuture<'_, Result<String, ServiceError>> {
        let mut all = self.enqueued.lock().expect("lock");
        all.push(request);
        let id = format!("child-{}", all.len());
        Box::pin(async move { Ok(id) })
    }

    fn children(&self) -> BoxFuture<'_, Result<Vec<ChildSummary>, ServiceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// A fresh context with a recording services double.
pub fn new_ctx() -> (JobContext, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let ctx = JobContext {
        cancel: CancellationToken::new(),
        services: recorder.clone(),
        record: Arc::new(boxcar_queue::RunRecord::new("job-1", 1)),
    };
    (ctx, recorder)
}

/// Log lines captured for the whole test binary (guest log lines carry the
/// job id, so each test filters by its own).
pub fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    Arc::clone(LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || LogWriter(Arc::clone(&sink)))
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        logs
    }))
}

/// Appends everything written to the shared buffer.
pub struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::Write::write(&mut *self.0.lock().expect("lock"), buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
