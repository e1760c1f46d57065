//! Test support: a worker process for the multi-process tests. Configured by
//! environment variables; appends `start|end|cancelled <job-id> <pid> <µs>` lines
//! to `BOXCAR_LOG` (one `write` per line, `O_APPEND`, so lines from several
//! processes never interleave). Prints `ready` once the worker runs, and
//! runs until killed.
//!
//! - `BOXCAR_URL` store URL (required)
//! - `BOXCAR_TYPE` job type (default `mp`)
//! - `BOXCAR_CONCURRENCY` (default 8)
//! - `BOXCAR_MODE` `noop` | `sleep:<ms>` | `until-cancel` (default `noop`)
//! - `BOXCAR_LEASE_MS` renewed lease length (default: timeout + grace)
//! - `BOXCAR_POLL_MS` poll interval (default 500)
//! - `BOXCAR_SERIALIZE_BY_SCOPE=1` declares the scope guard
//! - `BOXCAR_TYPE` may list several types: `a,b,c`
//! - `BOXCAR_NWR` `a:b,b:a` declares `not_while_running` (type:other)
//! - `BOXCAR_POOL` `4:a=2,b=1` declares pool `p` of concurrency 4 with costs
//!   (`-:a=1` declares no concurrency)
//! - `BOXCAR_POOL_RATE` `30` gives pool `p` a budget of 30 starts per minute
//! - `BOXCAR_WAITS` `a:b` declares `waits_for` (type:other)

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use boxcar_queue::{
    connect, Handler, HandlerSettings, JobContext, JobRun, Outcome, PoolConfig, Queue,
    QueueOptions, Registry, Worker, WorkerOptions,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use parking_lot::Mutex;

#[derive(Clone)]
enum Mode {
    Noop,
    Sleep(Duration),
    UntilCancel,
}

struct LogHandler {
    log: Arc<Mutex<std::fs::File>>,
    mode: Mode,
}

fn line(log: &Mutex<std::fs::File>, what: &str, id: &str) {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    let text = format!("{what} {id} {} {micros}\n", std::process::id());
    let mut f = log.lock();
    if let Err(e) = f.write_all(text.as_bytes()) {
        eprintln!("testworker: cannot write the log: {e}");
    }
}

impl Handler for LogHandler {
    fn handle(&self, job: JobRun, ctx: JobContext) -> BoxFuture<'static, Outcome> {
        let log = self.log.clone();
        let mode = self.mode.clone();
        async move {
            line(&log, "start", &job.id);
            match mode {
                Mode::Noop => {}
                Mode::Sleep(d) => {
                    tokio::select! {
                        () = tokio::time::sleep(d) => {}
                        () = ctx.cancel.cancelled() => {
                            line(&log, "cancelled", &job.id);
                            return Outcome::Cancelled;
                        }
                    }
                }
                Mode::UntilCancel => {
                    ctx.cancel.cancelled().await;
                    line(&log, "cancelled", &job.id);
                    return Outcome::Cancelled;
                }
            }
            line(&log, "end", &job.id);
            Outcome::Succeeded { result: None }
        }
        .boxed()
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn num(name: &str, default: u64) -> u64 {
    env(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let Some(url) = env("BOXCAR_URL") else {
        eprintln!("testworker: set BOXCAR_URL");
        std::process::exit(2);
    };
    let Some(log_path) = env("BOXCAR_LOG") else {
        eprintln!("testworker: set BOXCAR_LOG");
        std::process::exit(2);
    };
    let job_type = env("BOXCAR_TYPE").unwrap_or_else(|| "mp".into());
    let mode = match env("BOXCAR_MODE").as_deref() {
        None | Some("noop") => Mode::Noop,
        Some("until-cancel") => Mode::UntilCancel,
        Some(m) => match m.strip_prefix("sleep:").and_then(|ms| ms.parse().ok()) {
            Some(ms) => Mode::Sleep(Duration::from_millis(ms)),
            None => {
                eprintln!("testworker: unknown BOXCAR_MODE `{m}`");
                std::process::exit(2);
            }
        },
    };
    let log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
    {
        Ok(f) => Arc::new(Mutex::new(f)),
        Err(e) => {
            eprintln!("testworker: cannot open {log_path}: {e}");
            std::process::exit(2);
        }
    };
    let store = match connect(&url).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("testworker: {e}");
            std::process::exit(2);
        }
    };
    let queue = match Queue::new(store, QueueOptions::default()) {
        Ok(q) => q,
        Err(e) => {
            eprintln!("testworker: {e}");
            std::process::exit(2);
        }
    };
    let registry = Registry::new();
    let nwr: Vec<(String, String)> = env("BOXCAR_NWR")
        .unwrap_or_default()
        .split(',')
        .filter_map(|p| p.split_once(':'))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let waits: Vec<(String, String)> = env("BOXCAR_WAITS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|p| p.split_once(':'))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let handler: Arc<dyn Handler> = Arc::new(LogHandler { log, mode });
    for t in job_type.split(',') {
        let settings = {
            let mut settings = HandlerSettings::default();
            settings.concurrency = u32::try_from(num("BOXCAR_CONCURRENCY", 8)).unwrap_or(8);
            settings.timeout = Duration::from_secs(120);
            settings.serialize_by_scope = env("BOXCAR_SERIALIZE_BY_SCOPE").is_some();
            settings.not_while_running = nwr
                .iter()
                .filter(|(a, _)| a == t)
                .map(|(_, b)| b.clone())
                .collect();
            settings.waits_for = waits
                .iter()
                .filter(|(a, _)| a == t)
                .map(|(_, b)| b.clone())
                .collect();
            settings.lease_duration =
                env("BOXCAR_LEASE_MS").map(|_| Duration::from_millis(num("BOXCAR_LEASE_MS", 1000)));
            settings
        };
        if let Err(e) = registry.register(t, handler.clone(), settings) {
            eprintln!("testworker: {e}");
            std::process::exit(2);
        }
    }
    if let Some(spec) = env("BOXCAR_POOL") {
        let (limit, members) = spec.split_once(':').unwrap_or(("1", ""));
        let mut pool = {
            let mut pool = PoolConfig::default();
            pool.name = "p".into();
            pool.concurrency = limit.parse().ok();
            pool.rate_per_minute = env("BOXCAR_POOL_RATE").and_then(|r| r.parse().ok());
            pool
        };
        for m in members.split(',').filter_map(|m| m.split_once('=')) {
            pool.types.push(m.0.to_string());
            pool.costs.insert(m.0.to_string(), m.1.parse().unwrap_or(1));
        }
        if let Err(e) = registry.set_pools(vec![pool]) {
            eprintln!("testworker: {e}");
            std::process::exit(2);
        }
    }
    let opts = {
        let mut opts = WorkerOptions::default();
        opts.poll_interval = Duration::from_millis(num("BOXCAR_POLL_MS", 500));
        opts
    };
    let _worker = match Worker::start(queue, registry, opts) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("testworker: {e}");
            std::process::exit(2);
        }
    };
    println!("ready");
    let _ = std::io::stdout().flush();
    futures::future::pending::<()>().await;
}
