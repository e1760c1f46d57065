//! Engine-wide settings ([`SandboxConfig`]) and per-handler settings
//! ([`HandlerLimits`], [`Capabilities`]), each validated once, when the
//! sandbox is built or a handler is loaded.
//!
//! Invariant: [`Capabilities`] never prints `env` values (they may be
//! secrets): its `Debug` shows the variable names only.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    path::PathBuf,
    time::Duration,
};

use crate::{http::HttpOrigin, SandboxError};

/// Settings shared by every handler of one [`Sandbox`](crate::Sandbox).
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// How often the epoch ticker advances the engine epoch. Deadlines and
    /// cancellation are noticed within one tick. The ticker runs only while
    /// some job runs (an idle host pays nothing for it). Default 1 ms;
    /// 100 µs–1 s.
    pub epoch_tick: Duration,
    /// Pre-allocate instance slots with wasmtime's pooling allocator
    /// (faster instantiation, fixed capacity). Default true.
    pub pooling: bool,
    /// Concurrent instances the pool holds (only with `pooling`): the sum
    /// of every deployed handler's reserved instances
    /// ([`Sandbox::reserve_instances`](crate::Sandbox::reserve_instances))
    /// must fit. A job that still finds the pool full is given back to the
    /// queue without using an attempt. Default 256.
    pub pool_instances: u32,
    /// Core instances one job's component may hold: its share of the pool
    /// (the pool holds `pool_instances` times this) and the ceiling of a
    /// handler's `instances` limit. Default 20.
    pub job_instances: u32,
    /// Linear memories one job's component may hold (its share of the pool
    /// with `pooling`, and a store limit without). A component declaring
    /// more is refused at load when pooling. Default 2 (the Rust, Python and
    /// JavaScript guests define one).
    pub job_memories: u32,
    /// Tables one job's component may hold: its share of the pool and the
    /// ceiling of a handler's `tables` limit. Default 10.
    pub job_tables: u32,
    /// Per pool slot, how many bytes of the linear memory a finished job
    /// dirtied are reset in place (copied back from the module's snapshot)
    /// rather than unmapped (only with `pooling`). Pages kept resident cost
    /// no page faults the next time the slot runs the same module (the
    /// benchmark's Python echo: 1.5 ms per job with 0, 1.3 ms with 2 MiB;
    /// JS: 0.78 → 0.43 ms). Costs up to this much resident memory per slot
    /// that has run a job. Default 2 MiB (more changed nothing for those
    /// guests); at most 1 GiB.
    pub memory_keep_resident: usize,
    /// Idle pool slots that stay warm (only with `pooling`): a slot a job
    /// has finished in keeps its module's memory mapping and up to
    /// `memory_keep_resident` bytes resident, so the next job of that
    /// module starts faster. Once this many idle slots are warm, a job of
    /// another module takes the least recently used warm slot instead of a
    /// fresh one, so the memory idle slots hold stays within about
    /// `warm_slots × (memory_keep_resident + 192 KiB)` (a memory, a table
    /// and a stack per slot) however many handlers are deployed and however
    /// many jobs have run. Default 16; at most 100,000.
    pub warm_slots: u32,
    /// Largest linear memory any handler may be granted, in bytes; handler
    /// `memory` limits above it are rejected at load. Default 1 GiB.
    pub max_memory: u64,
    /// Compiled components are cached here, keyed by module digest and
    /// engine settings. `None` compiles on every load.
    pub cache_dir: Option<PathBuf>,
    /// Wasm stack cap per job, in bytes. Default 512 KiB.
    pub max_wasm_stack: usize,
    /// Enable fuel metering for the engine (needed for `HandlerLimits::fuel`;
    /// costs some speed for every guest). Default false.
    pub fuel: bool,
    /// Where per-job scratch directories (`Capabilities::scratch`) are
    /// created, one fresh sub-directory (or tmpfs mount point) per job,
    /// removed after it. Created when the sandbox is built. Must be
    /// writable by the host and by nobody else. `None` is
    /// `$TMPDIR/boxcar-scratch`.
    pub scratch_dir: Option<PathBuf>,
    /// How the scratch size cap is enforced. Default [`ScratchMode::Auto`].
    pub scratch_mode: ScratchMode,
    /// Epoch interruption. Always on in production: turning it off removes
    /// deadline and cancel enforcement for running wasm. Exists only so the
    /// benchmark can measure its cost.
    #[doc(hidden)]
    pub epoch_interruption: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            epoch_tick: Duration::from_millis(1),
            pooling: true,
            pool_instances: 256,
            job_instances: 20,
            job_memories: 2,
            job_tables: 10,
            memory_keep_resident: 2 << 20,
            warm_slots: 16,
            max_memory: 1 << 30,
            cache_dir: None,
            max_wasm_stack: 512 << 10,
            fuel: false,
            scratch_dir: None,
            scratch_mode: ScratchMode::Auto,
            epoch_interruption: true,
        }
    }
}

