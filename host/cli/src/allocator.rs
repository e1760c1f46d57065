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
//! The C code linked into the binary (SQLite) still allocates through
//! glibc's `malloc`, one arena per thread that used it. SQLite's page caches
//! churn there as jobs write logs and results, and glibc keeps the pages
//! such churn freed inside its arenas: the containment soak ended with
//! ≈ 6–9 MiB of them resident. [`give_back_freed_c_heap`] returns them to
//! the system; `serve` calls it every few seconds.
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

/// Free bytes glibc's arenas may hold before [`give_back_freed_c_heap`]
/// trims them: below it, trimming is not worth the arena locks it takes.
const C_HEAP_FREE_WORTH_TRIMMING: usize = 1 << 20;

/// Returns the pages glibc's arenas hold free (more than
/// [`C_HEAP_FREE_WORTH_TRIMMING`] bytes of them) to the system; the bytes
/// that were free when it looked, or 0 when it did not trim. It locks each
/// arena in turn, so it runs off the async runtime. A no-op where the C
/// library is not glibc.
pub fn give_back_freed_c_heap() -> usize {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallinfo2` and `malloc_trim` only read and adjust
        // glibc's own allocator state, under its arena locks; neither takes
        // or returns pointers into memory that Rust code owns.
        #[allow(unsafe_code)]
        let free = unsafe { libc::mallinfo2() }.fordblks;
        if free < C_HEAP_FREE_WORTH_TRIMMING {
            return 0;
        }
        #[allow(unsafe_code)]
        // SAFETY: as above.
        unsafe {
            libc::malloc_trim(0);
        }
        free
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        0
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::give_back_freed_c_heap;

    const BLOCK: usize = 64 << 10;
    const BLOCKS: usize = 128;
    const PAGE: usize = 4096;

    /// How many of the pages strictly inside `block` are resident.
    #[allow(unsafe_code)]
    fn resident_pages(block: usize) -> usize {
        let first = (block + PAGE) & !(PAGE - 1);
        let pages = (block + BLOCK - first) / PAGE - 1;
        let mut flags = vec![0u8; pages];
        // SAFETY: `mincore` only reads the page tables of the range and
        // writes one byte per page into `flags`, which holds `pages` bytes.
        let rc =
            unsafe { libc::mincore(first as *mut libc::c_void, pages * PAGE, flags.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        flags.iter().filter(|f| *f & 1 == 1).count()
    }

    #[test]
    #[allow(unsafe_code)]
    fn pages_the_c_heap_freed_go_back_to_the_system() {
        // SAFETY: blocks from `malloc`, written within their size, freed
        // once; the addresses are only inspected after the free.
        let blocks: Vec<usize> = (0..BLOCKS)
            .map(|_| unsafe {
                let block = libc::malloc(BLOCK).cast::<u8>();
                assert!(!block.is_null());
                std::ptr::write_bytes(block, 0xa5, BLOCK);
                block as usize
            })
            .collect();
        // Keeps the freed blocks off the top of the heap, which glibc would
        // trim by itself.
        let pin = unsafe { libc::malloc(BLOCK) };
        for block in &blocks {
            unsafe { libc::free(*block as *mut libc::c_void) };
        }
        let before: usize = blocks.iter().map(|b| resident_pages(*b)).sum();
        let freed = give_back_freed_c_heap();
        let after: usize = blocks.iter().map(|b| resident_pages(*b)).sum();
        unsafe { libc::free(pin) };
        assert!(freed >= BLOCKS * BLOCK, "glibc reported {freed} free bytes");
        assert!(
            before > 0,
            "the freed blocks were not resident to begin with"
        );
        assert!(
            after * 10 < before,
            "{after} of the freed blocks' {before} resident pages are still resident"
        );
    }
}
