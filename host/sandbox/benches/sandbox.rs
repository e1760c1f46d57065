//! Sandbox benchmark (`cargo bench -p boxcar-sandbox`): per-job cost, epoch
//! overhead and abort latency. Prints figures; see the crate README.
//!
//! Optional argument: a scale factor for the run counts (default 1.0), e.g.
//! `cargo bench -p boxcar-sandbox -- 0.1` for a quick look; `per-job` runs
//! only the per-job figures; `polyglot` only the Rust / Python / JavaScript
//! echo comparison (deploy-time compile and per-job cost, then the
//! interpreters again with other `memory_keep_resident` values; the Python
//! and JS rows need their example handlers built, see `boxcar-examples`).
//! Naming `echo`, `py.echo` or `js.echo` restricts it to those.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use boxcar_queue::testing::{job_run, RecordingServices};
use boxcar_queue::{JobContext, JobServices, Outcome};
use boxcar_sandbox::{Capabilities, HandlerLimits, LoadedHandler, Sandbox, SandboxConfig};
use tokio_util::sync::CancellationToken;

fn ctx(services: &Arc<dyn JobServices>) -> JobContext {
    JobContext {
        cancel: CancellationToken::new(),
        services: Arc::clone(services),
        record: Arc::new(boxcar_queue::RunRecord::new("job-1", 1)),
        lease: boxcar_queue::LeaseClock::unbounded(),
    }
}

fn sandbox(pooling: bool, epoch: bool) -> Sandbox {
    Sandbox::new(SandboxConfig {
        pooling,
        epoch_interruption: epoch,
        cache_dir: Some(std::env::temp_dir().join("boxcar-bench-cache")),
        ..SandboxConfig::default()
    })
    .expect("sandbox")
}

fn load(sandbox: &Sandbox, name: &str) -> Arc<LoadedHandler> {
    let bytes = std::fs::read(boxcar_examples::path(name).expect("example exists")).expect("read");
    sandbox
        .load(&bytes, HandlerLimits::default(), Capabilities::default())
        .expect("load")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(mut v: Vec<Duration>) -> String {
    v.sort();
    format!(
        "median {:>8.1?}  p90 {:>8.1?}  p99 {:>8.1?}  max {:>8.1?}  (n={})",
        percentile(&v, 0.5),
        percentile(&v, 0.9),
        percentile(&v, 0.99),
        v[v.len() - 1],
        v.len()
    )
}

async fn per_job(pooling: bool, runs: usize, services: &Arc<dyn JobServices>) {
    let sb = sandbox(pooling, true);
    let echo = load(&sb, "echo");
    let payload = r#"{"hello":"world"}"#;
    for _ in 0..200 {
        let _ = echo
            .run(
                job_run("echo", payload, Duration::from_secs(30)),
                ctx(services),
            )
            .await;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let j = job_run("echo", payload, Duration::from_secs(30));
        let c = ctx(services);
        let t = Instant::now();
        let outcome = echo.run(j, c).await;
        times.push(t.elapsed());
        assert!(matches!(outcome, Outcome::Succeeded { .. }), "{outcome:?}");
    }
    let label = if pooling { "pooling  " } else { "on-demand" };
    println!("echo instantiate+call, {label}: {}", summary(times));
}

/// `echo` granted every capability: env, a read-only dir, an HTTP origin
/// (unused) and scratch, to show what grants cost per job.
async fn per_job_with_capabilities(runs: usize, services: &Arc<dyn JobServices>) {
    let sb = sandbox(true, true);
    let bytes = boxcar_examples::bytes("echo");
    let caps = Capabilities {
        http: vec![boxcar_sandbox::HttpOrigin::parse("http://127.0.0.1:9").expect("origin")],
        dirs: vec![boxcar_sandbox::DirGrant {
            host: std::env::temp_dir(),
            guest: "/data".into(),
            mode: boxcar_sandbox::DirMode::ReadOnly,
        }],
        scratch: Some(1 << 20),
        env: [
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "2".to_string()),
        ]
        .into(),
    };
    let echo = sb
        .load(&bytes, HandlerLimits::default(), caps)
        .expect("load");
    let payload = r#"{"hello":"world"}"#;
    let mut times = Vec::with_capacity(runs);
    for i in 0..runs + 200 {
        let j = job_run("echo", payload, Duration::from_secs(30));
        let c = ctx(services);
        let t = Instant::now();
        let outcome = echo.run(j, c).await;
        if i >= 200 {
            times.push(t.elapsed());
        }
        assert!(matches!(outcome, Outcome::Succeeded { .. }), "{outcome:?}");
    }
    println!(
        "echo + env, ro dir, http, scratch, pooling: {}",
        summary(times)
    );
}

async fn epoch_overhead(services: &Arc<dyn JobServices>, rounds: usize) {
    let payload = r#"{"iterations": 300000000}"#;
    let mut results = Vec::new();
    for epoch in [false, true] {
        let sb = sandbox(false, epoch);
        let compute = load(&sb, "compute");
        let mut times = Vec::new();
        for _ in 0..rounds {
            let t = Instant::now();
            let outcome = compute
                .run(
                    job_run("compute", payload, Duration::from_secs(600)),
                    ctx(services),
                )
                .await;
            times.push(t.elapsed());
            assert!(matches!(outcome, Outcome::Succeeded { .. }), "{outcome:?}");
        }
        times.sort();
        results.push(percentile(&times, 0.5));
    }
    let (off, on) = (results[0], results[1]);
    println!(
        "CPU-bound guest (3e8 xorshift rounds), median of {rounds}: epoch off {off:.1?}, on {on:.1?}, slowdown {:+.1}%",
        (on.as_secs_f64() / off.as_secs_f64() - 1.0) * 100.0
    );
}

