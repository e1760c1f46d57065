//! Inspection and administration commands: `jobs`, `job`, `counts`,
//! `cancel`, `retry-failed`, `prune`, `handlers`, `migrate`.

use std::collections::BTreeMap;

use boxcar_queue::{
    ClaimGuards, HandlerEventKind, JobCursor, JobFilter, JobStatus, PoolStatus, Queue, Registry,
};
use chrono::Utc;
use serde_json::json;

use super::context::Context;
use super::history;
use crate::error::usage;
use crate::{
    api::parse_scope,
    cli::{CancelArgs, JobsArgs, PruneArgs, RetryArgs},
    output::{clip, json_for_terminal, printable, table},
    units::parse_duration,
    views::{HandlerEventView, JobView},
};

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", json_for_terminal(value)?);
    Ok(())
}

/// Parses a comma-separated status list.
pub fn parse_statuses(text: &str) -> anyhow::Result<Vec<JobStatus>> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|name| {
            name.trim().parse::<JobStatus>().map_err(|_| {
                usage(format!(
                    "unknown status `{name}`: use pending, running, succeeded, failed or cancelled"
                ))
            })
        })
        .collect()
}

/// Parses `--scope TYPE:ID`.
pub fn scope_arg(text: Option<&str>) -> anyhow::Result<Option<boxcar_queue::Scope>> {
    text.map(|t| parse_scope(t).map_err(usage)).transpose()
}

pub async fn jobs(context: Context, args: JobsArgs) -> anyhow::Result<()> {
    let queue = context.queue().await?;
    let mut filter = JobFilter::default();
    filter.types = args
        .job_type
        .map(|t| t.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    filter.statuses = args
        .status
        .as_deref()
        .map(parse_statuses)
        .transpose()?
        .unwrap_or_default();
    filter.scope = scope_arg(args.scope.as_deref())?;
    filter.parent_id = args.parent;
    filter.limit = Some(args.limit);
    filter.offset = Some(args.offset);
    filter.newest_first = args.newest;
    if let Some(after) = args.after.as_deref() {
        filter.after = Some(
            after
                .parse::<JobCursor>()
                .map_err(|e| usage(format!("--after: {e}")))?,
        );
    }
    let jobs = queue.find(&filter).await?;
    let next = JobCursor::next_page(&jobs, args.limit);
    let views: Vec<JobView> = jobs.iter().map(JobView::from).collect();
    if context.json {
        let listed: Vec<serde_json::Value> = jobs
            .iter()
            .zip(&views)
            .map(|(job, view)| {
                let mut value = serde_json::to_value(view)?;
                if let Some(fields) = value.as_object_mut() {
                    fields.insert("cursor".into(), JobCursor::of(job).to_string().into());
                }
                Ok(value)
            })
            .collect::<Result<_, serde_json::Error>>()?;
        return print_json(&listed);
    }
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                j.job_type.clone(),
                j.status.clone(),
                format!("{}/{}", j.attempts, j.max_attempts),
                j.scope
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                clip(j.last_error.as_deref().unwrap_or(""), 60),
                j.updated_at.clone(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "ID",
                "TYPE",
                "STATUS",
                "ATTEMPTS",
                "SCOPE",
                "LAST ERROR",
                "UPDATED"
            ],
            &rows
        )
    );
    if let Some(next) = next {
        eprintln!("next page: --after {next}");
    }
    Ok(())
}

/// The guards a claim of `job_type` carries per this configuration: the
/// declarations of its manifest in the configured handlers directory, and
/// its pools.
fn configured_guards(context: &Context, job_type: &str) -> ClaimGuards {
    let registry = Registry::new();
    let mut guards = match registry.set_pools(context.config.pools.clone()) {
        Ok(()) => registry.guards_for(job_type),
        Err(_) => ClaimGuards::default(),
    };
    let Some(dir) = &context.config.handlers else {
        return guards;
    };
    let manifest = crate::deploy::scan::manifests(dir)
        .into_iter()
        .find(|m| m.job_types.iter().any(|t| t == job_type));
    if let Some(m) = manifest {
        guards.serialize_by_scope = m.settings.serialize_by_scope;
        guards.not_while_running = m.settings.not_while_running;
        guards.waits_for = m.settings.waits_for;
    }
    guards
}

