//! Directory-tree work for measured scratch directories: measuring what a
//! tree holds, and deleting it.
//!
//! Invariants:
//! - Nothing here recurses: trees of any depth are walked with an explicit
//!   stack, so a guest's 30,000-deep chain cannot overflow a host stack.
//! - Every path operation is relative to an open directory (`*at` calls on
//!   one name), so depth or path length past `PATH_MAX` does not matter.
//! - Symlinks are never followed: entries are opened with `O_NOFOLLOW`.
//! - [`measure`] holds one descriptor per level it is inside and refuses
//!   trees deeper than [`MAX_DEPTH`], so it holds at most `MAX_DEPTH + 2`.
//!   [`remove`] holds at most [`REMOVE_OPEN`] + 2 whatever the depth: it
//!   climbs back with `..`, checking it reached the directory it left.
//! - Entries that vanish while being looked at (the guest is still
//!   running during [`measure`]) are skipped; any other failure is an
//!   error, never a silent zero.

use std::{
    ffi::{CStr, CString},
    io,
    os::{fd::OwnedFd, unix::fs::MetadataExt},
    path::Path,
};

use rustix::{
    fd::AsFd,
    fs::{self as rfs, AtFlags, Dir, FileType, Mode, OFlags},
    io::Errno,
};

/// Deepest directory level (below the scratch root) a running job may make.
pub(crate) const MAX_DEPTH: usize = 64;

/// Bytes charged per directory entry of any kind, so that many empty files
/// or directories count too.
pub(crate) const ENTRY_BYTES: u64 = 4096;

/// Directory descriptors [`remove`] keeps open on its stack.
const REMOVE_OPEN: usize = 8;

/// How often [`remove`] re-reads a directory that was not empty when it
/// tried to remove it (something was created in it meanwhile).
const MAX_RESCANS: u32 = 1000;

/// What [`measure`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Measured {
    /// The tree holds this many bytes (at most the limit given).
    Within(u64),
    /// The tree breaks a bound; says which.
    Over(String),
}

/// Bytes charged to the tree under `root`: per entry [`ENTRY_BYTES`], plus
/// for a regular file the larger of its length and its allocated blocks.
/// Stops early once the charge passes `cap` or the tree is deeper than
/// [`MAX_DEPTH`].
///
/// # Errors
/// An I/O error other than an entry vanishing (e.g. out of descriptors).
pub(crate) fn measure(root: &OwnedFd, cap: u64) -> io::Result<Measured> {
    let mut used = 0u64;
    let mut stack = vec![Dir::read_from(root)?];
    loop {
        let depth = stack.len();
        let Some(top) = stack.last_mut() else {
            break;
        };
        let entry = match top.read() {
            None => {
                stack.pop();
                continue;
            }
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(entry)) => entry,
        };
        let name = entry.file_name();
        if is_dot(name) {
            continue;
        }
        used = used.saturating_add(ENTRY_BYTES);
        if used > cap {
            return Ok(over(used, cap));
        }
        let parent = top.fd()?;
        let stat = match rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(s) => s,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {
                used = used.saturating_add(charge(stat.st_size, stat.st_blocks));
                if used > cap {
                    return Ok(over(used, cap));
                }
            }
            FileType::Directory => {
                if depth > MAX_DEPTH {
                    return Ok(Measured::Over(format!(
                        "the job's scratch directory is more than {MAX_DEPTH} levels deep"
                    )));
                }
                match open_dir(parent, name) {
                    Ok(fd) => stack.push(Dir::new(fd)?),
                    Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            _ => {}
        }
    }
    Ok(Measured::Within(used))
}

fn over(used: u64, cap: u64) -> Measured {
    Measured::Over(format!(
        "the job's scratch directory held more than {used} bytes (entries count 4 KiB each), more than capabilities.scratch ({cap} bytes)"
    ))
}

/// The bytes a file is charged: its length or its allocated blocks,
/// whichever is larger (sparse files count in full).
pub(crate) fn charge(size: impl TryInto<u64>, blocks: impl TryInto<u64>) -> u64 {
    let size = size.try_into().unwrap_or(0);
    let blocks = blocks.try_into().unwrap_or(0);
    size.max(blocks.saturating_mul(512))
}

