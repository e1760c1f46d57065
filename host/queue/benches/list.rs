//! `cargo bench -p boxcar-queue --bench list`: the jobs list over a large
//! store. Fills a fresh store with `BOXCAR_BENCH_LIST_JOBS` jobs (default
//! 1,000,000) by direct batched inserts (the queue's enqueue path would
//! take far longer and is measured by the `queue` bench), spread over
//! eight job types (skewed), five statuses (mostly succeeded), 1,000 scopes
//! (half the jobs) and 100 parents of 200 children, ten jobs per
//! millisecond (so sort keys tie); the first job is the parent the `parent` filter lists. Then, for each filter, it times the
//! first page, a middle page and the last page (both reached by cursor)
//! of 100 jobs, oldest first and newest first, through the store's `find`;
//! and for comparison the middle page reached by offset (not judged).
//! Prints one line per case (p50 and max over the timed runs, in ms) and
//! exits non-zero if any judged case's max is 100 ms or more.
//!
//! SQLite runs on a temp file, as boxcar leaves it (no `ANALYZE`);
//! Postgres, when `DATABASE_URL` is set, on its own schema, analyzed after
//! the fill (as autovacuum would) and dropped afterwards.
//! `BOXCAR_BENCH_STORES=sqlite,postgres` selects stores.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use boxcar_queue::store::postgres::PostgresStore;
use boxcar_queue::store::sqlite::SqliteStore;
use boxcar_queue::{JobCursor, JobFilter, JobStatus, JobStore, Scope};
use chrono::{DateTime, TimeZone, Utc};
use futures::FutureExt;

const PAGE: u32 = 100;
const BUDGET: Duration = Duration::from_millis(100);
const RUNS: usize = 15;
const TYPES: [&str; 8] = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"];