/// How per-job scratch directories are capped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScratchMode {
    /// `Tmpfs` when this host may mount (tried once, when the sandbox is
    /// built), else `Directory`.
    #[default]
    Auto,
    /// Each job's scratch is its own tmpfs of the cap's size: the kernel
    /// refuses writes past it (the guest gets `ENOSPC`). Needs
    /// `CAP_SYS_ADMIN`; building the sandbox fails without it. Scratch data
    /// then lives in memory (and swap).
    Tmpfs,
    /// A plain directory under `scratch_dir`, measured every 10 ms and when
    /// the job ends; a guest can write past the cap for up to one interval
    /// before it is stopped.
    Directory,
}

impl ScratchMode {
    /// `auto`, `tmpfs` or `directory`, as in the configuration file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Tmpfs => "tmpfs",
            Self::Directory => "directory",
        }
    }
}

impl std::str::FromStr for ScratchMode {
    type Err = SandboxError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "tmpfs" => Ok(Self::Tmpfs),
            "directory" => Ok(Self::Directory),
            other => Err(SandboxError::Config(format!(
                "scratch_mode: `{}` is not one of `auto`, `tmpfs`, `directory`",
                other.escape_debug()
            ))),
        }
    }
}

impl SandboxConfig {
    /// Checks every field; called by [`Sandbox::new`](crate::Sandbox::new).
    ///
    /// # Errors
    /// [`SandboxError::Config`] naming the field, its value and the range.
    pub fn validate(&self) -> Result<(), SandboxError> {
        let bad = |field: &str, why: String| Err(SandboxError::Config(format!("{field}: {why}")));
        if self.epoch_tick < Duration::from_micros(100) || self.epoch_tick > Duration::from_secs(1)
        {
            return bad(
                "epoch_tick",
                format!("{:?} is outside 100µs..=1s", self.epoch_tick),
            );
        }
        if self.max_wasm_stack < 64 << 10 || self.max_wasm_stack > 64 << 20 {
            return bad(
                "max_wasm_stack",
                format!("{} bytes is outside 64 KiB..=64 MiB", self.max_wasm_stack),
            );
        }
        if self.max_memory < 1 << 20 || self.max_memory > 16 << 30 {
            return bad(
                "max_memory",
                format!("{} bytes is outside 1 MiB..=16 GiB", self.max_memory),
            );
        }
        if self.pooling && (self.pool_instances == 0 || self.pool_instances > 100_000) {
            return bad(
                "pool_instances",
                format!("{} is outside 1..=100000", self.pool_instances),
            );
        }
        for (field, value) in [
            ("job_instances", self.job_instances),
            ("job_memories", self.job_memories),
            ("job_tables", self.job_tables),
        ] {
            if value == 0 || value > 1000 {
                return bad(field, format!("{value} is outside 1..=1000"));
            }
        }
        if self.warm_slots > 100_000 {
            return bad(
                "warm_slots",
                format!("{} is outside 0..=100000", self.warm_slots),
            );
        }
        if self.memory_keep_resident > 1 << 30 {
            return bad(
                "memory_keep_resident",
                format!("{} bytes is more than 1 GiB", self.memory_keep_resident),
            );
        }
        Ok(())
    }
}

