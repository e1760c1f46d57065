//! One memory cap per job, over all its linear memories: `many-memories`
//! (19 core instances, each growing its own memory to 62.5 MiB while it is
//! instantiated) ends `OutOfMemory` under `memory = 64MiB` and the host
//! does not grow by the sum; with pooling, a component holding more
//! memories than one job's share of the pool is refused at load.

use std::time::Duration;

use boxcar_sandbox::{Capabilities, HandlerLimits, Outcome, Sandbox, SandboxConfig, SandboxError};

use crate::common::{cache_dir, figure_from_child, sandbox, CPU};
use boxcar_queue::testing::{context, job_run};

/// The child test that runs the job in a process of its own.
const CHILD: &str = "memory::many_memories_job_is_out_of_memory_with_pooling";

/// Marks the line the child prints with its peak RSS growth.
const GROWTH: &str = "PEAK_RSS_GROWTH_KIB=";

/// A sandbox whose pool slots can hold the component's 20 memories.
fn roomy(pooling: bool) -> Sandbox {
    Sandbox::new(SandboxConfig {
        pooling,
        pool_instances: 2,
        job_memories: 20,
        cache_dir: Some(cache_dir()),
        ..SandboxConfig::default()
    })
    .expect("sandbox builds")
}

fn limits() -> HandlerLimits {
    HandlerLimits {
        memory: 64 << 20,
        ..HandlerLimits::default()
    }
}

async fn run_many_memories(sandbox: &Sandbox) -> Outcome {
    let h = sandbox
        .load(
            &boxcar_examples::bytes("many-memories"),
            limits(),
            Capabilities::default(),
        )
        .expect("loads when the pool share holds its memories");
    let (ctx, _) = context();
    h.run(job_run("many-memories", "{}", Duration::from_secs(30)), ctx)
        .await
}

/// `VmRSS` or `VmHWM` of this process, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} missing from /proc/self/status"))
}

#[tokio::test]
async fn many_memories_job_is_out_of_memory_with_pooling() {
    let sandbox = roomy(true);
    let rss_before = status_kib("VmRSS:");
    // Resets VmHWM to the current RSS, so the peak below is this job's.
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
    let outcome = run_many_memories(&sandbox).await;
    let peak = status_kib("VmHWM:");
    println!("{GROWTH}{}", peak.saturating_sub(rss_before));
    assert_eq!(outcome, Outcome::OutOfMemory);
}

#[tokio::test]
async fn many_memories_job_is_out_of_memory_without_pooling() {
    let _cpu = CPU.lock().await;
    assert_eq!(run_many_memories(&roomy(false)).await, Outcome::OutOfMemory);
}

#[test]
fn many_memories_do_not_grow_the_host_past_the_cap() {
    let growth = figure_from_child(CHILD, GROWTH);
    assert!(
        growth < 100 << 10,
        "the host grew by {} MiB for one job capped at 64 MiB",
        growth >> 10
    );
}

#[test]
fn pooling_refuses_more_memories_than_a_jobs_share() {
    let refused = sandbox()
        .load(
            &boxcar_examples::bytes("many-memories"),
            limits(),
            Capabilities::default(),
        )
        .err()
        .expect("20 memories exceed the default share");
    assert!(matches!(refused, SandboxError::PoolShare(_)), "{refused}");
    let text = refused.to_string();
    assert!(text.contains("job_memories"), "{text}");
}
