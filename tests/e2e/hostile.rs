//! The hostile-guest suite: every `tests/hostile/<attack>.toml` names an
//! example guest, a payload and the outcome boxcar must report; one
//! `boxcar serve` deploys them all and runs each attack once. Adding an
//! attack is adding one file (and its guest under `example-handlers/rust/`
//! when it needs a new one).
//!
//! An attack file:
//!
//! ```toml
//! # what the attack does (the first line, a comment; used in reports)
//! guest = "spin"                 # a built example guest
//! payload = '{}'                 # the job's payload (JSON text)
//! expect_status = "failed"       # succeeded, failed or cancelled
//! expect_error = "timed out"     # optional: a substring of the job's last error
//! expect_error_code = "…"        # optional: the job's error code, exactly
//! expect_result = ['"a":1']      # optional: substrings of the compact JSON result
//! forbid = ["SECRET"]            # optional: substrings that must appear nowhere in the job's JSON view
//! needs = ["noop"]               # optional: guests deployed beside it with their own manifests
//! [manifest]                     # optional: merged over the guest's own manifest
//! handler = { timeout = "500ms" }
//! ```
//!
//! Each attack is deployed as its own handler whose job type is the file
//! name without `.toml`, so attacks on one guest can carry different
//! manifests. `{fixture}` in the payload or the manifest is the path of a
//! directory holding `data/inside.txt`, `outside/secret.txt` (text
//! `SECRET`), symlinks `data/escape-dir` → `../outside` and
//! `data/escape-file` → the secret's absolute path, and `ro/existing.txt`.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use serde::Deserialize;
use serde_json::Value;

use crate::harness::{eventually, Env, Serve};

/// The manifest of the `echo` handler every hostile host also serves.
pub const ECHO: &str = "[handler]\njob_type = \"echo\"\ntimeout = \"10s\"\nconcurrency = 8\n";

/// The `[sandbox]` section of every hostile host: one job's pool share
/// holds the 20 memories of `many-memories`, so what stops it is the
/// per-job memory cap while it runs, not the share check at deploy.
pub const SANDBOX: &str = "[sandbox]\njob_memories = 20\n";

/// The final job statuses an attack may expect.
const STATUSES: [&str; 3] = ["succeeded", "failed", "cancelled"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAttack {
    guest: String,
    payload: String,
    expect_status: String,
    expect_error: Option<String>,
    expect_error_code: Option<String>,
    #[serde(default)]
    expect_result: Vec<String>,
    #[serde(default)]
    forbid: Vec<String>,
    #[serde(default)]
    needs: Vec<String>,
    #[serde(default)]
    manifest: toml::Table,
}

/// One attack, read from its file.
pub struct Attack {
    /// The file name without `.toml`; also the attack handler's job type.
    pub name: String,
    /// The file it came from.
    pub file: PathBuf,
    /// The first line's comment.
    pub description: String,
    /// The example guest that runs it.
    pub guest: String,
    payload: String,
    expect_status: String,
    expect_error: Option<String>,
    expect_error_code: Option<String>,
    expect_result: Vec<String>,
    forbid: Vec<String>,
    /// Guests deployed beside it, under their own names and manifests.
    pub needs: Vec<String>,
    manifest: toml::Table,
}

/// Where the attack files live.
pub fn attacks_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/hostile")
}

