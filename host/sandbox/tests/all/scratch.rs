//! The scratch directory under attack, in tmpfs and in directory mode: a
//! guest that makes a 30,000-deep directory chain, writes through a file it
//! deleted while open, or writes under a path longer than `PATH_MAX`,
//! neither brings the host down nor gets past its 64 MiB cap; nothing is
//! left under the scratch root, and the next job runs.
//!
//! tmpfs mode needs mount rights (root): without them these tests are
//! skipped, except under `CI=true`, where that is a failure.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use boxcar_sandbox::{
    Capabilities, HandlerLimits, LimitKind, Outcome, Sandbox, SandboxConfig, ScratchMode,
};

use crate::common::cache_dir;
use boxcar_queue::testing::{context, job_run};

/// A sandbox of its own (own scratch root) in `mode`; `None` when tmpfs
/// cannot be mounted here and this is not CI.
fn sandbox(mode: ScratchMode, name: &str) -> Option<(Sandbox, PathBuf)> {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "scratch-{name}-{}-{}",
        mode.as_str(),
        std::process::id()
    ));
    let built = Sandbox::new(SandboxConfig {
        cache_dir: Some(cache_dir()),
        scratch_dir: Some(root.clone()),
        scratch_mode: mode,
        pooling: false,
        ..SandboxConfig::default()
    });
    match built {
        Ok(sandbox) => {
            assert_eq!(sandbox.scratch_mode(), mode);
            Some((sandbox, root))
        }
        Err(e) if mode == ScratchMode::Tmpfs && std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipped: tmpfs scratch is unavailable here ({e}); under CI=true this fails");
            None
        }
        Err(e) => panic!("building a sandbox with scratch_mode {mode:?}: {e}"),
    }
}

fn entries(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .expect("the scratch root exists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

fn caps() -> Capabilities {
    Capabilities {
        scratch: Some(64 << 20),
        ..Capabilities::default()
    }
}

/// Runs the attack in `payload`, checks the aftermath, returns the outcome.
async fn attack(mode: ScratchMode, name: &str, payload: serde_json::Value) -> Option<Outcome> {
    let (sandbox, root) = sandbox(mode, name)?;
    let bytes = boxcar_examples::bytes("scratch-attack");
    let handler = sandbox
        .load(&bytes, HandlerLimits::default(), caps())
        .expect("the attack guest loads");
    let (ctx, _) = context();
    let outcome = handler
        .run(
            job_run(
                "scratch-attack",
                &payload.to_string(),
                Duration::from_secs(60),
            ),
            ctx,
        )
        .await;
    assert_eq!(
        entries(&root),
        Vec::<String>::new(),
        "nothing is left under the scratch root after {outcome:?}"
    );

    let echo = sandbox
        .load(
            &boxcar_examples::bytes("echo"),
            HandlerLimits::default(),
            caps(),
        )
        .expect("echo loads");
    let (ctx, _) = context();
    let after = echo
        .run(
            job_run("echo", r#"{"still":"here"}"#, Duration::from_secs(10)),
            ctx,
        )
        .await;
    assert_eq!(
        after,
        Outcome::Succeeded {
            result: Some(r#"{"still":"here"}"#.into())
        }
    );
    assert_eq!(entries(&root), Vec::<String>::new());
    std::fs::remove_dir(&root).expect("the scratch root is empty");
    Some(outcome)
}

fn assert_over_cap(outcome: &Outcome) {
    match outcome {
        Outcome::LimitExceeded {
            which: LimitKind::Other,
            detail,
        } => assert!(detail.contains("scratch"), "{detail}"),
        other => panic!("expected the scratch cap, got {other:?}"),
    }
}

fn deep_dirs() -> serde_json::Value {
    serde_json::json!({ "attack": "deep-dirs", "depth": 30_000 })
}

fn unlinked_write() -> serde_json::Value {
    serde_json::json!({ "attack": "unlinked-write", "mib": 512 })
}

fn deep_path_write() -> serde_json::Value {
    serde_json::json!({ "attack": "deep-path-write", "mib": 512 })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_dirs_in_tmpfs_mode() {
    if let Some(outcome) = attack(ScratchMode::Tmpfs, "deep-dirs", deep_dirs()).await {
        // The inode bound (one per 4 KiB of the cap) stops the chain.
        assert_over_cap(&outcome);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_dirs_in_directory_mode() {
    let outcome = attack(ScratchMode::Directory, "deep-dirs", deep_dirs())
        .await
        .expect("directory mode needs no privileges");
    assert_over_cap(&outcome);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlinked_write_in_tmpfs_mode() {
    if let Some(outcome) = attack(ScratchMode::Tmpfs, "unlinked", unlinked_write()).await {
        assert_over_cap(&outcome);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlinked_write_in_directory_mode() {
    let outcome = attack(ScratchMode::Directory, "unlinked", unlinked_write())
        .await
        .expect("directory mode needs no privileges");
    assert_over_cap(&outcome);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_path_write_in_tmpfs_mode() {
    if let Some(outcome) = attack(ScratchMode::Tmpfs, "deep-path", deep_path_write()).await {
        assert_over_cap(&outcome);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_path_write_in_directory_mode() {
    let outcome = attack(ScratchMode::Directory, "deep-path", deep_path_write())
        .await
        .expect("directory mode needs no privileges");
    assert_over_cap(&outcome);
}

/// A job whose scratch is torn down because its run was abandoned (stuck
/// past the deadline) leaves nothing behind either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_run_still_removes_its_scratch() {
    for mode in [ScratchMode::Directory, ScratchMode::Tmpfs] {
        let Some((sandbox, root)) = sandbox(mode, "abandoned") else {
            continue;
        };
        let handler = sandbox
            .load(
                &boxcar_examples::bytes("fs-probe"),
                HandlerLimits::default(),
                caps(),
            )
            .expect("fs-probe loads");
        let payload = serde_json::json!({ "ops": [
            { "op": "fill", "path": "/tmp/f", "bytes": 1 << 20 },
            { "op": "sleep", "ms": 10_000 },
        ]});
        let (ctx, _) = context();
        let outcome = handler
            .run(
                job_run("fs-probe", &payload.to_string(), Duration::from_millis(300)),
                ctx,
            )
            .await;
        assert_eq!(outcome, Outcome::TimedOut);
        let mut left = entries(&root);
        for _ in 0..100 {
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            left = entries(&root);
        }
        assert_eq!(left, Vec::<String>::new(), "{mode:?}");
        std::fs::remove_dir(&root).expect("the scratch root is empty");
    }
}

#[test]
fn scratch_mode_names_round_trip() {
    for mode in [
        ScratchMode::Auto,
        ScratchMode::Tmpfs,
        ScratchMode::Directory,
    ] {
        assert_eq!(mode.as_str().parse::<ScratchMode>().expect("parses"), mode);
    }
    assert!("zfs".parse::<ScratchMode>().is_err());
}
