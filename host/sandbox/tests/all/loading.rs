//! Loading: the compile cache, and rejecting what is not a handler.

use boxcar_sandbox::{Capabilities, HandlerLimits, Sandbox, SandboxConfig, SandboxError};

#[test]
fn second_load_of_the_same_bytes_is_a_cache_hit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = Sandbox::new(SandboxConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        pooling: false,
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    let bytes = boxcar_examples::bytes("echo");
    let (_, first) = sandbox
        .load_with_report(&bytes, HandlerLimits::default(), Capabilities::default())
        .expect("first load");
    let (_, second) = sandbox
        .load_with_report(&bytes, HandlerLimits::default(), Capabilities::default())
        .expect("second load");
    assert!(!first.cache_hit);
    assert!(second.cache_hit);
    assert_eq!(first.digest, second.digest);
    assert_eq!(sandbox.compiles(), 1);
    assert_eq!(sandbox.cache_hits(), 1);
    assert!(
        second.compile_time < first.compile_time,
        "{first:?} {second:?}"
    );
}

#[test]
fn bytes_that_are_not_a_component_are_rejected() {
    let sandbox = Sandbox::new(SandboxConfig {
        pooling: false,
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    let err = sandbox
        .load(
            b"not wasm at all",
            HandlerLimits::default(),
            Capabilities::default(),
        )
        .err()
        .expect("must fail");
    assert!(matches!(err, SandboxError::Compile(_)), "{err}");
}

#[test]
fn a_component_without_the_handler_export_is_rejected() {
    let sandbox = Sandbox::new(SandboxConfig {
        pooling: false,
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    let err = sandbox
        .load(
            b"(component)",
            HandlerLimits::default(),
            Capabilities::default(),
        )
        .err()
        .expect("must fail");
    assert!(matches!(err, SandboxError::World(_)), "{err}");
    assert!(err.to_string().contains("handler"), "{err}");
}

#[test]
fn invalid_configuration_is_rejected_at_construction() {
    let err = Sandbox::new(SandboxConfig {
        epoch_tick: std::time::Duration::ZERO,
        ..SandboxConfig::default()
    })
    .err()
    .expect("must fail");
    assert!(err.to_string().contains("epoch_tick"), "{err}");
    let sandbox = Sandbox::new(SandboxConfig {
        pooling: false,
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    let err = sandbox
        .load(
            &boxcar_examples::bytes("noop"),
            HandlerLimits {
                fuel: Some(1000),
                ..HandlerLimits::default()
            },
            Capabilities::default(),
        )
        .err()
        .expect("fuel needs a fuel engine");
    assert!(err.to_string().contains("fuel"), "{err}");
}

#[tokio::test]
async fn fuel_runs_out_on_a_spinning_guest() {
    let sandbox = Sandbox::new(SandboxConfig {
        fuel: true,
        pooling: false,
        cache_dir: Some(crate::common::cache_dir()),
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    let spin = sandbox
        .load(
            &boxcar_examples::bytes("spin"),
            HandlerLimits {
                fuel: Some(5_000_000),
                ..HandlerLimits::default()
            },
            Capabilities::default(),
        )
        .expect("loads");
    let (ctx, _) = crate::common::new_ctx();
    let outcome = spin
        .run(
            crate::common::job("spin", "{}", std::time::Duration::from_secs(10)),
            ctx,
        )
        .await;
    assert_eq!(outcome, boxcar_sandbox::Outcome::FuelExhausted);
}
