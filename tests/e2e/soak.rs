//! The soak: one `boxcar serve` on SQLite and one on Postgres, side by side,
//! each fed mixed jobs at a steady rate over its HTTP API for
//! `SOAK_MINUTES` (default 60): `echo`, `flaky` (fails once, logs, then
//! succeeds), `cooperative-sleep` (200 ms) and `progress`, plus a schedule
//! every 2 s, with retention pruning finished jobs older than two minutes.
//!
//! Every minute it prints, per host: resident memory, open file descriptors
//! and database connections (Postgres: backends with the host's own
//! `application_name`; SQLite: descriptors open on the database file),
//! and the jobs enqueued and still open. After a warm-up (a sixth of the
//! run, at least two minutes) the figures must stay flat: a leak shows as
//! growth. At the end every job must have ended, none failed.
//!
//! Ignored (it runs for an hour): `just soak`; `SOAK_MINUTES` shortens it.

use std::{
    path::Path,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use serde_json::{json, Value};

use crate::{
    api::http,
    harness::{eventually, postgres_schema, Env, Serve},
};

/// How much resident memory may grow from the end of warm-up to the end.
const RSS_SLACK_KIB: u64 = 24 * 1024;
/// How many more descriptors or connections than at warm-up's peak.
const HANDLE_SLACK: u64 = 8;

/// One minute's reading of a host.
#[derive(Debug, Clone, Copy)]
struct Sample {
    minute: u64,
    rss_kib: u64,
    fds: u64,
    connections: u64,
    enqueued: u64,
    open: u64,
}

/// How a host's database connections are counted.
enum Connections {
    /// Descriptors the host holds open on this SQLite file.
    SqliteFile(std::path::PathBuf),
    /// Backends of `DATABASE_URL`'s server with this application name.
    PostgresApplication(String),
}

impl Connections {
    fn count(&self, pid: u32) -> u64 {
        match self {
            Self::SqliteFile(file) => descriptors(pid)
                .iter()
                .filter(|target| target.as_path() == file.as_path())
                .count() as u64,
            Self::PostgresApplication(name) => postgres_backends(name),
        }
    }
}

fn descriptors(pid: u32) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .collect()
        })
        .unwrap_or_default()
}

fn postgres_backends(application: &str) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        use sqlx::Connection;
        let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
        let mut conn = sqlx::PgConnection::connect(&url)
            .await
            .expect("connect to count backends");
        let count: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
                .bind(application)
                .fetch_one(&mut conn)
                .await
                .expect("count backends");
        count.max(0) as u64
    })
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .expect("a VmRSS line")
}

fn start(env: &Env, name: &str) -> Serve {
    env.fast_config(
        "[retention]\nenabled = true\nolder_than = \"2m\"\ninterval = \"1m\"\n\n\
         [[schedules]]\nid = \"soak-tick\"\njob_type = \"echo\"\nevery = \"2s\"\npayload = { tick = true }\n",
    );
    for (name, example, extra) in [
        ("echo", "echo", "concurrency = 8"),
        ("flaky", "flaky", "concurrency = 4\nmax_attempts = 5"),
        ("sleep", "cooperative-sleep", "concurrency = 16"),
        ("progress", "progress", "concurrency = 2"),
    ] {
        env.deploy(
            name,
            example,
            &format!("[handler]\njob_type = \"{name}\"\ntimeout = \"30s\"\n{extra}\n"),
        );
    }
    let serve = env.serve(name, &[]);
    serve.wait_for_log("HTTP API listening", Duration::from_secs(120));
    eventually(Duration::from_secs(120), "four handlers deployed", || {
        (serve.output().matches("handler deployed").count() >= 4).then_some(())
    });
    serve
}

fn enqueue(serve: &Serve, job_type: &str, payload: Value) {
    let body = json!({"job_type": job_type, "payload": payload}).to_string();
    let (status, answer) = http(&serve.listen, "POST", "/jobs", Some(&body), None);
    assert_eq!(status, 201, "enqueue {job_type}: {answer}");
}

fn open_jobs(serve: &Serve) -> (u64, Value) {
    let (_, counts) = http(&serve.listen, "GET", "/counts", None, None);
    let open = ["pending", "running"]
        .iter()
        .map(|s| counts[s].as_u64().unwrap_or(0))
        .sum();
    (open, counts)
}

