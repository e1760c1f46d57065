//! Runs each subcommand: loads the [`Context`] (configuration and global
//! flags) once and hands it to the subcommand's module. The modules depend
//! on `context` and `crate::error`, never on this dispatcher.

mod admin;
mod bench;
mod check;
mod context;
mod demo;
mod enqueue;
mod enqueue_jsonl;
mod examples;
mod history;
mod replay;
mod schedules;
mod serve;

use context::Context;

use crate::{
    cli::{Cli, Command},
    error::usage,
};

/// Runs the parsed command with the host's log (and span export) set up
/// from the configuration; batched spans are exported before it returns.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let context = Context::load(&cli)?;
    let telemetry = crate::telemetry::init(&cli, &context.config)?;
    let result = dispatch(cli, context).await;
    telemetry.shutdown().await;
    result
}

async fn dispatch(cli: Cli, context: Context) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(context, args).await,
        Command::Enqueue(args) => enqueue::run(context, args).await,
        Command::Jobs(args) => admin::jobs(context, args).await,
        Command::Job { id } => admin::job(context, &id).await,
        Command::Logs(args) => history::logs(context, args).await,
        Command::Replay(args) => replay::run(context, args).await,
        Command::Counts => admin::counts(context).await,
        Command::Cancel(args) => admin::cancel(context, args).await,
        Command::RetryFailed(args) => admin::retry_failed(context, args).await,
        Command::Prune(args) => admin::prune(context, args).await,
        Command::Handlers => admin::handlers(context).await,
        Command::Schedules(args) => schedules::run(context, args).await,
        Command::Migrate => admin::migrate(context).await,
        Command::Check(args) => check::run(context, args).await,
        Command::Examples { command } => examples::run(context, command),
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(args) => bench::run(context, args).await,
        Command::CompileComponent(_) => Err(usage(
            "compile-component is internal: boxcar runs it as a child process",
        )),
    }
}