pub async fn job(context: Context, id: &str) -> anyhow::Result<()> {
    let queue = context.queue().await?;
    let Some(job) = queue.get(id).await? else {
        return Err(usage(format!("job `{id}` does not exist")));
    };
    let blocked_by = queue
        .blocked_by(&job, &configured_guards(&context, &job.job_type))
        .await?;
    let attempts = queue.attempts(id).await?.unwrap_or_default();
    let view = JobView::from(&job);
    let mut value = serde_json::to_value(&view)?;
    if let (Some(why), Some(fields)) = (blocked_by, value.as_object_mut()) {
        fields.insert("blocked_by".into(), why.to_string().into());
    }
    if context.json {
        if let Some(fields) = value.as_object_mut() {
            fields.insert("attempt_history".into(), history::attempts_json(&attempts)?);
        }
        return print_json(&value);
    }
    if let Some(fields) = value.as_object() {
        for (key, value) in fields {
            let text = match value {
                serde_json::Value::Null => continue,
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            println!("{key:<16} {}", printable(&text));
        }
    }
    if !attempts.is_empty() {
        println!();
        print!("{}", history::attempts_table(&attempts));
    }
    Ok(())
}

pub async fn counts(context: Context) -> anyhow::Result<()> {
    let queue = context.queue().await?;
    let counts = queue.count_by_status().await?;
    let pools = queue.pool_status(&context.config.pools).await?;
    let mut value = serde_json::to_value(counts)?;
    if context.json {
        if let Some(object) = value.as_object_mut() {
            object.insert(
                "pools".into(),
                pools.iter().map(PoolStatus::to_json).collect(),
            );
        }
        return print_json(&value);
    }
    let rows: Vec<Vec<String>> = value
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| vec![k.clone(), v.to_string()])
                .collect()
        })
        .unwrap_or_default();
    print!("{}", table(&["STATUS", "JOBS"], &rows));
    if !pools.is_empty() {
        let of = |n: u64, limit: Option<u32>| match limit {
            Some(l) => format!("{n}/{l}"),
            None => format!("{n} (unbounded)"),
        };
        let rows: Vec<Vec<String>> = pools
            .iter()
            .map(|p| {
                vec![
                    p.name.clone(),
                    of(p.occupied, p.concurrency),
                    p.budget_left()
                        .map_or_else(|| "-".into(), |left| of(left, p.rate_per_minute)),
                    p.window_resets_at
                        .map_or_else(|| "-".into(), |t| t.to_rfc3339()),
                ]
            })
            .collect();
        println!();
        print!(
            "{}",
            table(&["POOL", "OCCUPIED", "BUDGET LEFT", "WINDOW RESETS"], &rows)
        );
    }
    Ok(())
}

pub async fn cancel(context: Context, args: CancelArgs) -> anyhow::Result<()> {
    let queue = context.queue().await?;
    let reason = args.reason.as_str();
    let cancelled = if let Some(id) = &args.id {
        if queue.get(id).await?.is_none() {
            return Err(usage(format!("job `{id}` does not exist")));
        }
        usize::from(queue.cancel(id, reason).await?)
    } else if let Some(scope) = scope_arg(args.scope.as_deref())? {
        if args.pending_only {
            queue.cancel_pending_for_scope(scope, reason).await?
        } else {
            queue.cancel_for_scope(scope, reason).await?
        }
    } else if let Some(job_type) = &args.job_type {
        queue
            .cancel_by_dedupe_keys(job_type, &args.dedupe_key, reason)
            .await?
    } else {
        return Err(usage(
            "say what to cancel: --id ID, --scope TYPE:ID [--pending-only], or --type T --dedupe-key K...",
        ));
    };
    if context.json {
        return print_json(&json!({"cancelled": cancelled}));
    }
    println!("cancelled {cancelled} job(s)");
    Ok(())
}

pub async fn retry_failed(context: Context, args: RetryArgs) -> anyhow::Result<()> {
    let queue = context.queue().await?;
    let mut filter = JobFilter::default();
    filter.types = args.job_type.into_iter().collect();
    filter.scope = scope_arg(args.scope.as_deref())?;
    filter.limit = args.limit;
    filter.offset = args.offset;
    filter.id = args.id;
    let retried = queue.retry_failed(&filter).await?;
    if context.json {
        return print_json(&json!({"retried": retried}));
    }
    println!("retried {retried} failed job(s)");
    Ok(())
}

