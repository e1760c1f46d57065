//! Host paths no `dirs` grant may reach: the handlers directory (a guest
//! that can write there deploys a handler granting itself anything), the
//! compile cache (native code the host loads without recompiling), the
//! database file (and its directory, which holds the WAL) and the scratch
//! root (other jobs' `/tmp`).
//!
//! Invariants:
//! - A grant that equals, lies inside, or contains a protected path is
//!   refused at deploy, naming both paths; `ro` grants included (reading
//!   the database or another job's scratch is harm enough).
//! - Paths are compared after canonicalization, component by component:
//!   symlinks are resolved, and a path that does not exist yet is resolved
//!   through its nearest existing ancestor.

use std::path::{Component, Path, PathBuf};

use boxcar_sandbox::DirGrant;

/// A `dirs` grant overlaps a protected path.
#[derive(Debug, thiserror::Error)]
#[error("capabilities.dirs: the grant of {grant} ({resolved}) {relation} the {what} {protected}; a guest must never reach it: grant a directory outside it")]
pub struct GrantOverlap {
    /// The host path as the manifest wrote it.
    pub grant: String,
    /// The grant, canonicalized.
    pub resolved: String,
    /// `is`, `is inside` or `contains`.
    pub relation: &'static str,
    /// What the protected path is, e.g. `handlers directory`.
    pub what: &'static str,
    /// The protected path, canonicalized.
    pub protected: String,
}

/// The paths of this host that grants must stay clear of.
#[derive(Clone, Debug, Default)]
pub struct ProtectedPaths {
    paths: Vec<(&'static str, PathBuf)>,
}

impl ProtectedPaths {
    /// Adds `path`, described as `what` (e.g. `compile cache`).
    pub fn protect(&mut self, what: &'static str, path: &Path) {
        self.paths.push((what, resolve(path)));
    }

    /// Adds the database file of a `sqlite://PATH` URL (nothing for other
    /// stores, whose data is not on this host's file system).
    pub fn protect_database(&mut self, db_url: &str) {
        let path = db_url
            .strip_prefix("sqlite://")
            .or_else(|| db_url.strip_prefix("sqlite:"))
            .map(|rest| rest.split('?').next().unwrap_or(rest))
            .filter(|p| !p.is_empty());
        if let Some(path) = path {
            self.protect("database file", Path::new(path));
        }
    }

    /// Checks every grant against every protected path.
    ///
    /// # Errors
    /// The first overlap found.
    pub fn check(&self, grants: &[DirGrant]) -> Result<(), GrantOverlap> {
        for grant in grants {
            let resolved = resolve(&grant.host);
            for (what, protected) in &self.paths {
                let relation = if resolved == *protected {
                    "is"
                } else if resolved.starts_with(protected) {
                    "is inside"
                } else if protected.starts_with(&resolved) {
                    "contains"
                } else {
                    continue;
                };
                return Err(GrantOverlap {
                    grant: grant.host.display().to_string(),
                    resolved: resolved.display().to_string(),
                    relation,
                    what,
                    protected: protected.display().to_string(),
                });
            }
        }
        Ok(())
    }
}

/// `path` absolute, with symlinks resolved as far as it exists; the part
/// that does not exist yet is appended lexically (`.` dropped, `..` applied).
fn resolve(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            let mut out = canonical;
            for part in rest.iter().rev() {
                match part {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::Normal(name) => out.push(name),
                    _ => {}
                }
            }
            return out;
        }
        match (existing.parent(), existing.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use boxcar_sandbox::DirMode;

    fn grant(host: &Path) -> DirGrant {
        DirGrant {
            host: host.to_path_buf(),
            guest: "/data".into(),
            mode: DirMode::ReadOnly,
        }
    }

    #[test]
    fn grants_touching_a_protected_path_are_refused_naming_both() {
        let root = tempfile::tempdir().expect("tempdir");
        let handlers = root.path().join("handlers");
        let data = root.path().join("data");
        std::fs::create_dir_all(handlers.join("sub")).expect("mkdir");
        std::fs::create_dir_all(&data).expect("mkdir");
        let mut protected = ProtectedPaths::default();
        protected.protect("handlers directory", &handlers);
        protected.protect_database(&format!(
            "sqlite://{}/db/boxcar.db?mode=rwc",
            root.path().display()
        ));
        #[cfg(unix)]
        std::os::unix::fs::symlink(&handlers, root.path().join("innocent")).expect("symlink");

        let cases = [
            (handlers.clone(), "is the handlers directory"),
            (handlers.join("sub"), "is inside the handlers directory"),
            (root.path().to_path_buf(), "contains the handlers directory"),
            (root.path().join("handlers/../handlers/sub"), "is inside"),
            (root.path().join("db"), "contains the database file"),
            #[cfg(unix)]
            (root.path().join("innocent"), "is the handlers directory"),
        ];
        for (path, expected) in cases {
            let error = protected.check(&[grant(&path)]).unwrap_err().to_string();
            assert!(error.contains(expected), "{}: {error}", path.display());
            assert!(error.contains(&path.display().to_string()), "{error}");
        }
        assert!(protected.check(&[grant(&data)]).is_ok());
        assert!(protected
            .check(&[grant(&root.path().join("handlers-2"))])
            .is_ok());
    }
}