/// Per-handler resource bounds (from the manifest's `[limits]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerLimits {
    /// Linear memory cap per job, in bytes: the sum of every linear memory
    /// the job's instances hold. Default 64 MiB.
    pub memory: u64,
    /// Fuel per job; `None` is unmetered. Needs `SandboxConfig::fuel`.
    pub fuel: Option<u64>,
    /// Largest JSON result (and terminal `details`), in bytes. Default 256 KiB.
    pub max_result: usize,
    /// Largest single progress report, in bytes. Default 64 KiB.
    pub max_progress: usize,
    /// Total log volume per job (log import + stdout + stderr), in bytes;
    /// every line also costs 128 bytes, however short. Exceeding it stops
    /// the job with `LimitExceeded(LogVolume)`. Default 1 MiB.
    pub max_log: usize,
    /// Log lines per job (log calls plus stdout/stderr lines). Exceeding it
    /// stops the job with `LimitExceeded(LogVolume)`. Default 10,000.
    pub max_log_lines: usize,
    /// Longest log line kept; longer lines are truncated. Default 8 KiB.
    pub max_log_line: usize,
    /// Enqueue calls per job; further calls are refused. Default 100.
    pub max_enqueues: u32,
    /// Table elements per job, summed over all its tables. Default 100,000.
    pub table_elements: usize,
    /// Tables per job; at most the sandbox's `job_tables`. Default 10.
    pub tables: usize,
    /// Core instances per job; at most the sandbox's `job_instances`.
    /// Default 20.
    pub instances: usize,
    /// Largest outbound HTTP response body, in bytes; a longer body fails
    /// with `HTTP-response-body-size` in the guest. Default 4 MiB.
    pub max_http_body: u64,
}

impl Default for HandlerLimits {
    fn default() -> Self {
        Self {
            memory: 64 << 20,
            fuel: None,
            max_result: 256 << 10,
            max_progress: 64 << 10,
            max_log: 1 << 20,
            max_log_lines: 10_000,
            max_log_line: 8 << 10,
            max_enqueues: 100,
            table_elements: 100_000,
            tables: 10,
            instances: 20,
            max_http_body: 4 << 20,
        }
    }
}

impl HandlerLimits {
    /// Checks the limits against the sandbox's configuration: the checks of
    /// [`HandlerLimits::validate_form`], then `memory` within
    /// `max_memory`, `fuel` only with fuel metering, `instances` and
    /// `tables` within one job's pool share.
    ///
    /// # Errors
    /// [`SandboxError::Limits`] beginning with the field's name.
    pub fn validate(&self, config: &SandboxConfig) -> Result<(), SandboxError> {
        self.validate_form()?;
        let bad = |why: String| Err(SandboxError::Limits(why));
        if self.memory > config.max_memory {
            return bad(format!(
                "memory: {} bytes is more than the sandbox's max_memory ({})",
                self.memory, config.max_memory
            ));
        }
        if self.fuel.is_some() && !config.fuel {
            return bad(
                "fuel: this sandbox was built without fuel metering; enable SandboxConfig::fuel or remove the fuel limit".into(),
            );
        }
        if self.instances > config.job_instances as usize {
            return bad(format!(
                "instances: {} is more than the sandbox's job_instances ({})",
                self.instances, config.job_instances
            ));
        }
        if self.tables > config.job_tables as usize {
            return bad(format!(
                "tables: {} is more than the sandbox's job_tables ({})",
                self.tables, config.job_tables
            ));
        }
        Ok(())
    }

    /// The checks of [`HandlerLimits::validate`] that need no sandbox: for
    /// manifests, checked before any sandbox exists.
    ///
    /// # Errors
    /// [`SandboxError::Limits`] beginning with the field's name (`memory: …`).
    pub fn validate_form(&self) -> Result<(), SandboxError> {
        let bad = |why: String| Err(SandboxError::Limits(why));
        if self.memory < MIN_MEMORY {
            return bad(format!(
                "memory: {} bytes is less than 1 MiB; a component needs memory to start",
                self.memory
            ));
        }
        if self.fuel == Some(0) {
            return bad("fuel: 0 would stop every job at once; omit it for unmetered".into());
        }
        if self.max_log_line == 0 || self.max_log_line > self.max_log.max(1) {
            return bad(format!(
                "max_log_line: {} must be between 1 and max_log ({})",
                self.max_log_line, self.max_log
            ));
        }
        if self.max_log_lines == 0 {
            return bad("max_log_lines: 0 would stop a job at its first log line".into());
        }
        if self.tables == 0 {
            return bad("tables: must be at least 1".into());
        }
        if self.instances == 0 {
            return bad("instances: must be at least 1".into());
        }
        if self.max_http_body == 0 {
            return bad("max_http_body: 0 would refuse every response body".into());
        }
        Ok(())
    }
}

/// The smallest `memory` limit: a component needs memory to start.
const MIN_MEMORY: u64 = 1 << 20;

