//! Multi-process tests: real OS processes (the `boxcar-queue-testworker`
//! binary) sharing one SQLite file or one Postgres schema.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use boxcar_queue::{JobStatus, NewJob, Scope};
use serde_json::json;

use crate::support::{eventually, Backend, Fixture};

/// A worker process, killed (SIGKILL) when dropped.
struct Proc(Child);

impl Proc {
    fn spawn(url: &str, log: &Path, envs: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_boxcar-queue-testworker"));
        cmd.env("BOXCAR_URL", url)
            .env("BOXCAR_LOG", log)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn testworker");
        let out = child.stdout.take().expect("stdout");
        let mut first = String::new();
        BufReader::new(out)
            .read_line(&mut first)
            .expect("read ready");
        assert_eq!(first.trim(), "ready", "testworker did not start");
        Self(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// SIGKILL, then reap.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `n` worker processes at the same moment on one new database
/// (each connects and migrates it) and checks every one comes up.
fn start_together_on_a_new_database(url: &str, n: usize, rounds: usize) {
    let dir = tempfile::tempdir().unwrap();
    let log = log_path(&dir);
    for round in 0..rounds {
        let url = url.replace("{round}", &round.to_string());
        let mut children: Vec<Child> = (0..n)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_boxcar-queue-testworker"))
                    .env("BOXCAR_URL", &url)
                    .env("BOXCAR_LOG", &log)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn testworker")
            })
            .collect();
        let mut failures = Vec::new();
        for child in &mut children {
            let mut first = String::new();
            let out = child.stdout.take().expect("stdout");
            BufReader::new(out).read_line(&mut first).ok();
            if first.trim() != "ready" {
                let _ = child.kill();
                let mut err = String::new();
                if let Some(e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut BufReader::new(e), &mut err);
                }
                failures.push(err);
            }
        }
        for mut child in children {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert!(
            failures.is_empty(),
            "round {round}: {} of {n} processes failed to start: {failures:#?}",
            failures.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_processes_starting_together_on_a_new_file_all_come_up() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/new-{{round}}.db", dir.path().display());
    tokio::task::spawn_blocking(move || start_together_on_a_new_database(&url, 6, 40))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_processes_starting_together_on_a_new_schema_all_come_up() {
    let Some(base) = crate::support::database_url() else {
        return;
    };
    let prefix = format!("t_{}", uuid::Uuid::new_v4().simple());
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}schema={prefix}_{{round}}");
    let rounds = 3;
    let run =
        tokio::task::spawn_blocking(move || start_together_on_a_new_database(&url, 4, rounds))
            .await;
    let pool = sqlx::PgPool::connect(&base).await.unwrap();
    for round in 0..rounds {
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {prefix}_{round} CASCADE"))
            .execute(&pool)
            .await
            .unwrap();
    }
    run.unwrap();
}

/// `(what, job id, pid)` lines of the execution log.
fn read_log(path: &Path) -> Vec<(String, String, u32)> {
    read_timed_log(path)
        .into_iter()
        .map(|(w, i, p, _)| (w, i, p))
        .collect()
}

/// `(what, job id, pid, µs since the epoch)` lines of the execution log.
fn read_timed_log(path: &Path) -> Vec<(String, String, u32, u128)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut it = l.split(' ');
            let what = it.next()?.to_string();
            let id = it.next()?.to_string();
            let pid = it.next()?.parse().ok()?;
            let at = it.next()?.parse().ok()?;
            Some((what, id, pid, at))
        })
        .collect()
}

fn log_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("exec.log")
}

