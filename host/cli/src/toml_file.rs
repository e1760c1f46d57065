//! Strict operator TOML files (`boxcar.toml`, handler manifests): reading,
//! parsing and the one error type both report through.
//!
//! Invariant: every error names the file; parse errors name the key and
//! line (unknown keys are refused by `deny_unknown_fields` on the raw types).

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// An operator file that could not be read, parsed or validated.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("{path}: cannot read the {what}")]
    Read {
        /// The file.
        path: PathBuf,
        /// `configuration` or `manifest`.
        what: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Malformed TOML, an unknown key or a value of the wrong kind.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, naming the key.
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("{path}: {message}")]
    Invalid {
        /// The file (or `<defaults>`).
        path: PathBuf,
        /// The option and what is wrong with it.
        message: String,
    },
}

/// Reads `path`; `what` names the kind of file in the error.
///
/// # Errors
/// [`FileError::Read`].
pub fn read(path: &Path, what: &'static str) -> Result<String, FileError> {
    std::fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_path_buf(),
        what,
        source,
    })
}

/// Parses TOML text into the raw (strict) type.
///
/// # Errors
/// [`FileError::Parse`] naming the file, key and line.
pub fn parse<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, FileError> {
    toml::from_str(text).map_err(|error| FileError::Parse {
        path: path.to_path_buf(),
        message: error.to_string().trim_end().replace('\n', " "),
    })
}
