//! Command-line syntax (clap). Parsing only; `commands` does the work.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// boxcar: a durable job queue whose handlers are sandboxed WebAssembly components.
#[derive(Parser, Debug)]
#[command(name = "boxcar", version, about, propagate_version = true)]
pub struct Cli {
    /// Database URL: sqlite://PATH, postgres://USER@HOST/DB[?schema=NAME] or memory://.
    #[arg(long, global = true, env = "BOXCAR_DB")]
    pub db: Option<String>,
    /// Configuration file (default: ./boxcar.toml when it exists).
    #[arg(long, global = true, env = "BOXCAR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Machine-readable JSON output instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// The format of boxcar's own log on stderr: text (coloured only on a
    /// terminal) or json (one object per line). Overrides `[log] format`.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<crate::config::LogFormat>,
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a host: workers for deployed handlers, the HTTP API, hot deploy.
    Serve(ServeArgs),
    /// Enqueue a job and print its id (or its result with --wait).
    Enqueue(EnqueueArgs),
    /// List jobs.
    Jobs(JobsArgs),
    /// Show one job and its attempts.
    Job {
        /// The job id.
        id: String,
    },
    /// Print the log lines a job's handler wrote, attempt by attempt.
    Logs(LogsArgs),
    /// Run a stored job once, locally, in the sandbox its last attempt ran
    /// in (or with another module), and print its logs and outcome; the
    /// queue is not written to.
    Replay(ReplayArgs),
    /// Count jobs by status.
    Counts,
    /// Cancel jobs: one by id, a scope, or by dedupe keys.
    Cancel(CancelArgs),
    /// Put failed jobs back to pending with their attempts reset.
    RetryFailed(RetryArgs),
    /// Delete old terminal jobs.
    Prune(PruneArgs),
    /// Deployed handler types, their digests and the latest rejections.
    Handlers,
    /// Recurring schedules with their next run times.
    Schedules(SchedulesArgs),
    /// Validate a module + manifest (or a configuration) without deploying.
    Check(CheckArgs),
    /// Create or upgrade the database tables.
    Migrate,
    /// Bundled example handlers.
    Examples {
        #[command(subcommand)]
        command: ExamplesCommand,
    },
    /// Watch the whole system work on a fresh temporary SQLite database.
    Demo(DemoArgs),
    /// Measure throughput and pickup latency through the real dispatcher.
    Bench(BenchArgs),
    /// Internal: compile one component in a resource-limited child process
    /// of `serve` / `check` (see `deploy::compile`).
    #[command(hide = true)]
    CompileComponent(CompileComponentArgs),
}

/// `boxcar compile-component` (internal).
#[derive(Args, Debug)]
pub struct CompileComponentArgs {
    /// The component bytes.
    #[arg(long = "in")]
    pub input: PathBuf,
    /// Where the compiled artifact is written.
    #[arg(long = "out")]
    pub output: PathBuf,
    /// The serving engine's codegen settings (`epoch=1,fuel=0,stack=N`).
    #[arg(long)]
    pub codegen: String,
}

/// `boxcar schedules`.
#[derive(Args, Debug)]
pub struct SchedulesArgs {
    /// First store the configuration's `[[schedules]]` (create, update in
    /// place, remove this owner's undeclared ones), as a serving host does
    /// at start.
    #[arg(long)]
    pub reconcile: bool,
}

/// `boxcar serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Handlers directory to watch; without it this host only serves the API.
    #[arg(long)]
    pub handlers: Option<PathBuf>,
    /// HTTP API address (default 127.0.0.1:7878).
    #[arg(long)]
    pub listen: Option<String>,
    /// Bearer token the API requires (required when not on loopback).
    #[arg(long, env = "BOXCAR_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Do not apply migrations at start.
    #[arg(long)]
    pub no_migrate: bool,
    /// Do not serve the HTTP API.
    #[arg(long)]
    pub no_api: bool,
    /// Lease owner id (default: a random UUID).
    #[arg(long)]
    pub worker_id: Option<String>,
}

