//! `boxcar bench`: the queue benchmarks through the real dispatcher against
//! `--db`, with a bundled WASM component (default: the no-op; the sleep
//! guest for `inflight`) or a native handler that does the same. Prints one
//! JSON line per workload, each saying whether `RUST_BACKTRACE` was set.

use std::sync::Arc;

use boxcar_queue::{
    bench::{self, BenchConfig, NoopHandler, SleepHandler, TypesConfig},
    connect, Handler,
};
use boxcar_sandbox::Sandbox;

use super::context::Context;
use crate::error::usage;
use crate::{
    cli::{BenchArgs, BenchHandler, Workload},
    sandbox_glue,
};

/// The bundled example `name` loaded in a sandbox whose pool holds at
/// least `slots` instances (and as many as the configuration says).
fn wasm_handler(context: &Context, name: &str, slots: u32) -> anyhow::Result<Arc<dyn Handler>> {
    let component = boxcar_examples::get(name)
        .ok_or_else(|| anyhow::anyhow!("the {name} example is missing from this build"))?
        .component()?;
    let mut config = sandbox_glue::sandbox_config(&context.config.sandbox);
    config.pool_instances = config.pool_instances.max(slots);
    let sandbox = Sandbox::new(config)?;
    let loaded = sandbox.load(
        component,
        boxcar_sandbox::HandlerLimits::default(),
        boxcar_sandbox::Capabilities::default(),
    )?;
    Ok(loaded)
}

pub async fn run(context: Context, args: BenchArgs) -> anyhow::Result<()> {
    if args.jobs == 0
        || args.concurrency == 0
        || args.types == 0
        || args.batch == 0
        || args.producers == 0
        || args.rows == Some(0)
        || args.inflight == 0
    {
        return Err(usage(
            "--jobs, --concurrency, --types, --batch, --producers, --rows and --inflight must be positive",
        ));
    }
    let store = connect(&context.db).await?;
    let (handler, system): (Arc<dyn Handler>, &str) = match args.handler {
        BenchHandler::Native => (Arc::new(NoopHandler), "boxcar-native"),
        BenchHandler::Wasm => (wasm_handler(&context, "noop", 0)?, "boxcar-wasm"),
    };
    let config = BenchConfig {
        system: system.to_string(),
        drain_jobs: args.jobs,
        single_jobs: (args.jobs / 10).max(1),
        drain_concurrency: args.concurrency,
        ..BenchConfig::default()
    };
    if matches!(args.workload, Workload::Drain | Workload::All) {
        let result = bench::drain(store.clone(), handler.clone(), &config).await?;
        println!("{}", result.to_json_line());
    }
    if matches!(args.workload, Workload::Latency | Workload::All) {
        let result = bench::latency(store.clone(), handler.clone(), &config).await?;
        println!("{}", result.to_json_line());
    }
    let batched = BenchConfig {
        batch_size: args.batch,
        producers: args.producers,
        ..config.clone()
    };
    if args.workload == Workload::Enqueue {
        let result = bench::enqueue(store.clone(), &batched).await?;
        println!("{}", result.to_json_line());
    }
    if args.workload == Workload::Backlog {
        let rows = args.rows.unwrap_or(1_000_000);
        let result = bench::backlog(store.clone(), handler.clone(), &batched, rows).await?;
        println!("{}", result.to_json_line());
    }
    if args.workload == Workload::Retained {
        let rows = args.rows.unwrap_or(5_000_000);
        let result = bench::retained(store.clone(), handler.clone(), &batched, rows).await?;
        println!("{}", result.to_json_line());
    }
    if args.workload == Workload::Inflight {
        let sleeper: Arc<dyn Handler> = match args.handler {
            BenchHandler::Native => Arc::new(SleepHandler),
            BenchHandler::Wasm => wasm_handler(&context, "sleep", args.inflight)?,
        };
        let inflight = BenchConfig {
            drain_concurrency: args.inflight,
            ..batched.clone()
        };
        let payload = serde_json::json!({ "ms": args.wait_ms });
        let result = bench::inflight(store.clone(), sleeper, &inflight, &payload).await?;
        println!("{}", result.to_json_line());
    }
    if args.workload == Workload::Types {
        let types = TypesConfig {
            types: args.types,
            idle: std::time::Duration::from_secs(args.idle_secs),
        };
        let result = bench::types(store.clone(), handler.clone(), &config, &types).await?;
        println!("{}", result.to_json_line());
    }
    Ok(())
}
