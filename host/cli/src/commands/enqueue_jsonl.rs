//! `boxcar enqueue --jsonl FILE|-`: enqueue one job per line of a JSON
//! Lines file (or standard input), the same objects `POST /jobs/batch`
//! takes as NDJSON, in transactions of up to [`MAX_BATCH`] lines.
//!
//! Invariants: each line is validated on its own — a refused line is
//! reported (with its line number) and does not keep the others out; the
//! valid lines of one chunk are inserted in one transaction. The command
//! fails (after enqueueing the rest) when any line was refused.

use std::io::BufRead;

use serde_json::json;

use super::context::Context;
use crate::{
    api::{
        batch::{ndjson_item, MAX_BATCH},
        ApiError,
    },
    error::usage,
};

/// What the run did, for the summary.
#[derive(Default)]
struct Tally {
    added: u64,
    deduplicated: u64,
    refused: Vec<serde_json::Value>,
}

fn open(source: &str) -> anyhow::Result<Box<dyn BufRead>> {
    if source == "-" {
        return Ok(Box::new(std::io::BufReader::new(std::io::stdin())));
    }
    let file = std::fs::File::open(source).map_err(|e| {
        usage(format!(
            "--jsonl `{source}`: {e}; give a file of one JSON job per line, or - for standard input"
        ))
    })?;
    Ok(Box::new(std::io::BufReader::new(file)))
}

/// Enqueues one chunk: `lines` are (line number, text).
async fn enqueue_chunk(
    queue: &boxcar_queue::Queue,
    lines: Vec<(usize, String)>,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let mut jobs = Vec::with_capacity(lines.len());
    let mut numbers = Vec::with_capacity(lines.len());
    for (number, line) in lines {
        match ndjson_item(&line, number) {
            Ok(job) => {
                jobs.push(job);
                numbers.push(number);
            }
            Err(refused) => tally.refused.push(with_line(refused.body(), number)),
        }
    }
    for (number, outcome) in numbers.into_iter().zip(queue.add_each(jobs).await?) {
        match outcome {
            Ok(added) if added.deduplicated => tally.deduplicated += 1,
            Ok(_) => tally.added += 1,
            Err(refused) => tally
                .refused
                .push(with_line(ApiError::from(refused).body(), number)),
        }
    }
    Ok(())
}

fn with_line(mut body: serde_json::Value, line: usize) -> serde_json::Value {
    if let Some(fields) = body.as_object_mut() {
        fields.insert("line".into(), line.into());
    }
    body
}

pub async fn run(context: Context, source: &str) -> anyhow::Result<()> {
    let reader = open(source)?;
    let queue = context.queue().await?;
    let registry = context.producer_registry(&queue).await?;
    queue.attach_registry(registry);
    let mut tally = Tally::default();
    let mut chunk = Vec::with_capacity(MAX_BATCH);
    for (index, line) in reader.lines().enumerate() {
        let line =
            line.map_err(|e| usage(format!("--jsonl `{source}` line {}: {e}", index + 1)))?;
        if line.trim().is_empty() {
            continue;
        }
        chunk.push((index + 1, line));
        if chunk.len() == MAX_BATCH {
            enqueue_chunk(&queue, std::mem::take(&mut chunk), &mut tally).await?;
        }
    }
    if !chunk.is_empty() {
        enqueue_chunk(&queue, chunk, &mut tally).await?;
    }
    let refused = tally.refused.len();
    if context.json {
        println!(
            "{}",
            json!({"added": tally.added, "deduplicated": tally.deduplicated,
                   "refused": refused, "errors": tally.refused})
        );
    } else {
        for error in &tally.refused {
            eprintln!(
                "line {}: {} ({})",
                error["line"],
                error["message"].as_str().unwrap_or_default(),
                error["error"].as_str().unwrap_or_default()
            );
        }
        println!(
            "enqueued {} jobs ({} deduplicated, {refused} refused)",
            tally.added, tally.deduplicated
        );
    }
    if refused > 0 {
        return Err(usage(format!(
            "{refused} lines were refused (listed above); the other lines were enqueued"
        )));
    }
    Ok(())
}
