//! SQLite faults while a host runs: the disk holding the database fills up,
//! another process holds the file's write lock for longer than the busy
//! timeout, and the database turns read-only. The producer gets a clear
//! error, the host keeps running, and once the fault is gone new work runs
//! and nothing committed before it is lost or corrupted
//! (`PRAGMA integrity_check`).
//!
//! Read-only, for a running process, cannot be a read-only remount: the
//! kernel refuses one (`EBUSY`) while any file on the mount is open for
//! writing, as the host's database is. So the fault has two parts, which
//! together give every writer what a read-only filesystem gives: a
//! read-only bind mount over the database's directory (every new open for
//! writing, the producer's and any new connection of the host's, fails
//! with `EROFS`), and, for the files the host already holds open, `strace`
//! fault injection that fails each of the host's write, truncate and sync
//! calls on the database, its `-wal` and `-shm` with `EROFS` (stores into
//! the `-shm` the host has already mapped are not system calls and still
//! land). Lifting it detaches `strace` and unmounts the bind.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::harness::{describe, eventually, Env, Serve};

/// A size-limited tmpfs mounted for one test; unmounted when dropped.
struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    fn mount(dir: PathBuf, size: &str) -> Option<Self> {
        std::fs::create_dir_all(&dir).expect("mount point");
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output();
        match output {
            Ok(output) if output.status.success() => Some(Self { dir }),
            other => {
                let reason = match other {
                    Ok(output) => describe(&output),
                    Err(e) => e.to_string(),
                };
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "CI=true but a tmpfs for the disk-full test cannot be mounted: {reason}"
                );
                eprintln!("skipping the disk-full test: cannot mount a tmpfs: {reason}");
                None
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

fn start_echo_host(env: &Env) -> Serve {
    env.fast_config("");
    env.deploy(
        "echo",
        "echo",
        "[handler]\njob_type = \"echo\"\nconcurrency = 4\ntimeout = \"10s\"\nlease_duration = \"2s\"\n",
    );
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    serve
}

fn enqueue_many(env: &Env, from: usize, jobs: usize) {
    for n in from..from + jobs {
        env.ok(&["enqueue", "echo", &format!("{{\"n\": {n}}}")]);
    }
}

fn wait_for_succeeded(env: &Env, jobs: u64) {
    eventually(Duration::from_secs(60), "the jobs to succeed", || {
        (env.json(&["counts"])["succeeded"] == jobs).then_some(())
    });
}

fn integrity(db_file: &std::path::Path) -> String {
    let output = Command::new("sqlite3")
        .arg(db_file)
        .arg("PRAGMA integrity_check;")
        .output()
        .expect("run sqlite3 (Debian package sqlite3)");
    assert!(output.status.success(), "{}", describe(&output));
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[test]
fn sqlite_disk_full_is_a_clear_error_and_the_host_recovers() {
    let mut env = Env::sqlite();
    let Some(disk) = SmallDisk::mount(env.path("small"), "8m") else {
        return;
    };
    let db_file = disk.dir.join("boxcar.db");
    env.db = format!("sqlite://{}", db_file.display());
    let mut serve = start_echo_host(&env);
    enqueue_many(&env, 0, 20);
    wait_for_succeeded(&env, 20);

    let filler = disk.dir.join("filler");
    let chunk = vec![0u8; 64 * 1024];
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).expect("filler");
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
    }
    let refused = (0..50).find_map(|n| {
        let big = format!("{{\"pad\": \"{}\", \"n\": {n}}}", "x".repeat(60_000));
        let output = env.run(&["enqueue", "echo", &big]);
        (!output.status.success()).then_some(output)
    });
    let refused = refused.expect("an enqueue on a full disk is refused");
    let said = describe(&refused).to_lowercase();
    assert!(
        said.contains("full") || said.contains("no space"),
        "the error says the disk is full: {said}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        serve.is_running(),
        "the host survives a full disk:\n{}",
        serve.output()
    );

    std::fs::remove_file(&filler).expect("free the disk");
    let before = env.json(&["counts"]);
    let accepted_while_full = before["succeeded"].as_u64().unwrap_or(0)
        + before["pending"].as_u64().unwrap_or(0)
        + before["running"].as_u64().unwrap_or(0);
    enqueue_many(&env, 100, 20);
    wait_for_succeeded(&env, accepted_while_full + 20);
    assert!(serve.is_running(), "{}", serve.output());
    let counts = env.json(&["counts"]);
    assert_eq!(counts["failed"], 0, "{counts}");
    drop(serve);
    assert_eq!(integrity(&db_file), "ok");
}

#[test]
fn sqlite_locked_past_the_busy_timeout_is_a_clear_error_and_the_host_recovers() {
    let env = Env::sqlite();
    let mut serve = start_echo_host(&env);
    enqueue_many(&env, 0, 10);
    wait_for_succeeded(&env, 10);
    let db_file = env.path("boxcar.db");

    // sqlite3 takes the lock, says so, and holds it until told to commit,
    // so the enqueue meets the lock however slowly either process starts.
    let mut locker = Command::new("sqlite3")
        .arg(&db_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sqlite3 (Debian package sqlite3)");
    let mut script = locker.stdin.take().expect("stdin");
    {
        use std::io::{BufRead, Write};
        script
            .write_all(b"BEGIN EXCLUSIVE;\nSELECT 'locked';\n")
            .expect("write the locking script");
        script.flush().expect("send the locking script");
        let mut said = String::new();
        std::io::BufReader::new(locker.stdout.take().expect("stdout"))
            .read_line(&mut said)
            .expect("read what sqlite3 printed");
        assert_eq!(said.trim(), "locked", "sqlite3 took the exclusive lock");
    }
    let refused = env.run(&["enqueue", "echo", r#"{"n": -1}"#]);
    {
        use std::io::Write;
        script.write_all(b"COMMIT;\n").expect("release the lock");
    }
    drop(script);
    let _ = locker.wait();
    assert!(
        !refused.status.success(),
        "an enqueue while another process holds the lock past the busy timeout fails"
    );
    let said = describe(&refused).to_lowercase();
    assert!(
        said.contains("locked") || said.contains("busy"),
        "the error says the database is locked: {said}"
    );
    assert!(serve.is_running(), "{}", serve.output());

    enqueue_many(&env, 10, 10);
    wait_for_succeeded(&env, 20);
    assert!(serve.is_running(), "{}", serve.output());
    drop(serve);
    assert_eq!(integrity(&db_file), "ok");
}

/// The calls that write to, truncate or sync a file: on a read-only
/// filesystem each fails with `EROFS`.
const WRITE_CALLS: &str =
    "write,pwrite64,writev,pwritev,pwritev2,ftruncate,fallocate,fsync,fdatasync";

/// The database directory made read-only under a running host (see the
/// module doc); lifted when dropped.
struct ReadOnly {
    dir: PathBuf,
    mounted: bool,
    tracer: Option<Child>,
}

impl ReadOnly {
    /// Makes `dir` read-only for new opens and the database files `files`
    /// read-only for the already open files of process `pid`, or `None`
    /// (with a printed reason) when this machine cannot and `CI` is not set.
    fn impose(dir: &Path, files: &[PathBuf], pid: u32, log: &Path) -> Option<Self> {
        let mut fault = Self {
            dir: dir.to_path_buf(),
            mounted: false,
            tracer: None,
        };
        let bound = run(Command::new("mount").arg("--bind").arg(dir).arg(dir)).and_then(|()| {
            fault.mounted = true;
            run(Command::new("mount")
                .args(["-o", "remount,bind,ro"])
                .arg(dir))
        });
        if let Err(reason) = bound {
            return read_only_skip(&format!("cannot mount the directory read-only: {reason}"));
        }
        let mut strace = Command::new("strace");
        strace
            .args(["-f", "-o", "/dev/null", "-p", &pid.to_string()])
            .args(["-e", &format!("trace={WRITE_CALLS}")])
            .args(["-e", &format!("inject={WRITE_CALLS}:error=EROFS")]);
        for file in files {
            strace.arg("-P").arg(file);
        }
        let stderr = std::fs::File::create(log).expect("strace log");
        let spawned = strace
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn();
        match spawned {
            Ok(child) => fault.tracer = Some(child),
            Err(e) => {
                return read_only_skip(&format!("cannot run strace (Debian package strace): {e}"))
            }
        }
        let attached = Instant::now();
        while !std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("attached")
        {
            let exited = fault
                .tracer
                .as_mut()
                .is_some_and(|t| matches!(t.try_wait(), Ok(Some(_))));
            if exited || attached.elapsed() > Duration::from_secs(10) {
                let said = std::fs::read_to_string(log).unwrap_or_default();
                return read_only_skip(&format!("strace could not attach to the host: {said}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(fault)
    }

    /// Detaches `strace` (SIGINT: it lets go of every thread) and unmounts
    /// the read-only bind.
    fn lift(&mut self) {
        if let Some(mut tracer) = self.tracer.take() {
            let _ = Command::new("kill")
                .args(["-INT", &tracer.id().to_string()])
                .status();
            let _ = tracer.wait();
        }
        if std::mem::take(&mut self.mounted) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        self.lift();
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed:\n{}", describe(&output)))
    }
}

fn read_only_skip(reason: &str) -> Option<ReadOnly> {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but the read-only test cannot run: {reason}"
    );
    eprintln!("skipping the read-only test: {reason}");
    None
}

/// Every job in `ids` has succeeded.
fn all_succeeded(env: &Env, ids: &[String]) -> bool {
    ids.iter()
        .all(|id| env.json(&["job", id])["status"] == "succeeded")
}

#[test]
fn sqlite_turned_read_only_is_a_clear_error_and_the_host_recovers() {
    let mut env = Env::sqlite();
    let data = env.path("data");
    std::fs::create_dir_all(&data).expect("data dir");
    let db_file = data.join("boxcar.db");
    env.db = format!("sqlite://{}", db_file.display());
    env.fast_config("");
    env.deploy(
        "echo",
        "echo",
        "[handler]\njob_type = \"echo\"\nconcurrency = 4\ntimeout = \"10s\"\nlease_duration = \"2s\"\n",
    );
    env.deploy(
        "slow",
        "sleep",
        "[handler]\njob_type = \"slow\"\nconcurrency = 2\ntimeout = \"10s\"\nlease_duration = \"2s\"\nmax_attempts = 10\n",
    );
    let mut serve = env.serve("serve", &[]);
    for handler in ["handler=echo", "handler=slow"] {
        serve.wait_for_log(handler, Duration::from_secs(60));
    }
    let committed: Vec<String> = (0..20)
        .map(|n| {
            env.ok(&["enqueue", "echo", &format!("{{\"n\": {n}}}")])
                .trim()
                .to_string()
        })
        .collect();
    wait_for_succeeded(&env, 20);
    let mid_run: Vec<String> = (0..6)
        .map(|n| {
            env.ok(&["enqueue", "slow", &format!("{{\"ms\": 1000, \"n\": {n}}}")])
                .trim()
                .to_string()
        })
        .collect();

    let files: Vec<PathBuf> = ["boxcar.db", "boxcar.db-wal", "boxcar.db-shm"]
        .iter()
        .map(|f| data.join(f))
        .collect();
    let pid = serve.pid().expect("host pid");
    let Some(mut fault) = ReadOnly::impose(&data, &files, pid, &env.path("strace.log")) else {
        return;
    };
    let refused = env.run(&["enqueue", "echo", r#"{"n": -1}"#]);
    assert!(
        !refused.status.success(),
        "an enqueue into a read-only database is refused:\n{}",
        describe(&refused)
    );
    let said = describe(&refused).to_lowercase();
    assert!(
        said.contains("read-only") || said.contains("readonly"),
        "the error says the database is read-only: {said}"
    );
    eprintln!(
        "read-only: the producer was told: {}",
        String::from_utf8_lossy(&refused.stderr).trim()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        serve.is_running(),
        "the host survives a read-only database:\n{}",
        serve.output()
    );
    assert!(
        serve.output().contains("disk I/O error"),
        "the host's writes to its open database files failed (SQLite reports EROFS on a write as a disk I/O error):\n{}",
        serve.output()
    );
    let complaints: Vec<String> = serve
        .output()
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .map(str::to_string)
        .collect();
    eprintln!(
        "read-only: the host logged {} warnings and errors meanwhile, the first: {}",
        complaints.len(),
        complaints.first().map_or("", String::as_str)
    );
    fault.lift();
    let lifted = Instant::now();

    let after: Vec<String> = (100..120)
        .map(|n| {
            env.ok(&["enqueue", "echo", &format!("{{\"n\": {n}}}")])
                .trim()
                .to_string()
        })
        .collect();
    eventually(
        Duration::from_secs(60),
        "the jobs from before, during and after the fault to succeed",
        || (all_succeeded(&env, &after) && all_succeeded(&env, &mid_run)).then_some(()),
    );
    eprintln!(
        "read-only: every job from before, during and after the fault succeeded {:?} after it was lifted",
        lifted.elapsed()
    );
    assert!(
        all_succeeded(&env, &committed),
        "a job committed before the fault is intact"
    );
    assert!(serve.is_running(), "{}", serve.output());
    let counts = env.json(&["counts"]);
    assert_eq!(counts["failed"], 0, "{counts}");
    assert_eq!(counts["succeeded"], 46, "{counts}");
    drop(serve);
    assert_eq!(integrity(&db_file), "ok");
}
