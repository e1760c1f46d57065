# Everyday recipes. `just --list` shows them.

# Run the demo on a fresh temporary SQLite database.
demo:
    cargo run --release -- demo

# The whole test suite (Postgres tests use $DATABASE_URL).
test:
    DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test} cargo test --workspace

# The hostile-guest suite (tests/hostile/*.toml) and the containment soak.
hostile:
    cargo test -p boxcar --test e2e -- hostile:: containment::

# Benchmarks: the sandbox bench and the queue workloads through the binary.
bench:
    cargo bench -p boxcar-sandbox
    cargo run --release -- --db sqlite://target/bench.db bench --workload all

# Formatting and lints, as CI wants them.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# Build the example guest components (done by `cargo build` too).
guests:
    cargo build -p boxcar-examples

# The long chaos run: CHAOS_MINUTES (30) of kills, stops and terminations
# on 3 hosts; CHAOS_DB=sqlite for one SQLite file, CHAOS_SEED to replay.
chaos:
    DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test} cargo test --release -p boxcar --test e2e -- --ignored --nocapture chaos::chaos_long

# Database faults: a private Postgres restarted and its backends killed, a
# host cut off from it by a network partition, SQLite on a full disk, under
# another process's lock and turned read-only (root; iproute2, strace).
db-faults:
    cargo test -p boxcar --test e2e -- --nocapture db_faults:: partition:: sqlite_faults::

# The soak: an hour (SOAK_MINUTES) of mixed jobs at a steady rate on SQLite
# and Postgres side by side, printing RSS, descriptors and connections each
# minute; fails on growth after warm-up.
soak:
    DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test} cargo test --release -p boxcar --test e2e -- --ignored --nocapture soak::

# Fuzz TARGET for SECS seconds (see README "Fuzzing"): cargo fuzz on the
# stable toolchain (RUSTC_BOOTSTRAP=1, no sanitizer), one process, new
# inputs kept in fuzz/target/corpus (the committed seeds are read only).
# `cargo install cargo-fuzz` first. Crashes land in fuzz/artifacts/TARGET.
fuzz target secs="600":
    mkdir -p fuzz/target/corpus/{{target}}
    cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -s none -O -a {{target}} target/corpus/{{target}} corpus/{{target}} -- -max_total_time={{secs}}