/// Every attack in [`attacks_dir`], sorted by name; panics naming each
/// malformed file.
pub fn load_all() -> Vec<Attack> {
    let dir = attacks_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading the attack directory {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let mut attacks = Vec::new();
    let mut errors = Vec::new();
    for file in files {
        match parse(&file, boxcar_examples::has) {
            Ok(attack) => attacks.push(attack),
            Err(e) => errors.push(e),
        }
    }
    let needed: Vec<&String> = attacks.iter().flat_map(|a| &a.needs).collect();
    for attack in &attacks {
        if attack.name == "echo" || needed.contains(&&attack.name) {
            errors.push(format!(
                "{}: the attack name `{}` is also a helper handler's job type (echo, or a `needs` guest); rename the file",
                attack.file.display(),
                attack.name
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "malformed attack files:\n{}",
        errors.join("\n")
    );
    assert!(!attacks.is_empty(), "no attack files in {}", dir.display());
    attacks
}

/// Reads one attack file; `built` says whether an example guest exists.
/// The error names the file and what to fix.
pub fn parse(file: &Path, built: impl Fn(&str) -> bool) -> Result<Attack, String> {
    let at = file.display();
    let text = std::fs::read_to_string(file).map_err(|e| format!("{at}: cannot read: {e}"))?;
    let name = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!(
            "{at}: the file name is the attack's job type: use lowercase letters, digits and `-`"
        ));
    }
    let description = text
        .lines()
        .next()
        .and_then(|line| line.strip_prefix('#'))
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| {
            format!("{at}: the first line must be a `# comment` saying what the attack does")
        })?
        .to_string();
    let raw: RawAttack = toml::from_str(&text).map_err(|e| format!("{at}: {e}"))?;
    serde_json::from_str::<Value>(&raw.payload)
        .map_err(|e| format!("{at}: `payload` is not JSON text: {e}"))?;
    if !STATUSES.contains(&raw.expect_status.as_str()) {
        return Err(format!(
            "{at}: `expect_status = {:?}`: use one of {STATUSES:?}",
            raw.expect_status
        ));
    }
    for guest in std::iter::once(&raw.guest).chain(&raw.needs) {
        if !built(guest) {
            return Err(format!(
                "{at}: guest `{guest}` is not a built example; add example-handlers/rust/{guest} (a member of example-handlers/rust/Cargo.toml)"
            ));
        }
    }
    Ok(Attack {
        name,
        file: file.to_path_buf(),
        description,
        guest: raw.guest,
        payload: raw.payload,
        expect_status: raw.expect_status,
        expect_error: raw.expect_error,
        expect_error_code: raw.expect_error_code,
        expect_result: raw.expect_result,
        forbid: raw.forbid,
        needs: raw.needs,
        manifest: raw.manifest,
    })
}

impl Attack {
    /// The payload with `{fixture}` filled in.
    pub fn payload(&self, fixture: &Path) -> Value {
        let text = self
            .payload
            .replace("{fixture}", &fixture.display().to_string());
        serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "{}: the payload is not JSON once {{fixture}} is filled in: {e}",
                self.file.display()
            )
        })
    }

    /// The guest's manifest with the attack's `[manifest]` merged over it,
    /// its job type set to the attack's name and `{fixture}` filled in.
    pub fn manifest(&self, fixture: &Path) -> String {
        let example = boxcar_examples::get(&self.guest).expect("checked when parsed");
        let text = std::fs::read_to_string(example.manifest_path()).expect("guest manifest");
        let mut manifest: toml::Table = toml::from_str(&text).expect("guest manifest is TOML");
        merge(&mut manifest, &self.manifest);
        let handler = manifest
            .entry("handler")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(handler) = handler {
            handler.insert("job_type".into(), toml::Value::String(self.name.clone()));
        }
        toml::to_string(&manifest)
            .expect("a TOML table serializes")
            .replace("{fixture}", &fixture.display().to_string())
    }

    /// `Ok` when `job` (boxcar's JSON view of it) ended as the file says;
    /// otherwise every way it differs.
    pub fn check(&self, job: &Value) -> Result<(), String> {
        let mut wrong = Vec::new();
        if job["status"] != self.expect_status.as_str() {
            wrong.push(format!(
                "status is {} (expected {:?})",
                job["status"], self.expect_status
            ));
        }
        let error = job["last_error"].as_str().unwrap_or_default();
        if let Some(expected) = &self.expect_error {
            if !error.contains(expected.as_str()) {
                wrong.push(format!("last_error {error:?} lacks {expected:?}"));
            }
        }
        if let Some(code) = &self.expect_error_code {
            if job["error_code"] != code.as_str() {
                wrong.push(format!(
                    "error_code is {} (expected {code:?})",
                    job["error_code"]
                ));
            }
        }
        let result = job["result"].to_string();
        for expected in &self.expect_result {
            if !result.contains(expected.as_str()) {
                wrong.push(format!("result lacks {expected:?}"));
            }
        }
        let whole = job.to_string();
        for forbidden in &self.forbid {
            if whole.contains(forbidden.as_str()) {
                wrong.push(format!("the job shows the forbidden {forbidden:?}"));
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} ({}): {}\n    job: {job}",
                self.file.display(),
                self.description,
                wrong.join("; ")
            ))
        }
    }
}

/// Merges `over` into `base`: tables key by key, anything else replaced.
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(base)), toml::Value::Table(over)) => merge(base, over),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Creates (once) the fixture directory `{fixture}` stands for.
pub fn fixture(env: &Env) -> PathBuf {
    let root = env.path("fixture");
    let text = root.display().to_string();
    assert!(
        !text.contains(['"', '\\', '\'']),
        "the fixture path must be safe inside JSON and TOML strings: {text}"
    );
    if root.exists() {
        return root;
    }
    for dir in ["data", "outside", "ro"] {
        std::fs::create_dir_all(root.join(dir)).expect("fixture dir");
    }
    std::fs::write(root.join("data/inside.txt"), "inside").expect("fixture file");
    std::fs::write(root.join("outside/secret.txt"), "SECRET").expect("fixture file");
    std::fs::write(root.join("ro/existing.txt"), "read me").expect("fixture file");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink("../outside", root.join("data/escape-dir")).expect("symlink");
        std::os::unix::fs::symlink(
            root.join("outside/secret.txt"),
            root.join("data/escape-file"),
        )
        .expect("symlink");
    }
    root
}