/// Feeds one host for `minutes`, sampling it every minute; returns the
/// samples. About 36 jobs a second, plus the schedule's.
fn soak(name: &str, serve: &Serve, connections: &Connections, minutes: u64) -> Vec<Sample> {
    let pid = serve.pid().expect("running");
    let started = Instant::now();
    let mut samples = Vec::new();
    let (mut enqueued, mut tick) = (0u64, 0u64);
    let mut next_sample = started;
    while samples.len() as u64 <= minutes {
        if Instant::now() >= next_sample {
            let (open, counts) = open_jobs(serve);
            let sample = Sample {
                minute: samples.len() as u64,
                rss_kib: rss_kib(pid),
                fds: descriptors(pid).len() as u64,
                connections: connections.count(pid),
                enqueued,
                open,
            };
            println!(
                "soak {name}: minute {} rss {:.1} MiB fds {} connections {} enqueued {} open {} counts {counts}",
                sample.minute,
                sample.rss_kib as f64 / 1024.0,
                sample.fds,
                sample.connections,
                sample.enqueued,
                sample.open
            );
            samples.push(sample);
            next_sample += Duration::from_secs(60);
            if samples.len() as u64 > minutes {
                break;
            }
        }
        tick += 1;
        enqueue(serve, "echo", json!({"tick": tick}));
        enqueue(serve, "echo", json!({"tick": tick, "pad": "x".repeat(512)}));
        enqueue(serve, "sleep", json!({"ms": 200}));
        if tick % 5 == 0 {
            enqueue(
                serve,
                "flaky",
                json!({"succeed_on": 2, "retry_after_ms": 50, "log_lines": 2}),
            );
            enqueued += 1;
        }
        if tick % 10 == 0 {
            enqueue(serve, "progress", json!({"steps": 3, "step_ms": 50}));
            enqueued += 1;
        }
        enqueued += 3;
        std::thread::sleep(Duration::from_millis(100));
    }
    samples
}

/// The problems in one host's samples: growth after warm-up.
fn growth(name: &str, samples: &[Sample]) -> Vec<String> {
    let warm_up = (samples.len() / 6)
        .max(2)
        .min(samples.len().saturating_sub(1));
    let (warm, rest) = samples.split_at(warm_up + 1);
    let Some(base) = warm.last() else {
        return vec![format!("{name}: no samples")];
    };
    let peak_fds = warm.iter().map(|s| s.fds).max().unwrap_or(0);
    let peak_connections = warm.iter().map(|s| s.connections).max().unwrap_or(0);
    let mut problems = Vec::new();
    if let Some(last) = rest.last() {
        if last.rss_kib > base.rss_kib + RSS_SLACK_KIB {
            problems.push(format!(
                "{name}: resident memory grew from {} KiB at minute {} to {} KiB at minute {}",
                base.rss_kib, base.minute, last.rss_kib, last.minute
            ));
        }
    }
    for sample in rest {
        if sample.fds > peak_fds + HANDLE_SLACK
            || sample.connections > peak_connections + HANDLE_SLACK
        {
            problems.push(format!(
                "{name}: minute {} holds {} descriptors and {} connections (warm-up peaks {peak_fds}, {peak_connections})",
                sample.minute, sample.fds, sample.connections
            ));
        }
    }
    problems
}

/// Soaks one host and checks it: flat figures, every job ended, none failed.
fn soak_and_check(name: &str, env: &Env, connections: Connections, minutes: u64) -> Vec<String> {
    let serve = start(env, name);
    let samples = soak(name, &serve, &connections, minutes);
    eventually(Duration::from_secs(120), "every soak job to end", || {
        (open_jobs(&serve).0 == 0).then_some(())
    });
    let mut problems = growth(name, &samples);
    let (_, counts) = open_jobs(&serve);
    if counts["failed"].as_u64().unwrap_or(0) > 0 {
        problems.push(format!("{name}: jobs failed: {counts}"));
    }
    problems
}

fn minutes() -> u64 {
    std::env::var("SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(60)
}

#[test]
#[ignore = "long (an hour): just soak"]
fn soak_long_on_sqlite_and_postgres() {
    let minutes = minutes();
    let sqlite = Env::sqlite();
    let sqlite_file = Path::new(sqlite.db.trim_start_matches("sqlite://")).to_path_buf();
    let Some((url, _drop_schema)) = postgres_schema("soak") else {
        return;
    };
    let application = format!("boxcar-soak-{}", std::process::id());
    let postgres = Env::with_db(format!("{url}&application_name={application}"));
    let failed = AtomicBool::new(false);
    let problems = std::thread::scope(|scope| {
        let on_sqlite = scope.spawn(|| {
            soak_and_check(
                "sqlite",
                &sqlite,
                Connections::SqliteFile(sqlite_file),
                minutes,
            )
        });
        let on_postgres = scope.spawn(|| {
            soak_and_check(
                "postgres",
                &postgres,
                Connections::PostgresApplication(application.clone()),
                minutes,
            )
        });
        let mut problems = Vec::new();
        for handle in [on_sqlite, on_postgres] {
            match handle.join() {
                Ok(found) => problems.extend(found),
                Err(_) => failed.store(true, Ordering::Relaxed),
            }
        }
        problems
    });
    assert!(!failed.load(Ordering::Relaxed), "a soak thread panicked");
    assert!(
        problems.is_empty(),
        "soak problems:\n{}",
        problems.join("\n")
    );
}
