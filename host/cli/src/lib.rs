//! The `boxcar` binary's code as a library: the command line, the HTTP API,
//! the configuration and manifest parsers. `main.rs` only calls [`main`];
//! the library exists so the fuzz targets (`host/fuzz-targets`) and tests
//! can call the real parsers. `anyhow` stops here; everything below uses
//! typed errors.
//!
//! Exit codes: 0 ok; 1 runtime failure; 2 bad usage or input; 3 the job
//! waited for failed or was cancelled; 4 a wait timed out.

mod allocator;
mod api;
mod cli;
mod commands;
mod config;
mod deploy;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod manifest;
mod output;
mod protected;
mod sandbox_glue;
mod schema;
mod telemetry;
mod toml_file;
mod units;
mod views;

use std::process::ExitCode;

use clap::Parser;

/// Parses the command line and runs the command; the process exit code.
pub fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if let cli::Command::CompileComponent(args) = &cli.command {
        // No runtime and no tracing: the child compiles and exits.
        return deploy::compile::child_main(args);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(error::exit_code(&error))
        }
    }
}
