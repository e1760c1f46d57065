//! Several `serve` processes on one database, and a host killed mid-job.

use std::{collections::HashSet, time::Duration};

use crate::harness::{eventually, postgres_schema, Env};

#[test]
fn a_job_survives_sigkill_of_its_host() {
    let env = Env::sqlite();
    env.fast_config("");
    env.deploy(
        "slow",
        "sleep",
        "[handler]\njob_type = \"slow\"\ntimeout = \"20s\"\nlease_duration = \"1s\"\n",
    );
    let mut first = env.serve("first", &[]);
    first.wait_for_log("handler deployed", Duration::from_secs(30));
    let id = env
        .ok(&["enqueue", "slow", r#"{"ms": 1500}"#])
        .trim()
        .to_string();
    eventually(Duration::from_secs(5), "the job to start", || {
        (env.json(&["job", &id])["status"] == "running").then_some(())
    });
    first.kill9();
    assert_eq!(
        env.json(&["job", &id])["status"],
        "running",
        "the row still claims to run"
    );

    let second = env.serve("second", &[]);
    second.wait_for_log("boxcar host started", Duration::from_secs(30));
    let job = eventually(
        Duration::from_secs(20),
        "the job to be recovered and finish",
        || {
            let job = env.json(&["job", &id]);
            (job["status"] == "succeeded").then_some(job)
        },
    );
    assert_eq!(
        job["attempts"], 2,
        "the recovery counted as a new attempt: {job}"
    );
}

fn share_jobs(env: &Env, jobs: usize) {
    env.fast_config("");
    env.deploy(
        "echo",
        "echo",
        "[handler]\njob_type = \"echo\"\nconcurrency = 8\ntimeout = \"10s\"\n",
    );
    let a = env.serve("a", &[]);
    let b = env.serve("b", &[]);
    a.wait_for_log("handler deployed", Duration::from_secs(60));
    b.wait_for_log("handler deployed", Duration::from_secs(60));

    let children: Vec<serde_json::Value> = (0..jobs)
        .map(|n| serde_json::json!({"job_type": "echo", "payload": {"n": n}}))
        .collect();
    let file = env.path("jobs.json");
    std::fs::write(&file, serde_json::to_string(&children).expect("json")).expect("write");
    // A flow enqueues every job in one transaction; its parent waits for all of them.
    let parent = env
        .ok(&[
            "enqueue",
            "echo",
            r#"{"parent": true}"#,
            "--children",
            file.to_str().expect("utf-8"),
        ])
        .trim()
        .to_string();
    eventually(Duration::from_secs(120), "every job to finish", || {
        (env.json(&["job", &parent])["status"] == "succeeded").then_some(())
    });
    let counts = env.json(&["counts"]);
    assert_eq!(counts["succeeded"], jobs as u64 + 1, "{counts}");
    let mut seen = HashSet::new();
    let mut offset = 0;
    loop {
        let page = env.json(&["jobs", "--limit", "1000", "--offset", &offset.to_string()]);
        let page = page.as_array().expect("array").clone();
        if page.is_empty() {
            break;
        }
        for job in &page {
            assert_eq!(job["attempts"], 1, "every job ran exactly once: {job}");
            assert!(seen.insert(job["id"].as_str().expect("id").to_string()));
        }
        offset += page.len();
    }
    assert_eq!(seen.len(), jobs + 1);
    let a_log = a.output();
    let b_log = b.output();
    assert!(!a_log.contains("panicked") && !b_log.contains("panicked"));
}

#[test]
fn two_hosts_share_2000_jobs_on_one_sqlite_file() {
    share_jobs(&Env::sqlite(), 2000);
}

#[test]
fn two_hosts_share_2000_jobs_on_postgres() {
    let Some((url, _drop_schema)) = postgres_schema("share") else {
        return;
    };
    share_jobs(&Env::with_db(url), 2000);
}

#[test]
fn sigterm_stops_claiming_then_releases_unfinished_jobs_after_the_grace() {
    let env = Env::sqlite();
    std::fs::write(
        env.path("boxcar.toml"),
        "[worker]\npoll_interval = \"100ms\"\nshutdown_grace = \"500ms\"\nabandon_grace = \"1s\"\n",
    )
    .expect("config");
    env.deploy(
        "slow",
        "sleep",
        "[handler]\njob_type = \"slow\"\ntimeout = \"30s\"\n",
    );
    let mut serve = env.serve("serve", &[]);
    serve.wait_for_log("handler deployed", Duration::from_secs(30));
    let id = env
        .ok(&["enqueue", "slow", r#"{"ms": 20000}"#])
        .trim()
        .to_string();
    eventually(Duration::from_secs(5), "the job to start", || {
        (env.json(&["job", &id])["status"] == "running").then_some(())
    });
    let started = std::time::Instant::now();
    let status = serve.terminate();
    assert!(
        status.success(),
        "graceful exit: {status}\n{}",
        serve.output()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        started.elapsed()
    );
    let job = env.json(&["job", &id]);
    assert_eq!(
        job["status"], "pending",
        "released for another worker: {job}"
    );
    assert_eq!(job["attempts"], 0, "release gives the attempt back: {job}");
}

/// Starts `serve` with its log on a pipe and sends it SIGTERM the moment
/// a log line contains `cue`; returns the exit status and the whole log.
fn terminate_at_cue(env: &Env, cue: &str) -> (std::process::ExitStatus, String) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let handlers = env.handlers().display().to_string();
    let mut child = env
        .command()
        .args(["serve", "--handlers", &handlers, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let stderr = child.stderr.take().expect("piped stderr");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let mut log = String::new();
    let mut signalled = false;
    loop {
        match received.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                if !signalled && line.contains(cue) {
                    let _ = std::process::Command::new("kill")
                        .args(["-TERM", &child.id().to_string()])
                        .status();
                    signalled = true;
                }
                log.push_str(&line);
                log.push('\n');
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("serve neither logged {cue:?} nor exited within 60 s:\n{log}");
            }
        }
    }
    let status = child.wait().expect("wait for serve");
    assert!(signalled, "serve exited before logging {cue:?}:\n{log}");
    (status, log)
}

/// A SIGTERM that arrives while the host starts — while it deploys, or
/// just as its worker starts claiming — is a graceful shutdown, never the
/// signal's default action: the process exits 0 and no job is left running
/// under a lease nobody will renew.
#[test]
fn sigterm_at_any_moment_of_the_start_is_a_graceful_shutdown() {
    let env = Env::sqlite();
    std::fs::write(
        env.path("boxcar.toml"),
        "[worker]\npoll_interval = \"50ms\"\nshutdown_grace = \"200ms\"\nabandon_grace = \"1s\"\n",
    )
    .expect("config");
    std::fs::write(
        env.path("producer.toml"),
        "handled_elsewhere = [\"slow\"]\n",
    )
    .expect("producer config");
    env.deploy(
        "slow",
        "sleep",
        "[handler]\njob_type = \"slow\"\ntimeout = \"30s\"\n",
    );
    let producer = env.path("producer.toml").display().to_string();
    let mut ids = Vec::new();
    for _ in 0..8 {
        let out = env.ok(&["--config", &producer, "enqueue", "slow", r#"{"ms": 20000}"#]);
        ids.push(out.trim().to_string());
    }
    let first_line = "";
    for cue in [first_line, "boxcar host started"] {
        let (status, log) = terminate_at_cue(&env, cue);
        assert!(
            status.success(),
            "SIGTERM at {cue:?}: a graceful exit, not the signal's default action: {status}\n{log}"
        );
        for id in &ids {
            let job = env.json(&["job", id]);
            assert_eq!(
                job["status"], "pending",
                "SIGTERM at {cue:?}: the job is released, not left running: {job}\n{log}"
            );
        }
    }
}
