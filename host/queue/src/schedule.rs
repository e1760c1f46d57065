//! Recurring schedules: declarations, validation, and when each
//! tick falls.
//!
//! A [`ScheduleSpec`] is what configuration declares. [`ScheduleSpec::validate`]
//! turns it into a [`Schedule`] or a [`ScheduleError`] that reads
//! `<id>: <reason>`. A [`Schedule`] knows its [`Cadence`] and computes tick
//! instants; the store persists it as a [`ScheduleDef`] plus the next tick.
//!
//! Invariants:
//! - exactly one of `every` (positive) and `cron` (5 or 6 fields); `tz` and
//!   `immediately` only with `cron`; `immediately` never with `start_at`;
//!   `end_at` after `start_at`; the payload is a JSON object;
//! - cron instants follow croner's documented DST semantics: a fixed-time
//!   pattern whose wall-clock time falls into a spring-forward gap runs at
//!   the first instant after the gap, and once (at the earlier instant) in a
//!   fall-back overlap; interval patterns run on real instants;
//! - [`Schedule::next_after`] is strictly after `now`, so a host that was
//!   down across several ticks runs one catch-up job, not one per tick;
//! - the store enqueues a tick's job only if it moves `next_run_at` from
//!   that tick (compare-and-set in the enqueue's transaction), so each tick
//!   yields one job across the fleet.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::Serialize;

/// A declared schedule as configuration states it (not yet validated).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ScheduleSpec {
    /// Identity; changing any other field updates the schedule in place.
    pub id: String,
    /// Job type each tick enqueues.
    pub job_type: String,
    /// Payload of each job (a JSON object).
    pub payload: serde_json::Value,
    /// Fixed interval between ticks.
    pub every: Option<Duration>,
    /// Cron expression (5 fields, or 6 with seconds first).
    pub cron: Option<String>,
    /// IANA time zone of the cron expression (default UTC).
    pub tz: Option<String>,
    /// Cron only: run once at creation as well.
    pub immediately: bool,
    /// No tick before this instant.
    pub start_at: Option<DateTime<Utc>>,
    /// No tick after this instant.
    pub end_at: Option<DateTime<Utc>>,
}

/// A declaration was refused. Displays as `<id>: <reason>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{id}: {reason}")]
pub struct ScheduleError {
    /// The schedule's id (or `<missing id>`).
    pub id: String,
    /// What is wrong and how to fix it.
    pub reason: String,
}

/// How often a schedule ticks.
#[derive(Clone, Debug)]
pub enum Cadence {
    /// Every fixed interval.
    Every(Duration),
    /// On the instants of a cron expression in a time zone.
    Cron {
        /// The expression as declared.
        expr: String,
        /// Parsed.
        cron: Box<Cron>,
        /// The zone the expression's wall-clock times are in.
        tz: Tz,
    },
}

/// A validated schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    def: ScheduleDef,
    cadence: Cadence,
}

/// What the store persists of a schedule's definition. Two definitions
/// that differ in any field mean the schedule was edited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScheduleDef {
    /// Identity.
    pub id: String,
    /// Job type.
    pub job_type: String,
    /// Payload JSON object text (canonical: keys sorted).
    pub payload: String,
    /// Interval in milliseconds (exclusive with `cron`).
    pub every_ms: Option<i64>,
    /// Cron expression (exclusive with `every_ms`).
    pub cron: Option<String>,
    /// IANA zone name (cron only).
    pub tz: Option<String>,
    /// Cron only: tick at creation.
    pub immediately: bool,
    /// Earliest tick.
    pub start_at: Option<DateTime<Utc>>,
    /// Latest tick.
    pub end_at: Option<DateTime<Utc>>,
}

/// A schedule as stored, with its bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScheduleRecord {
    /// The definition.
    #[serde(flatten)]
    pub def: ScheduleDef,
    /// The next tick; `None` once past `end_at`.
    pub next_run_at: Option<DateTime<Utc>>,
    /// The last tick that enqueued a job.
    pub last_run_at: Option<DateTime<Utc>>,
    /// The declaring set that owns it (reconcile removes only its own).
    pub owner: Option<String>,
    /// First stored.
    pub created_at: DateTime<Utc>,
    /// Last changed.
    pub updated_at: DateTime<Utc>,
}

/// Most characters of a schedule id.
pub const MAX_SCHEDULE_ID_LEN: usize = 200;