/// `boxcar enqueue`.
#[derive(Args, Debug)]
pub struct EnqueueArgs {
    /// The job type.
    #[arg(required_unless_present = "jsonl")]
    pub job_type: Option<String>,
    /// The payload: a JSON object (default `{}`), `-` to read it from
    /// standard input, or `@FILE` to read it from a file.
    pub payload: Option<String>,
    /// Scope as TYPE:ID.
    #[arg(long)]
    pub scope: Option<String>,
    /// Dedupe key: no second live job with the same key.
    #[arg(long)]
    pub dedupe_key: Option<String>,
    /// Attempt budget.
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Run after this delay, e.g. 10s.
    #[arg(long, conflicts_with = "run_at")]
    pub delay: Option<String>,
    /// Run at this RFC 3339 time.
    #[arg(long)]
    pub run_at: Option<String>,
    /// Priority: lower runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// The job must start within this long, e.g. 1h, or it fails as expired.
    #[arg(long)]
    pub ttl: Option<String>,
    /// A JSON file with an array of child jobs ({job_type, payload, ...}); this job runs after them.
    #[arg(long)]
    pub children: Option<PathBuf>,
    /// Wait for the job to finish and print its result.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "30s", requires = "wait")]
    pub timeout: String,
    /// Enqueue one job per line of this JSON Lines file (`-`: standard
    /// input), each the object `POST /jobs/batch` takes, e.g.
    /// {"job_type": "echo", "payload": {"n": 1}}; 10,000 lines per transaction.
    #[arg(long, value_name = "FILE|-", conflicts_with_all = [
        "job_type", "payload", "scope", "dedupe_key", "max_attempts", "delay",
        "run_at", "ttl", "children", "wait",
    ])]
    pub jsonl: Option<String>,
}

/// `boxcar logs`.
#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The job id.
    pub id: String,
    /// Only this attempt.
    #[arg(long)]
    pub attempt: Option<u32>,
    /// Keep printing new lines until the job finishes.
    #[arg(long, short)]
    pub follow: bool,
}

/// `boxcar replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The job id.
    pub id: String,
    /// Run this module instead of the one the job's last attempt ran (to
    /// test a fix); its manifest is the one beside it, else the deployed
    /// one for the job's type.
    #[arg(long)]
    pub module: Option<PathBuf>,
    /// The manifest to run under, instead of the one found.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Handlers directory to look for the module and manifest in
    /// (default: `handlers` in boxcar.toml).
    #[arg(long)]
    pub handlers: Option<PathBuf>,
}

/// `boxcar jobs`.
#[derive(Args, Debug)]
pub struct JobsArgs {
    /// Only these statuses (comma-separated).
    #[arg(long)]
    pub status: Option<String>,
    /// Only these types (comma-separated).
    #[arg(long = "type")]
    pub job_type: Option<String>,
    /// Only this scope (TYPE:ID).
    #[arg(long)]
    pub scope: Option<String>,
    /// Children of this parent job.
    #[arg(long)]
    pub parent: Option<String>,
    /// Page size.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// Rows to skip (slow when deep: page with --after instead).
    #[arg(long, default_value_t = 0)]
    pub offset: u32,
    /// The page after this cursor (printed after a full page, and as each
    /// job's `cursor` with --json).
    #[arg(long)]
    pub after: Option<String>,
    /// Newest first (the default is oldest first).
    #[arg(long)]
    pub newest: bool,
}

/// `boxcar cancel`.
#[derive(Args, Debug)]
pub struct CancelArgs {
    /// Cancel this job.
    #[arg(long, conflicts_with_all = ["scope", "job_type"])]
    pub id: Option<String>,
    /// Cancel this scope's jobs (TYPE:ID): running ones are aborted.
    #[arg(long, conflicts_with = "job_type")]
    pub scope: Option<String>,
    /// With --scope: only pending jobs; running ones are left alone.
    #[arg(long, requires = "scope")]
    pub pending_only: bool,
    /// With --dedupe-key: the job type.
    #[arg(long = "type", requires = "dedupe_key")]
    pub job_type: Option<String>,
    /// With --type: the dedupe keys to cancel.
    #[arg(long = "dedupe-key", num_args = 1.., requires = "job_type")]
    pub dedupe_key: Vec<String>,
    /// Stored as the jobs' last error.
    #[arg(long, default_value = "cancelled by operator")]
    pub reason: String,
}

