//! Transactional enqueue, the Postgres `add_job` SQL function, option and
//! registry validation, and pool windows on the injectable clock.

use std::sync::Arc;
use std::time::Duration;

use boxcar_queue::store::memory::MemoryStore;
use boxcar_queue::store::postgres::PostgresStore;
use boxcar_queue::store::sqlite::SqliteStore;
use boxcar_queue::store::ClaimParams;
use boxcar_queue::{ClaimGuards, PoolGuard};
use boxcar_queue::{
    HandlerSettings, JobStatus, JobStore, ManualClock, NewJob, OptionsError, PoolConfig, Queue,
    QueueOptions, Registry, RegistryError, RetentionPolicy, Worker, WorkerOptions,
};
use serde_json::json;

use crate::support::{Backend, Fixture};

#[tokio::test]
async fn sqlite_enqueue_in_callers_transaction() {
    let fx = Fixture::new(Backend::Sqlite).await.unwrap();
    let sqlite = SqliteStore::open(&fx.url).await.unwrap();
    let pool = sqlite.pool().clone();
    sqlx::query("CREATE TABLE articles (id INTEGER PRIMARY KEY, state TEXT)")
        .execute(&pool)
        .await
        .unwrap();
    let q = Queue::new(Arc::new(sqlite), QueueOptions::default()).unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO articles VALUES (1, 'processing')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let r = q
        .add_in_tx(&mut *tx, NewJob::new("article.audio", &json!({"id": 1})))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(
        q.get(&r.id).await.unwrap().is_none(),
        "rolled back with the caller: no job"
    );
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO articles VALUES (2, 'processing')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let r = q
        .add_in_tx(&mut *tx, NewJob::new("article.audio", &json!({"id": 2})))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        q.get(&r.id).await.unwrap().unwrap().status,
        JobStatus::Pending
    );
}