/// Bytes held by files that were deleted while this process still has them
/// open, on device `dev`, whose path lies under `root` (the host path of a
/// scratch directory). A deleted file whose path is too long for the kernel
/// to name cannot be placed and is counted for every `root` on `dev`.
///
/// # Errors
/// `/proc/self/fd` cannot be listed.
pub(crate) fn open_deleted(root: &Path, dev: u64) -> io::Result<u64> {
    let mut used = 0u64;
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Ok(entry) = entry else { continue };
        let link = entry.path();
        // `stat` follows the descriptor itself, whatever its path length.
        let Ok(meta) = std::fs::metadata(&link) else {
            continue;
        };
        if !meta.is_file() || meta.nlink() != 0 || meta.dev() != dev {
            continue;
        }
        match std::fs::read_link(&link) {
            Ok(target) if target.starts_with(root) => {}
            Ok(_) => continue,
            Err(e) if e.raw_os_error() == Some(Errno::NAMETOOLONG.raw_os_error()) => {}
            Err(_) => continue,
        }
        used = used.saturating_add(charge(meta.size(), meta.blocks()));
    }
    Ok(used)
}

/// One directory on [`remove`]'s stack.
struct Level {
    /// Open while the level is within the last [`REMOVE_OPEN`].
    dir: Option<OwnedFd>,
    /// Inode, to check that climbing with `..` came back here.
    ino: u64,
    /// Name in the parent.
    name: CString,
    /// Sub-directories still to empty and remove.
    pending: Vec<CString>,
}

