//! Hostile: attacks the host through the scratch directory at `/tmp`.
//!
//! - `{"attack": "deep-dirs", "depth": N}`: a chain of N directories, each
//!   made relative to the one above (no path grows), so the host must
//!   measure and delete a tree far deeper than its stack or `PATH_MAX`.
//! - `{"attack": "unlinked-write", "mib": N}`: creates a file, deletes it,
//!   then writes N MiB into the open file, which no path reaches.
//! - `{"attack": "deep-path-write", "mib": N}`: writes N MiB into a file
//!   whose path is longer than `PATH_MAX` (20 levels of 250-byte names).
//!
//! Write errors (e.g. `ENOSPC`) are counted, not fatal, and the written
//! file and the deepest directory stay open until the job ends. Returns
//! what it managed: `{"depth", "written", "errors", "error"}`.

use std::io::Write;

use boxcar_guest::{Error, Job};
use serde::{Deserialize, Serialize};
use wasip2::filesystem::types::{Descriptor, DescriptorFlags, OpenFlags, PathFlags};

#[derive(Deserialize)]
#[serde(tag = "attack", rename_all = "kebab-case")]
enum Attack {
    DeepDirs { depth: u32 },
    UnlinkedWrite { mib: u64 },
    DeepPathWrite { mib: u64 },
}

#[derive(Serialize, Default)]
struct Report {
    depth: u32,
    written: u64,
    errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

const CHUNK: usize = 64 << 10;

/// The `/tmp` preopen.
fn scratch() -> Result<Descriptor, Error> {
    wasip2::filesystem::preopens::get_directories()
        .into_iter()
        .find(|(_, path)| path == "/tmp")
        .map(|(dir, _)| dir)
        .ok_or_else(|| boxcar_guest::terminal("no /tmp: grant scratch").into())
}

/// Makes `depth` nested directories named `name` below `dir`, each relative
/// to the last; returns the deepest reached and the error that stopped it.
fn chain(dir: Descriptor, depth: u32, name: &str, report: &mut Report) -> Descriptor {
    let mut dir = dir;
    while report.depth < depth {
        let next = dir.create_directory_at(name).and_then(|()| {
            dir.open_at(
                PathFlags::empty(),
                name,
                OpenFlags::DIRECTORY,
                DescriptorFlags::READ | DescriptorFlags::MUTATE_DIRECTORY,
            )
        });
        match next {
            Ok(next) => {
                dir = next;
                report.depth += 1;
            }
            Err(e) => {
                report.error = Some(format!("mkdir at depth {}: {e:?}", report.depth));
                break;
            }
        }
    }
    dir
}

fn scratch_attack(job: Job<Attack>) -> Result<Report, Error> {
    let mut report = Report::default();
    let chunk = vec![0x5au8; CHUNK];
    match job.payload {
        Attack::DeepDirs { depth } => {
            let deepest = chain(scratch()?, depth, "d", &mut report);
            std::mem::forget(deepest);
        }
        Attack::UnlinkedWrite { mib } => {
            let mut file = std::fs::File::create("/tmp/hidden")
                .map_err(|e| boxcar_guest::terminal(format!("create: {e}")))?;
            std::fs::remove_file("/tmp/hidden")
                .map_err(|e| boxcar_guest::terminal(format!("unlink: {e}")))?;
            for _ in 0..mib * 16 {
                match file.write_all(&chunk) {
                    Ok(()) => report.written += CHUNK as u64,
                    Err(e) => {
                        report.errors += 1;
                        report.error.get_or_insert(e.to_string());
                    }
                }
            }
            std::mem::forget(file);
        }
        Attack::DeepPathWrite { mib } => {
            let name = "n".repeat(250);
            let deepest = chain(scratch()?, 20, &name, &mut report);
            let file = deepest
                .open_at(
                    PathFlags::empty(),
                    "file",
                    OpenFlags::CREATE,
                    DescriptorFlags::READ | DescriptorFlags::WRITE,
                )
                .map_err(|e| boxcar_guest::terminal(format!("create: {e:?}")))?;
            let mut offset = 0u64;
            for _ in 0..mib * 16 {
                match file.write(&chunk, offset) {
                    Ok(n) => {
                        offset += n;
                        report.written += n;
                    }
                    Err(e) => {
                        report.errors += 1;
                        report.error.get_or_insert(format!("{e:?}"));
                    }
                }
            }
            std::mem::forget(file);
            std::mem::forget(deepest);
        }
    }
    Ok(report)
}

boxcar_guest::handler!(scratch_attack);
