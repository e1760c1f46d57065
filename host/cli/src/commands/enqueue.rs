//! `boxcar enqueue`: validate and insert one job (or a flow), print its id,
//! or with `--wait` wait for it and print its result; `--jsonl` hands over
//! to [`super::enqueue_jsonl`].

use boxcar_queue::{JobStatus, NewJob, QueueError, WaitError};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{admin::scope_arg, context::Context};
use crate::error::{usage, JobFailed, WaitTimedOut};
use crate::{
    cli::EnqueueArgs,
    output::{json_for_terminal, json_text_for_terminal},
    units::parse_duration,
    views::JobView,
};

/// One child in a `--children` file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChildSpec {
    job_type: String,
    #[serde(default = "empty_object")]
    payload: Value,
    scope: Option<String>,
    dedupe_key: Option<String>,
    max_attempts: Option<u32>,
    #[serde(default)]
    priority: i32,
}

fn empty_object() -> Value {
    json!({})
}

/// The payload argument's text: `{}` when absent, standard input for `-`,
/// a file's contents for `@FILE`, else the argument itself (a command
/// line holds at most about 128 KiB; larger payloads come by `-` or `@`).
fn payload_text(arg: Option<&str>) -> anyhow::Result<String> {
    match arg {
        None => Ok("{}".to_string()),
        Some("-") => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(|e| {
                usage(format!(
                    "reading the payload from standard input: {e}; pipe a UTF-8 JSON object"
                ))
            })?;
            Ok(text)
        }
        Some(arg) => match arg.strip_prefix('@') {
            Some(path) => std::fs::read_to_string(path).map_err(|e| {
                usage(format!(
                    "reading the payload from `{path}`: {e}; give @FILE of a UTF-8 JSON object"
                ))
            }),
            None => Ok(arg.to_string()),
        },
    }
}

pub async fn run(context: Context, args: EnqueueArgs) -> anyhow::Result<()> {
    if let Some(source) = &args.jsonl {
        return super::enqueue_jsonl::run(context, source).await;
    }
    let job_type = args
        .job_type
        .clone()
        .ok_or_else(|| usage("give a job type, or --jsonl FILE for many jobs"))?;
    let payload = payload_text(args.payload.as_deref())?;
    let mut job = NewJob::from_text(job_type, payload);
    job.scope = scope_arg(args.scope.as_deref())?;
    job.dedupe_key = args.dedupe_key.clone();
    job.max_attempts = args.max_attempts;
    job.priority = args.priority;
    if let Some(delay) = &args.delay {
        job.delay = Some(parse_duration(delay).map_err(|m| usage(format!("--delay: {m}")))?);
    }
    if let Some(at) = &args.run_at {
        let at = DateTime::parse_from_rfc3339(at).map_err(|e| {
            usage(format!(
                "--run-at `{at}` is not an RFC 3339 time ({e}), e.g. 2026-01-31T09:00:00Z"
            ))
        })?;
        job.run_at = Some(at.with_timezone(&Utc));
    }
    if let Some(ttl) = &args.ttl {
        job.ttl = Some(parse_duration(ttl).map_err(|m| usage(format!("--ttl: {m}")))?);
    }
    let wait_timeout =
        parse_duration(&args.timeout).map_err(|m| usage(format!("--timeout: {m}")))?;
    let children = match &args.children {
        None => Vec::new(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("--children {}: {e}", path.display())))?;
            let specs: Vec<ChildSpec> = serde_json::from_str(&text).map_err(|e| {
                usage(format!(
                    "--children {}: expected a JSON array of {{job_type, payload, ...}} ({e})",
                    path.display()
                ))
            })?;
            specs
                .into_iter()
                .map(|spec| {
                    let mut child = NewJob::new(spec.job_type, &spec.payload);
                    child.scope = scope_arg(spec.scope.as_deref())?;
                    child.dedupe_key = spec.dedupe_key;
                    child.max_attempts = spec.max_attempts;
                    child.priority = spec.priority;
                    Ok(child)
                })
                .collect::<anyhow::Result<Vec<_>>>()?
        }
    };

    let queue = context.queue().await?;
    let registry = context.producer_registry(&queue).await?;
    queue.attach_registry(registry);
    let (id, deduplicated) = if children.is_empty() {
        let added = queue.add(job).await.map_err(enqueue_error)?;
        (added.id, added.deduplicated)
    } else {
        (
            queue.add_flow(job, children).await.map_err(enqueue_error)?,
            false,
        )
    };

    if !args.wait {
        if context.json {
            println!("{}", json!({"id": id, "deduplicated": deduplicated}));
        } else {
            println!("{id}");
        }
        return Ok(());
    }
    let finished = queue.wait(&id, wait_timeout).await.map_err(|error| match error {
        WaitError::Timeout(_) => WaitTimedOut(format!(
            "job {id} did not finish within {}; it is still queued — check it later with `boxcar job {id}`",
            args.timeout
        ))
        .into(),
        other => anyhow::Error::from(other),
    })?;
    if context.json {
        println!("{}", json_for_terminal(&JobView::from(&finished))?);
    } else if let Some(result) = &finished.result {
        println!("{}", json_text_for_terminal(result));
    }
    if finished.status != JobStatus::Succeeded {
        return Err(JobFailed {
            id,
            status: finished.status.as_str().to_string(),
            message: finished.last_error.unwrap_or_default(),
            code: finished.error_code,
        }
        .into());
    }
    Ok(())
}

fn enqueue_error(error: QueueError) -> anyhow::Error {
    match error {
        QueueError::Enqueue(e) => usage(e.to_string()),
        other => other.into(),
    }
}
