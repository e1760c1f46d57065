//! `boxcar schedules`: the stored recurring schedules and their next run
//! times; `--reconcile` first stores the configuration's declarations, as a
//! host that runs handlers does at start.

use boxcar_queue::Scheduler;

use super::context::Context;
use crate::{cli::SchedulesArgs, output::table, views::ScheduleView};

pub async fn run(context: Context, args: SchedulesArgs) -> anyhow::Result<()> {
    let queue = context.queue().await?;
    let scheduler = Scheduler::new(queue);
    if args.reconcile {
        let report = scheduler
            .reconcile(&context.config.schedules_owner, &context.config.schedules)
            .await?;
        if !context.json {
            println!(
                "schedules: {} created, {} updated, {} removed",
                report.created.len(),
                report.updated.len(),
                report.removed.len()
            );
        }
    }
    let views: Vec<ScheduleView> = scheduler
        .list()
        .await?
        .iter()
        .map(ScheduleView::from)
        .collect();
    if context.json {
        println!("{}", serde_json::to_string_pretty(&views)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|s| {
            let cadence = match (&s.every, &s.cron) {
                (Some(every), _) => format!("every {every}"),
                (None, Some(cron)) => match &s.tz {
                    Some(tz) => format!("cron {cron} ({tz})"),
                    None => format!("cron {cron}"),
                },
                (None, None) => String::new(),
            };
            vec![
                s.id.clone(),
                s.job_type.clone(),
                cadence,
                s.next_run_at.clone().unwrap_or_else(|| "finished".into()),
                s.last_run_at.clone().unwrap_or_else(|| "never".into()),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["ID", "TYPE", "CADENCE", "NEXT RUN", "LAST RUN"], &rows)
    );
    Ok(())
}