/// The instant a cron expression is searched from at validation, to refuse
/// one that never fires (whose every later search would walk croner's whole
/// range of years in vain).
const NEVER_FIRES_PROBE: DateTime<Utc> = DateTime::<Utc>::UNIX_EPOCH;

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl ScheduleSpec {
    /// Schedule `id` enqueuing `job_type` with `payload`, with no cadence
    /// yet: set `every` or `cron` (and the other fields) before
    /// [`ScheduleSpec::validate`].
    pub fn new(
        id: impl Into<String>,
        job_type: impl Into<String>,
        payload: serde_json::Value,
    ) -> Self {
        Self {
            id: id.into(),
            job_type: job_type.into(),
            payload,
            ..Self::default()
        }
    }

    /// Validates the declaration.
    ///
    /// # Errors
    /// [`ScheduleError`] naming the id and the first rule broken.
    pub fn validate(&self) -> Result<Schedule, ScheduleError> {
        let id = if self.id.trim().is_empty() {
            "<missing id>".to_string()
        } else {
            self.id.clone()
        };
        let err = |reason: &str| ScheduleError {
            id: id.clone(),
            reason: reason.to_string(),
        };
        if self.id.trim().is_empty() {
            return Err(err("`id` must not be blank"));
        }
        if self.id.len() > MAX_SCHEDULE_ID_LEN || self.id.chars().any(char::is_control) {
            return Err(err(
                "`id` must be at most 200 characters without control characters",
            ));
        }
        if self.job_type.trim().is_empty() {
            return Err(err("`job_type` must not be blank"));
        }
        if !self.payload.is_object() {
            return Err(err(
                "`payload` must be a table (a JSON object), e.g. payload = { full = true }",
            ));
        }
        let cadence = match (&self.every, &self.cron) {
            (Some(_), Some(_)) => {
                return Err(err("set exactly one of `every` and `cron`, not both"))
            }
            (None, None) => {
                return Err(err(
                    "set exactly one of `every` (e.g. \"5m\") and `cron` (e.g. \"17 3 * * *\")",
                ))
            }
            (Some(every), None) => {
                if every.is_zero() {
                    return Err(err("`every` must be a positive duration, e.g. \"5m\""));
                }
                if self.tz.is_some() {
                    return Err(err("`tz` applies to `cron` only; remove it or use `cron`"));
                }
                if self.immediately {
                    return Err(err(
                        "`immediately` applies to `cron` only; an `every` schedule starts at `start_at` or one interval after it is created",
                    ));
                }
                Cadence::Every(*every)
            }
            (None, Some(expr)) => {
                let fields = expr.split_whitespace().count();
                if !(fields == 5 || fields == 6) {
                    return Err(err(&format!(
                        "`cron` must have 5 fields (minute hour day month weekday) or 6 (seconds first); `{expr}` has {fields}"
                    )));
                }
                if let Some(field) = expr
                    .split_whitespace()
                    .find(|f| f.split(',').all(str::is_empty))
                {
                    return Err(err(&format!(
                        "`cron` `{expr}` has a field that lists nothing (`{field}`)"
                    )));
                }
                let cron = parser()
                    .parse(expr)
                    .map_err(|e| err(&format!("`cron` `{expr}` is invalid: {e}")))?;
                let tz = match &self.tz {
                    None => Tz::UTC,
                    Some(name) => Tz::from_str(name).map_err(|_| {
                        err(&format!(
                            "`tz` `{name}` is not an IANA time zone name, e.g. \"Europe/Berlin\""
                        ))
                    })?,
                };
                if self.immediately && self.start_at.is_some() {
                    return Err(err(
                        "`immediately` cannot be combined with `start_at`; remove one",
                    ));
                }
                // Without a year field, an expression that fires at all
                // fires within eight years of any instant (29 February).
                if cron
                    .find_next_occurrence(&NEVER_FIRES_PROBE.with_timezone(&tz), false)
                    .is_err()
                {
                    return Err(err(&format!(
                        "`cron` `{expr}` never fires (no date matches it, e.g. 31 February)"
                    )));
                }
                Cadence::Cron {
                    expr: expr.clone(),
                    cron: Box::new(cron),
                    tz,
                }
            }
        };
        if let (Some(s), Some(e)) = (self.start_at, self.end_at) {
            if e <= s {
                return Err(err("`end_at` must be after `start_at`"));
            }
        }
        let def = ScheduleDef {
            id: self.id.clone(),
            job_type: self.job_type.clone(),
            payload: self.payload.to_string(),
            every_ms: self.every.map(ms),
            cron: self.cron.clone(),
            tz: self.tz.clone(),
            immediately: self.immediately,
            start_at: self.start_at,
            end_at: self.end_at,
        };
        Ok(Schedule { def, cadence })
    }
}

