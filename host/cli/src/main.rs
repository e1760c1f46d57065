//! The `boxcar` binary: chooses the allocator and runs [`boxcar::main`].
//!
//! Exit codes: 0 ok; 1 runtime failure; 2 bad usage or input; 3 the job
//! waited for failed or was cancelled; 4 a wait timed out.

use std::process::ExitCode;

/// mimalloc (see `boxcar::allocator` for why); only the binary chooses it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    boxcar::main()
}