/// Deploys `echo`, every attack and the guests they need, starts
/// `boxcar serve --config CONFIG` and returns once all are deployed and the
/// API listens. A rejected handler fails the test.
pub fn start(env: &Env, attacks: &[Attack], config: &Path) -> Serve {
    let fixture = fixture(env);
    env.deploy("echo", "echo", ECHO);
    let mut helpers: Vec<&String> = attacks.iter().flat_map(|a| &a.needs).collect();
    helpers.sort();
    helpers.dedup();
    for guest in &helpers {
        let example = boxcar_examples::get(guest).expect("checked when parsed");
        let manifest = std::fs::read_to_string(example.manifest_path()).expect("guest manifest");
        env.deploy(guest, guest, &manifest);
    }
    for attack in attacks {
        env.deploy(&attack.name, &attack.guest, &attack.manifest(&fixture));
    }
    let handlers = 1 + helpers.len() + attacks.len();
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    eventually(
        Duration::from_secs(300),
        "every hostile handler deployed",
        || {
            let log = serve.output();
            assert!(
                !log.contains("handler rejected"),
                "a hostile handler was rejected (fix its [manifest]):\n{log}"
            );
            (log.matches("handler deployed").count() >= handlers).then_some(())
        },
    );
    serve.wait_for_log("HTTP API listening", Duration::from_secs(30));
    serve
}

#[test]
fn attack_files_are_well_formed() {
    let attacks = load_all();
    let fixture = Path::new("/fixture");
    for attack in &attacks {
        attack.payload(fixture);
        let manifest: toml::Table = toml::from_str(&attack.manifest(fixture))
            .unwrap_or_else(|e| panic!("{}: merged manifest: {e}", attack.file.display()));
        assert_eq!(
            manifest["handler"]["job_type"].as_str(),
            Some(attack.name.as_str())
        );
    }
}

#[test]
fn malformed_attack_files_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = "# d\nguest = \"echo\"\npayload = '{}'\nexpect_status = \"succeeded\"\n";
    let cases = [
        ("no-comment", good.replace("# d\n", ""), "first line"),
        ("bad-json", good.replace("'{}'", "'{'"), "not JSON"),
        (
            "bad-status",
            good.replace("\"succeeded\"", "\"done\""),
            "expect_status",
        ),
        (
            "no-guest",
            good.replace("\"echo\"", "\"no-such-guest\""),
            "example-handlers/rust/no-such-guest",
        ),
        (
            "bad-need",
            format!("{good}needs = [\"ghost\"]\n"),
            "guest `ghost`",
        ),
        (
            "typo",
            format!("{good}expect_eror = \"x\"\n"),
            "expect_eror",
        ),
        ("Upper", good.to_string(), "file name"),
    ];
    for (name, text, expected) in cases {
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(&file, text).expect("write");
        let error = match parse(&file, |guest| guest == "echo") {
            Ok(_) => panic!("{name}: accepted"),
            Err(e) => e,
        };
        assert!(
            error.contains(&file.display().to_string()) && error.contains(expected),
            "{name}: {error}"
        );
    }
    let file = dir.path().join("fine.toml");
    std::fs::write(&file, good).expect("write");
    let attack = parse(&file, |guest| guest == "echo").expect("a well-formed file");
    assert_eq!(attack.description, "d");
    assert!(attack
        .check(&serde_json::json!({"status": "failed"}))
        .is_err());
    assert!(attack
        .check(&serde_json::json!({"status": "succeeded"}))
        .is_ok());
}

#[test]
fn every_hostile_attack_ends_as_its_file_says() {
    let attacks = load_all();
    let env = Env::sqlite();
    let config = env.fast_config(SANDBOX);
    let mut serve = start(&env, &attacks, &config);
    let fixture = fixture(&env);
    let started = std::time::Instant::now();
    let ids: Vec<String> = attacks
        .iter()
        .map(|attack| {
            let payload = attack.payload(&fixture).to_string();
            env.ok(&["enqueue", &attack.name, &payload])
                .trim()
                .to_string()
        })
        .collect();
    eventually(
        Duration::from_secs(120),
        "every attack job is terminal",
        || {
            let counts = env.json(&["counts"]);
            (counts["pending"] == 0 && counts["running"] == 0).then_some(())
        },
    );
    let failures: Vec<String> = attacks
        .iter()
        .zip(&ids)
        .filter_map(|(attack, id)| attack.check(&env.json(&["job", id])).err())
        .collect();
    eprintln!("{} attacks ran in {:?}", attacks.len(), started.elapsed());
    assert!(serve.is_running(), "the host died:\n{}", serve.output());
    let after = env.ok(&[
        "enqueue",
        "echo",
        r#"{"after":"attacks"}"#,
        "--wait",
        "--timeout",
        "10s",
    ]);
    assert!(after.contains("attacks"), "the host still serves: {after}");
    assert!(
        failures.is_empty(),
        "{} of {} attacks ended otherwise than their files say:\n{}",
        failures.len(),
        attacks.len(),
        failures.join("\n")
    );
}
