//! Compiling a module in a child process with a memory and time budget.
//!
//! The host re-invokes its own executable as `boxcar compile-component`
//! with `RLIMIT_DATA` (heap and other private writable memory) set to the
//! budget and `RLIMIT_AS` to the budget plus [`ADDRESS_SLACK`] (thread
//! stacks, allocator arenas and the binary's own mappings are address
//! space, not use), no core dumps, and killed if the host dies. The child
//! compiles with the serving engine's codegen settings
//! ([`CodegenSettings`]) and writes the artifact into a fresh private
//! temporary directory; the host loads it from there. A child still running
//! at the time budget is killed.
//!
//! Invariants:
//! - Every way the child can fail is a [`SandboxError`]: an invalid module
//!   is [`SandboxError::Compile`] (as an in-process compile would say); a
//!   budget exceeded or a crashed child is [`SandboxError::CompileAborted`]
//!   naming the budget and the `boxcar.toml` key to raise.
//! - The host never waits longer than the time budget (plus the kill).

use std::{
    io::Read,
    path::{Path, PathBuf},
    process::{Command, ExitCode, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use boxcar_sandbox::{CodegenSettings, SandboxError};

use crate::{cli::CompileComponentArgs, config::SandboxSettings};

/// Address space the child may reserve beyond its memory budget.
pub const ADDRESS_SLACK: u64 = 4 << 30;
/// Child exit code: the bytes are not a valid component (message on stderr).
const EXIT_INVALID: u8 = 2;
/// Child exit code: the compile ran out of memory.
const EXIT_OUT_OF_MEMORY: u8 = 3;
/// Most of the child's stderr kept for a message.
const STDERR_CAP: u64 = 16 << 10;

/// Limits on what a deployed module may cost before it serves.
#[derive(Clone, Debug)]
pub struct CompileBudget {
    /// Largest module file, in bytes.
    pub max_module: u64,
    /// Memory the compile process may use, in bytes.
    pub memory: u64,
    /// Wall-clock time the compile process may take.
    pub timeout: Duration,
    /// The executable re-invoked as `compile-component` (this binary).
    pub exe: Option<PathBuf>,
}

impl CompileBudget {
    /// The budget of `[sandbox]`, compiling with this executable.
    pub fn from_settings(settings: &SandboxSettings) -> Self {
        Self {
            max_module: settings.max_module,
            memory: settings.compile_memory,
            timeout: settings.compile_timeout,
            exe: std::env::current_exe().ok(),
        }
    }
}

/// `1 GiB`, `512 MiB`, `64 KiB` or `N bytes`.
pub fn human_bytes(bytes: u64) -> String {
    for (unit, name) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    if bytes >= 1 << 20 {
        #[allow(clippy::cast_precision_loss)]
        let mib = bytes as f64 / f64::from(1u32 << 20);
        return format!("{mib:.1} MiB");
    }
    format!("{bytes} bytes")
}

/// The `compile-component` child: compiles `--in` into `--out`.
pub fn child_main(args: &CompileComponentArgs) -> ExitCode {
    let settings = match CodegenSettings::parse(&args.codegen) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let wasm = match std::fs::read(&args.input) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", args.input.display());
            return ExitCode::from(if is_oom(&e.to_string()) {
                EXIT_OUT_OF_MEMORY
            } else {
                1
            });
        }
    };
    match boxcar_sandbox::precompile(&settings, &wasm) {
        Ok(artifact) => match std::fs::write(&args.output, artifact) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: cannot write {}: {e}", args.output.display());
                ExitCode::from(1)
            }
        },
        Err(e) => {
            let text = e.to_string();
            eprintln!("{text}");
            if is_oom(&text) {
                ExitCode::from(EXIT_OUT_OF_MEMORY)
            } else if matches!(e, SandboxError::Compile(_)) {
                ExitCode::from(EXIT_INVALID)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// True when an error text says memory ran out.
fn is_oom(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    [
        "memory allocation",
        "os error 12",
        "cannot allocate memory",
        "out of memory",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}

/// Compiles `wasm` (the module at `module`, named in messages) in a child
/// process under `budget`, returning the artifact. Blocking: call from
/// `spawn_blocking`.
///
/// # Errors
/// [`SandboxError::Compile`] for an invalid module,
/// [`SandboxError::CompileAborted`] for a budget exceeded or a failed child.
pub fn in_child(
    budget: &CompileBudget,
    codegen: &CodegenSettings,
    module: &Path,
    wasm: &[u8],
) -> Result<Vec<u8>, SandboxError> {
    let aborted = |why: String| {
        SandboxError::CompileAborted(format!("compiling {}: {why}", module.display()))
    };
    let exe = budget.exe.as_ref().ok_or_else(|| {
        aborted("cannot find the boxcar executable to compile in a child process".into())
    })?;
    let dir = tempfile::Builder::new()
        .prefix("boxcar-compile-")
        .tempdir()
        .map_err(|e| aborted(format!("cannot create a temporary directory: {e}")))?;
    let input = dir.path().join("module.wasm");
    let output = dir.path().join("module.cwasm");
    std::fs::write(&input, wasm)
        .map_err(|e| aborted(format!("cannot write {}: {e}", input.display())))?;
    let mut command = Command::new(exe);
    command
        .arg("compile-component")
        .arg("--in")
        .arg(&input)
        .arg("--out")
        .arg(&output)
        .arg("--codegen")
        .arg(codegen.to_string())
        .env_clear()
        .envs(crate::allocator::RLIMITED_CHILD_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    limit(&mut command, budget.memory);
    let started = Instant::now();
    let mut child = command.spawn().map_err(|e| {
        aborted(format!(
            "cannot start the compile process {}: {e}",
            exe.display()
        ))
    })?;
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut pipe) = stderr {
            let _ = (&mut pipe).take(STDERR_CAP).read_to_end(&mut text);
            let _ = std::io::copy(&mut pipe, &mut std::io::sink());
        }
        String::from_utf8_lossy(&text).into_owned()
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() >= budget.timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(aborted(format!("cannot wait for the compile process: {e}")));
            }
        }
    };
    let stderr = reader.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(aborted(format!(
            "took longer than the {} compile timeout ([sandbox] compile_timeout in boxcar.toml); raise it or shrink the module",
            humantime::format_duration(budget.timeout)
        )));
    };
    if status.success() {
        return std::fs::read(&output)
            .map_err(|e| aborted(format!("cannot read the compiled artifact: {e}")));
    }
    let last = stderr.trim().lines().last().unwrap_or("").to_string();
    if status.code() == Some(i32::from(EXIT_INVALID)) {
        return Err(SandboxError::Compile(
            stderr
                .trim()
                .strip_prefix(&SandboxError::Compile(String::new()).to_string())
                .unwrap_or(stderr.trim())
                .to_string(),
        ));
    }
    if status.code() == Some(i32::from(EXIT_OUT_OF_MEMORY))
        || is_oom(&stderr)
        || killed_by_kernel(status)
    {
        return Err(SandboxError::CompileAborted(format!(
            "compiling {} exceeded the {} compile memory budget ([sandbox] compile_memory in boxcar.toml); raise it or shrink the module",
            module.display(),
            human_bytes(budget.memory)
        )));
    }
    Err(aborted(format!(
        "the compile process failed ({status}){}",
        if last.is_empty() {
            String::new()
        } else {
            format!(": {}", crate::output::printable(&last))
        }
    )))
}