/// `boxcar retry-failed`.
#[derive(Args, Debug)]
pub struct RetryArgs {
    /// Only the job with this id.
    #[arg(long)]
    pub id: Option<String>,
    /// Only this type.
    #[arg(long = "type")]
    pub job_type: Option<String>,
    /// Only this scope (TYPE:ID).
    #[arg(long)]
    pub scope: Option<String>,
    /// Page size (without it: every matching failed job).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Rows to skip (with --limit).
    #[arg(long, requires = "limit")]
    pub offset: Option<u32>,
}

/// `boxcar prune`.
#[derive(Args, Debug)]
pub struct PruneArgs {
    /// Delete terminal jobs finished longer ago than this, e.g. 7d.
    #[arg(long)]
    pub older_than: String,
    /// Statuses to delete (comma-separated; default all terminal).
    #[arg(long)]
    pub status: Option<String>,
}

/// `boxcar check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The module to validate (its manifest defaults to MODULE with .toml).
    pub module: Option<PathBuf>,
    /// The manifest, when not beside the module.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
}

/// `boxcar examples`.
#[derive(Subcommand, Debug)]
pub enum ExamplesCommand {
    /// Write every bundled example handler (.wasm + .toml) into DIR.
    Export {
        /// Target directory (created if missing).
        dir: PathBuf,
    },
    /// List the bundled examples.
    List,
}

/// `boxcar demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Keep the demo's temporary directory and print its path.
    #[arg(long)]
    pub keep: bool,
}

/// Which benchmark workload.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Enqueue in batches, then drain with one worker.
    Drain,
    /// Idle worker; jobs enqueued one at a time; pickup latency.
    Latency,
    /// One busy type drains with `--types` types registered, against the
    /// busy type alone; then the idle host's CPU use with all of them.
    Types,
    /// Batch enqueue (`add_many`, one transaction per `--batch` jobs) and
    /// one-by-one enqueue rates; nothing runs the jobs.
    Enqueue,
    /// A drain from the head of a queue `--rows` deep (default 1,000,000),
    /// against the same drain with nothing else queued.
    Backlog,
    /// A drain beside `--rows` finished rows (default 5,000,000), against
    /// the same drain with none.
    Retained,
    /// `--jobs` jobs that each wait `--wait-ms` (the sleep guest) at
    /// concurrency `--inflight`: the rate and the memory per job in flight.
    Inflight,
    /// Drain and latency.
    All,
}

/// Which handler the benchmark runs.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchHandler {
    /// The bundled no-op WASM component.
    Wasm,
    /// A native no-op (queue overhead alone).
    Native,
}

/// `boxcar bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workload to run.
    #[arg(long, value_enum, default_value_t = Workload::All)]
    pub workload: Workload,
    /// Jobs for the drain workload.
    #[arg(long, default_value_t = 20_000)]
    pub jobs: usize,
    /// Worker concurrency for the drain workload.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
    /// Handler to run.
    #[arg(long, value_enum, default_value_t = BenchHandler::Wasm)]
    pub handler: BenchHandler,
    /// Job types registered in the `types` workload (the busy one included).
    #[arg(long, default_value_t = 500)]
    pub types: usize,
    /// Seconds the `types` workload measures the idle host's CPU use.
    #[arg(long, default_value_t = 5)]
    pub idle_secs: u64,
    /// Jobs per `add_many` call (one transaction) in the `enqueue` workload.
    #[arg(long, default_value_t = 10_000)]
    pub batch: usize,
    /// Concurrent producers sharing the `enqueue` workload's batches.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Rows of the `backlog` (default 1,000,000) and `retained` (default
    /// 5,000,000) workloads.
    #[arg(long)]
    pub rows: Option<usize>,
    /// Concurrency of the `inflight` workload (the sandbox's pool is grown
    /// to hold as many instances when it is smaller).
    #[arg(long, default_value_t = 2_000)]
    pub inflight: u32,
    /// Milliseconds each job of the `inflight` workload waits.
    #[arg(long, default_value_t = 1_000)]
    pub wait_ms: u64,
}