#[tokio::test]
async fn postgres_enqueue_in_callers_transaction_and_sql_function() {
    let Some(fx) = Fixture::new(Backend::Postgres).await else {
        return;
    };
    let pg: &Arc<PostgresStore> = fx.postgres().unwrap();
    let pool = pg.pool().clone();
    let schema = pg.schema().to_string();
    let q = fx.queue();
    let mut tx = pool.begin().await.unwrap();
    let r = q
        .add_in_tx(&mut *tx, NewJob::new("sql", &json!({"id": 1})))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(
        q.get(&r.id).await.unwrap().is_none(),
        "rolled back with the caller: no job"
    );
    let mut tx = pool.begin().await.unwrap();
    let r = q
        .add_in_tx(&mut *tx, NewJob::new("sql", &json!({"id": 2})))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(q.get(&r.id).await.unwrap().is_some());

    let (id, dedup): (String, bool) = sqlx::query_as(&format!(
        "SELECT id, deduplicated FROM {schema}.add_job('sql', '{{\"from\": \"sql\"}}'::jsonb, dedupe_key => 'k1')"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(!dedup);
    let (again, dedup): (String, bool) = sqlx::query_as(&format!(
        "SELECT id, deduplicated FROM {schema}.add_job('sql', '{{}}'::jsonb, dedupe_key => 'k1')"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(dedup && again == id);
    let bad = sqlx::query(&format!(
        "SELECT * FROM {schema}.add_job('sql', '[1]'::jsonb)"
    ))
    .fetch_one(&pool)
    .await;
    assert!(bad.unwrap_err().to_string().contains("JSON object"));

    let ran = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let ran2 = ran.clone();
    struct H(Arc<parking_lot::Mutex<Vec<String>>>);
    impl boxcar_queue::Handler for H {
        fn handle(
            &self,
            job: boxcar_queue::JobRun,
            _c: boxcar_queue::JobContext,
        ) -> futures::future::BoxFuture<'static, boxcar_queue::Outcome> {
            self.0.lock().push(job.payload);
            Box::pin(async { boxcar_queue::Outcome::Succeeded { result: None } })
        }
    }
    let reg = Registry::new();
    reg.register("sql", Arc::new(H(ran2)), HandlerSettings::default())
        .unwrap();
    let w = Worker::start(q.clone(), reg, WorkerOptions::default()).unwrap();
    let j = q.wait(&id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        j.status,
        JobStatus::Succeeded,
        "a job enqueued by SQL runs on a Rust worker"
    );
    assert!(ran.lock().iter().any(|p| p.contains("\"from\"")));
    w.shutdown().await;
    fx.finish().await;
}

/// The SQL function refuses the identifiers `Queue::add` refuses (control
/// characters, over-long names and keys, the host's reserved `boxcar:`
/// dedupe prefix), with a clear error and nothing inserted; keys at the
/// limits are accepted.
#[tokio::test]
async fn postgres_sql_function_applies_the_identifier_rules() {
    let Some(fx) = Fixture::new(Backend::Postgres).await else {
        return;
    };
    let pg: &Arc<PostgresStore> = fx.postgres().unwrap();
    let pool = pg.pool().clone();
    let schema = pg.schema().to_string();
    let q = fx.queue();
    let long_name = "t".repeat(256);
    let long_key = "k".repeat(1025);
    // (job_type, scope_type, scope_id, dedupe_key, what the error says)
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        &'a str,
    );
    let refused: Vec<Case> = vec![
        ("bad\ntype", None, None, None, "control character"),
        ("bad\u{1b}[2Jtype", None, None, None, "control character"),
        ("bad\u{85}type", None, None, None, "control character"),
        (&long_name, None, None, None, "over the 255-byte limit"),
        ("ok", Some("tenant\r"), Some("1"), None, "control character"),
        (
            "ok",
            Some("tenant"),
            Some("1\u{7}"),
            None,
            "control character",
        ),
        ("ok", None, None, Some("key\u{1b}"), "control character"),
        (
            "ok",
            Some(&long_name),
            Some("1"),
            None,
            "over the 255-byte limit",
        ),
        (
            "ok",
            Some("tenant"),
            Some(&long_key),
            None,
            "over the 1024-byte limit",
        ),
        (
            "ok",
            None,
            None,
            Some(&long_key),
            "over the 1024-byte limit",
        ),
        (
            "ok",
            None,
            None,
            Some("boxcar:from:parent/k"),
            "reserved for the host",
        ),
        ("   ", None, None, None, "must be non-empty"),
    ];
    for (job_type, scope_type, scope_id, dedupe_key, says) in refused {
        let error = sqlx::query(&format!(
            "SELECT * FROM {schema}.add_job($1, '{{}}'::jsonb, \
             scope_type => $2, scope_id => $3, dedupe_key => $4)"
        ))
        .bind(job_type)
        .bind(scope_type)
        .bind(scope_id)
        .bind(dedupe_key)
        .fetch_one(&pool)
        .await
        .expect_err("refused by add_job");
        let message = error.to_string();
        assert!(message.contains(says), "{job_type:?}: {message}");
        assert!(
            !message.chars().any(|c| c.is_control()),
            "the error does not echo control characters: {message:?}"
        );
        let mut job = NewJob::new(job_type, &json!({}));
        if let (Some(t), Some(i)) = (scope_type, scope_id) {
            job = job.scope(boxcar_queue::Scope::new(t, i));
        }
        if let Some(k) = dedupe_key {
            job = job.dedupe_key(k);
        }
        assert!(
            q.add(job).await.is_err(),
            "Queue::add refuses it too: {message}"
        );
    }
    let total: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.jobs"))
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(total, 0, "nothing was inserted");

    let at_limit = "k".repeat(1024);
    let (id, deduplicated): (String, bool) = sqlx::query_as(&format!(
        "SELECT id, deduplicated FROM {schema}.add_job($1, '{{}}'::jsonb, \
         scope_type => $1, scope_id => $2, dedupe_key => $2)"
    ))
    .bind("t".repeat(255))
    .bind(&at_limit)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(!deduplicated);
    let job = q.get(&id).await.unwrap().unwrap();
    assert_eq!(job.dedupe_key.as_deref(), Some(at_limit.as_str()));
    let (_, deduplicated): (String, bool) = sqlx::query_as(&format!(
        "SELECT id, deduplicated FROM {schema}.add_job('ok', '{{}}'::jsonb, dedupe_key => 'Boxcar:mine é')"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        !deduplicated,
        "printable keys outside the reserved prefix are fine"
    );
    fx.finish().await;
}

#[test]
fn every_invalid_option_is_named() {
    let base = WorkerOptions::default;
    let retention = |older: u64, every: u64, statuses: Vec<JobStatus>| {
        RetentionPolicy::new(
            Duration::from_millis(older),
            Duration::from_millis(every),
            statuses,
        )
    };
    let cases: Vec<(WorkerOptions, &str)> = vec![
        (
            {
                let mut opts = base();
                opts.worker_id = "  ".into();
                opts
            },
            "worker_id",
        ),
        (
            {
                let mut opts = base();
                opts.poll_interval = Duration::ZERO;
                opts
            },
            "poll_interval",
        ),
        (
            {
                let mut opts = base();
                opts.max_backoff = Duration::from_secs(1);
                opts.base_backoff = Duration::from_secs(2);
                opts
            },
            "max_backoff",
        ),
        (
            {
                let mut opts = base();
                opts.starvation_polls = 0;
                opts
            },
            "starvation_polls",
        ),
        (
            {
                let mut opts = base();
                opts.retention = Some(retention(0, 10, vec![JobStatus::Succeeded]));
                opts
            },
            "retention.older_than",
        ),
        (
            {
                let mut opts = base();
                opts.retention = Some(retention(10, 0, vec![JobStatus::Succeeded]));
                opts
            },
            "retention.sweep_interval",
        ),
        (
            {
                let mut opts = base();
                opts.retention = Some(retention(10, 10, vec![]));
                opts
            },
            "retention.statuses",
        ),
        (
            {
                let mut opts = base();
                opts.retention = Some(retention(10, 10, vec![JobStatus::Running]));
                opts
            },
            "retention.statuses",
        ),
    ];
    for (opts, name) in cases {
        let err: OptionsError = opts.validate().unwrap_err();
        assert_eq!(err.option, name);
        assert!(err.to_string().contains(name));
    }
    assert!(WorkerOptions::default().validate().is_ok());
    let q = {
        let mut opts = QueueOptions::default();
        opts.default_max_attempts = 0;
        opts
    };
    assert_eq!(q.validate().unwrap_err().option, "default_max_attempts");
    let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new());
    assert!(
        Queue::new(store, q).is_err(),
        "a queue refuses bad options at construction"
    );
}

#[tokio::test]
async fn worker_refuses_bad_options() {
    let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new());
    let q = Queue::new(store, QueueOptions::default()).unwrap();
    let bad = {
        let mut opts = WorkerOptions::default();
        opts.poll_interval = Duration::ZERO;
        opts
    };
    let err = Worker::start(q, Registry::new(), bad).err().unwrap();
    assert_eq!(err.option, "poll_interval");
}

#[test]
fn registry_validation() {
    let h: Arc<dyn boxcar_queue::Handler> = Arc::new(boxcar_queue::bench::NoopHandler);
    let reg = Registry::new();
    let w = |t: &[&str]| {
        let mut settings = HandlerSettings::default();
        settings.waits_for = t.iter().map(|s| s.to_string()).collect();
        settings
    };
    reg.register("a", h.clone(), w(&["b"])).unwrap();
    reg.register("b", h.clone(), w(&["c"])).unwrap();
    let err = reg.register("c", h.clone(), w(&["a"])).unwrap_err();
    assert!(
        matches!(&err, RegistryError::WaitsForCycle(c) if c.contains("a -> b -> c -> a")),
        "{err}"
    );
    assert!(
        reg.get("c").is_none(),
        "a refused registration changes nothing"
    );
    let bad = {
        let mut settings = HandlerSettings::default();
        settings.concurrency = 0;
        settings
    };
    assert!(reg
        .register("d", h.clone(), bad)
        .unwrap_err()
        .to_string()
        .contains("concurrency"));
    let nwr = {
        let mut settings = HandlerSettings::default();
        settings.not_while_running = vec!["f".into()];
        settings
    };
    reg.register("e", h.clone(), nwr).unwrap();
    reg.register("f", h.clone(), HandlerSettings::default())
        .unwrap();
    let warnings = reg.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("`e`") && w.contains("`f`")),
        "{warnings:?}"
    );
    let pool = |name: &str, c: Option<u32>, r: Option<u32>, types: &[&str]| {
        let mut pool = PoolConfig::default();
        pool.name = name.into();
        pool.concurrency = c;
        pool.rate_per_minute = r;
        pool.types = types.iter().map(|s| s.to_string()).collect();
        pool
    };
    assert!(reg
        .set_pools(vec![pool("p", None, None, &["a"])])
        .unwrap_err()
        .to_string()
        .contains("declare"));
    assert!(reg
        .set_pools(vec![pool("p", Some(0), None, &["a"])])
        .unwrap_err()
        .to_string()
        .contains("positive"));
    let two = vec![
        pool("p", Some(1), None, &["a"]),
        pool("q", Some(1), None, &["a"]),
    ];
    assert!(reg
        .set_pools(two)
        .unwrap_err()
        .to_string()
        .contains("also in pool"));
    reg.set_pools(vec![pool("p", Some(4), Some(10), &["a", "elsewhere"])])
        .unwrap();
    let g = reg.guards_for("a");
    assert_eq!(g.pools.len(), 1);
    assert_eq!(g.waits_for, vec!["b".to_string()]);
}