/// True when the child was killed by a signal the host did not send (the
/// kernel's out-of-memory killer sends SIGKILL).
fn killed_by_kernel(status: ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(libc::SIGKILL)
}

/// Sets the child's resource limits between fork and exec.
fn limit(command: &mut Command, memory: u64) {
    use std::os::unix::process::CommandExt;
    let data = memory;
    let address = memory.saturating_add(ADDRESS_SLACK);
    let hook = move || {
        set(libc::RLIMIT_DATA, data)?;
        set(libc::RLIMIT_AS, address)?;
        set(libc::RLIMIT_CORE, 0)?;
        #[cfg(target_os = "linux")]
        {
            // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and
            // touches no memory; async-signal-safe.
            #[allow(unsafe_code)]
            let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec and only calls setrlimit
    // and prctl, which are async-signal-safe; it allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(hook);
    }
}

fn set(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    let value = libc::rlim_t::try_from(value).unwrap_or(libc::RLIM_INFINITY);
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `limit` is a valid rlimit that outlives the call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::setrlimit(resource, &raw const limit) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::{human_bytes, is_oom};

    #[test]
    fn sizes_and_out_of_memory_texts() {
        assert_eq!(human_bytes(512 << 20), "512 MiB");
        assert_eq!(human_bytes(1 << 30), "1 GiB");
        assert_eq!(human_bytes(3 << 19), "1536 KiB");
        assert_eq!(human_bytes(1_500_000), "1.4 MiB");
        assert_eq!(human_bytes(100), "100 bytes");
        assert!(is_oom("memory allocation of 123 bytes failed"));
        assert!(is_oom(
            "failed to mmap: Cannot allocate memory (os error 12)"
        ));
        assert!(!is_oom("invalid magic number"));
    }
}
