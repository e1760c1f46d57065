//! The binary's memory allocator: mimalloc instead of the system's.
//!
//! A host that runs untrusted guests sees bursts of large, short-lived
//! allocations (a guest's huge result, a log flood, a big payload) on many
//! threads. glibc's allocator keeps what such bursts freed in per-thread
//! arenas, so the host's resident memory ratchets up with every burst and
//! does not come back (the containment soak grew ≈ 60 MiB with it, of which
//! ≈ 8 MiB was live); mimalloc returns freed pages to the system and keeps
//! the same soak within ≈ 30 MiB of where it started. It is built without
//! transparent-huge-page hints (`no_thp`): with them, every touched 4 KiB of
//! an allocator region could fault in 2 MiB, and the idle host started at
//! ≈ 200 MiB instead of ≈ 60.
//!
//! Invariant: only the binary chooses the allocator (its `#[global_allocator]`
//! is in `main.rs`); the libraries, this crate's included, stay
//! allocator-neutral.

/// Environment for a child process of this binary that runs under a memory
/// rlimit (the compile child): mimalloc then commits memory page by page as
/// it is used instead of whole arenas up front, so `RLIMIT_DATA` counts what
/// the child uses. Without it the Rust `echo` needs a ≈ 96 MiB budget to
/// compile; with it, ≈ 32 MiB.
pub const RLIMITED_CHILD_ENV: [(&str, &str); 3] = [
    ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
    ("MIMALLOC_PAGE_COMMIT_ON_DEMAND", "1"),
    ("MIMALLOC_PAGEMAP_COMMIT", "0"),
];
