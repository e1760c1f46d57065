//! `[capabilities]` of a manifest: what the module is granted. `http`,
//! `dirs`, `scratch` and `env` land in the sandbox's own [`Capabilities`]
//! and pass its form checks (named `capabilities.<key>`); directory
//! existence is left to load time (a directory may be mounted after the
//! manifest is written). `may_enqueue` goes to the queue, which alone
//! decides what a running job may enqueue.

use std::{collections::BTreeMap, path::PathBuf};

use boxcar_sandbox::{Capabilities, DirGrant, DirMode, HttpOrigin, SandboxError};
use serde::Deserialize;

use super::check_name;
use crate::units::ByteSize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCapabilities {
    #[serde(default)]
    may_enqueue: Vec<String>,
    #[serde(default)]
    http: Vec<String>,
    #[serde(default)]
    dirs: Vec<RawDir>,
    scratch: Option<ByteSize>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDir {
    host: PathBuf,
    guest: String,
    mode: Option<String>,
}

/// The job types the module may enqueue and the sandbox grants.
pub(super) fn resolve(raw: RawCapabilities) -> Result<(Vec<String>, Capabilities), String> {
    for name in &raw.may_enqueue {
        check_name("capabilities.may_enqueue", name)?;
    }
    let http = raw
        .http
        .iter()
        .map(|o| HttpOrigin::parse(o).map_err(|e| format!("capabilities.http: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let dirs = raw
        .dirs
        .into_iter()
        .map(|d| {
            let mode = match d.mode.as_deref() {
                None | Some("ro") => DirMode::ReadOnly,
                Some("rw") => DirMode::ReadWrite,
                Some(other) => {
                    return Err(format!(
                        "capabilities.dirs: mode `{}` for {} must be \"ro\" or \"rw\"",
                        other.escape_debug(),
                        d.guest.escape_debug()
                    ))
                }
            };
            Ok(DirGrant {
                host: d.host,
                guest: d.guest,
                mode,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let capabilities = Capabilities {
        http,
        dirs,
        scratch: raw.scratch.map(|b| b.0),
        env: raw.env,
    };
    capabilities.validate_form().map_err(|e| match e {
        SandboxError::Capabilities(m) => format!("capabilities.{m}"),
        other => other.to_string(),
    })?;
    Ok((raw.may_enqueue, capabilities))
}

/// One line naming every grant. Env values are never included (they may
/// be secrets), only their names.
pub(super) fn summary(may_enqueue: &[String], caps: &Capabilities) -> String {
    let mut parts = Vec::new();
    if !may_enqueue.is_empty() {
        parts.push(format!("may_enqueue={}", may_enqueue.join(",")));
    }
    if !caps.http.is_empty() {
        let origins: Vec<String> = caps.http.iter().map(ToString::to_string).collect();
        parts.push(format!("http={}", origins.join(",")));
    }
    for dir in &caps.dirs {
        parts.push(format!(
            "dir={}:{}:{}",
            dir.host.display(),
            dir.guest,
            dir.mode.as_str()
        ));
    }
    if let Some(bytes) = caps.scratch {
        parts.push(format!("scratch={}", ByteSize(bytes)));
    }
    if !caps.env.is_empty() {
        let names: Vec<&str> = caps.env.keys().map(String::as_str).collect();
        parts.push(format!("env={}", names.join(",")));
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use boxcar_sandbox::DirMode;

    use crate::manifest::parse_for_test as parse;

    #[test]
    fn capabilities_parse() {
        let manifest = parse(
            r#"
            [handler]
            job_type = "a"
            [limits]
            max_http_body = "1MiB"
            [capabilities]
            http = ["https://api.example.com", "http://127.0.0.1:8089", "https://*.example.org"]
            dirs = [
                { host = "/srv/media", guest = "/media", mode = "ro" },
                { host = "/srv/out", guest = "/out", mode = "rw" },
                { host = "/srv/default", guest = "/default" },
            ]
            scratch = "64MiB"
            env = { API_BASE = "https://api.example.com", TOKEN = "hunter2" }
            may_enqueue = ["article.audio"]
            "#,
        )
        .expect("valid");
        let caps = &manifest.capabilities;
        let http: Vec<String> = caps.http.iter().map(ToString::to_string).collect();
        assert_eq!(
            http,
            vec![
                "https://api.example.com:443",
                "http://127.0.0.1:8089",
                "https://*.example.org:443"
            ]
        );
        assert_eq!(caps.dirs.len(), 3);
        assert_eq!(caps.dirs[0].guest, "/media");
        assert_eq!(caps.dirs[0].mode, DirMode::ReadOnly);
        assert_eq!(caps.dirs[1].mode, DirMode::ReadWrite);
        assert_eq!(caps.dirs[2].mode, DirMode::ReadOnly);
        assert_eq!(caps.scratch, Some(64 * 1024 * 1024));
        assert_eq!(caps.env["TOKEN"], "hunter2");
        assert_eq!(manifest.settings.may_enqueue, vec!["article.audio"]);
        assert_eq!(manifest.limits.max_http_body, 1024 * 1024);
        let shown = format!("{manifest:?}");
        assert!(
            shown.contains("TOKEN") && !shown.contains("hunter2"),
            "{shown}"
        );
        // Directories need not exist yet: that is checked at load.
        assert_eq!(caps.dirs[0].host, Path::new("/srv/media"));
    }

    #[test]
    fn bad_capabilities_are_refused_with_the_key() {
        let caps = |body: &str| format!("[handler]\njob_type = \"a\"\n[capabilities]\n{body}\n");
        for (body, expect) in [
            (r#"http = ["api.example.com"]"#, "capabilities.http"),
            (r#"http = ["ftp://x"]"#, "capabilities.http"),
            (r#"http = ["https://x/path"]"#, "capabilities.http"),
            (r#"http = ["https://x:0"]"#, "capabilities.http"),
            (
                r#"dirs = [{ host = "/srv", guest = "/m", mode = "rx" }]"#,
                "capabilities.dirs",
            ),
            (
                r#"dirs = [{ host = "srv", guest = "/m" }]"#,
                "capabilities.dirs",
            ),
            (
                r#"dirs = [{ host = "/srv", guest = "m" }]"#,
                "capabilities.dirs",
            ),
            (
                r#"dirs = [{ host = "/srv", guest = "/m/../etc" }]"#,
                "capabilities.dirs",
            ),
            (
                r#"dirs = [{ host = "/a", guest = "/m" }, { host = "/b", guest = "/m" }]"#,
                "twice",
            ),
            (
                "scratch = \"1MiB\"\ndirs = [{ host = \"/a\", guest = \"/tmp\" }]",
                "twice",
            ),
            (
                r#"dirs = [{ host = "/a", guest = "/m", extra = 1 }]"#,
                "extra",
            ),
            ("scratch = \"0\"", "capabilities.scratch"),
            (r#"env = { "A=B" = "x" }"#, "capabilities.env"),
            ("network = true", "network"),
        ] {
            let error = parse(&caps(body)).unwrap_err().to_string();
            assert!(error.contains(expect), "{body:?} gave {error}");
            assert!(error.contains("handlers/x.toml"), "{error}");
        }
        let error = parse("[handler]\njob_type = \"a\"\n[limits]\nmax_http_body = \"0\"\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("limits.max_http_body"), "{error}");
    }

    #[test]
    fn the_summary_names_grants_but_no_env_value() {
        let manifest = parse(
            "[handler]\njob_type = \"a\"\n[capabilities]\nmay_enqueue = [\"b\"]\nscratch = \"1MiB\"\nenv = { TOKEN = \"hunter2\" }\n",
        )
        .expect("valid");
        let summary = manifest.grants_summary();
        assert!(
            summary.contains("may_enqueue=b")
                && summary.contains("scratch=")
                && summary.contains("env=TOKEN"),
            "{summary}"
        );
        assert!(!summary.contains("hunter2"), "{summary}");
        let none = parse("[handler]\njob_type = \"a\"\n").expect("valid");
        assert_eq!(none.grants_summary(), "none");
    }
}