/// Deletes the directory at `path` and everything in it, without recursion
/// and with a bounded number of open descriptors. Meant for a tree nobody
/// changes any more; a directory that gains entries meanwhile is re-read.
///
/// # Errors
/// The first failure that is not an entry vanishing; the tree is then
/// partly deleted.
pub(crate) fn remove(path: &Path) -> io::Result<()> {
    let root = match rfs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut stack = vec![Level {
        ino: rfs::fstat(&root)?.st_ino,
        pending: clear_files(&root)?,
        dir: Some(root),
        name: CString::default(),
    }];
    // Levels from `open_from` to the top hold their descriptor.
    let mut open_from = 0usize;
    let mut rescans = 0u32;
    while let Some(top) = stack.last_mut() {
        let Some(dir) = top.dir.as_ref() else {
            return Err(io::Error::other("scratch removal lost its directory"));
        };
        if let Some(name) = top.pending.pop() {
            match open_dir(dir, &name) {
                Ok(fd) => {
                    let level = Level {
                        ino: rfs::fstat(&fd)?.st_ino,
                        pending: clear_files(&fd)?,
                        dir: Some(fd),
                        name,
                    };
                    stack.push(level);
                    if stack.len() - open_from > REMOVE_OPEN {
                        stack[open_from].dir = None;
                        open_from += 1;
                    }
                }
                Err(Errno::NOENT) => {}
                Err(Errno::NOTDIR | Errno::LOOP) => unlink(dir, &name, AtFlags::empty())?,
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        let Some(done) = stack.pop() else { break };
        open_from = open_from.min(stack.len().saturating_sub(1));
        let Some(parent) = stack.last_mut() else {
            break;
        };
        if parent.dir.is_none() {
            let Some(child) = done.dir.as_ref() else {
                return Err(io::Error::other("scratch removal lost its directory"));
            };
            let up = open_dir(child, c"..")?;
            if rfs::fstat(&up)?.st_ino != parent.ino {
                return Err(io::Error::other(
                    "a directory moved while the scratch directory was being deleted",
                ));
            }
            parent.dir = Some(up);
        }
        drop(done.dir);
        let Some(dir) = parent.dir.as_ref() else {
            return Err(io::Error::other("scratch removal lost its directory"));
        };
        match rfs::unlinkat(dir, &done.name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(Errno::NOTEMPTY) if rescans < MAX_RESCANS => {
                rescans += 1;
                parent.pending.push(done.name);
            }
            Err(e) => return Err(e.into()),
        }
    }
    match std::fs::remove_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Unlinks every non-directory in `dir`; returns the names of its
/// sub-directories.
fn clear_files(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    let mut subdirs = Vec::new();
    let mut entries = Dir::read_from(dir)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name();
        if is_dot(name) {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(s) => FileType::from_raw_mode(s.st_mode) == FileType::Directory,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e.into()),
            },
            _ => false,
        };
        if is_dir {
            subdirs.push(name.to_owned());
        } else {
            match rfs::unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(Errno::ISDIR) => subdirs.push(name.to_owned()),
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(subdirs)
}

fn unlink(dir: &OwnedFd, name: &CStr, flags: AtFlags) -> io::Result<()> {
    match rfs::unlinkat(dir, name, flags) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn open_dir(parent: impl AsFd, name: &CStr) -> rustix::io::Result<OwnedFd> {
    rfs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

#[cfg(test)]
mod tests {
    use std::{io::Write, os::unix::fs::MetadataExt};

    use super::*;

    fn open(path: &Path) -> OwnedFd {
        rfs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .expect("open dir")
    }

    /// A chain of `depth` directories below `root`, made with `*at` calls.
    fn chain(root: &Path, depth: usize, name: &CStr) {
        let mut dir = open(root);
        for _ in 0..depth {
            rfs::mkdirat(&dir, name, Mode::RWXU).expect("mkdirat");
            dir = open_dir(&dir, name).expect("openat");
        }
        let fd = rfs::openat(
            &dir,
            c"leaf",
            OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .expect("create leaf");
        let mut file = std::fs::File::from(fd);
        file.write_all(&[7u8; 10_000]).expect("write leaf");
    }

    #[test]
    fn removes_a_chain_far_deeper_than_a_stack_or_path_max_allows() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("job");
        std::fs::create_dir(&root).expect("mkdir");
        // 30,000 levels: recursive removal overflows a 2 MiB thread stack.
        chain(&root, 30_000, c"d");
        std::fs::create_dir(root.join("side")).expect("mkdir side");
        std::fs::write(root.join("side/f"), b"x").expect("write");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir outside");
        std::fs::write(outside.join("keep"), b"keep").expect("write");
        std::os::unix::fs::symlink(&outside, root.join("link")).expect("symlink");
        let handle = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || remove(&root).map(|()| root))
            .expect("spawn");
        let root = handle.join().expect("no stack overflow").expect("removed");
        assert!(!root.exists());
        assert!(outside.join("keep").exists(), "symlinks are not followed");
    }

    #[test]
    fn removes_paths_longer_than_path_max() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("job");
        std::fs::create_dir(&root).expect("mkdir");
        let long = CString::new("n".repeat(250)).expect("name");
        chain(&root, 30, &long);
        remove(&root).expect("removed");
        assert!(!root.exists());
    }

    #[test]
    fn measure_counts_deep_paths_and_refuses_deep_trees() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("job");
        std::fs::create_dir(&root).expect("mkdir");
        let long = CString::new("n".repeat(250)).expect("name");
        chain(&root, 20, &long);
        // 20 dirs + the leaf, 4 KiB each, plus the leaf's 10,000 bytes
        // (at least: its blocks may round up).
        let Measured::Within(used) = measure(&open(&root), u64::MAX).expect("measured") else {
            panic!("within");
        };
        assert!(used >= 21 * ENTRY_BYTES + 10_000, "{used}");
        assert!(matches!(
            measure(&open(&root), 50_000).expect("measured"),
            Measured::Over(_)
        ));
        remove(&root).expect("removed");

        std::fs::create_dir(&root).expect("mkdir");
        chain(&root, MAX_DEPTH + 2, c"d");
        match measure(&open(&root), u64::MAX).expect("measured") {
            Measured::Over(why) => assert!(why.contains("levels deep"), "{why}"),
            other => panic!("expected the depth bound, got {other:?}"),
        }
        remove(&root).expect("removed");
    }

    #[test]
    fn open_deleted_counts_unlinked_files_under_the_root_only() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (a, b) = (tmp.path().join("job-1"), tmp.path().join("job-10"));
        std::fs::create_dir(&a).expect("mkdir");
        std::fs::create_dir(&b).expect("mkdir");
        let dev = std::fs::metadata(&a).expect("stat").dev();
        let a = a.canonicalize().expect("canonical");
        let b = b.canonicalize().expect("canonical");
        let mut held = std::fs::File::create(b.join("f")).expect("create");
        held.write_all(&[1u8; 1 << 20]).expect("write");
        std::fs::remove_file(b.join("f")).expect("unlink");
        assert_eq!(open_deleted(&a, dev).expect("listed"), 0);
        assert!(open_deleted(&b, dev).expect("listed") >= 1 << 20);
        drop(held);
        assert_eq!(open_deleted(&b, dev).expect("listed"), 0);
    }
}
