//! The end-to-end harness: a temp dir per test, the real binary, a cleared
//! environment, `serve` processes that are killed when dropped, and the
//! full output of every command on failure.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

/// The binary cargo built for this test run.
pub const BOXCAR: &str = env!("CARGO_BIN_EXE_boxcar");

/// The binary under test: `BOXCAR_E2E_BIN` when set (a copy of the build
/// that a long run keeps to itself while the target directory is rebuilt,
/// or an installed binary), else [`BOXCAR`].
pub fn boxcar_binary() -> std::ffi::OsString {
    std::env::var_os("BOXCAR_E2E_BIN").unwrap_or_else(|| BOXCAR.into())
}

/// A test sandbox: its own directory, database and handlers directory.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub db: String,
}

impl Env {
    /// A fresh directory with a SQLite database URL.
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = format!("sqlite://{}", dir.path().join("boxcar.db").display());
        let env = Self { dir, db };
        std::fs::create_dir_all(env.handlers()).expect("handlers dir");
        env
    }

    /// A fresh directory with a database URL of the given store.
    pub fn with_db(db: String) -> Self {
        let mut env = Self::sqlite();
        env.db = db;
        env
    }

    /// The handlers directory.
    pub fn handlers(&self) -> PathBuf {
        self.dir.path().join("handlers")
    }

    /// A path inside the test directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A command with a cleared environment in the test directory.
    pub fn command(&self) -> Command {
        self.command_via(&[])
    }

    /// As [`command`](Self::command), run through `wrapper` (a program and
    /// its arguments that end by running the binary, e.g. `ip netns exec NS`).
    pub fn command_via(&self, wrapper: &[String]) -> Command {
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(boxcar_binary());
                command
            }
            None => Command::new(boxcar_binary()),
        };
        command
            .env_clear()
            .env("HOME", self.dir.path())
            .env("XDG_CACHE_HOME", shared_cache())
            .env("BOXCAR_DB", &self.db)
            .env("BOXCAR_LOG", "info,wasmtime=warn,cranelift=warn")
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        command
    }

    /// Runs `boxcar ARGS` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run boxcar")
    }

    /// Runs `boxcar ARGS`, asserts success, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "boxcar {args:?} failed:\n{}",
            describe(&output)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs `boxcar --json ARGS` and parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("boxcar {args:?} printed non-JSON ({e}):\n{text}"))
    }

    /// Starts `boxcar serve --handlers DIR --listen ADDR` with extra args.
    pub fn serve(&self, name: &str, extra: &[&str]) -> Serve {
        self.serve_handlers(name, &self.handlers(), extra)
    }

    /// Starts `boxcar serve` on the handlers directory `handlers`.
    pub fn serve_handlers(&self, name: &str, handlers: &Path, extra: &[&str]) -> Serve {
        self.serve_via(name, handlers, &[], extra)
    }

    /// Starts `boxcar serve` on `handlers` through `wrapper` (see
    /// [`command_via`](Self::command_via)).
    pub fn serve_via(
        &self,
        name: &str,
        handlers: &Path,
        wrapper: &[String],
        extra: &[&str],
    ) -> Serve {
        let log = self.path(&format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let listen = format!("127.0.0.1:{}", free_port());
        let mut args = vec![
            "serve".to_string(),
            "--handlers".into(),
            handlers.display().to_string(),
            "--listen".into(),
            listen.clone(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = self
            .command_via(wrapper)
            .args(&args)
            .stdout(file.try_clone().expect("clone log"))
            .stderr(file)
            .spawn()
            .expect("spawn serve");
        Serve {
            child: Some(child),
            log,
            listen,
        }
    }

    /// Copies a bundled example into the handlers directory as `name`, with
    /// `manifest` as its manifest text (module first, each renamed into place).
    pub fn deploy(&self, name: &str, example: &str, manifest: &str) {
        let bytes = boxcar_examples::bytes(example);
        write_atomically(&self.handlers().join(format!("{name}.wasm")), &bytes);
        write_atomically(
            &self.handlers().join(format!("{name}.toml")),
            manifest.as_bytes(),
        );
    }

    /// Writes a `boxcar.toml` with fast polling (top-level `extra` first) and
    /// returns its path.
    pub fn fast_config(&self, extra: &str) -> PathBuf {
        let path = self.path("boxcar.toml");
        let text = format!(
            "{extra}\n[worker]\npoll_interval = \"100ms\"\nbase_backoff = \"100ms\"\nmax_backoff = \"1s\"\nshutdown_grace = \"2s\"\n"
        );
        std::fs::write(&path, text).expect("write config");
        path
    }
}

/// Writes through a temporary file and a rename, as operators should.
pub fn write_atomically(path: &Path, bytes: &[u8]) {
    let temp = path.with_extension("partial");
    std::fs::write(&temp, bytes).expect("write");
    std::fs::rename(&temp, path).expect("rename");
}

/// One compile cache for the whole test run, so each guest compiles once.
fn shared_cache() -> PathBuf {
    let dir = std::env::temp_dir().join("boxcar-e2e-cache");
    std::fs::create_dir_all(&dir).expect("cache dir");
    dir
}

/// A port on 127.0.0.1 that nothing listens on, never the same twice in
/// one test process.
///
/// Ports come from below Linux's ephemeral range (32768 and up), walked from
/// an offset set by the process id: asking the kernel for port 0 and
/// dropping the listener could hand the same port to two hosts of one test,
/// or to an outgoing connection before the host bound it (CI once saw
/// "Address already in use" that way).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id() % 97) * 120,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let step = NEXT.fetch_add(1, Ordering::SeqCst);
        let port = (FIRST + step % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN)
}

/// stdout and stderr of a finished command, for failure messages.
pub fn describe(output: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A running `boxcar serve`; killed (and its log printed if the test is
/// failing) when dropped.
pub struct Serve {
    child: Option<Child>,
    pub log: PathBuf,
    pub listen: String,
}

impl Serve {
    /// Everything the process logged so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.output().contains(needle) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "serve never logged {needle:?} within {timeout:?}:\n{}",
            self.output()
        );
    }

    /// The process id, while it has not been killed or terminated.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running (it has not exited on its own).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Kills the process with SIGKILL (no graceful shutdown).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits for a graceful exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        child.wait().expect("wait")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- serve log {} ---\n{}",
                self.log.display(),
                self.output()
            );
        }
    }
}

