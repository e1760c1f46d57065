//! Per-job scratch directories (`Capabilities::scratch`): creation, the size
//! cap, and teardown.
//!
//! Invariants:
//! - In tmpfs mode each job's scratch is its own tmpfs, mounted with a size
//!   of the cap (rounded up to whole pages, plus one page so that going over
//!   is visible) and an inode bound; the kernel refuses writes past it, and
//!   files deleted while open still count. Teardown is a lazy unmount and
//!   the removal of the empty mount point.
//! - In directory mode the cap is measured every [`POLL`] while the job
//!   runs and once more when it ends: the tree (see [`crate::tree`]) plus
//!   files the guest deleted but still holds open. Trees deeper than
//!   [`tree::MAX_DEPTH`] break the cap. At most [`WALKS`] measurements run
//!   at once, bounding the descriptors they hold.
//! - A job over its cap ends `LimitExceeded`, never with its own answer.
//! - Teardown never runs a walk on an async worker thread: it runs on a
//!   blocking thread (awaited on the normal path, detached when the job's
//!   future is dropped), so the directory is gone however the job ended.

use std::{
    fs::DirBuilder,
    io,
    os::{
        fd::OwnedFd,
        unix::fs::{DirBuilderExt, MetadataExt},
    },
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use boxcar_queue::{LimitKind, Outcome};
use rustix::{
    fs::{Mode, OFlags},
    mount::{MountFlags, UnmountFlags},
};
use tokio::sync::Semaphore;

use crate::{
    config::{ScratchMode, SCRATCH_GUEST_PATH},
    tree::{self, Measured},
    SandboxError,
};

/// How often a running job's scratch is checked against its cap.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// Directory-mode measurements that may run at once (each holds up to
/// `tree::MAX_DEPTH + 2` descriptors).
const WALKS: usize = 2;

static WALK_PERMITS: Semaphore = Semaphore::const_new(WALKS);

/// Distinguishes this process's scratch directories.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// How scratch caps are enforced, once resolved (never `Auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Tmpfs,
    Directory,
}

impl Kind {
    pub(crate) fn mode(self) -> ScratchMode {
        match self {
            Self::Tmpfs => ScratchMode::Tmpfs,
            Self::Directory => ScratchMode::Directory,
        }
    }
}

/// Creates the scratch root and decides the mode: `Auto` mounts a tiny
/// tmpfs once to see whether this host may mount. Returns the root (made
/// absolute and free of symlinks when it exists) and the mode.
///
/// # Errors
/// [`SandboxError::Config`] when `Tmpfs` is asked for and mounting fails.
pub(crate) fn resolve(root: PathBuf, mode: ScratchMode) -> Result<(PathBuf, Kind), SandboxError> {
    let made = std::fs::create_dir_all(&root);
    let root = root.canonicalize().unwrap_or(root);
    let probe = |made: io::Result<()>| -> io::Result<()> {
        made?;
        let dir = fresh_dir(&root, "probe")?;
        let mounted = mount_tmpfs(&dir, 1, 4);
        if mounted.is_ok() {
            rustix::mount::unmount(&dir, UnmountFlags::DETACH)?;
        }
        std::fs::remove_dir(&dir)?;
        mounted
    };
    let kind = match mode {
        ScratchMode::Directory => Kind::Directory,
        ScratchMode::Tmpfs => {
            probe(made).map_err(|e| {
                SandboxError::Config(format!(
                    "scratch_mode: tmpfs was asked for, but mounting a tmpfs under {} failed ({e}); the host needs CAP_SYS_ADMIN (root) for it, or set scratch_mode to `directory`",
                    root.display()
                ))
            })?;
            Kind::Tmpfs
        }
        ScratchMode::Auto => match probe(made) {
            Ok(()) => Kind::Tmpfs,
            Err(e) => {
                tracing::info!(error = %e, root = %root.display(), "cannot mount tmpfs; scratch caps are measured");
                Kind::Directory
            }
        },
    };
    Ok((root, kind))
}

/// A new, empty, private directory `<prefix>-<pid>-<n>` under `root`.
fn fresh_dir(root: &Path, prefix: &str) -> io::Result<PathBuf> {
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("{prefix}-{}-{n}", std::process::id()));
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
}

fn page_size() -> u64 {
    u64::try_from(rustix::param::page_size()).unwrap_or(4096)
}

/// Mounts a private tmpfs of `pages` pages and `inodes` inodes at `dir`.
fn mount_tmpfs(dir: &Path, pages: u64, inodes: u64) -> io::Result<()> {
    let size = pages.saturating_mul(page_size());
    let data = std::ffi::CString::new(format!("size={size},nr_inodes={inodes},mode=0700"))
        .map_err(io::Error::other)?;
    rustix::mount::mount(
        "boxcar-scratch",
        dir,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        data.as_c_str(),
    )?;
    Ok(())
}

/// One job's scratch directory. Dropping it without [`Scratch::teardown`]
/// removes it on a detached thread.
pub(crate) struct Scratch {
    /// `None` once torn down.
    inner: Option<Inner>,
}

struct Inner {
    path: PathBuf,
    kind: Kind,
    cap: u64,
    /// The directory itself (the tmpfs root in tmpfs mode).
    root: Arc<OwnedFd>,
    /// Its device, for placing deleted-but-open files.
    dev: u64,
}