#[tokio::test]
async fn pool_rate_window_resets_after_a_minute() {
    let clock = ManualClock::new(chrono::Utc::now());
    let store: Arc<dyn JobStore> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let q = Queue::new(store.clone(), QueueOptions::default()).unwrap();
    for _ in 0..5 {
        q.add(NewJob::new("r", &json!({}))).await.unwrap();
    }
    let mut guards = ClaimGuards::default();
    guards.pools = vec![PoolGuard {
        name: "api".into(),
        rate_per_minute: Some(2),
        member_costs: vec![("r".into(), 1)],
        cost: 1,
        rate_cost: 1,
        ..PoolGuard::default()
    }];
    let claim = || ClaimParams {
        worker_id: "w".into(),
        job_type: "r".into(),
        limit: 5,
        lease: Duration::from_secs(600),
        handler_version: None,
        guards: guards.clone(),
    };
    assert_eq!(store.claim_batch(claim()).await.unwrap().claimed.len(), 2);
    clock.advance(Duration::from_secs(59));
    assert_eq!(
        store.claim_batch(claim()).await.unwrap().claimed.len(),
        0,
        "same window"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        store.claim_batch(claim()).await.unwrap().claimed.len(),
        2,
        "the window reset"
    );
}

#[tokio::test]
async fn retention_sweeper_prunes_old_terminal_jobs() {
    let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new());
    let q = Queue::new(store, QueueOptions::default()).unwrap();
    let reg = Registry::new();
    reg.register(
        "r",
        Arc::new(boxcar_queue::bench::NoopHandler),
        HandlerSettings::default(),
    )
    .unwrap();
    let opts = {
        let mut opts = WorkerOptions::default();
        opts.poll_interval = Duration::from_millis(20);
        opts.retention = Some(RetentionPolicy::new(
            Duration::from_millis(50),
            Duration::from_millis(20),
            vec![JobStatus::Succeeded],
        ));
        opts
    };
    let w = Worker::start(q.clone(), reg, opts).unwrap();
    let id = q.add(NewJob::new("r", &json!({}))).await.unwrap().id;
    let pending_forever = q
        .add(NewJob::new("r", &json!({})).delay(Duration::from_secs(3600)))
        .await
        .unwrap()
        .id;
    assert_eq!(
        q.wait(&id, Duration::from_secs(5)).await.unwrap().status,
        JobStatus::Succeeded
    );
    let gone = crate::support::eventually(Duration::from_secs(5), || async {
        q.get(&id).await.unwrap().is_none()
    })
    .await;
    assert!(gone, "the sweeper pruned the old succeeded job");
    assert!(
        q.get(&pending_forever).await.unwrap().is_some(),
        "live jobs are kept"
    );
    assert_eq!(w.maintenance().prune_once().await.unwrap(), 0);
    w.shutdown().await;
}
