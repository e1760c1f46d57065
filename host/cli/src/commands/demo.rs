//! `boxcar demo`: the whole system on a fresh temporary SQLite database.
//!
//! Deploys bundled example handlers by writing them into a handlers
//! directory (exactly as an operator would), starts an in-process host,
//! enqueues a mix — successes, a flaky job that retries, a runaway `spin`
//! job that is aborted at its timeout, and scoped jobs that must not overlap
//! — prints every lifecycle event as it happens, and ends with a summary
//! that checks what it claims (e.g. that scoped runs never overlapped).

use std::{sync::Arc, time::Duration};

use boxcar_queue::{
    connect, Job, JobStatus, LifecycleEvent, LifecycleObserver, NewJob, Queue, QueueOptions,
    Registry, Scope, Worker, WorkerOptions,
};
use boxcar_sandbox::Sandbox;
use chrono::Utc;
use serde_json::json;

use crate::{
    cli::DemoArgs,
    deploy::Deployer,
    error::usage,
    output::{clip, table},
    sandbox_glue,
};

/// The demo gives up (and says so) after this long.
const DEMO_TIMEOUT: Duration = Duration::from_secs(50);

/// Manifests the demo writes: (file name, example module, manifest text).
const HANDLERS: &[(&str, &str, &str)] = &[
    ("echo", "echo", "[handler]\njob_type = \"echo\"\nconcurrency = 4\ntimeout = \"10s\"\n"),
    ("flaky", "flaky", "[handler]\njob_type = \"flaky\"\nconcurrency = 2\ntimeout = \"10s\"\nmax_attempts = 5\n"),
    (
        "spin",
        "spin",
        "[handler]\njob_type = \"spin\"\nconcurrency = 1\ntimeout = \"1s\"\nmax_attempts = 1\n",
    ),
    (
        "account-sync",
        "sleep",
        "[handler]\njob_type = \"account.sync\"\nconcurrency = 4\ntimeout = \"10s\"\nserialize_by_scope = true\n",
    ),
];

struct Printer;

impl LifecycleObserver for Printer {
    fn on_transition(&self, event: &LifecycleEvent) {
        let scope = event
            .scope
            .as_ref()
            .map(|s| format!(" [{s}]"))
            .unwrap_or_default();
        let error = event
            .error
            .as_deref()
            .map(|e| format!(" — {}", clip(e, 70)))
            .unwrap_or_default();
        let took = event
            .duration
            .map(|d| format!(" ({} ms)", d.as_millis()))
            .unwrap_or_default();
        println!(
            "  {}  {:<16} {:<13} {}{} attempt {}{}{}",
            Utc::now().format("%H:%M:%S%.3f"),
            event.outcome.as_str(),
            event.job_type,
            short(&event.job_id),
            scope,
            event.attempts,
            took,
            error
        );
    }
}