impl Scratch {
    /// Makes the job's scratch directory under `base`.
    ///
    /// # Errors
    /// Creating, mounting or opening it failed (nothing is left behind).
    pub(crate) fn create(base: &Path, kind: Kind, cap: u64) -> io::Result<Self> {
        let path = fresh_dir(base, "job")?;
        let made = Self::prepare(&path, kind, cap);
        if made.is_err() {
            if kind == Kind::Tmpfs {
                let _ = rustix::mount::unmount(&path, UnmountFlags::DETACH);
            }
            let _ = std::fs::remove_dir(&path);
        }
        let (root, dev) = made?;
        Ok(Self {
            inner: Some(Inner {
                path,
                kind,
                cap,
                root: Arc::new(root),
                dev,
            }),
        })
    }

    fn prepare(path: &Path, kind: Kind, cap: u64) -> io::Result<(OwnedFd, u64)> {
        if kind == Kind::Tmpfs {
            let page = page_size();
            let pages = cap.div_ceil(page).saturating_add(1);
            let inodes = (cap / tree::ENTRY_BYTES).max(1).saturating_add(2);
            mount_tmpfs(path, pages, inodes)?;
        }
        let root = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let dev = std::fs::metadata(path)?.dev();
        Ok((root, dev))
    }

    /// The host path the guest sees as [`SCRATCH_GUEST_PATH`].
    pub(crate) fn path(&self) -> Option<&Path> {
        self.inner.as_ref().map(|i| i.path.as_path())
    }

    /// Resolves once the scratch is over its cap; checks every [`POLL`].
    pub(crate) async fn watch(&self) -> Outcome {
        loop {
            tokio::time::sleep(POLL).await;
            if let Some(outcome) = self.check().await {
                return outcome;
            }
        }
    }

    /// `Some(LimitExceeded)` when the scratch is over its cap now.
    pub(crate) async fn check(&self) -> Option<Outcome> {
        let inner = self.inner.as_ref()?;
        let over = match inner.kind {
            Kind::Tmpfs => tmpfs_over(&inner.root, inner.cap),
            Kind::Directory => {
                let _permit = WALK_PERMITS.acquire().await.ok();
                let (root, path, dev, cap) = (
                    Arc::clone(&inner.root),
                    inner.path.clone(),
                    inner.dev,
                    inner.cap,
                );
                tokio::task::spawn_blocking(move || directory_over(&root, &path, dev, cap))
                    .await
                    .unwrap_or_else(|e| Some(format!("measuring it failed: {e}")))
            }
        };
        over.map(|detail| Outcome::LimitExceeded {
            which: LimitKind::Other,
            detail: format!("scratch ({SCRATCH_GUEST_PATH}): {detail}"),
        })
    }

    /// Removes the scratch on a blocking thread and waits for it.
    pub(crate) async fn teardown(mut self) {
        if let Some(inner) = self.inner.take() {
            let _ = tokio::task::spawn_blocking(move || inner.remove()).await;
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            // Not awaited: the job's future was dropped. A plain thread runs
            // even while the async runtime shuts down.
            let spawned = std::thread::Builder::new()
                .name("boxcar-scratch-rm".into())
                .spawn(move || inner.remove());
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start a thread to remove a scratch directory");
            }
        }
    }
}

impl Inner {
    /// Unmounts (tmpfs) and deletes the directory; failures are logged.
    fn remove(self) {
        let Self {
            path, kind, root, ..
        } = self;
        drop(root);
        if kind == Kind::Tmpfs {
            if let Err(e) = rustix::mount::unmount(&path, UnmountFlags::DETACH) {
                tracing::warn!(error = %e, path = %path.display(), "cannot unmount a job's scratch tmpfs");
            }
        }
        if let Err(e) = tree::remove(&path) {
            tracing::warn!(error = %e, path = %path.display(), "cannot remove a job's scratch directory");
        }
    }
}

/// Whether a scratch tmpfs holds more than `cap` bytes or has run out of
/// inodes (then the guest was refused an entry).
fn tmpfs_over(root: &OwnedFd, cap: u64) -> Option<String> {
    let st = match rustix::fs::fstatvfs(root) {
        Ok(st) => st,
        Err(e) => return Some(format!("measuring it failed: {e}")),
    };
    let page = st.f_frsize.max(1);
    let used = st.f_blocks.saturating_sub(st.f_bfree).saturating_mul(page);
    if used > cap.div_ceil(page).saturating_mul(page) {
        return Some(format!(
            "the guest wrote more than capabilities.scratch ({cap} bytes) and was refused (ENOSPC) at {used} bytes"
        ));
    }
    if st.f_ffree == 0 {
        return Some(format!(
            "the guest made more than {} files and directories (one per 4 KiB of capabilities.scratch) and was refused",
            st.f_files.saturating_sub(2)
        ));
    }
    None
}

/// Whether a measured scratch directory is over `cap`.
fn directory_over(root: &OwnedFd, path: &Path, dev: u64, cap: u64) -> Option<String> {
    let in_tree = match tree::measure(root, cap) {
        Ok(Measured::Within(bytes)) => bytes,
        Ok(Measured::Over(why)) => return Some(why),
        Err(e) => return Some(format!("measuring it failed: {e}")),
    };
    let deleted = match tree::open_deleted(path, dev) {
        Ok(bytes) => bytes,
        Err(e) => return Some(format!("listing open files failed: {e}")),
    };
    let used = in_tree.saturating_add(deleted);
    (used > cap).then(|| {
        format!(
            "held {used} bytes ({deleted} in files deleted while open), more than capabilities.scratch ({cap} bytes)"
        )
    })
}
