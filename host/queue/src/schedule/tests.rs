//! Schedule validation and tick arithmetic with fixed instants, including
//! both Europe/Berlin DST changes of 2026 (29 March 02:00 CET → 03:00 CEST,
//! 25 October 03:00 CEST → 02:00 CET).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::*;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|e| panic!("bad test instant {s}: {e}"))
}

fn cron(id: &str, expr: &str, tz: Option<&str>) -> ScheduleSpec {
    ScheduleSpec {
        id: id.into(),
        job_type: "app.reconcile".into(),
        payload: serde_json::json!({"full": true}),
        cron: Some(expr.into()),
        tz: tz.map(Into::into),
        ..ScheduleSpec::default()
    }
}

fn every(id: &str, d: Duration) -> ScheduleSpec {
    ScheduleSpec {
        id: id.into(),
        job_type: "app.tick".into(),
        payload: serde_json::json!({}),
        every: Some(d),
        ..ScheduleSpec::default()
    }
}

fn valid(spec: &ScheduleSpec) -> Schedule {
    spec.validate()
        .unwrap_or_else(|e| panic!("expected a valid schedule: {e}"))
}

fn refused(spec: &ScheduleSpec) -> String {
    match spec.validate() {
        Ok(_) => panic!("expected `{}` to be refused", spec.id),
        Err(e) => e.to_string(),
    }
}

/// The next `n` ticks from `now`, each computed as the scheduler does.
fn ticks(s: &Schedule, now: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = s.first_run(now);
    while let Some(tick) = t {
        out.push(tick);
        if out.len() == n {
            break;
        }
        t = s.next_after(tick, tick);
    }
    out
}

#[test]
fn fixed_time_in_spring_gap_runs_at_first_instant_after_the_gap() {
    let s = valid(&cron("n", "30 2 * * *", Some("Europe/Berlin")));
    assert_eq!(
        ticks(&s, at("2026-03-27T12:00:00Z"), 4),
        vec![
            at("2026-03-28T01:30:00Z"), // 02:30 CET
            at("2026-03-29T01:00:00Z"), // 02:30 does not exist: 03:00 CEST
            at("2026-03-30T00:30:00Z"), // 02:30 CEST
            at("2026-03-31T00:30:00Z"),
        ]
    );
}

#[test]
fn fixed_time_in_autumn_overlap_runs_once_at_the_earlier_instant() {
    let s = valid(&cron("n", "30 2 * * *", Some("Europe/Berlin")));
    assert_eq!(
        ticks(&s, at("2026-10-24T12:00:00Z"), 3),
        vec![
            at("2026-10-25T00:30:00Z"), // first 02:30 (CEST); not again at 01:30Z
            at("2026-10-26T01:30:00Z"), // 02:30 CET
            at("2026-10-27T01:30:00Z"),
        ]
    );
}

#[test]
fn daily_wall_clock_time_keeps_local_time_across_both_changes() {
    let s = valid(&cron("n", "0 9 * * *", Some("Europe/Berlin")));
    assert_eq!(
        ticks(&s, at("2026-03-28T00:00:00Z"), 2),
        vec![at("2026-03-28T08:00:00Z"), at("2026-03-29T07:00:00Z")]
    );
    assert_eq!(
        ticks(&s, at("2026-10-24T00:00:00Z"), 2),
        vec![at("2026-10-24T07:00:00Z"), at("2026-10-25T08:00:00Z")]
    );
}

#[test]
fn interval_pattern_runs_on_real_instants_through_the_overlap() {
    let s = valid(&cron("n", "0,30 * * * *", Some("Europe/Berlin")));
    assert_eq!(
        ticks(&s, at("2026-10-24T23:50:00Z"), 5),
        vec![
            at("2026-10-25T00:00:00Z"), // 02:00 CEST
            at("2026-10-25T00:30:00Z"), // 02:30 CEST
            at("2026-10-25T01:00:00Z"), // 02:00 CET
            at("2026-10-25T01:30:00Z"), // 02:30 CET
            at("2026-10-25T02:00:00Z"), // 03:00 CET
        ]
    );
}

#[test]
fn six_field_cron_has_seconds_and_utc_is_the_default_zone() {
    let s = valid(&cron("n", "*/10 * * * * *", None));
    assert_eq!(
        ticks(&s, at("2026-01-01T00:00:01Z"), 2),
        vec![at("2026-01-01T00:00:10Z"), at("2026-01-01T00:00:20Z")]
    );
}

#[test]
fn missed_ticks_collapse_into_one_catch_up() {
    let s = valid(&every("e", Duration::from_secs(1)));
    let tick = at("2026-01-01T00:00:01Z");
    // The host was down from 00:00:01 to 00:00:04.5: one catch-up (the
    // stored tick), then the cadence resumes after now.
    assert_eq!(
        s.next_after(tick, at("2026-01-01T00:00:04.500Z")),
        Some(at("2026-01-01T00:00:05Z"))
    );
    let c = valid(&cron("c", "0 * * * *", None));
    assert_eq!(
        c.next_after(at("2026-01-01T01:00:00Z"), at("2026-01-01T05:10:00Z")),
        Some(at("2026-01-01T06:00:00Z"))
    );
}

#[test]
fn every_starts_one_interval_after_creation_or_at_start_at() {
    let now = at("2026-01-01T00:00:00Z");
    let s = valid(&every("e", Duration::from_secs(300)));
    assert_eq!(s.first_run(now), Some(at("2026-01-01T00:05:00Z")));
    let mut spec = every("e", Duration::from_secs(300));
    spec.start_at = Some(at("2026-02-01T00:00:00Z"));
    assert_eq!(valid(&spec).first_run(now), spec.start_at);
}