fn short(id: &str) -> &str {
    id.get(id.len().saturating_sub(8)..).unwrap_or(id)
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("boxcar-demo-").tempdir()?;
    let handlers = dir.path().join("handlers");
    std::fs::create_dir_all(&handlers)?;
    let db = format!("sqlite://{}", dir.path().join("demo.db").display());
    println!("boxcar demo — database {db}");

    for (name, example, manifest) in HANDLERS {
        let component = boxcar_examples::get(example)
            .ok_or_else(|| usage(format!("example `{example}` is missing from this build")))?
            .component()?;
        super::examples::write_atomically(&handlers.join(format!("{name}.wasm")), component)?;
        super::examples::write_atomically(
            &handlers.join(format!("{name}.toml")),
            manifest.as_bytes(),
        )?;
    }

    let queue = Queue::new(connect(&db).await?, QueueOptions::default())?;
    queue.observe(Arc::new(Printer));
    let registry = Registry::new();
    let settings = crate::config::Config::default().sandbox;
    let sandbox = Arc::new(Sandbox::new(sandbox_glue::sandbox_config(&settings))?);
    let deployer = Deployer::new(
        handlers.clone(),
        sandbox,
        registry.clone(),
        queue.clone(),
        crate::deploy::compile::CompileBudget::from_settings(&settings),
    );
    println!("deploying handlers dropped into {} …", handlers.display());
    deployer.reconcile().await;
    for pair in deployer.deployed() {
        println!(
            "  deployed {:<13} → {:<13} digest {}",
            pair.name,
            pair.job_types.join(","),
            &pair.digest[..12]
        );
    }
    for rejection in deployer.rejections() {
        println!("  REJECTED {}: {}", rejection.name, rejection.reason);
    }
    let worker = Worker::start(queue.clone(), registry.clone(), {
        let mut opts = WorkerOptions::default();
        opts.poll_interval = Duration::from_millis(100);
        opts.base_backoff = Duration::from_millis(200);
        opts.max_backoff = Duration::from_secs(2);
        opts
    })?;

    println!("\nenqueueing: 4 echo, 1 flaky (succeeds on attempt 3), 1 runaway spin (1 s timeout), 6 account.sync over 2 scopes\n");
    let mut ids = Vec::new();
    for n in 1..=4 {
        ids.push(
            queue
                .add(NewJob::new("echo", &json!({"greeting": "hello", "n": n})))
                .await?
                .id,
        );
    }
    ids.push(
        queue
            .add(NewJob::new(
                "flaky",
                &json!({"succeed_on": 3, "retry_after_ms": 300}),
            ))
            .await?
            .id,
    );
    ids.push(queue.add(NewJob::new("spin", &json!({}))).await?.id);
    for n in 0..6 {
        let scope = Scope::new("account", if n % 2 == 0 { "alice" } else { "bob" });
        ids.push(
            queue
                .add(NewJob::new("account.sync", &json!({"ms": 250})).scope(scope))
                .await?
                .id,
        );
    }

    let deadline = tokio::time::Instant::now() + DEMO_TIMEOUT;
    let mut finished = Vec::new();
    for id in &ids {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        finished.push(queue.wait(id, left).await?);
    }
    worker.shutdown().await;
    // Observers run on their own thread; let the last events print first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    print_summary(&queue, &finished).await?;
    if args.keep {
        let kept = dir.keep();
        println!("\nkept {}", kept.display());
    }
    Ok(())
}

async fn print_summary(queue: &Queue, jobs: &[Job]) -> anyhow::Result<()> {
    println!("\nsummary");
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let ran_ms = match (j.started_at, j.finished_at) {
                (Some(s), Some(f)) => format!("{}", (f - s).num_milliseconds()),
                _ => String::new(),
            };
            vec![
                short(&j.id).to_string(),
                j.job_type.clone(),
                j.scope
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                j.status.as_str().to_string(),
                format!("{}/{}", j.attempts, j.max_attempts),
                ran_ms,
                clip(
                    j.result
                        .as_deref()
                        .or(j.last_error.as_deref())
                        .unwrap_or(""),
                    50,
                ),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "JOB",
                "TYPE",
                "SCOPE",
                "STATUS",
                "ATTEMPTS",
                "LAST RUN MS",
                "RESULT / ERROR"
            ],
            &rows
        )
    );

    let succeeded = jobs
        .iter()
        .filter(|j| j.status == JobStatus::Succeeded)
        .count();
    let retried = jobs
        .iter()
        .filter(|j| j.attempts > 1 && j.status == JobStatus::Succeeded)
        .count();
    let aborted = jobs
        .iter()
        .filter(|j| {
            j.last_error
                .as_deref()
                .is_some_and(|e| e.contains("timed out"))
        })
        .count();
    let scoped: Vec<&Job> = jobs
        .iter()
        .filter(|j| j.job_type == "account.sync")
        .collect();
    let overlaps = overlapping_pairs(&scoped);
    let counts = queue.count_by_status().await?;
    println!(
        "\nsucceeded {succeeded} · retried then succeeded {retried} · aborted at timeout {aborted} · serialized {} scoped jobs with {overlaps} overlaps",
        scoped.len()
    );
    println!(
        "store counts: pending {} running {} succeeded {} failed {} cancelled {}",
        counts.pending, counts.running, counts.succeeded, counts.failed, counts.cancelled
    );
    if overlaps > 0 {
        anyhow::bail!("serialize_by_scope was violated: {overlaps} overlapping runs in one scope");
    }
    Ok(())
}

fn overlapping_pairs(jobs: &[&Job]) -> usize {
    let mut overlaps = 0;
    for (i, a) in jobs.iter().enumerate() {
        for b in &jobs[i + 1..] {
            if a.scope != b.scope {
                continue;
            }
            if let (Some(a_start), Some(a_end), Some(b_start), Some(b_end)) =
                (a.started_at, a.finished_at, b.started_at, b.finished_at)
            {
                if a_start < b_end && b_start < a_end {
                    overlaps += 1;
                }
            }
        }
    }
    overlaps
}
