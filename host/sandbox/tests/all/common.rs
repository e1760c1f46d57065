//! Shared fixtures: one sandbox for the whole binary, memoised example
//! loads, captured logs. The job and host-services doubles are the queue's
//! (`boxcar_queue::testing`), shared with the other test binaries.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use boxcar_sandbox::{Capabilities, HandlerLimits, LoadedHandler, Sandbox, SandboxConfig};

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

/// Runs `child` (a test of this binary, ignored or not) alone in a process
/// of its own and returns the number it printed after `marker`.
pub fn figure_from_child(child: &str, marker: &str) -> u64 {
    let exe = std::env::current_exe().expect("test binary path");
    let out = std::process::Command::new(exe)
        .args([
            child,
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "--include-ignored",
        ])
        .output()
        .expect("run the child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {child} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .split(marker)
        .nth(1)
        .map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("the child printed no {marker}:\n{stdout}"))
}