pub async fn prune(context: Context, args: PruneArgs) -> anyhow::Result<()> {
    let age = parse_duration(&args.older_than).map_err(usage)?;
    if age.is_zero() {
        return Err(usage("--older-than must be positive, e.g. 7d"));
    }
    let statuses = match args.status.as_deref() {
        Some(text) => {
            let statuses = parse_statuses(text)?;
            if let Some(live) = statuses.iter().find(|s| !s.is_terminal()) {
                return Err(usage(format!(
                    "only terminal jobs can be pruned; `{}` is not terminal",
                    live.as_str()
                )));
            }
            statuses
        }
        None => vec![
            JobStatus::Succeeded,
            JobStatus::Failed,
            JobStatus::Cancelled,
        ],
    };
    let cutoff = chrono::Duration::from_std(age)
        .ok()
        .and_then(|age| Utc::now().checked_sub_signed(age))
        .ok_or_else(|| usage("--older-than is too large: give an age such as 7d or 1y"))?;
    let queue = context.queue().await?;
    let pruned = queue.prune(cutoff, &statuses).await?;
    if context.json {
        return print_json(&json!({"pruned": pruned}));
    }
    println!("pruned {pruned} job(s)");
    Ok(())
}

/// job type → its latest `deployed` event, unless a later `removed` one exists.
async fn current_deploys(queue: &Queue) -> anyhow::Result<BTreeMap<String, HandlerEventView>> {
    let events = queue.handler_events(10_000).await?;
    let mut latest: BTreeMap<String, HandlerEventView> = BTreeMap::new();
    for event in events.iter().rev() {
        let Some(job_type) = &event.job_type else {
            continue;
        };
        match event.kind {
            HandlerEventKind::Deployed => {
                latest.insert(job_type.clone(), HandlerEventView::from(event));
            }
            HandlerEventKind::Removed => {
                latest.remove(job_type);
            }
            HandlerEventKind::Rejected => {}
        }
    }
    Ok(latest)
}

pub async fn handlers(context: Context) -> anyhow::Result<()> {
    let queue = context.queue().await?;
    let deployed = current_deploys(&queue).await?;
    let events = queue.handler_events(10_000).await?;
    let mut rejections: BTreeMap<String, HandlerEventView> = BTreeMap::new();
    for event in events.iter().rev() {
        let Some(file) = &event.file else { continue };
        match event.kind {
            HandlerEventKind::Rejected => {
                rejections.insert(file.clone(), HandlerEventView::from(event));
            }
            HandlerEventKind::Deployed | HandlerEventKind::Removed => {
                rejections.remove(file);
            }
        }
    }
    if context.json {
        let deployed: Vec<_> = deployed.values().collect();
        let rejected: Vec<_> = rejections.values().collect();
        return print_json(&json!({"deployed": deployed, "rejected": rejected}));
    }
    let rows: Vec<Vec<String>> = deployed
        .iter()
        .map(|(job_type, e)| {
            vec![
                job_type.clone(),
                e.file.clone().unwrap_or_default(),
                e.digest.as_deref().map(|d| clip(d, 16)).unwrap_or_default(),
                e.at.clone(),
                e.reason
                    .as_deref()
                    .and_then(|r| r.strip_prefix("grants: "))
                    .unwrap_or("")
                    .to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["TYPE", "MODULE", "DIGEST", "DEPLOYED", "GRANTS"], &rows)
    );
    if !rejections.is_empty() {
        println!("\nrejected (the previous version, if any, keeps serving):");
        for (file, e) in &rejections {
            println!(
                "  {} at {}: {}",
                printable(file),
                e.at,
                printable(e.reason.as_deref().unwrap_or(""))
            );
        }
    }
    Ok(())
}

pub async fn migrate(context: Context) -> anyhow::Result<()> {
    context.queue().await?;
    if context.json {
        return print_json(&json!({"migrated": true}));
    }
    println!("database is up to date: {}", redact(&context.db));
    Ok(())
}

/// The URL without any password.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}
