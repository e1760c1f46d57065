//! The handlers directory, read in one place: which pairs it holds
//! ([`pairs`]), their valid manifests ([`manifests`], for producers and
//! inspection), and each module's digest, computed once per change of the
//! file ([`ModuleDigests`]).
//!
//! Invariants:
//! - A pair is `name.wasm` beside `name.toml`; a module without a manifest
//!   (or the reverse) and hidden files (`.name.wasm`) are not pairs yet.
//! - A module whose size, modification time and inode are unchanged since
//!   it was last hashed is not read again; one over the module size limit
//!   is never read (its size and time stand in for its bytes).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::SystemTime,
};

use boxcar_sandbox::ModuleBytes;

use crate::manifest::Manifest;

/// One `name.wasm` + `name.toml` pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    /// The module file.
    pub module: PathBuf,
    /// The manifest file.
    pub manifest: PathBuf,
}

/// The pairs in `dir`, by name (file stem).
///
/// # Errors
/// When the directory cannot be listed.
pub fn pairs(dir: &Path) -> std::io::Result<BTreeMap<String, Pair>> {
    let mut pairs = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("wasm") {
            continue;
        }
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let manifest = path.with_extension("toml");
        if manifest.is_file() {
            pairs.insert(
                name.to_string(),
                Pair {
                    module: path.clone(),
                    manifest,
                },
            );
        }
    }
    Ok(pairs)
}

/// The valid manifests of the pairs in `dir`; an unreadable directory or an
/// invalid manifest contributes nothing (deploy reports those).
pub fn manifests(dir: &Path) -> Vec<Manifest> {
    pairs(dir)
        .map(|pairs| {
            pairs
                .values()
                .filter_map(|pair| Manifest::load(&pair.manifest).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// What identifies one version of a module file without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let inode = 0;
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode,
        }
    }
}

/// A module's identity for change detection: its digest, or (over the size
/// limit) its size and time.
#[derive(Debug)]
pub struct Seen {
    /// `sha256:<hex>`, or `oversized:<len>:<time>`.
    pub key: String,
    /// The bytes, when this look read them (a new or changed file).
    pub read: Option<ModuleBytes>,
}

/// Module digests by pair name, each with the stamp of the file it hashed.
#[derive(Default)]
pub struct ModuleDigests {
    known: BTreeMap<String, (Stamp, String)>,
}

impl ModuleDigests {
    /// The identity of `module` (pair `name`): the remembered digest when
    /// the file's stamp is unchanged, else the file is read and hashed (or,
    /// over `max_module`, only measured).
    ///
    /// # Errors
    /// When the file cannot be read.
    pub fn look(&mut self, name: &str, module: &Path, max_module: u64) -> std::io::Result<Seen> {
        // Stamped before reading, as in `read`.
        let stamp = Stamp::of(&std::fs::metadata(module)?);
        if stamp.len > max_module {
            self.known.remove(name);
            return Ok(Seen {
                key: format!("oversized:{}:{:?}", stamp.len, stamp.modified),
                read: None,
            });
        }
        if let Some((known, digest)) = self.known.get(name) {
            if *known == stamp {
                return Ok(Seen {
                    key: format!("sha256:{digest}"),
                    read: None,
                });
            }
        }
        let bytes = ModuleBytes::new(std::fs::read(module)?);
        self.known
            .insert(name.to_string(), (stamp, bytes.digest().to_string()));
        Ok(Seen {
            key: format!("sha256:{}", bytes.digest()),
            read: Some(bytes),
        })
    }

    /// Reads and hashes `module` (pair `name`) to compile it, and remembers
    /// its digest; `None` when it is over `max_module` or cannot be read
    /// (then [`super::prepare`] measures it and says why).
    pub fn read(&mut self, name: &str, module: &Path, max_module: u64) -> Option<ModuleBytes> {
        // Stamped before reading: a file replaced meanwhile is read again
        // next time, never taken for the old one.
        let stamp = Stamp::of(&std::fs::metadata(module).ok()?);
        if stamp.len > max_module {
            return None;
        }
        let bytes = ModuleBytes::new(std::fs::read(module).ok()?);
        self.known
            .insert(name.to_string(), (stamp, bytes.digest().to_string()));
        Some(bytes)
    }

    /// Forgets every pair not in `present`.
    pub fn retain(&mut self, present: &BTreeMap<String, Pair>) {
        self.known.retain(|name, _| present.contains_key(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_need_both_files_and_a_visible_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        for file in ["a.wasm", "a.toml", "b.wasm", "c.toml", ".d.wasm", ".d.toml"] {
            std::fs::write(dir.path().join(file), "x").expect("write");
        }
        let pairs = pairs(dir.path()).expect("listed");
        assert_eq!(pairs.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(pairs["a"].manifest, dir.path().join("a.toml"));
    }

    #[test]
    fn an_unchanged_module_is_not_read_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let module = dir.path().join("a.wasm");
        std::fs::write(&module, "one").expect("write");
        let mut digests = ModuleDigests::default();
        let first = digests.look("a", &module, 1 << 20).expect("look");
        assert!(first.read.is_some(), "a new file is read");
        let again = digests.look("a", &module, 1 << 20).expect("look");
        assert!(again.read.is_none(), "an unchanged file is not read");
        assert_eq!(again.key, first.key);

        let replacement = dir.path().join("a.partial");
        std::fs::write(&replacement, "two").expect("write");
        std::fs::rename(&replacement, &module).expect("rename");
        let changed = digests.look("a", &module, 1 << 20).expect("look");
        assert!(changed.read.is_some(), "a replaced file is read");
        assert_ne!(changed.key, first.key);

        let big = digests.look("a", &module, 2).expect("look");
        assert!(big.read.is_none() && big.key.starts_with("oversized:"));
    }
}
