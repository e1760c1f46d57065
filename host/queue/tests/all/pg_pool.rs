//! The Postgres store's pools hand out live connections without a ping per
//! statement: only a connection idle for a while is checked first.

use std::time::Duration;

use crate::support::{database_url, Backend, Fixture};

/// Every connection of the store's pool is closed by the server while it
/// sits idle (as a server restart or an administrator's
/// `pg_terminate_backend` does); after a second and a half of idleness each
/// is found dead before it is handed out and replaced, so the store's next
/// statements succeed instead of failing on a dead socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_server_closed_while_idle_are_replaced_before_use() {
    let Some(fx) = Fixture::new(Backend::Postgres).await else {
        return;
    };
    let pg = fx.postgres().unwrap().clone();
    let pool = pg.pool();
    let held = pool.size().max(1);
    let mut conns = Vec::new();
    for _ in 0..held {
        conns.push(pool.acquire().await.unwrap());
    }
    let mut pids = Vec::new();
    for conn in &mut conns {
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        pids.push(pid);
    }
    drop(conns);
    let admin = sqlx::PgPool::connect(&database_url().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for pid in &pids {
        let gone: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(&admin)
            .await
            .unwrap();
        assert!(gone, "backend {pid} was terminated");
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for _ in 0..=held {
        let one: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(pool)
            .await
            .expect("a dead idle connection is replaced, not handed out");
        assert_eq!(one, 1);
    }
    assert!(fx.store.get("no-such-job").await.unwrap().is_none());
    fx.finish().await;
}
