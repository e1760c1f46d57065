//! SQLite faults while a host runs: the disk holding the database fills up,
//! and another process holds the file's write lock for longer than the busy
//! timeout. The producer gets a clear error, the host keeps running, and
//! once the fault is gone new work runs and nothing committed before it is
//! lost or corrupted (`PRAGMA integrity_check`).

use std::{path::PathBuf, process::Command, time::Duration};

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

    let mut locker = Command::new("sqlite3")
        .arg(&db_file)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run sqlite3 (Debian package sqlite3)");
    {
        use std::io::Write;
        let mut script = locker.stdin.take().expect("stdin");
        script
            .write_all(b"BEGIN EXCLUSIVE;\nSELECT 'locked';\n.shell sleep 33\nCOMMIT;\n")
            .expect("write the locking script");
    }
    std::thread::sleep(Duration::from_millis(500));
    let refused = env.run(&["enqueue", "echo", r#"{"n": -1}"#]);
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
    let _ = locker.wait();

    enqueue_many(&env, 10, 10);
    wait_for_succeeded(&env, 20);
    assert!(serve.is_running(), "{}", serve.output());
    drop(serve);
    assert_eq!(integrity(&db_file), "ok");
}