async fn abort_latency(services: &Arc<dyn JobServices>, runs: usize) {
    let sb = sandbox(true, true);
    let spin = load(&sb, "spin");
    let timeout = Duration::from_millis(100);
    let mut overshoot = Vec::with_capacity(runs);
    for _ in 0..runs {
        let j = job_run("spin", "{}", timeout);
        let deadline = Instant::now()
            + (j.deadline - chrono::Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO);
        let outcome = spin.run(j, ctx(services)).await;
        overshoot.push(Instant::now().saturating_duration_since(deadline));
        assert_eq!(outcome, Outcome::TimedOut);
    }
    println!(
        "spin abort overshoot past a 100 ms deadline (1 ms tick): {}",
        summary(overshoot)
    );
}

/// Minor page faults of this process so far (`/proc/self/stat` field 10);
/// 0 where that file does not exist.
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the parenthesised command name, which may hold spaces.
            let rest = &stat[stat.rfind(')')? + 2..];
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Deploy (compile, then load the compiled code from the cache) and per-job
/// cost of the `names` echo handlers, with `keep_resident` bytes of linear
/// memory reset in place per pool slot. `cache` is shared by calls: a
/// module's first call compiles, later ones report a cache hit.
async fn polyglot(
    runs: usize,
    services: &Arc<dyn JobServices>,
    cache: &std::path::Path,
    keep_resident: usize,
    names: &[&str],
) {
    println!("memory_keep_resident = {} MiB", keep_resident >> 20);
    let limits = HandlerLimits {
        memory: 256 << 20,
        ..HandlerLimits::default()
    };
    let sb = Sandbox::new(SandboxConfig {
        cache_dir: Some(cache.to_path_buf()),
        memory_keep_resident: keep_resident,
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    for &name in names {
        if !boxcar_examples::has(name) {
            println!(
                "{name:<8} not built (its toolchain was missing when boxcar-examples was built): skipped"
            );
            continue;
        }
        let bytes = boxcar_examples::bytes(name);
        let (_, first) = sb
            .load_with_report(&bytes, limits.clone(), Capabilities::default())
            .expect("load");
        let (handler, cached) = sb
            .load_with_report(&bytes, limits.clone(), Capabilities::default())
            .expect("cached load");
        let how = if first.cache_hit {
            "cache hit"
        } else {
            "compile"
        };
        println!(
            "{name:<8} {:>5.1} MB  deploy: {how} {:>8.1?}, then cached load {:>7.1?}",
            bytes.len() as f64 / 1e6,
            first.compile_time,
            cached.compile_time
        );
        let payload = r#"{"hello":"world"}"#;
        for _ in 0..50 {
            let _ = handler
                .run(
                    job_run(name, payload, Duration::from_secs(30)),
                    ctx(services),
                )
                .await;
        }
        let faults_before = minor_faults();
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let j = job_run(name, payload, Duration::from_secs(30));
            let c = ctx(services);
            let t = Instant::now();
            let outcome = handler.run(j, c).await;
            times.push(t.elapsed());
            assert!(matches!(outcome, Outcome::Succeeded { .. }), "{outcome:?}");
        }
        let faults = minor_faults().saturating_sub(faults_before) as f64 / runs as f64;
        println!(
            "{name:<8} instantiate+call {}  page faults/job {faults:.0}",
            summary(times)
        );
    }
}

fn main() {
    let scale: f64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1.0);
    let only_per_job = std::env::args().any(|a| a == "per-job");
    let only_polyglot = std::env::args().any(|a| a == "polyglot");
    let n = |base: usize| ((base as f64 * scale) as usize).max(3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let services: Arc<dyn JobServices> = Arc::new(RecordingServices::default());
    rt.block_on(async {
        let all_echoes = ["echo", "py.echo", "js.echo"];
        let picked: Vec<&str> = all_echoes
            .iter()
            .copied()
            .filter(|name| std::env::args().any(|a| a == *name))
            .collect();
        let echoes: Vec<&str> = if picked.is_empty() {
            all_echoes.to_vec()
        } else {
            picked
        };
        let default_keep = SandboxConfig::default().memory_keep_resident;
        let cache = tempfile::tempdir().expect("temp dir for the compile cache");
        if only_polyglot {
            polyglot(n(1_000), &services, cache.path(), default_keep, &echoes).await;
            let interpreters: Vec<&str> = echoes.iter().copied().filter(|n| *n != "echo").collect();
            for keep in [0, 8 << 20, 128 << 20] {
                polyglot(n(1_000), &services, cache.path(), keep, &interpreters).await;
            }
            return;
        }
        per_job(true, n(10_000), &services).await;
        per_job(false, n(10_000), &services).await;
        per_job_with_capabilities(n(10_000), &services).await;
        if !only_per_job {
            polyglot(n(1_000), &services, cache.path(), default_keep, &echoes).await;
            epoch_overhead(&services, n(5)).await;
            abort_latency(&services, n(100)).await;
        }
    });
}