async fn drain_four_processes(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = log_path(&dir);
    let q = fx.queue();
    const N: usize = 10_000;
    let mut ids = Vec::with_capacity(N);
    for chunk in 0..(N / 1000) {
        let jobs = (0..1000)
            .map(|i| NewJob::new("mp", &json!({"n": chunk * 1000 + i})))
            .collect();
        ids.extend(q.add_many(jobs).await.unwrap().into_iter().map(|r| r.id));
    }
    let t0 = Instant::now();
    let mut procs: Vec<Proc> = (0..4)
        .map(|_| {
            Proc::spawn(
                &fx.url,
                &log,
                &[("BOXCAR_CONCURRENCY", "8"), ("BOXCAR_POLL_MS", "100")],
            )
        })
        .collect();
    let store = fx.store.clone();
    let done = eventually(Duration::from_secs(180), || {
        let store = store.clone();
        async move { store.count_by_status().await.unwrap().succeeded == N as u64 }
    })
    .await;
    let elapsed = t0.elapsed();
    for p in &mut procs {
        p.kill();
    }
    assert!(
        done,
        "not all jobs succeeded: {:?}",
        fx.store.count_by_status().await.unwrap()
    );
    let lines = read_log(&log);
    let mut ends: HashMap<&str, usize> = HashMap::new();
    let mut by_pid: HashMap<u32, usize> = HashMap::new();
    for (what, id, pid) in &lines {
        if what == "end" {
            *ends.entry(id.as_str()).or_default() += 1;
            *by_pid.entry(*pid).or_default() += 1;
        }
    }
    for id in &ids {
        assert_eq!(
            ends.get(id.as_str()),
            Some(&1),
            "job {id} ran {:?} times",
            ends.get(id.as_str())
        );
    }
    assert_eq!(
        lines.iter().filter(|l| l.0 == "start").count(),
        N,
        "no job started twice"
    );
    assert!(by_pid.len() >= 2, "work spread over processes: {by_pid:?}");
    eprintln!("{backend:?}: 4 processes drained {N} jobs in {elapsed:?} ({by_pid:?})");
    fx.finish().await;
}

async fn sigkill_recovery(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = log_path(&dir);
    let q = fx.queue();
    let a = q
        .add(NewJob::new("mp", &json!({})).max_attempts(3))
        .await
        .unwrap()
        .id;
    let b = q
        .add(NewJob::new("mp", &json!({})).max_attempts(3))
        .await
        .unwrap()
        .id;
    let mut victim = Proc::spawn(
        &fx.url,
        &log,
        &[
            ("BOXCAR_MODE", "sleep:600000"),
            ("BOXCAR_LEASE_MS", "1000"),
            ("BOXCAR_POLL_MS", "100"),
        ],
    );
    let victim_pid = victim.pid();
    let started = eventually(Duration::from_secs(20), || async {
        read_log(&log).iter().filter(|l| l.0 == "start").count() == 2
    })
    .await;
    assert!(started, "the victim did not start both jobs");
    victim.kill();
    let t0 = Instant::now();
    let _rescuer = Proc::spawn(&fx.url, &log, &[("BOXCAR_POLL_MS", "100")]);
    let store = fx.store.clone();
    let done = eventually(Duration::from_secs(30), || {
        let store = store.clone();
        async move { store.count_by_status().await.unwrap().succeeded == 2 }
    })
    .await;
    assert!(done, "jobs of the killed worker were not recovered");
    for id in [&a, &b] {
        let j = fx.store.get(id).await.unwrap().unwrap();
        assert_eq!(j.status, JobStatus::Succeeded);
        assert_eq!(j.attempts, 2, "the recovery counts as a new attempt");
    }
    let lines = read_log(&log);
    assert!(
        lines.iter().all(|l| l.0 != "end" || l.2 != victim_pid),
        "the victim never finished"
    );
    eprintln!("{backend:?}: recovered after SIGKILL in {:?}", t0.elapsed());
    fx.finish().await;
}

