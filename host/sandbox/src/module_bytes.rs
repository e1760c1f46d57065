//! [`ModuleBytes`]: a component's bytes with their sha256, hashed once.
//!
//! Invariant: the digest is always the sha256 of the bytes it travels
//! with (there is no constructor that takes a digest), so a caller that
//! needs the digest (for a pin, a deploy record, a change check) and the
//! sandbox (for its compile cache key) share one hash.

use sha2::{Digest, Sha256};

/// A component's bytes and their sha256 (lowercase hex).
#[derive(Clone)]
pub struct ModuleBytes {
    bytes: Vec<u8>,
    digest: String,
}

impl ModuleBytes {
    /// Hashes `bytes`.
    pub fn new(bytes: Vec<u8>) -> Self {
        let digest = digest(&bytes);
        Self { bytes, digest }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Their sha256, lowercase hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }
}

/// The sha256 of `bytes`, lowercase hex.
pub(crate) fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl std::fmt::Debug for ModuleBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleBytes")
            .field("len", &self.bytes.len())
            .field("digest", &self.digest)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::ModuleBytes;

    #[test]
    fn the_digest_is_the_sha256_of_the_bytes() {
        let module = ModuleBytes::new(b"abc".to_vec());
        assert_eq!(
            module.digest(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(module.bytes(), b"abc");
    }
}
