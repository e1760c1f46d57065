//! Guards: scope serialization, `not_while_running`, `waits_for`, pools
//! (slots and rate), pool status, and the read-only blocker answer — the
//! claim's predicate, with blockers compared as `Blocker` values.

use boxcar_queue::{
    Blocker, JobFilter, JobStatus, PoolConfig, PoolGuard, PoolStatus, Registry, Scope,
};

use super::*;
use crate::support::Fixture;

async fn scope(fx: &Fixture) {
    let q = fx.queue();
    let a = Scope::new("acct", "a");
    add(&q, job("s").scope(a.clone())).await;
    add(&q, job("s").scope(a.clone())).await;
    add(&q, job("s").scope(Scope::new("acct", "b"))).await;
    add(&q, job("s")).await;
    add(&q, job("s")).await;
    let c = fx
        .store
        .claim_batch(guarded("s", 10, live_scope_guard()))
        .await
        .unwrap();
    assert_eq!(
        c.claimed.len(),
        4,
        "one per scope, scope-less jobs unaffected: {:?}",
        c.claimed
    );
    assert_eq!(
        c.claimed
            .iter()
            .filter(|j| j.scope.as_ref() == Some(&a))
            .count(),
        1
    );
    let c2 = fx
        .store
        .claim_batch(guarded("s", 10, live_scope_guard()))
        .await
        .unwrap();
    assert!(c2.claimed.is_empty());
    assert_eq!(
        c2.blocked_by,
        Some(Blocker::ScopeBusy {
            scope_type: "acct".into()
        })
    );
    let held = c
        .claimed
        .iter()
        .find(|j| j.scope.as_ref() == Some(&a))
        .unwrap()
        .id
        .clone();
    let q2 = fx.queue();
    let other = add(&q2, job("s2").scope(a.clone())).await;
    let c3 = fx
        .store
        .claim_batch(guarded("s2", 10, live_scope_guard()))
        .await
        .unwrap();
    assert!(
        c3.claimed.is_empty(),
        "any type's live lease in the scope blocks"
    );
    let _ = other;
    let _ = held;
    let id = add(&q, job("e").scope(Scope::new("x", "1"))).await;
    let mut short = guarded("e", 1, live_scope_guard());
    short.lease = Duration::from_millis(20);
    fx.store.claim_batch(short).await.unwrap();
    add(&q, job("e").scope(Scope::new("x", "1"))).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    let c4 = fx
        .store
        .claim_batch(guarded("e", 1, live_scope_guard()))
        .await
        .unwrap();
    assert_eq!(
        c4.claimed.len(),
        1,
        "an expired lease does not block its scope"
    );
    assert_ne!(c4.claimed[0].id, id);
}

async fn types(fx: &Fixture) {
    let q = fx.queue();
    add(&q, job("import")).await;
    add(&q, job("hydrate")).await;
    let nwr = |other: &str| {
        let mut guards = ClaimGuards::default();
        guards.not_while_running = vec![other.into()];
        guards
    };
    let c = fx
        .store
        .claim_batch(guarded("import", 1, nwr("hydrate")))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    let c = fx
        .store
        .claim_batch(guarded("hydrate", 1, nwr("import")))
        .await
        .unwrap();
    assert!(
        c.claimed.is_empty(),
        "not while a listed type holds a live lease"
    );
    assert_eq!(
        c.blocked_by,
        Some(Blocker::Running {
            types: vec!["import".into()]
        })
    );
    let mut waits = ClaimGuards::default();
    waits.waits_for = vec!["ingest".into()];
    add(&q, job("rollup")).await;
    add(&q, job("ingest").delay(Duration::from_secs(3600))).await;
    let c = fx
        .store
        .claim_batch(guarded("rollup", 1, waits.clone()))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1, "future ingest work does not block");
    add(&q, job("rollup")).await;
    add(&q, job("ingest")).await;
    let c = fx
        .store
        .claim_batch(guarded("rollup", 1, waits.clone()))
        .await
        .unwrap();
    assert!(c.claimed.is_empty(), "due ingest work blocks");
    assert_eq!(
        c.blocked_by,
        Some(Blocker::WaitsFor {
            types: vec!["ingest".into()]
        })
    );
}