/// What a handler may do beyond computing (from the manifest's
/// `[capabilities]`). Nothing is granted by default: no network, no files,
/// no environment. Which job types a guest may enqueue is not here: the
/// sandbox forwards every enqueue call to the run's `JobServices`, and the
/// queue alone decides (`HandlerSettings::may_enqueue`). See the README's
/// "Capabilities" section.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Origins outbound `wasi:http` requests may go to; empty refuses all.
    pub http: Vec<HttpOrigin>,
    /// Host directories preopened in the guest.
    pub dirs: Vec<DirGrant>,
    /// Size cap, in bytes, of a fresh per-job scratch directory the guest
    /// sees at `/tmp`; `None` grants none. Enforced as
    /// [`SandboxConfig::scratch_mode`] says; it also bounds the entries (one
    /// per 4 KiB of the cap).
    pub scratch: Option<u64>,
    /// The guest's entire environment. Values may be secrets: never logged.
    pub env: BTreeMap<String, String>,
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capabilities")
            .field("http", &self.http)
            .field("dirs", &self.dirs)
            .field("scratch", &self.scratch)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The guest path of the scratch directory.
pub const SCRATCH_GUEST_PATH: &str = "/tmp";

impl Capabilities {
    /// Checks the grants; called at load. Directories must exist now (they
    /// are opened again for every job).
    ///
    /// # Errors
    /// [`SandboxError::Capabilities`] naming the grant and what to fix.
    pub fn validate(&self) -> Result<(), SandboxError> {
        self.validate_form()?;
        for dir in &self.dirs {
            if !dir.host.is_dir() {
                return Err(SandboxError::Capabilities(format!(
                    "dirs: host path `{}` is not an existing directory; create it or fix the path",
                    dir.host.display()
                )));
            }
        }
        Ok(())
    }

    /// The checks of [`Capabilities::validate`] that need no filesystem:
    /// for manifests, which may name directories that appear later.
    ///
    /// # Errors
    /// [`SandboxError::Capabilities`] naming the grant (`dirs: …`,
    /// `env: …`, `scratch: …`) and what to fix.
    pub fn validate_form(&self) -> Result<(), SandboxError> {
        let bad = |why: String| Err(SandboxError::Capabilities(why));
        let mut guest_paths = BTreeSet::new();
        if self.scratch.is_some() {
            guest_paths.insert(SCRATCH_GUEST_PATH.to_string());
        }
        for dir in &self.dirs {
            if let Err(why) = check_guest_path(&dir.guest) {
                return bad(format!("dirs: guest path `{}` {why}", dir.guest));
            }
            if !guest_paths.insert(dir.guest.clone()) {
                return bad(format!(
                    "dirs: guest path `{}` is granted twice (scratch uses {SCRATCH_GUEST_PATH})",
                    dir.guest
                ));
            }
            if !dir.host.is_absolute() {
                return bad(format!(
                    "dirs: host path `{}` must be absolute",
                    dir.host.display()
                ));
            }
        }
        if self.scratch == Some(0) {
            return bad("scratch: 0 bytes; omit scratch to grant none".into());
        }
        for (name, value) in &self.env {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return bad(format!(
                    "env: `{}` is not a variable name (non-empty, no `=` or NUL)",
                    name.escape_debug()
                ));
            }
            if value.contains('\0') {
                return bad(format!("env: the value of `{name}` contains a NUL byte"));
            }
        }
        Ok(())
    }
}

fn check_guest_path(path: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') || path.len() < 2 {
        return Err("must be absolute and not `/`, e.g. `/media`");
    }
    if path.ends_with('/')
        || path
            .split('/')
            .skip(1)
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err("must be a plain absolute path without `.`, `..`, `//` or a trailing `/`");
    }
    if path.contains('\0') {
        return Err("contains a NUL byte");
    }
    Ok(())
}

/// A host directory preopened in the guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirGrant {
    /// Absolute host path; must exist when the handler is loaded.
    pub host: PathBuf,
    /// Absolute path the guest sees it at, e.g. `/media`.
    pub guest: String,
    /// Read-only or read-write.
    pub mode: DirMode,
}

/// Access to a granted directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirMode {
    /// Read files and list directories only.
    ReadOnly,
    /// Also create, write, rename and delete.
    ReadWrite,
}

impl DirMode {
    /// `ro` or `rw`, as in the manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "ro",
            Self::ReadWrite => "rw",
        }
    }
}