/// One generated job's filterable attributes.
struct Row {
    id: String,
    job_type: &'static str,
    status: JobStatus,
    scope: Option<u32>,
    parent: Option<String>,
    created_at: DateTime<Utc>,
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn row(i: usize, rng: &mut Rng, parents: &mut Vec<String>) -> Row {
    let base = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let created_at = base + chrono::Duration::milliseconds((i / 10) as i64);
    let r = rng.next();
    let job_type = TYPES[match r % 100 {
        0..=39 => 0,
        40..=64 => 1,
        65..=79 => 2,
        80..=89 => 3,
        90..=94 => 4,
        95..=97 => 5,
        98 => 6,
        _ => 7,
    }];
    let status = match (r >> 8) % 100 {
        0..=79 => JobStatus::Succeeded,
        80..=89 => JobStatus::Pending,
        90..=94 => JobStatus::Failed,
        95..=97 => JobStatus::Cancelled,
        _ => JobStatus::Running,
    };
    let scope = (r >> 16)
        .is_multiple_of(2)
        .then_some(((r >> 20) % 1000) as u32);
    let id = uuid::Uuid::now_v7().to_string();
    let parent = if i.is_multiple_of(10_000) {
        parents.push(id.clone());
        None
    } else if i % 50 == 1 {
        parents.last().cloned()
    } else {
        None
    };
    Row {
        id,
        job_type,
        status,
        scope,
        parent,
        created_at,
    }
}

/// A filter of the list and which generated rows it matches.
struct Case {
    name: String,
    filter: JobFilter,
    matches: Box<dyn Fn(&Row) -> bool>,
    count: usize,
}

fn case(name: &str, filter: JobFilter, matches: impl Fn(&Row) -> bool + 'static) -> Case {
    Case {
        name: name.into(),
        filter,
        matches: Box::new(matches),
        count: 0,
    }
}

fn cases(parent: &str) -> Vec<Case> {
    let mut out = vec![case("none", JobFilter::default(), |_| true)];
    let mut f = JobFilter::default();
    f.statuses = vec![JobStatus::Failed];
    out.push(case("status=failed", f, |r| r.status == JobStatus::Failed));
    let mut f = JobFilter::default();
    f.statuses = vec![JobStatus::Pending, JobStatus::Running];
    out.push(case("status=pending,running", f, |r| {
        matches!(r.status, JobStatus::Pending | JobStatus::Running)
    }));
    let mut f = JobFilter::default();
    f.types = vec!["t0".into()];
    out.push(case("type=t0", f, |r| r.job_type == "t0"));
    let mut f = JobFilter::default();
    f.types = vec!["t7".into()];
    out.push(case("type=t7", f, |r| r.job_type == "t7"));
    let mut f = JobFilter::default();
    f.types = vec!["t3".into(), "t6".into()];
    out.push(case("type=t3,t6", f, |r| matches!(r.job_type, "t3" | "t6")));
    let mut f = JobFilter::default();
    f.types = vec!["t1".into()];
    f.statuses = vec![JobStatus::Failed];
    out.push(case("type=t1+status=failed", f, |r| {
        r.job_type == "t1" && r.status == JobStatus::Failed
    }));
    let mut f = JobFilter::default();
    f.scope = Some(Scope::new("acct", "7"));
    out.push(case("scope", f, |r| r.scope == Some(7)));
    let mut f = JobFilter::default();
    f.scope = Some(Scope::new("acct", "7"));
    f.statuses = vec![JobStatus::Succeeded];
    out.push(case("scope+status", f, |r| {
        r.scope == Some(7) && r.status == JobStatus::Succeeded
    }));
    let mut f = JobFilter::default();
    f.parent_id = Some(parent.to_string());
    let p = parent.to_string();
    out.push(case("parent", f, move |r| r.parent.as_deref() == Some(&p)));
    out
}

/// Inserts `rows` into `table` in one multi-row statement.
async fn insert(store: &Store, table: &str, rows: &[Row]) {
    let mut sql = format!(
        "INSERT INTO {table} (id, job_type, payload, scope_type, scope_id, status, run_at, \
         max_attempts, attempts, parent_id, finished_at, created_at, updated_at) VALUES "
    );
    for (n, _) in rows.iter().enumerate() {
        let b = n * 9;
        if n > 0 {
            sql.push(',');
        }
        sql.push_str(&format!(
            "(${}, ${}, '{{}}', ${}, ${}, ${}, ${}, 3, 1, ${}, ${}, ${}, ${})",
            b + 1,
            b + 2,
            b + 3,
            b + 4,
            b + 5,
            b + 6,
            b + 7,
            b + 8,
            b + 6,
            b + 9,
        ));
    }
    macro_rules! bind_rows {
        ($q:expr, $time:expr) => {{
            let mut q = $q;
            for r in rows {
                let finished = r.status.is_terminal().then(|| $time(r.created_at));
                q = q
                    .bind(r.id.clone())
                    .bind(r.job_type)
                    .bind(r.scope.map(|_| "acct"))
                    .bind(r.scope.map(|s| s.to_string()))
                    .bind(r.status.as_str())
                    .bind($time(r.created_at))
                    .bind(r.parent.clone())
                    .bind(finished)
                    .bind($time(r.created_at));
            }
            q
        }};
    }
    match store {
        Store::Sqlite(s) => {
            bind_rows!(sqlx::query(&sql), |t: DateTime<Utc>| t.timestamp_millis())
                .execute(s.pool())
                .await
                .unwrap();
        }
        Store::Postgres(s) => {
            bind_rows!(sqlx::query(&sql), |t: DateTime<Utc>| t)
                .execute(s.pool())
                .await
                .unwrap();
        }
    }
}

enum Store {
    Sqlite(Arc<SqliteStore>),
    Postgres(Arc<PostgresStore>),
}

impl Store {
    fn dyn_store(&self) -> Arc<dyn JobStore> {
        match self {
            Store::Sqlite(s) => s.clone(),
            Store::Postgres(s) => s.clone(),
        }
    }
    fn table(&self) -> String {
        match self {
            Store::Sqlite(_) => "boxcar_jobs".into(),
            Store::Postgres(s) => format!("{}.jobs", s.schema()),
        }
    }
}

/// Fills the store; returns the filters with their match counts.
async fn fill(store: &Store, n: usize) -> Vec<Case> {
    let started = Instant::now();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut parents = Vec::new();
    let mut cases: Option<Vec<Case>> = None;
    let table = store.table();
    let mut batch = Vec::with_capacity(1000);
    for i in 0..n {
        let r = row(i, &mut rng, &mut parents);
        if cases.is_none() {
            cases = Some(self::cases(&r.id));
        }
        for c in cases.iter_mut().flatten() {
            if (c.matches)(&r) {
                c.count += 1;
            }
        }
        batch.push(r);
        if batch.len() == 1000 || i + 1 == n {
            insert(store, &table, &batch).await;
            batch.clear();
        }
    }
    if let Store::Postgres(s) = store {
        sqlx::query(&format!("ANALYZE {table}"))
            .execute(s.pool())
            .await
            .unwrap();
    }
    eprintln!(
        "filled {n} jobs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    cases.unwrap_or_default()
}

/// p50 and max of `RUNS` runs of `find(f)` (after one untimed run), and
/// the page's length.
async fn time(store: &Arc<dyn JobStore>, f: &JobFilter) -> (f64, f64, usize) {
    let len = store.find(f).await.unwrap().len();
    let mut ms: Vec<f64> = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let t = Instant::now();
        let page = store.find(f).await.unwrap();
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(page.len(), len);
    }
    ms.sort_by(f64::total_cmp);
    (ms[RUNS / 2], ms[RUNS - 1], len)
}

/// The cursor of the job just before position `at` of `f`'s list (found
/// by offset: setup, not timed).
async fn cursor_before(store: &Arc<dyn JobStore>, f: &JobFilter, at: usize) -> Option<JobCursor> {
    if at == 0 {
        return None;
    }
    let mut g = f.clone();
    g.offset = Some(u32::try_from(at - 1).unwrap());
    g.limit = Some(1);
    store.find(&g).await.unwrap().first().map(JobCursor::of)
}

/// Runs every case on `store`; returns the judged cases over budget.
async fn run(name: &str, store: Store, n: usize) -> Vec<String> {
    let cases = fill(&store, n).await;
    let s = store.dyn_store();
    let mut over = Vec::new();
    println!(
        "{:<9} {:<24} {:<7} {:<13} {:>9} {:>9} {:>5} {:>8}",
        "store", "filter", "order", "page", "p50_ms", "max_ms", "rows", "matches"
    );
    for c in &cases {
        for newest_first in [false, true] {
            let mut f = c.filter.clone();
            f.newest_first = newest_first;
            f.limit = Some(PAGE);
            let page = PAGE as usize;
            let last_start = c.count.saturating_sub(1) / page * page;
            let positions = [
                ("first", 0),
                ("middle", c.count / 2 / page * page),
                ("last", last_start),
            ];
            for (label, at) in positions {
                let mut g = f.clone();
                g.after = cursor_before(&s, &f, at).await;
                let (p50, max, rows) = time(&s, &g).await;
                let order = if newest_first { "newest" } else { "oldest" };
                println!(
                    "{name:<9} {:<24} {order:<7} {label:<13} {p50:>9.2} {max:>9.2} {rows:>5} {:>8}",
                    c.name, c.count
                );
                if max >= BUDGET.as_secs_f64() * 1000.0 {
                    over.push(format!("{name} {} {order} {label}: {max:.1} ms", c.name));
                }
            }
            if c.name == "none" {
                let mut g = f.clone();
                g.offset = Some(u32::try_from(c.count / 2).unwrap());
                let (p50, max, rows) = time(&s, &g).await;
                let order = if newest_first { "newest" } else { "oldest" };
                println!(
                    "{name:<9} {:<24} {order:<7} {:<13} {p50:>9.2} {max:>9.2} {rows:>5} {:>8}",
                    c.name, "middle/offset", c.count
                );
            }
        }
    }
    over
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("BOXCAR_BENCH_LIST_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let stores = std::env::var("BOXCAR_BENCH_STORES").unwrap_or_else(|_| "sqlite,postgres".into());
    let mut over = Vec::new();
    if stores.contains("sqlite") {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("list.db");
        let store = SqliteStore::open(&path.display().to_string())
            .await
            .unwrap();
        store.migrate().await.unwrap();
        over.extend(run("sqlite", Store::Sqlite(Arc::new(store)), n).await);
    }
    if stores.contains("postgres") {
        match std::env::var("DATABASE_URL") {
            Ok(url) => {
                let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
                let store = Arc::new(PostgresStore::connect(&url, &schema).await.unwrap());
                store.migrate().await.unwrap();
                let result = AssertUnwindSafe(run("postgres", Store::Postgres(store.clone()), n))
                    .catch_unwind()
                    .await;
                store.drop_schema().await.unwrap();
                match result {
                    Ok(o) => over.extend(o),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            Err(_) => eprintln!("skipping Postgres: DATABASE_URL is not set"),
        }
    }
    if !over.is_empty() {
        eprintln!(
            "FAILED: {} page(s) took {} ms or more:",
            over.len(),
            BUDGET.as_millis()
        );
        for o in &over {
            eprintln!("  {o}");
        }
        std::process::exit(1);
    }
    println!("every page under {} ms", BUDGET.as_millis());
}