#[test]
fn cron_immediately_and_start_at_and_end_at() {
    let now = at("2026-01-01T00:00:30Z");
    let mut spec = cron("c", "0 * * * *", None);
    spec.immediately = true;
    assert_eq!(valid(&spec).first_run(now), Some(now));

    let mut spec = cron("c", "0 * * * *", None);
    spec.start_at = Some(at("2026-01-02T00:00:00Z"));
    assert_eq!(
        valid(&spec).first_run(now),
        Some(at("2026-01-02T00:00:00Z"))
    );

    let mut spec = cron("c", "0 * * * *", None);
    spec.end_at = Some(at("2026-01-01T01:30:00Z"));
    let s = valid(&spec);
    assert_eq!(s.first_run(now), Some(at("2026-01-01T01:00:00Z")));
    assert_eq!(
        s.next_after(at("2026-01-01T01:00:00Z"), at("2026-01-01T01:00:00Z")),
        None
    );
}

#[test]
fn invalid_declarations_name_the_id_and_the_reason() {
    let mut both = cron("both", "0 * * * *", None);
    both.every = Some(Duration::from_secs(1));
    assert_eq!(
        refused(&both),
        "both: set exactly one of `every` and `cron`, not both"
    );

    let mut neither = every("neither", Duration::from_secs(1));
    neither.every = None;
    assert!(refused(&neither).starts_with("neither: set exactly one of `every`"));

    assert!(refused(&cron("bad-cron", "61 * * * *", None))
        .starts_with("bad-cron: `cron` `61 * * * *` is invalid"));
    assert!(refused(&cron("short", "* * *", None)).starts_with("short: `cron` must have 5 fields"));
    assert!(refused(&cron("year", "0 0 0 1 1 * 2030", None))
        .starts_with("year: `cron` must have 5 fields"));
    assert_eq!(
        refused(&cron("zone", "0 * * * *", Some("Mars/Olympus"))),
        "zone: `tz` `Mars/Olympus` is not an IANA time zone name, e.g. \"Europe/Berlin\""
    );

    let mut tz_every = every("tz-every", Duration::from_secs(1));
    tz_every.tz = Some("UTC".into());
    assert!(refused(&tz_every).starts_with("tz-every: `tz` applies to `cron` only"));

    let mut imm_every = every("imm-every", Duration::from_secs(1));
    imm_every.immediately = true;
    assert!(refused(&imm_every).starts_with("imm-every: `immediately` applies to `cron` only"));

    let mut imm_start = cron("imm-start", "0 * * * *", None);
    imm_start.immediately = true;
    imm_start.start_at = Some(at("2026-01-01T00:00:00Z"));
    assert!(refused(&imm_start)
        .starts_with("imm-start: `immediately` cannot be combined with `start_at`"));

    assert_eq!(
        refused(&every("zero", Duration::ZERO)),
        "zero: `every` must be a positive duration, e.g. \"5m\""
    );

    let mut window = every("window", Duration::from_secs(1));
    window.start_at = Some(at("2026-01-02T00:00:00Z"));
    window.end_at = Some(at("2026-01-01T00:00:00Z"));
    assert_eq!(
        refused(&window),
        "window: `end_at` must be after `start_at`"
    );

    let mut payload = every("payload", Duration::from_secs(1));
    payload.payload = serde_json::json!([1]);
    assert!(refused(&payload).starts_with("payload: `payload` must be a table"));

    let mut blank = every("blank", Duration::from_secs(1));
    blank.job_type = " ".into();
    assert_eq!(refused(&blank), "blank: `job_type` must not be blank");

    assert_eq!(
        refused(&every("", Duration::from_secs(1))),
        "<missing id>: `id` must not be blank"
    );
}

#[test]
fn duplicate_ids_are_refused() {
    let specs = vec![
        every("a", Duration::from_secs(1)),
        every("a", Duration::from_secs(2)),
        cron("b", "nope", None),
    ];
    let errors = match validate_all(&specs) {
        Ok(_) => panic!("expected errors"),
        Err(e) => e,
    };
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        text[0],
        "a: declared more than once; schedule ids must be unique"
    );
    assert!(text[1].starts_with("b: `cron` must have 5 fields"));
}

#[test]
fn definition_round_trips_and_edits_are_visible() {
    let s = valid(&cron("n", "17 3 * * *", Some("Europe/Berlin")));
    let back = Schedule::from_def(s.def()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.def(), s.def());
    let edited = valid(&cron("n", "18 3 * * *", Some("Europe/Berlin")));
    assert_ne!(edited.def(), s.def());
}

#[test]
fn a_cron_that_can_never_fire_is_refused_at_once() {
    for (expr, says) in [
        (", 04 0 ? * *", "lists nothing (`,`)"),
        ("0 0 31 2 *", "never fires"),
        ("0 0 30 2 ?", "never fires"),
    ] {
        let started = std::time::Instant::now();
        let refused = cron("never", expr, None).validate().expect_err("refused");
        assert!(refused.reason.contains(says), "{expr}: {}", refused.reason);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{expr}: refused in {:?}",
            started.elapsed()
        );
    }
    let leap_day = cron("leap", "0 0 29 2 *", Some("Europe/Berlin"))
        .validate()
        .expect("fires every four years");
    assert_eq!(
        leap_day.first_run(at("2026-12-03T12:00:00Z")),
        Some(at("2028-02-28T23:00:00Z"))
    );
}
