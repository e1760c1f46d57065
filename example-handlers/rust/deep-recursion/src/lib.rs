//! Hostile: recurses without bound. Small frames, so the wasm stack (not the
//! shadow stack in linear memory) overflows: a `StackOverflow` trap.

use boxcar_guest::{Error, Job};

#[inline(never)]
fn down(n: u64) -> u64 {
    if std::hint::black_box(n) == u64::MAX {
        return 0;
    }
    std::hint::black_box(down(n + 1)).wrapping_add(1)
}

fn deep_recursion(_job: Job<serde_json::Value>) -> Result<u64, Error> {
    Ok(down(0))
}

boxcar_guest::handler!(deep_recursion);
