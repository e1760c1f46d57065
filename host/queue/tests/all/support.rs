//! Per-test fixtures: a fresh store of each backend (a temp SQLite file, a
//! random Postgres schema dropped at the end, or memory), and small helpers.

use std::sync::Arc;
use std::time::Duration;

use boxcar_queue::store::memory::MemoryStore;
use boxcar_queue::store::postgres::PostgresStore;
use boxcar_queue::store::sqlite::SqliteStore;
use boxcar_queue::store::traced::TracedStore;
use boxcar_queue::store::Completed;
use boxcar_queue::{
    Handler, JobContext, JobRun, JobStore, LifecycleEvent, LifecycleObserver, LifecycleOutcome,
    Outcome, Queue, QueueOptions,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use parking_lot::Mutex;

/// One `#[tokio::test]` per backend for each named check (an `async fn
/// (&Fixture)` of the module that invokes it): a module per check with the tests
/// `memory`, `sqlite` and `postgres`, each on a fresh database.
macro_rules! backends {
    ($($check:ident),+ $(,)?) => {$(
        mod $check {
            backends!(@test $check, memory, Memory);
            backends!(@test $check, sqlite, Sqlite);
            backends!(@test $check, postgres, Postgres);
        }
    )+};
    (@test $check:ident, $name:ident, $backend:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let backend = crate::support::Backend::$backend;
            let Some(fx) = crate::support::Fixture::new(backend).await else {
                return;
            };
            super::$check(&fx).await;
            fx.finish().await;
        }
    };
}

/// Which backend a fixture uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Sqlite,
    Postgres,
}

/// The Postgres URL, or `None` (with a printed reason) when tests must skip.
/// With `CI=true` a missing `DATABASE_URL` is a failure, not a skip.
pub fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("DATABASE_URL is not set but CI=true: Postgres tests must run in CI");
            }
            eprintln!("skipping Postgres test: DATABASE_URL is not set");
            None
        }
    }
}

/// Every test store goes through the tracing decorator, as stores from
/// `open_store` do: the suites prove it delegates faithfully.
fn traced(store: Arc<dyn JobStore>) -> Arc<dyn JobStore> {
    Arc::new(TracedStore::new(store))
}

/// One test's database.
pub struct Fixture {
    pub backend: Backend,
    pub store: Arc<dyn JobStore>,
    /// `sqlite://…` or `postgres://…?schema=…`, for other processes.
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg: Option<Arc<PostgresStore>>,
}

impl Fixture {
    pub async fn new(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Memory => Some(Self {
                backend,
                store: traced(Arc::new(MemoryStore::new())),
                url: "memory://".into(),
                _dir: None,
                pg: None,
            }),
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let path = dir.path().join("boxcar.db");
                let url = format!("sqlite://{}", path.display());
                let store = SqliteStore::open(&url).await.expect("open sqlite");
                store.migrate().await.expect("migrate sqlite");
                Some(Self {
                    backend,
                    store: traced(Arc::new(store)),
                    url,
                    _dir: Some(dir),
                    pg: None,
                })
            }
            Backend::Postgres => {
                let base = database_url()?;
                let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
                let store = Arc::new(
                    PostgresStore::connect(&base, &schema)
                        .await
                        .expect("connect postgres"),
                );
                store.migrate().await.expect("migrate postgres");
                let sep = if base.contains('?') { '&' } else { '?' };
                Some(Self {
                    backend,
                    store: traced(store.clone()),
                    url: format!("{base}{sep}schema={schema}"),
                    _dir: None,
                    pg: Some(store),
                })
            }
        }
    }

    /// Another store instance (own connections) on the same database; the
    /// same instance for memory.
    pub async fn reopen(&self) -> Arc<dyn JobStore> {
        match self.backend {
            Backend::Memory => self.store.clone(),
            _ => boxcar_queue::open_store(&self.url)
                .await
                .expect("reopen store"),
        }
    }

    pub fn queue(&self) -> Queue {
        Queue::new(self.store.clone(), QueueOptions::default()).expect("queue")
    }

    pub fn postgres(&self) -> Option<&Arc<PostgresStore>> {
        self.pg.as_ref()
    }

    /// Drops the Postgres schema.
    pub async fn finish(mut self) {
        if let Some(pg) = self.pg.take() {
            pg.drop_schema().await.expect("drop schema");
        }
    }
}

impl Drop for Fixture {
    /// A test that panicked before `finish` still drops its schema (on a
    /// helper thread with its own runtime, since `Drop` cannot await).
    fn drop(&mut self) {
        let Some(pg) = self.pg.take() else { return };
        let schema = pg.schema().to_string();
        let Some(url) = database_url() else { return };
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let pool = sqlx::PgPool::connect(&url).await.ok()?;
                sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .execute(&pool)
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Polls `cond` every 10 ms until it is true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Records every lifecycle event it observes.
#[derive(Default)]
pub struct Recorder(Mutex<Vec<LifecycleEvent>>);

impl LifecycleObserver for Recorder {
    fn on_transition(&self, event: &LifecycleEvent) {
        self.0.lock().push(event.clone());
    }
}

impl Recorder {
    /// The outcomes observed for job `id`, in order.
    pub fn outcomes(&self, id: &str) -> Vec<LifecycleOutcome> {
        self.0
            .lock()
            .iter()
            .filter(|e| e.job_id == id)
            .map(|e| e.outcome)
            .collect()
    }
}

type Behaviour = Arc<dyn Fn(JobRun, JobContext) -> BoxFuture<'static, Outcome> + Send + Sync>;

/// A native handler whose every run is a call of a closure; its version is
/// `sha256:test`.
struct FnHandler(Behaviour);

impl Handler for FnHandler {
    fn handle(&self, job: JobRun, ctx: JobContext) -> BoxFuture<'static, Outcome> {
        (self.0)(job, ctx)
    }
    fn version(&self) -> String {
        "sha256:test".into()
    }
}

/// The success of `job`'s current claim, returning `result`.
pub fn success(job: &boxcar_queue::Job, result: Option<&str>) -> Completed {
    Completed {
        id: job.id.clone(),
        attempt: job.attempts,
        result: result.map(str::to_string),
        ending: Default::default(),
    }
}

/// A handler that runs `f` for each job.
pub fn handler<F, Fut>(f: F) -> Arc<dyn Handler>
where
    F: Fn(JobRun, JobContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Outcome> + Send + 'static,
{
    Arc::new(FnHandler(Arc::new(move |j, c| f(j, c).boxed())))
}
