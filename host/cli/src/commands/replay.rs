//! `boxcar replay ID [--module FILE] [--manifest FILE] [--handlers DIR]`:
//! runs a stored job's payload once, here, in the sandbox of this
//! configuration, with the module its last attempt ran (or the one given)
//! under that module's manifest — its limits and grants — and prints what
//! the guest logged and how the run ended.
//!
//! Invariants: the queue is only read (the store is opened without
//! migrating; the run goes through [`boxcar_queue::replay`], which writes
//! nothing): the job's row, attempts and logs stay as they were. A guest's
//! `enqueue` is a dry run: checked by the engine's rules, printed, never
//! inserted. The exit code is 0 when the run succeeded and 3 when it did
//! not, as for `enqueue --wait`.

mod source;

use std::sync::Arc;

use boxcar_queue::{Handler, Outcome, Replay, ReplayRequest};
use boxcar_sandbox::{LoadedHandler, Sandbox};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{usage, Context};
use crate::{
    cli::ReplayArgs,
    deploy::{self, compile::CompileBudget, DeployError},
    error::JobFailed,
    output::{json_for_terminal, json_text_for_terminal, printable},
    sandbox_glue,
    views::time,
};
use source::{Module, Source, Wanted};

/// `boxcar replay`.
pub async fn run(context: Context, args: ReplayArgs) -> anyhow::Result<()> {
    let queue = context.existing_queue().await?;
    let job = queue
        .get(&args.id)
        .await?
        .ok_or_else(|| usage(format!("job `{}` does not exist", args.id)))?;
    let attempts = queue.attempts(&job.id).await?.unwrap_or_default();
    let last = attempts.last();
    let attempt = last.map_or(1, |a| a.attempt.max(1));
    let digest = last
        .and_then(|a| a.digest.clone())
        .or_else(|| job.handler_version.clone());
    let handlers = args
        .handlers
        .clone()
        .or_else(|| context.config.handlers.clone());
    let budget = CompileBudget::from_settings(&context.config.sandbox);
    let source = source::find(&Wanted {
        job_type: &job.job_type,
        digest: digest.as_deref(),
        module: args.module.as_deref(),
        manifest: args.manifest.as_deref(),
        handlers: handlers.as_deref(),
        max_module: budget.max_module,
    })?;
    let sandbox = Arc::new(Sandbox::new(sandbox_glue::sandbox_config(
        &context.config.sandbox,
    ))?);
    let handler = load(&sandbox, &budget, &source).await?;
    let digest = handler.digest().to_string();
    if !context.json {
        println!(
            "replaying job {} ({}, attempt {} of {}); nothing is written to the queue",
            job.id, job.job_type, attempt, job.max_attempts
        );
        println!("  module    {}", source.origin);
        println!("  manifest  {}", source.manifest.path.display());
    }

    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.cancel();
        }
    });
    let handler: Arc<dyn Handler> = handler;
    let replayed = boxcar_queue::replay(
        &queue,
        ReplayRequest {
            job: &job,
            attempt,
            handler,
            settings: &source.manifest.settings,
            abandon_grace: context.config.worker.abandon_grace,
            cancel,
        },
    )
    .await;
    ctrl_c.abort();

    if context.json {
        let view = json_view(&job.id, attempt, &digest, &source, &replayed);
        println!("{}", json_for_terminal(&view)?);
    } else {
        print_text(&replayed);
    }
    match replayed.outcome {
        Outcome::Succeeded { .. } => Ok(()),
        Outcome::Terminal { message, code, .. } => Err(failed(&job.id, message, code)),
        other => Err(failed(
            &job.id,
            other.error_message().unwrap_or_default(),
            None,
        )),
    }
}

fn failed(id: &str, message: String, code: Option<String>) -> anyhow::Error {
    JobFailed {
        id: id.to_string(),
        status: "failed on replay".into(),
        message,
        code,
    }
    .into()
}