async fn cancel_reaches_other_process(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = log_path(&dir);
    let _worker = Proc::spawn(&fx.url, &log, &[("BOXCAR_MODE", "until-cancel")]);
    let q = fx.queue();
    let scope = Scope::new("doc", "9");
    let id = q
        .add(NewJob::new("mp", &json!({})).scope(scope.clone()))
        .await
        .unwrap()
        .id;
    let started = eventually(Duration::from_secs(20), || async {
        read_log(&log).iter().any(|l| l.0 == "start" && l.1 == id)
    })
    .await;
    assert!(started);
    let t0 = Instant::now();
    assert_eq!(
        q.cancel_for_scope(scope, "document deleted").await.unwrap(),
        1
    );
    let aborted = eventually(Duration::from_secs(5), || async {
        read_log(&log)
            .iter()
            .any(|l| l.0 == "cancelled" && l.1 == id)
    })
    .await;
    let took = t0.elapsed();
    assert!(aborted, "the other process never aborted the job");
    assert!(
        took <= Duration::from_millis(1500),
        "abort took {took:?}, over one poll interval + 1 s"
    );
    let j = fx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Cancelled);
    assert_eq!(j.last_error.as_deref(), Some("document deleted"));
    eprintln!("{backend:?}: cross-process cancel aborted the run in {took:?}");
    fx.finish().await;
}

