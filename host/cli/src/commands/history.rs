//! What happened on each attempt of a job: the attempts table of `boxcar
//! job ID`, and `boxcar logs ID [--attempt N] [--follow]`.
//!
//! `--follow` reads the store every [`FOLLOW_EVERY`] for lines after the
//! last one printed, and exits once the job is finished and every line
//! stored up to its end was printed (the status is read before the lines,
//! so the lines written with the final transition are never missed). A
//! running job's lines reach the store in batches (see the engine), so they
//! appear with a delay of about a quarter second.

use std::time::Duration;

use boxcar_queue::{Attempt, LogQuery, Queue};

use super::{usage, Context};
use crate::{
    cli::LogsArgs,
    output::{clip, printable, table},
    views::{time, AttemptView, LogLineView},
};

/// How often `--follow` asks the store for new lines.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// `n` bytes in a short human form.
fn bytes(n: Option<u64>) -> String {
    match n {
        None => "-".into(),
        Some(n) if n >= 1 << 20 => format!("{:.1}MiB", n as f64 / f64::from(1 << 20)),
        Some(n) if n >= 1 << 10 => format!("{:.1}KiB", n as f64 / f64::from(1 << 10)),
        Some(n) => format!("{n}B"),
    }
}

/// The attempts of a job as an aligned table.
pub fn attempts_table(attempts: &[Attempt]) -> String {
    let rows: Vec<Vec<String>> = attempts
        .iter()
        .map(|a| {
            let u = &a.usage;
            vec![
                a.attempt.to_string(),
                a.outcome.to_string(),
                a.worker.clone().unwrap_or_else(|| "-".into()),
                a.digest
                    .as_deref()
                    .map_or_else(|| "-".into(), |d| clip(d, 19)),
                a.started_at.map_or_else(|| "-".into(), time),
                u.wall_ms.map_or_else(|| "-".into(), |ms| format!("{ms}ms")),
                bytes(u.peak_memory_bytes),
                bytes(u.log_bytes),
                clip(a.error.as_deref().unwrap_or(""), 60),
            ]
        })
        .collect();
    table(
        &[
            "#", "OUTCOME", "WORKER", "DIGEST", "STARTED", "WALL", "MEMORY", "LOG", "ERROR",
        ],
        &rows,
    )
}

/// The attempts of `id` as JSON values.
pub fn attempts_json(attempts: &[Attempt]) -> serde_json::Result<serde_json::Value> {
    serde_json::to_value(attempts.iter().map(AttemptView::from).collect::<Vec<_>>())
}

/// Prints one page of the lines of `query` after its cursor and moves the
/// cursor past them; returns how many were printed.
async fn print_page(queue: &Queue, query: &mut LogQuery, json: bool) -> anyhow::Result<usize> {
    let lines = queue.logs(query).await?;
    for line in &lines {
        if json {
            println!("{}", serde_json::to_string(&LogLineView::from(line))?);
        } else {
            println!(
                "{}  #{}  {:<6} {}",
                time(line.line.at),
                line.line.attempt,
                line.line.level,
                printable(&line.line.message)
            );
        }
        query.after = Some(line.cursor);
    }
    Ok(lines.len())
}

/// `boxcar logs`.
pub async fn logs(context: Context, args: LogsArgs) -> anyhow::Result<()> {
    let queue = context.queue().await?;
    if queue.get(&args.id).await?.is_none() {
        return Err(usage(format!("job `{}` does not exist", args.id)));
    }
    let mut query = LogQuery {
        job_id: args.id.clone(),
        attempt: args.attempt,
        ..LogQuery::default()
    };
    loop {
        let finished = queue
            .get(&args.id)
            .await?
            .is_none_or(|job| job.status.is_terminal());
        let page = query.page() as usize;
        let mut printed = print_page(&queue, &mut query, context.json).await?;
        while printed == page {
            printed = print_page(&queue, &mut query, context.json).await?;
        }
        if !args.follow || finished {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}
