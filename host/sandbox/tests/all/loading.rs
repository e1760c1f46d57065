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
    let (ctx, _) = boxcar_queue::testing::context();
    let outcome = spin
        .run(
            boxcar_queue::testing::job_run("spin", "{}", std::time::Duration::from_secs(10)),
            ctx,
        )
        .await;
    assert_eq!(outcome, boxcar_sandbox::Outcome::FuelExhausted);
}

#[tokio::test]
async fn a_separately_compiled_artifact_loads_into_a_pooling_sandbox() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = Sandbox::new(SandboxConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        pool_instances: 4,
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    let settings = boxcar_sandbox::CodegenSettings::parse(&sandbox.config().codegen().to_string())
        .expect("settings round-trip");
    let module = boxcar_sandbox::ModuleBytes::new(boxcar_examples::bytes("echo"));
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let compile = |wasm: &[u8]| {
        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        boxcar_sandbox::precompile(&settings, wasm)
    };
    let (handler, report) = sandbox
        .load_compiled_by(
            &module,
            HandlerLimits::default(),
            Capabilities::default(),
            &compile,
        )
        .expect("the artifact loads");
    assert!(!report.cache_hit);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    let (ctx, _) = boxcar_queue::testing::context();
    let outcome = handler
        .run(
            boxcar_queue::testing::job_run(
                "echo",
                r#"{"a":1}"#,
                std::time::Duration::from_secs(10),
            ),
            ctx,
        )
        .await;
    assert!(
        matches!(outcome, boxcar_sandbox::Outcome::Succeeded { .. }),
        "{outcome:?}"
    );
    // Cached now: the compiler is not called again.
    sandbox
        .load_compiled_by(
            &module,
            HandlerLimits::default(),
            Capabilities::default(),
            &compile,
        )
        .expect("cache hit");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);

    // An artifact of other codegen settings is refused, not run.
    let other = Sandbox::new(SandboxConfig {
        pooling: false,
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    let fuel = boxcar_sandbox::CodegenSettings {
        fuel: true,
        ..other.config().codegen()
    };
    let refused = other.load_compiled_by(
        &module,
        HandlerLimits::default(),
        Capabilities::default(),
        &|wasm: &[u8]| boxcar_sandbox::precompile(&fuel, wasm),
    );
    match refused {
        Err(SandboxError::Compile(message)) => {
            assert!(message.contains("does not load"), "{message}");
        }
        Err(other) => panic!("expected a compile error, got {other}"),
        Ok(_) => panic!("an artifact of other settings must not load"),
    }
}
