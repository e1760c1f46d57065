//! A throwaway PostgreSQL server of the test's own: `initdb` in a temporary
//! directory, started on a free port, restarted or stopped at will, and
//! stopped when dropped. Database-fault tests use it so that restarting the
//! server or killing its backends cannot disturb tests running beside them
//! on the machine's shared server.
//!
//! [`PrivatePostgres::start_reachable`] also listens on given addresses of
//! this machine and trusts clients of one subnet, for hosts that reach it
//! from network namespaces of their own.
//!
//! Needs the Debian PostgreSQL server binaries and root (the server runs as
//! the `postgres` user). Where either is missing the test is skipped with a
//! printed reason, except with `CI=true`, where that is a failure.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Duration,
};

use crate::harness::{describe, eventually, free_port};

/// A running private server; stopped (immediate mode) when dropped.
pub struct PrivatePostgres {
    _dir: tempfile::TempDir,
    data: PathBuf,
    bin: PathBuf,
    pub port: u16,
    /// `listen_addresses`, comma-separated.
    listen: String,
}

impl PrivatePostgres {
    /// Initialises and starts a server, or `None` (with a printed reason)
    /// when this machine cannot run one and `CI` is not set.
    pub fn start() -> Option<Self> {
        Self::start_reachable(&[], None)
    }

    /// As [`start`](Self::start), listening on `addresses` besides
    /// 127.0.0.1 and trusting clients from `subnet` (CIDR), if given.
    pub fn start_reachable(addresses: &[String], subnet: Option<&str>) -> Option<Self> {
        let Some(bin) = server_binaries() else {
            return skip("no PostgreSQL server binaries under /usr/lib/postgresql");
        };
        if !is_root() {
            return skip("running a private PostgreSQL server needs root");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        run_ok(Command::new("chown").args(["postgres:postgres", &path_str(dir.path())]));
        let port = free_port();
        let server = Self {
            _dir: dir,
            data,
            bin,
            port,
            listen: std::iter::once("127.0.0.1".to_string())
                .chain(addresses.iter().cloned())
                .collect::<Vec<_>>()
                .join(","),
        };
        server.as_postgres(
            "initdb",
            &[
                "-D",
                &path_str(&server.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        if let Some(subnet) = subnet {
            use std::io::Write;
            let mut hba = std::fs::OpenOptions::new()
                .append(true)
                .open(server.data.join("pg_hba.conf"))
                .expect("open pg_hba.conf");
            writeln!(hba, "host all all {subnet} trust").expect("write pg_hba.conf");
        }
        server.ctl(&["start"]);
        Some(server)
    }

    /// A boxcar database URL for this server.
    pub fn url(&self) -> String {
        self.url_at("127.0.0.1")
    }

    /// A boxcar database URL for this server at `address` (one it listens on).
    pub fn url_at(&self, address: &str) -> String {
        format!("postgres://postgres@{address}:{}/postgres", self.port)
    }

    /// Restarts the server (fast mode: open connections are cut).
    pub fn restart(&self) {
        self.ctl(&["restart", "-m", "fast"]);
    }

    /// Terminates every backend of the server except the caller's own, the
    /// way `pg_terminate_backend` is used by operators; returns how many.
    pub fn kill_backends(&self) -> usize {
        let output = self.psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
        );
        output.trim().parse().unwrap_or(0)
    }

    /// Runs one SQL statement through `psql` and returns its unaligned output.
    pub fn psql(&self, sql: &str) -> String {
        let output = Command::new("psql")
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .arg(self.url())
            .output()
            .expect("run psql");
        assert!(output.status.success(), "psql {sql}: {}", describe(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn ctl(&self, action: &[&str]) {
        let options = format!(
            "-p {} -k {} -c listen_addresses={} -c fsync=off",
            self.port,
            path_str(self._dir.path()),
            self.listen
        );
        let log = path_str(&self._dir.path().join("server.log"));
        let data = path_str(&self.data);
        let mut args = vec!["-D", &data, "-o", &options, "-l", &log, "-w"];
        args.extend_from_slice(action);
        self.as_postgres("pg_ctl", &args);
        eventually(
            Duration::from_secs(20),
            "the private server to accept connections",
            || {
                Command::new("pg_isready")
                    .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                    .stdout(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
                    .then_some(())
            },
        );
    }

    fn as_postgres(&self, program: &str, args: &[&str]) -> Output {
        run_ok(
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(self.bin.join(program))
                .args(args),
        )
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &path_str(&self.data), "-m", "immediate", "stop"])
            .output();
    }
}

/// The newest installed server's `bin` directory.
fn server_binaries() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn skip(reason: &str) -> Option<PrivatePostgres> {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but the database-fault tests cannot run: {reason}"
    );
    eprintln!("skipping a database-fault test: {reason}");
    None
}

fn run_ok(command: &mut Command) -> Output {
    let output = command.output().expect("spawn");
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}",
        describe(&output)
    );
    output
}

fn path_str(path: &Path) -> String {
    path.display().to_string()
}