/// Compiles (or loads from the compile cache) the module under the
/// manifest's limits and grants.
async fn load(
    sandbox: &Arc<Sandbox>,
    budget: &CompileBudget,
    source: &Source,
) -> anyhow::Result<Arc<LoadedHandler>> {
    let manifest = &source.manifest;
    match &source.module {
        Module::File { path, bytes } => {
            let prepared =
                deploy::prepare_read(sandbox, budget, path, &manifest.path, bytes.clone()).await?;
            Ok(prepared.handler)
        }
        Module::Cached { digest } => {
            let (limits, caps) = (manifest.limits.clone(), manifest.capabilities.clone());
            let (cached_sandbox, wanted) = (Arc::clone(sandbox), digest.clone());
            let loaded = tokio::task::spawn_blocking(move || {
                cached_sandbox.load_cached(&wanted, limits, caps)
            })
            .await?
            .map_err(|source| DeployError::Sandbox {
                path: manifest.path.clone(),
                source,
            })?;
            loaded.ok_or_else(|| {
                usage(format!(
                    "the module of the job's last attempt (sha256 {digest}) is neither in the handlers directory nor in the compile cache: give it with --module FILE"
                ))
            })
        }
    }
}

fn print_text(replayed: &Replay) {
    for line in &replayed.logs {
        println!(
            "{}  #{}  {:<6} {}",
            time(line.at),
            line.attempt,
            line.level,
            printable(&line.message)
        );
    }
    for progress in &replayed.progress {
        println!(
            "progress (not stored): {}",
            json_text_for_terminal(progress)
        );
    }
    for enqueue in &replayed.enqueues {
        match &enqueue.answer {
            Ok(id) => println!(
                "dry run: would enqueue {} {} as {id} (not enqueued)",
                printable(&enqueue.job_type),
                json_text_for_terminal(&enqueue.payload)
            ),
            Err(reason) => println!(
                "dry run: enqueue of {} refused: {}",
                printable(&enqueue.job_type),
                printable(reason)
            ),
        }
    }
    let wall = replayed.usage.wall_ms.unwrap_or(0);
    match &replayed.outcome {
        Outcome::Succeeded { result } => {
            println!("outcome: succeeded in {wall} ms");
            if let Some(result) = result {
                println!("{}", json_text_for_terminal(result));
            }
        }
        other => println!(
            "outcome: {} in {wall} ms: {}",
            replayed.outcome_name(),
            printable(&other.error_message().unwrap_or_default())
        ),
    }
}

fn json_view(id: &str, attempt: u32, digest: &str, source: &Source, replayed: &Replay) -> Value {
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let (result, code, details) = match &replayed.outcome {
        Outcome::Succeeded { result } => (result.as_deref().map(parse), None, None),
        Outcome::Terminal { code, details, .. } => {
            (None, code.clone(), details.as_deref().map(parse))
        }
        _ => (None, None, None),
    };
    json!({
        "job_id": id,
        "attempt": attempt,
        "digest": digest,
        "module": source.origin,
        "manifest": source.manifest.path.display().to_string(),
        "outcome": replayed.outcome_name(),
        "result": result,
        "error": replayed.outcome.error_message(),
        "error_code": code,
        "error_details": details,
        "logs": replayed.logs.iter().map(|l| json!({
            "attempt": l.attempt,
            "seq": l.seq,
            "at": time(l.at),
            "level": l.level,
            "message": l.message,
        })).collect::<Vec<_>>(),
        "progress": replayed.progress.iter().map(|p| parse(p)).collect::<Vec<_>>(),
        "enqueues": replayed.enqueues.iter().map(|e| json!({
            "job_type": e.job_type,
            "payload": parse(&e.payload),
            "id": e.answer.as_ref().ok(),
            "refused": e.answer.as_ref().err(),
        })).collect::<Vec<_>>(),
        "usage": replayed.usage,
    })
}
