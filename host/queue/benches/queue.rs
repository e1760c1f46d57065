//! `cargo bench -p boxcar-queue`: the drain and latency workloads with a
//! native no-op handler on SQLite (temp file) and, when DATABASE_URL is set,
//! on Postgres (a fresh schema, dropped afterwards). Prints one JSON line
//! per run. `BOXCAR_BENCH_STORES=sqlite,postgres` selects stores. On
//! Postgres a third run, `latency-notify`, enqueues through a separate
//! connection pool so the worker is woken by LISTEN/NOTIFY alone.
//! `BOXCAR_BENCH_GUARDED=1` adds `drain-guarded` (100 scopes with
//! `serialize_by_scope`, all jobs in one pool). `BOXCAR_BENCH_TYPES=N`
//! adds `types` (one busy type drains with N types registered).
//! `BOXCAR_BENCH_CONCURRENCY=C` sets the drains' concurrency (default 16);
//! `BOXCAR_BENCH_DRAIN_ONLY=1` skips the latency runs.
//! `BOXCAR_BENCH_ENQUEUE=B` runs only `enqueue` (`add_many` in batches of
//! B, one transaction each); `BOXCAR_BENCH_JOBS=N` sets the jobs enqueued
//! and drained (default 20,000).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use boxcar_queue::bench::{
    drain, drain_guarded, enqueue, latency, latency_notify, types, BenchConfig, NoopHandler,
    TypesConfig,
};
use boxcar_queue::store::postgres::PostgresStore;
use boxcar_queue::store::sqlite::SqliteStore;
use boxcar_queue::JobStore;

async fn run(store: Arc<dyn JobStore>, producer: Option<Arc<dyn JobStore>>, cfg: &BenchConfig) {
    if let Some(batch) = std::env::var("BOXCAR_BENCH_ENQUEUE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let cfg = BenchConfig {
            batch_size: batch,
            ..cfg.clone()
        };
        match enqueue(store.clone(), &cfg).await {
            Ok(r) => println!("{}", r.to_json_line()),
            Err(e) => eprintln!("enqueue on {} failed: {e}", store.backend()),
        }
        return;
    }
    let h: Arc<dyn boxcar_queue::Handler> = Arc::new(NoopHandler);
    match drain(store.clone(), h.clone(), cfg).await {
        Ok(r) => println!("{}", r.to_json_line()),
        Err(e) => eprintln!("drain on {} failed: {e}", store.backend()),
    }
    if std::env::var("BOXCAR_BENCH_GUARDED").is_ok() {
        match drain_guarded(store.clone(), h.clone(), cfg).await {
            Ok(r) => println!("{}", r.to_json_line()),
            Err(e) => eprintln!("drain-guarded on {} failed: {e}", store.backend()),
        }
    }
    if let Some(n) = std::env::var("BOXCAR_BENCH_TYPES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let t = TypesConfig {
            types: n,
            ..TypesConfig::default()
        };
        match types(store.clone(), h.clone(), cfg, &t).await {
            Ok(r) => println!("{}", r.to_json_line()),
            Err(e) => eprintln!("types on {} failed: {e}", store.backend()),
        }
    }
    if std::env::var("BOXCAR_BENCH_DRAIN_ONLY").is_ok() {
        return;
    }
    match latency(store.clone(), h.clone(), cfg).await {
        Ok(r) => println!("{}", r.to_json_line()),
        Err(e) => eprintln!("latency on {} failed: {e}", store.backend()),
    }
    if let Some(producer) = producer {
        match latency_notify(store.clone(), producer, h, cfg).await {
            Ok(r) => println!("{}", r.to_json_line()),
            Err(e) => eprintln!("latency-notify on {} failed: {e}", store.backend()),
        }
    }
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut cfg = BenchConfig::default();
    if let Some(c) = std::env::var("BOXCAR_BENCH_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cfg.drain_concurrency = c;
    }
    if let Some(n) = std::env::var("BOXCAR_BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cfg.drain_jobs = n;
    }
    let stores = std::env::var("BOXCAR_BENCH_STORES").unwrap_or_else(|_| "sqlite,postgres".into());
    if stores.contains("sqlite") {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.db");
        let store = SqliteStore::open(&path.display().to_string())
            .await
            .unwrap();
        store.migrate().await.unwrap();
        run(Arc::new(store), None, &cfg).await;
    }
    if stores.contains("postgres") {
        match std::env::var("DATABASE_URL") {
            Ok(url) => {
                let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
                let store = Arc::new(PostgresStore::connect(&url, &schema).await.unwrap());
                store.migrate().await.unwrap();
                let producer = Arc::new(PostgresStore::connect(&url, &schema).await.unwrap());
                run(store.clone(), Some(producer), &cfg).await;
                store.drop_schema().await.unwrap();
            }
            Err(_) => eprintln!("skipping Postgres benchmark: DATABASE_URL is not set"),
        }
    }
}