async fn pools(fx: &Fixture) {
    let q = fx.queue();
    let pool = |t: &str, cost: u32| PoolGuard {
        name: "api".into(),
        concurrency: Some(4),
        rate_per_minute: Some(5),
        member_costs: vec![("big".into(), 2), ("small".into(), 1)],
        cost,
        rate_cost: if t == "big" { 2 } else { 1 },
    };
    let g = |t: &str, cost| {
        let mut guards = ClaimGuards::default();
        guards.pools = vec![pool(t, cost)];
        guards
    };
    for _ in 0..3 {
        add(&q, job("big")).await;
        add(&q, job("small")).await;
    }
    let c = fx
        .store
        .claim_batch(guarded("big", 3, g("big", 2)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 2, "2 × cost 2 fills 4 slots");
    let c = fx
        .store
        .claim_batch(guarded("small", 3, g("small", 1)))
        .await
        .unwrap();
    assert!(c.claimed.is_empty(), "pool full");
    assert_eq!(c.blocked_by, Some(Blocker::PoolFull { pool: "api".into() }));
    let q2 = fx.queue();
    let big: Vec<String> = q2
        .find(&running_big())
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    q.cancel(&big[0], "free a slot").await.unwrap();
    let c = fx
        .store
        .claim_batch(guarded("small", 3, g("small", 1)))
        .await
        .unwrap();
    assert_eq!(
        c.claimed.len(),
        1,
        "rate budget 5: 2+2 spent, 1 left (cancel refunds nothing)"
    );
    let c = fx
        .store
        .claim_batch(guarded("small", 3, g("small", 1)))
        .await
        .unwrap();
    assert!(c.claimed.is_empty());
    assert_eq!(
        c.blocked_by,
        Some(Blocker::RateSpent { pool: "api".into() })
    );
}

/// `pool_status`: occupancy from live leases only (costs summed, expired
/// leases and other types ignored), spend and window from the guard row,
/// nothing refunded by a cancel, pools reported in the order asked.
async fn pool_status(fx: &Fixture) {
    let q = fx.queue();
    let api = {
        let mut pool = PoolConfig::default();
        pool.name = "api".into();
        pool.concurrency = Some(6);
        pool.rate_per_minute = Some(10);
        pool.types = vec!["big".into(), "small".into()];
        pool.costs = [("big".to_string(), 2)].into();
        pool.rate_costs = [("big".to_string(), 3)].into();
        pool
    };
    let slots = {
        let mut pool = PoolConfig::default();
        pool.name = "slots".into();
        pool.concurrency = Some(1);
        pool.rate_per_minute = None;
        pool.types = vec!["other".into()];
        pool
    };
    let both = [slots.clone(), api.clone()];
    let st = q.pool_status(&both).await.unwrap();
    assert_eq!(st.len(), 2);
    assert_eq!(st[0].name, "slots");
    assert_eq!(
        st[1],
        PoolStatus {
            name: "api".into(),
            occupied: 0,
            concurrency: Some(6),
            spent: 0,
            rate_per_minute: Some(10),
            window_resets_at: None,
        }
    );
    for _ in 0..2 {
        add(&q, job("big")).await;
    }
    add(&q, job("small")).await;
    add(&q, job("unrelated")).await;
    let registry = Registry::new();
    registry.set_pools(vec![api.clone()]).unwrap();
    // SQLite stores milliseconds: allow `before`'s sub-millisecond part.
    let before = fx.store.now().await.unwrap();
    let c = fx
        .store
        .claim_batch(guarded("big", 2, registry.guards_for("big")))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 2);
    // An expired lease occupies nothing; an unrelated type neither.
    let c = fx
        .store
        .claim_batch(claim("small", W2, 1, Duration::from_millis(1)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    let c = fx
        .store
        .claim_batch(claim("unrelated", W2, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let st = q.pool_status(&both).await.unwrap();
    assert_eq!(st[0].occupied, 0);
    assert_eq!((st[0].spent, st[0].window_resets_at), (0, None));
    assert_eq!(st[1].occupied, 4, "two live big jobs at cost 2");
    assert_eq!(st[1].spent, 6, "two starts at rate cost 3");
    assert_eq!(st[1].budget_left(), Some(4));
    let resets = st[1].window_resets_at.expect("an open window");
    let after = fx.store.now().await.unwrap();
    assert!(
        resets > before + chrono::Duration::milliseconds(59_999)
            && resets <= after + chrono::Duration::seconds(60),
        "the window resets a minute after its first start: {before} .. {resets} .. {after}"
    );
    let big = q.find(&running_big()).await.unwrap();
    q.cancel(&big[0].id, "free a slot").await.unwrap();
    let st = q.pool_status(&[api]).await.unwrap();
    assert_eq!(st[0].occupied, 2, "the cancelled job holds no slot");
    assert_eq!(st[0].spent, 6, "cancelling refunds no budget");
}

/// `blocked_by`: a due pending job names the guard that holds it back, the
/// same predicate a claim evaluates; not-due, non-pending and unguarded jobs
/// report nothing, and the answer clears once the blocker is gone.
async fn blocked_by(fx: &Fixture) {
    let q = fx.queue();
    let scope = Scope::new("account", "7");
    let running = add(&q, job("mail").scope(scope.clone())).await;
    let c = fx
        .store
        .claim_batch(claim("mail", W2, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    let waiting = add(&q, job("mail").scope(scope.clone())).await;
    let later = add(
        &q,
        job("mail").scope(scope).delay(Duration::from_secs(3600)),
    )
    .await;
    let guards = live_scope_guard();
    let get = |id: String| {
        let q = q.clone();
        async move { q.get(&id).await.unwrap().unwrap() }
    };
    let why = q
        .blocked_by(&get(waiting.clone()).await, &guards)
        .await
        .unwrap();
    assert_eq!(
        why,
        Some(Blocker::ScopeBusy {
            scope_type: "account".into()
        })
    );
    let said = why.map(|b| b.to_string()).unwrap_or_default();
    assert!(said.contains("scope type `account`"), "{said}");
    assert_eq!(
        q.blocked_by(&get(later).await, &guards).await.unwrap(),
        None,
        "not due yet: nothing to explain"
    );
    assert_eq!(
        q.blocked_by(&get(running.clone()).await, &guards)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        q.blocked_by(&get(waiting.clone()).await, &ClaimGuards::default())
            .await
            .unwrap(),
        None
    );
    q.cancel(&running, "done").await.unwrap();
    assert_eq!(
        q.blocked_by(&get(waiting).await, &guards).await.unwrap(),
        None,
        "the scope is free"
    );
}

backends!(scope, types, pools, pool_status, blocked_by);

/// The running jobs of type `big`.
fn running_big() -> JobFilter {
    let mut filter = JobFilter::default();
    filter.types = vec!["big".into()];
    filter.statuses = vec![JobStatus::Running];
    filter
}
