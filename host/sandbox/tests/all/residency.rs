//! What the pool keeps after jobs end: a finished job's memory beyond
//! `memory_keep_resident` goes back to the system when the job ends (not
//! after a batch of later jobs), a deep recursion does not leave its stack
//! pages resident, and idle warm slots stay within `warm_slots` however
//! many modules have run. The RSS checks run in a child process of their
//! own, so other tests' jobs do not move the figures.

use std::{sync::Arc, time::Duration};

use boxcar_sandbox::{Capabilities, HandlerLimits, LoadedHandler, Outcome, Sandbox, SandboxConfig};

use crate::common::{cache_dir, figure_from_child};
use boxcar_queue::testing::{context, job_run};

/// Marks the line a child prints with the RSS growth it measured.
const GROWTH: &str = "RSS_GROWTH_KIB=";

fn pooled_config(pool_instances: u32, warm_slots: u32) -> SandboxConfig {
    SandboxConfig {
        pool_instances,
        warm_slots,
        // Deep enough that a recursion's stack pages are easy to see.
        max_wasm_stack: 4 << 20,
        cache_dir: Some(cache_dir()),
        ..SandboxConfig::default()
    }
}

fn pooled(pool_instances: u32, warm_slots: u32) -> Sandbox {
    Sandbox::new(pooled_config(pool_instances, warm_slots)).expect("sandbox builds")
}

fn load(sandbox: &Sandbox, name: &str) -> Arc<LoadedHandler> {
    sandbox
        .load(
            &boxcar_examples::bytes(name),
            HandlerLimits::default(),
            Capabilities::default(),
        )
        .expect("example loads")
}

async fn run(handler: &LoadedHandler, job_type: &str, payload: &str) -> Outcome {
    let (ctx, _) = context();
    handler
        .run(job_run(job_type, payload, Duration::from_secs(30)), ctx)
        .await
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// Child of [`a_finished_jobs_memory_goes_back_when_it_ends`].
#[tokio::test]
#[ignore = "run in a child process by a_finished_jobs_memory_goes_back_when_it_ends"]
async fn child_memory_hog_then_measure() {
    let sandbox = pooled(4, 4);
    let hog = load(&sandbox, "memory-hog");
    assert_eq!(
        run(&hog, "memory-hog", r#"{"max_mib":1}"#).await,
        Outcome::Succeeded {
            result: Some("1".into())
        }
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = rss_kib();
    assert_eq!(
        run(&hog, "memory-hog", r#"{"max_mib":48}"#).await,
        Outcome::Succeeded {
            result: Some("48".into())
        }
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    println!("{GROWTH}{}", rss_kib().saturating_sub(before));
}

#[test]
fn a_finished_jobs_memory_goes_back_when_it_ends() {
    let growth = figure_from_child("residency::child_memory_hog_then_measure", GROWTH);
    assert!(
        growth < 16 << 10,
        "a job that touched 48 MiB left the host {} MiB larger after it ended",
        growth >> 10
    );
}

/// Child of [`deep_recursions_do_not_leave_their_stacks_resident`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a child process by deep_recursions_do_not_leave_their_stacks_resident"]
async fn child_deep_recursions_then_measure() {
    const AT_ONCE: usize = 16;
    // Linear memories keep nothing resident here, so what stays is stacks.
    let sandbox = Sandbox::new(SandboxConfig {
        memory_keep_resident: 0,
        ..pooled_config(AT_ONCE as u32, AT_ONCE as u32)
    })
    .expect("sandbox builds");
    let echo = load(&sandbox, "echo");
    let deep = load(&sandbox, "deep-recursion");
    let burst = |handler: Arc<LoadedHandler>, job_type: &'static str| async move {
        let runs = (0..AT_ONCE).map(|_| {
            let handler = Arc::clone(&handler);
            tokio::spawn(async move { run(&handler, job_type, "{}").await })
        });
        let mut outcomes = Vec::new();
        for handle in runs.collect::<Vec<_>>() {
            outcomes.push(handle.await.expect("run task"));
        }
        outcomes
    };
    // Every stack slot has run a job once before the figure is taken.
    for outcome in burst(Arc::clone(&echo), "echo").await {
        assert!(matches!(outcome, Outcome::Succeeded { .. }), "{outcome:?}");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = rss_kib();
    for outcome in burst(Arc::clone(&deep), "deep-recursion").await {
        assert!(matches!(outcome, Outcome::Trapped { .. }), "{outcome:?}");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    println!("{GROWTH}{}", rss_kib().saturating_sub(before));
}

#[test]
fn deep_recursions_do_not_leave_their_stacks_resident() {
    let growth = figure_from_child("residency::child_deep_recursions_then_measure", GROWTH);
    assert!(
        growth < 16 << 10,
        "16 deep recursions, each filling a 4 MiB wasm stack, left the host {} MiB larger after they ended",
        growth >> 10
    );
}

#[tokio::test]
async fn idle_warm_slots_stay_within_warm_slots() {
    let sandbox = pooled(8, 2);
    for name in ["echo", "noop", "compute", "progress", "trap", "memory-hog"] {
        let handler = load(&sandbox, name);
        let payload = if name == "memory-hog" {
            r#"{"max_mib":8}"#
        } else {
            "{}"
        };
        run(&handler, name, payload).await;
    }
    let idle = sandbox.pool_residency().expect("a pooled sandbox");
    assert!(
        idle.warm_memories <= 2 && idle.warm_tables <= 2 && idle.warm_stacks <= 2,
        "six modules run one after another left {idle:?} with warm_slots = 2"
    );
    let keep = SandboxConfig::default().memory_keep_resident;
    assert!(
        idle.memory_bytes <= 2 * keep && idle.stack_bytes <= 2 * (128 << 10),
        "idle slots hold more than warm_slots allows: {idle:?}"
    );
    assert!(
        idle.warm_stacks == 0 || idle.stack_bytes > 0,
        "idle stacks are not zeroed and reset, so their resident bytes go uncounted: {idle:?}"
    );
}

#[test]
fn an_unpooled_sandbox_has_no_pool_residency() {
    let sandbox = Sandbox::new(SandboxConfig {
        pooling: false,
        cache_dir: Some(cache_dir()),
        ..SandboxConfig::default()
    })
    .expect("sandbox builds");
    assert_eq!(sandbox.pool_residency(), None);
}
