//! `boxcar bench`: the queue benchmarks through the real dispatcher against
//! `--db`, with the bundled no-op WASM component (default) or a native no-op.
//! Prints one JSON line per workload, each saying whether `RUST_BACKTRACE`
//! was set.

use std::sync::Arc;

use boxcar_queue::{
    bench::{self, BenchConfig, NoopHandler, TypesConfig},
    connect, Handler,
};
use boxcar_sandbox::Sandbox;

use super::context::Context;
use crate::error::usage;
use crate::{
    cli::{BenchArgs, BenchHandler, Workload},
    sandbox_glue,
};

pub async fn run(context: Context, args: BenchArgs) -> anyhow::Result<()> {
    if args.jobs == 0 || args.concurrency == 0 || args.types == 0 || args.batch == 0 {
        return Err(usage(
            "--jobs, --concurrency, --types and --batch must be positive",
        ));
    }
    let store = connect(&context.db).await?;
    let (handler, system): (Arc<dyn Handler>, &str) = match args.handler {
        BenchHandler::Native => (Arc::new(NoopHandler), "boxcar-native"),
        BenchHandler::Wasm => {
            let component = boxcar_examples::get("noop")
                .ok_or_else(|| anyhow::anyhow!("the noop example is missing from this build"))?
                .component()?;
            let sandbox = Sandbox::new(sandbox_glue::sandbox_config(&context.config.sandbox))?;
            let loaded = sandbox.load(
                component,
                boxcar_sandbox::HandlerLimits::default(),
                boxcar_sandbox::Capabilities::default(),
            )?;
            (loaded, "boxcar-wasm")
        }
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
    if args.workload == Workload::Enqueue {
        let config = BenchConfig {
            batch_size: args.batch,
            ..config.clone()
        };
        let result = bench::enqueue(store.clone(), &config).await?;
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