async fn scope_guard_across_processes(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = log_path(&dir);
    let q = fx.queue();
    let mut scope_of = HashMap::new();
    let jobs: Vec<NewJob> = (0..300)
        .map(|i| NewJob::new("mp", &json!({})).scope(Scope::new("acct", (i % 10).to_string())))
        .collect();
    let scopes: Vec<String> = jobs
        .iter()
        .map(|j| j.scope.clone().unwrap().scope_id)
        .collect();
    for (r, s) in q.add_many(jobs).await.unwrap().into_iter().zip(scopes) {
        scope_of.insert(r.id, s);
    }
    let envs = [
        ("BOXCAR_CONCURRENCY", "8"),
        ("BOXCAR_POLL_MS", "50"),
        ("BOXCAR_MODE", "sleep:5"),
        ("BOXCAR_SERIALIZE_BY_SCOPE", "1"),
    ];
    let mut procs: Vec<Proc> = (0..3).map(|_| Proc::spawn(&fx.url, &log, &envs)).collect();
    let store = fx.store.clone();
    let done = eventually(Duration::from_secs(120), || {
        let store = store.clone();
        async move { store.count_by_status().await.unwrap().succeeded == 300 }
    })
    .await;
    for p in &mut procs {
        p.kill();
    }
    assert!(
        done,
        "not all guarded jobs succeeded: {:?}",
        fx.store.count_by_status().await.unwrap()
    );
    let lines = read_timed_log(&log);
    let mut spans: HashMap<&str, (u128, u128, u32)> = HashMap::new();
    for (what, id, pid, at) in &lines {
        let e = spans.entry(id.as_str()).or_insert((0, 0, *pid));
        if what == "start" {
            e.0 = *at;
        } else if what == "end" {
            e.1 = *at;
        }
    }
    let mut by_scope: HashMap<&str, Vec<(u128, u128, u32)>> = HashMap::new();
    for (id, span) in &spans {
        by_scope
            .entry(scope_of[*id].as_str())
            .or_default()
            .push(*span);
    }
    let pids: std::collections::HashSet<u32> = spans.values().map(|s| s.2).collect();
    assert!(pids.len() >= 2, "work spread over processes");
    for (scope, mut v) in by_scope {
        v.sort();
        for w in v.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "scope {scope}: {:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
    fx.finish().await;
}

/// Runs `jobs` on 3 worker processes with `envs`; returns each job's
/// `(type, start µs, end µs)` from the execution log.
async fn run_guarded(
    fx: &Fixture,
    jobs: Vec<NewJob>,
    envs: &[(&str, &str)],
) -> Vec<(String, u128, u128)> {
    let dir = tempfile::tempdir().unwrap();
    let log = log_path(&dir);
    let q = fx.queue();
    let n = jobs.len() as u64;
    let types: Vec<String> = jobs.iter().map(|j| j.job_type.clone()).collect();
    let mut type_of = HashMap::new();
    for (r, t) in q.add_many(jobs).await.unwrap().into_iter().zip(types) {
        type_of.insert(r.id, t);
    }
    let mut procs: Vec<Proc> = (0..3).map(|_| Proc::spawn(&fx.url, &log, envs)).collect();
    let store = fx.store.clone();
    let done = eventually(Duration::from_secs(120), || {
        let store = store.clone();
        async move { store.count_by_status().await.unwrap().succeeded == n }
    })
    .await;
    for p in &mut procs {
        p.kill();
    }
    assert!(
        done,
        "not all guarded jobs succeeded: {:?}",
        fx.store.count_by_status().await.unwrap()
    );
    let mut spans: HashMap<String, (u128, u128)> = HashMap::new();
    for (what, id, _pid, at) in read_timed_log(&log) {
        let e = spans.entry(id).or_insert((0, 0));
        if what == "start" {
            e.0 = at;
        } else if what == "end" {
            e.1 = at;
        }
    }
    spans
        .into_iter()
        .map(|(id, (a, b))| (type_of[&id].clone(), a, b))
        .collect()
}

async fn pool_guard_across_processes(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let jobs = (0..150)
        .map(|i| NewJob::new(["big", "small", "tiny"][i % 3], &json!({})))
        .collect();
    let envs = [
        ("BOXCAR_TYPE", "big,small,tiny"),
        ("BOXCAR_CONCURRENCY", "4"),
        ("BOXCAR_POLL_MS", "50"),
        ("BOXCAR_MODE", "sleep:5"),
        ("BOXCAR_POOL", "4:big=2,small=1,tiny=1"),
    ];
    let spans = run_guarded(&fx, jobs, &envs).await;
    let cost = |t: &str| if t == "big" { 2i64 } else { 1 };
    let mut edges: Vec<(u128, i64)> = Vec::new();
    for (t, a, b) in &spans {
        edges.push((*a, cost(t)));
        edges.push((*b, -cost(t)));
    }
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let mut used = 0;
    let mut peak = 0;
    for (_, d) in edges {
        used += d;
        peak = peak.max(used);
    }
    assert!(
        peak <= 4,
        "summed cost of overlapping runs reached {peak} > 4"
    );
    assert!(peak >= 2, "the pool did let work overlap (peak {peak})");
    fx.finish().await;
}

/// A pool of 30 starts per minute over 3 processes and 35 due jobs: the
/// first fixed window admits exactly 30 starts, the other 5 stay pending
/// (the test ends well before the window could reset).
async fn rate_pool_across_processes(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = log_path(&dir);
    let q = fx.queue();
    let jobs = (0..35).map(|_| NewJob::new("rated", &json!({}))).collect();
    q.add_many(jobs).await.unwrap();
    let envs = [
        ("BOXCAR_TYPE", "rated"),
        // Few slots and slow jobs, so one process cannot take the whole
        // budget before the others are up: every process competes.
        ("BOXCAR_CONCURRENCY", "4"),
        ("BOXCAR_MODE", "sleep:400"),
        ("BOXCAR_POLL_MS", "20"),
        ("BOXCAR_POOL", "-:rated=1"),
        ("BOXCAR_POOL_RATE", "30"),
    ];
    let t0 = Instant::now();
    let mut procs: Vec<Proc> = (0..3).map(|_| Proc::spawn(&fx.url, &log, &envs)).collect();
    let store = fx.store.clone();
    let thirty = eventually(Duration::from_secs(40), || {
        let store = store.clone();
        async move { store.count_by_status().await.unwrap().succeeded >= 30 }
    })
    .await;
    // Many more polls by every process while the budget is spent.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let counts = fx.store.count_by_status().await.unwrap();
    for p in &mut procs {
        p.kill();
    }
    assert!(
        t0.elapsed() < Duration::from_secs(55),
        "too slow to tell: the window may have reset"
    );
    assert!(thirty, "the budget admitted fewer than 30: {counts:?}");
    assert_eq!(
        (counts.succeeded + counts.running, counts.pending),
        (30, 5),
        "{counts:?}"
    );
    let starts: Vec<(u32, u128)> = read_timed_log(&log)
        .into_iter()
        .filter(|l| l.0 == "start")
        .map(|(_, _, pid, at)| (pid, at))
        .collect();
    let first = starts.iter().map(|s| s.1).min().unwrap();
    let in_window = starts.iter().filter(|s| s.1 < first + 60_000_000).count();
    assert_eq!(in_window, 30, "starts in the first one-minute window");
    let pids: std::collections::HashSet<u32> = starts.iter().map(|s| s.0).collect();
    assert!(pids.len() >= 2, "the starts came from one process only");
    fx.finish().await;
}

async fn not_while_running_across_processes(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let jobs = (0..120)
        .map(|i| NewJob::new(["import", "hydrate"][i % 2], &json!({})))
        .collect();
    let envs = [
        ("BOXCAR_TYPE", "import,hydrate"),
        ("BOXCAR_CONCURRENCY", "4"),
        ("BOXCAR_POLL_MS", "50"),
        ("BOXCAR_MODE", "sleep:5"),
        ("BOXCAR_NWR", "import:hydrate,hydrate:import"),
    ];
    let spans = run_guarded(&fx, jobs, &envs).await;
    let (imports, hydrates): (Vec<_>, Vec<_>) = spans.iter().partition(|s| s.0 == "import");
    for i in &imports {
        for h in &hydrates {
            assert!(
                i.2 <= h.1 || h.2 <= i.1,
                "import {i:?} overlaps hydrate {h:?}"
            );
        }
    }
    fx.finish().await;
}

async fn waits_for_across_processes(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let jobs = (0..90)
        .map(|i| NewJob::new(if i % 3 == 0 { "rollup" } else { "ingest" }, &json!({})))
        .collect();
    let envs = [
        ("BOXCAR_TYPE", "rollup,ingest"),
        ("BOXCAR_CONCURRENCY", "4"),
        ("BOXCAR_POLL_MS", "50"),
        ("BOXCAR_MODE", "sleep:5"),
        ("BOXCAR_WAITS", "rollup:ingest"),
    ];
    let spans = run_guarded(&fx, jobs, &envs).await;
    let last_ingest_end = spans
        .iter()
        .filter(|s| s.0 == "ingest")
        .map(|s| s.2)
        .max()
        .unwrap();
    for r in spans.iter().filter(|s| s.0 == "rollup") {
        assert!(
            r.1 >= last_ingest_end,
            "rollup {r:?} started while ingest work (due since the start) was outstanding"
        );
    }
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_waits_for_holds_across_three_processes() {
    waits_for_across_processes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_waits_for_holds_across_three_processes() {
    waits_for_across_processes(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rate_pool_holds_across_three_processes() {
    rate_pool_across_processes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rate_pool_holds_across_three_processes() {
    rate_pool_across_processes(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_pool_guard_holds_across_three_processes() {
    pool_guard_across_processes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pool_guard_holds_across_three_processes() {
    pool_guard_across_processes(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_not_while_running_holds_across_three_processes() {
    not_while_running_across_processes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_not_while_running_holds_across_three_processes() {
    not_while_running_across_processes(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_scope_guard_holds_across_three_processes() {
    scope_guard_across_processes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_scope_guard_holds_across_three_processes() {
    scope_guard_across_processes(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_four_processes_drain_10k() {
    drain_four_processes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_four_processes_drain_10k() {
    drain_four_processes(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sigkill_recovery() {
    sigkill_recovery(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sigkill_recovery() {
    sigkill_recovery(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_cancel_for_scope_reaches_other_process() {
    cancel_reaches_other_process(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_cancel_for_scope_reaches_other_process() {
    cancel_reaches_other_process(Backend::Postgres).await;
}