/// Validates a declared set: each declaration, and no id twice.
///
/// # Errors
/// Every refused declaration, in order, each as `<id>: <reason>`.
pub fn validate_all(specs: &[ScheduleSpec]) -> Result<Vec<Schedule>, Vec<ScheduleError>> {
    let mut out = Vec::with_capacity(specs.len());
    let mut errors = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for spec in specs {
        if !seen.insert(spec.id.as_str()) {
            errors.push(ScheduleError {
                id: spec.id.clone(),
                reason: "declared more than once; schedule ids must be unique".into(),
            });
            continue;
        }
        match spec.validate() {
            Ok(s) => out.push(s),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

impl Schedule {
    /// Rebuilds a schedule from its stored definition.
    ///
    /// # Errors
    /// The stored definition no longer validates (edited by hand?).
    pub fn from_def(def: &ScheduleDef) -> Result<Self, ScheduleError> {
        let payload = serde_json::from_str(&def.payload).map_err(|_| ScheduleError {
            id: def.id.clone(),
            reason: "the stored payload is not JSON".into(),
        })?;
        ScheduleSpec {
            id: def.id.clone(),
            job_type: def.job_type.clone(),
            payload,
            every: def
                .every_ms
                .map(|v| Duration::from_millis(u64::try_from(v).unwrap_or(0))),
            cron: def.cron.clone(),
            tz: def.tz.clone(),
            immediately: def.immediately,
            start_at: def.start_at,
            end_at: def.end_at,
        }
        .validate()
    }

    /// The persisted definition.
    pub fn def(&self) -> &ScheduleDef {
        &self.def
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.def.id
    }

    /// The cadence.
    pub fn cadence(&self) -> &Cadence {
        &self.cadence
    }

    /// The first tick of a schedule created (or edited) at `now`:
    /// `every` → `start_at`, else one interval after `now`; `cron` → now when
    /// `immediately`, else the first cron instant after `max(now, start_at)`.
    /// `None` when that is past `end_at`.
    pub fn first_run(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let first = match &self.cadence {
            Cadence::Every(every) => match self.def.start_at {
                Some(s) if s > now => Some(s),
                Some(s) => Some(Self::step_past(s, *every, now)),
                None => now.checked_add_signed(crate::time::span(*every)),
            },
            Cadence::Cron { .. } if self.def.immediately => Some(now),
            Cadence::Cron { .. } => {
                let from = self.def.start_at.map_or(now, |s| s.max(now));
                let inclusive = self.def.start_at.is_some_and(|s| s > now);
                self.cron_next(from, inclusive)
            }
        };
        first.filter(|t| self.def.end_at.is_none_or(|end| *t <= end))
    }

    /// The tick after `tick`, strictly after `now` (missed ticks are
    /// skipped, not queued). `None` when past `end_at`.
    pub fn next_after(&self, tick: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let from = tick.max(now);
        let next = match &self.cadence {
            Cadence::Every(every) => Some(Self::step_past(tick, *every, from)),
            Cadence::Cron { .. } => self.cron_next(from, false),
        };
        next.filter(|t| self.def.end_at.is_none_or(|end| *t <= end))
    }

    /// `anchor + k·every` for the smallest k ≥ 1 that is after `now`.
    fn step_past(anchor: DateTime<Utc>, every: Duration, now: DateTime<Utc>) -> DateTime<Utc> {
        let every_ms = ms(every).max(1);
        let behind = (now - anchor).num_milliseconds().max(0);
        let k = behind / every_ms + 1;
        anchor
            .checked_add_signed(chrono::Duration::milliseconds(k.saturating_mul(every_ms)))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    fn cron_next(&self, from: DateTime<Utc>, inclusive: bool) -> Option<DateTime<Utc>> {
        let Cadence::Cron { cron, tz, .. } = &self.cadence else {
            return None;
        };
        cron.find_next_occurrence(&from.with_timezone(tz), inclusive)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

#[cfg(test)]
mod tests;