/// Polls `check` until it returns `Some`, or panics after `timeout`.
pub fn eventually<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The local Postgres URL, or `None` (with a printed reason) outside CI.
/// In CI (`CI=true`) a missing `DATABASE_URL` fails the test.
pub fn postgres_url(schema: &str) -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let separator = if url.contains('?') { '&' } else { '?' };
            Some(format!("{url}{separator}schema={schema}"))
        }
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "DATABASE_URL is not set, and CI=true: Postgres tests must run in CI"
            );
            eprintln!("skipping: DATABASE_URL is not set (set it to run the Postgres tests)");
            None
        }
    }
}

/// Drops a Postgres schema when the test ends (pass or fail).
pub struct DropSchema {
    pub base_url: String,
    pub schema: String,
}

impl Drop for DropSchema {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async {
            use sqlx::Connection;
            if let Ok(mut conn) = sqlx::PgConnection::connect(&self.base_url).await {
                let statement = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
                let _ = sqlx::query(&statement).execute(&mut conn).await;
            }
        });
    }
}

/// A Postgres URL for a fresh schema of its own plus the guard that drops
/// it, or `None` (with a printed reason) outside CI.
pub fn postgres_schema(test: &str) -> Option<(String, DropSchema)> {
    let schema = unique_schema(test);
    let url = postgres_url(&schema)?;
    let base_url = std::env::var("DATABASE_URL").unwrap_or_default();
    Some((url, DropSchema { base_url, schema }))
}

/// A unique schema name for one test.
pub fn unique_schema(test: &str) -> String {
    format!(
        "e2e_{test}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    )
}
