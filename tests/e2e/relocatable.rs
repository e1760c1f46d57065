//! The binary carries everything `demo`, `examples export` and `bench`
//! need: a copy of it in a directory of its own, run from an empty working
//! directory with a cleared environment and with every file the examples
//! table names hidden, still works.
//!
//! Hiding: each directory holding an example component or manifest (the
//! guest target dir, `example-handlers/…`) gets an empty tmpfs mounted over
//! it in a private user and mount namespace (`unshare`), so only the
//! process under test loses them and the rest of the suite keeps reading
//! them; the script checks the hiding took effect before it runs the
//! binary. Where namespaces are unavailable the copy still runs from an
//! empty directory, with a note, and with `CI=true` that is a failure.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use crate::harness::{describe, BOXCAR};

/// Mounts an empty tmpfs over every directory argument up to `--`, checks
/// that the probe file vanished, then runs the binary with the rest.
const HIDE_AND_RUN: &str = r#"bin=$1; probe=$2; shift 2
while [ "$1" != "--" ]; do mount -t tmpfs boxcar-hidden "$1" || exit 97; shift; done; shift
if [ -e "$probe" ]; then echo "the build tree is still visible: $probe" >&2; exit 98; fi
exec "$bin" "$@""#;

/// The binary, copied out of the build tree, and an empty working directory.
struct Relocated {
    dir: tempfile::TempDir,
    hide: Option<Vec<PathBuf>>,
}

impl Relocated {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("bin")).expect("bin dir");
        std::fs::create_dir_all(dir.path().join("work")).expect("work dir");
        std::fs::copy(BOXCAR, dir.path().join("bin").join("boxcar")).expect("copy the binary");
        let dirs = build_tree_dirs();
        let hide = if namespaces_work(dir.path()) {
            Some(dirs)
        } else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but `unshare --user --map-root-user --mount` is unavailable: \
                 the build tree cannot be hidden from the binary under test"
            );
            eprintln!(
                "note: user namespaces are unavailable; the copied binary runs from an empty \
                 directory but can still see the build tree"
            );
            None
        };
        Self { dir, hide }
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Runs the copy with `args` in the empty working directory.
    fn run(&self, args: &[&str]) -> Output {
        let bin = self.dir.path().join("bin").join("boxcar");
        let mut command = match &self.hide {
            Some(dirs) => {
                let mut c = Command::new("unshare");
                c.args(["--user", "--map-root-user", "--mount", "--", "sh", "-c"])
                    .arg(HIDE_AND_RUN)
                    .arg("sh")
                    .arg(&bin)
                    .arg(boxcar_examples::ALL[0].wasm)
                    .args(dirs)
                    .arg("--");
                c
            }
            None => Command::new(&bin),
        };
        command
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("HOME", self.dir.path())
            .env("XDG_CACHE_HOME", self.dir.path().join("cache"))
            .env("BOXCAR_LOG", "warn")
            .current_dir(self.work())
            .stdin(Stdio::null())
            .output()
            .expect("run the copied binary")
    }

    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "copied boxcar {args:?} failed:\n{}",
            describe(&output)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

/// Every directory holding a file the examples table names, without those
/// inside another (a mount over the outer one hides them already).
fn build_tree_dirs() -> Vec<PathBuf> {
    let all: BTreeSet<PathBuf> = boxcar_examples::ALL
        .iter()
        .flat_map(|e| [e.wasm_path(), e.manifest_path()])
        .filter_map(Path::parent)
        .map(Path::to_path_buf)
        .collect();
    all.iter()
        .filter(|d| !all.iter().any(|o| o != *d && d.starts_with(o)))
        .cloned()
        .collect()
}

/// Whether this machine lets an unprivileged test mount in a namespace.
fn namespaces_work(scratch: &Path) -> bool {
    Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "--", "sh", "-c"])
        .arg("mount -t tmpfs boxcar-probe \"$1\"")
        .arg("sh")
        .arg(scratch)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_copied_binary_runs_demo_export_and_bench_without_the_build_tree() {
    let relocated = Relocated::new();

    let demo = relocated.ok(&["demo"]);
    assert!(demo.contains("0 overlaps"), "{demo}");
    assert!(demo.contains("succeeded 11"), "{demo}");

    relocated.ok(&["examples", "export", "handlers"]);
    let exported = relocated.work().join("handlers");
    for name in ["echo", "noop", "flaky", "spin", "many-memories"] {
        let example = boxcar_examples::get(name).expect("example");
        let module = std::fs::read(exported.join(format!("{name}.wasm"))).expect("module");
        assert_eq!(Some(module.as_slice()), example.embedded, "{name}.wasm");
        let manifest =
            std::fs::read_to_string(exported.join(format!("{name}.toml"))).expect("manifest");
        assert_eq!(manifest, example.manifest_text, "{name}.toml");
    }

    let listing = relocated.ok(&["examples", "list"]);
    assert!(listing.contains("echo"), "{listing}");
    for example in boxcar_examples::ALL.iter().filter(|e| e.embedded.is_none()) {
        assert!(
            !exported.join(format!("{}.wasm", example.name)).exists(),
            "{} is not in this build and is not exported",
            example.name
        );
        assert!(listing.contains("not in this build"), "{listing}");
    }

    let db = format!("sqlite://{}", relocated.work().join("bench.db").display());
    let bench = relocated.ok(&[
        "--db",
        &db,
        "bench",
        "--workload",
        "drain",
        "--jobs",
        "20",
        "--concurrency",
        "2",
    ]);
    assert!(bench.contains("\"system\":\"boxcar-wasm\""), "{bench}");
}
