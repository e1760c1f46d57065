//! Every fuzz target run briefly as an ordinary test (no instrumented
//! build): the committed seeds (`fuzz/corpus/<target>`) and crash
//! regressions (`fuzz/regressions/<target>`) replayed, then mutations of
//! them (byte flips, inserts, deletions, repeats, splices) for a bounded
//! time — `BOXCAR_FUZZ_SECS` seconds per target, 3 by default — from a
//! seed printed with the counts (`BOXCAR_FUZZ_SEED` replays a run).
//! A panic prints the input that caused it.

use std::{
    panic::{catch_unwind, resume_unwind, AssertUnwindSafe},
    path::PathBuf,
    time::{Duration, Instant},
};

/// splitmix64: a small deterministic generator for the mutations.
struct Rng(u64);

impl Rng {
    fn step(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.step() % n as u64) as usize
        }
    }
}

fn files(dir: PathBuf) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    paths
        .into_iter()
        .filter(|p| p.is_file())
        .map(|p| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..=rng.below(4) {
        let len = input.len();
        match rng.below(6) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(len + 1);
                input.insert(i, rng.step() as u8);
            }
            2 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(8)).min(len);
                input.drain(start..end);
            }
            3 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(16)).min(len);
                let piece = input[start..end].to_vec();
                let at = rng.below(len + 1);
                input.splice(at..at, piece);
            }
            4 if !other.is_empty() => {
                let start = rng.below(other.len());
                let end = (start + 1 + rng.below(32)).min(other.len());
                let at = rng.below(len + 1);
                input.splice(at..at, other[start..end].iter().copied());
            }
            _ if len > 0 => {
                let i = rng.below(len);
                input[i] = [
                    b'"', b'{', b'}', b'[', b']', b':', b',', b'0', b'\n', b'\\', 0xff,
                ][rng.below(11)];
            }
            _ => input.push(rng.step() as u8),
        }
    }
}

fn run_one(target: &str, body: fn(&[u8]), input: &[u8]) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| body(input))) {
        eprintln!(
            "fuzz target {target} panicked on {} bytes: {:?}",
            input.len(),
            String::from_utf8_lossy(input)
        );
        resume_unwind(panic);
    }
}

fn replay(target: &str) {
    let body = boxcar_fuzz_targets::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, body)| *body)
        .unwrap_or_else(|| panic!("no target {target}"));
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let seeds = files(fuzz.join("corpus").join(target));
    let regressions = files(fuzz.join("regressions").join(target));
    assert!(!seeds.is_empty(), "no seeds in fuzz/corpus/{target}");
    for input in seeds.iter().chain(&regressions) {
        run_one(target, body, input);
    }
    let secs = std::env::var("BOXCAR_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let seed = std::env::var("BOXCAR_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let mut rng = Rng(seed);
    let pool: Vec<&Vec<u8>> = seeds.iter().chain(&regressions).collect();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut runs = 0u64;
    while Instant::now() < deadline {
        let mut input = pool[rng.below(pool.len())].clone();
        let other = pool[rng.below(pool.len())];
        mutate(&mut rng, &mut input, other);
        run_one(target, body, &input);
        runs += 1;
    }
    println!(
        "fuzz target {target}: {} seeds, {} regressions, {runs} mutated inputs in {secs} s (BOXCAR_FUZZ_SEED={seed})",
        seeds.len(),
        regressions.len()
    );
}

#[test]
fn manifest() {
    replay("manifest");
}

#[test]
fn config() {
    replay("config");
}

#[test]
fn units() {
    replay("units");
}

#[test]
fn schedule() {
    replay("schedule");
}

#[test]
fn payload_schema() {
    replay("payload_schema");
}

#[test]
fn api() {
    replay("api");
}

#[test]
fn guest_payload() {
    replay("guest_payload");
}

#[test]
fn wit_boundary() {
    replay("wit_boundary");
}

#[test]
fn every_target_is_tested_here() {
    let source = include_str!("replay.rs");
    for (name, _) in boxcar_fuzz_targets::TARGETS {
        assert!(
            source.contains(&format!("replay(\"{name}\")")),
            "no test replays {name}"
        );
        let stub = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/fuzz_targets")
            .join(format!("{name}.rs"));
        assert!(stub.is_file(), "no {}", stub.display());
    }
}
