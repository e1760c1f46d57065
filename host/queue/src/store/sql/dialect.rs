//! How each SQL backend spells what the shared statements
//! ([`statements`](super::statements)) leave open: table names, the
//! current instant, a bound list of ids or types, row locks, and saturating
//! time sums.
//!
//! Invariant: on SQLite the statement's "now" is a parameter the caller
//! binds *last* (integer milliseconds from the process clock, so SQLite
//! never reads a clock of its own); on Postgres it is `now()`, the
//! transaction's start on the database clock, and is not bound.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    #[cfg(feature = "sqlite")]
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
}

/// One SQL backend's table names and spelling.
#[derive(Clone, Debug)]
pub(in crate::store) struct Dialect {
    /// The jobs table.
    pub jobs: String,
    /// The guard rows (locks, rate windows).
    pub guards: String,
    /// The schedules table.
    pub schedules: String,
    /// The handler events table.
    pub events: String,
    /// Which host serves which job type (`deployed_types`).
    pub deployed_types: String,
    /// Finished attempts (`job_attempts`).
    pub attempts: String,
    /// Stored guest log lines (`job_logs`).
    pub logs: String,
    backend: Backend,
}

/// SQLite: the elements of the JSON array bound at `param`, one row each as
/// column `element`, each rendered once. `json_each`'s `value` renders an
/// object or array element back to JSON text every time it is read, and a
/// plain subquery would be flattened into its reader, one rendering per
/// `json_extract` of it (an attempt row reads fourteen fields); the
/// `OFFSET` keeps the subquery whole, so each element is rendered once and
/// SQLite's JSON parse cache serves every field read from it.
#[cfg(feature = "sqlite")]
pub(in crate::store) fn sqlite_json_elements(param: &str) -> String {
    format!("(SELECT value AS element FROM json_each({param}) LIMIT -1 OFFSET 0)")
}

impl Dialect {
    /// SQLite: tables prefixed `boxcar_` in the one database file.
    #[cfg(feature = "sqlite")]
    pub(in crate::store) fn sqlite() -> Self {
        Self {
            jobs: "boxcar_jobs".into(),
            guards: "boxcar_job_guards".into(),
            schedules: "boxcar_schedules".into(),
            events: "boxcar_handler_events".into(),
            deployed_types: "boxcar_deployed_types".into(),
            attempts: "boxcar_job_attempts".into(),
            logs: "boxcar_job_logs".into(),
            backend: Backend::Sqlite,
        }
    }

    /// Postgres: every table named in `schema`.
    #[cfg(feature = "postgres")]
    pub(in crate::store) fn postgres(schema: &str) -> Self {
        Self {
            jobs: format!("{schema}.jobs"),
            guards: format!("{schema}.job_guards"),
            schedules: format!("{schema}.schedules"),
            events: format!("{schema}.handler_events"),
            deployed_types: format!("{schema}.deployed_types"),
            attempts: format!("{schema}.job_attempts"),
            logs: format!("{schema}.job_logs"),
            backend: Backend::Postgres,
        }
    }

    /// The current instant in a statement whose other parameters are
    /// `$1..$(n-1)`: `$n` on SQLite, `now()` on Postgres.
    pub(super) fn now(&self, n: usize) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => format!("${n}"),
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                let _ = n;
                "now()".into()
            }
        }
    }

    /// `col` is one of the list bound at `$n` (a JSON array of strings on
    /// SQLite, a `text[]` on Postgres).
    pub(super) fn in_list(&self, col: &str, n: usize) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => format!("{col} IN (SELECT value FROM json_each(${n}))"),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("{col} = ANY(${n})"),
        }
    }

    /// `(id, attempts)` is one of the claims bound as two lists of equal
    /// length: ids at `$n`, attempts at `$(n+1)` (JSON arrays on SQLite,
    /// `text[]` and `int4[]` on Postgres). The lookup stays on the primary
    /// key. On SQLite the ids are walked once and each attempt is read by
    /// its index (`->>`): joining two `json_each` on their keys is a nested
    /// loop, whose cost grows with the square of the claims (50 ms for
    /// 1,000 claims, under the write lock, in a lease renewal).
    pub(super) fn in_claims(&self, n: usize) -> String {
        let m = n + 1;
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => format!(
                "(id, attempts) IN (SELECT i.value, ${m} ->> i.key FROM json_each(${n}) AS i)"
            ),
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                format!("(id, attempts) IN (SELECT * FROM unnest(${n}::text[], ${m}::int4[]))")
            }
        }
    }

    /// The list bound at `$n` as rows `u(value)`.
    pub(super) fn list_rows(&self, n: usize) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => format!("json_each(${n}) AS u"),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("unnest(${n}::text[]) AS u(value)"),
        }
    }

    /// What a read appends to keep its rows locked until the transaction
    /// ends and skip rows another transaction holds: `FOR UPDATE SKIP
    /// LOCKED` on Postgres; nothing on SQLite, whose write lock already
    /// covers the whole database.
    pub(super) fn lock_rows(&self) -> &'static str {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => "",
            #[cfg(feature = "postgres")]
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// `col` where the planner must not pick an index for it, so a lookup
    /// by id keeps to the primary key (SQLite: `+col`; Postgres:
    /// `COALESCE(col, col)`, which neither an index nor a partial index's
    /// predicate matches). On Postgres a fence such as `status = 'running'`
    /// otherwise matched the partial lease index, which statistics gathered
    /// while no job ran price at one row: completions and renewals then
    /// walked that index, dead entries and all (≈ 0.2–0.6 s per statement
    /// in a drain), instead of probing the primary key.
    pub(in crate::store) fn unindexed(&self, col: &str) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => format!("+{col}"),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("COALESCE({col}, {col})"),
        }
    }

    /// The condition that job `j` (a row of table `t`) has no live child.
    /// On Postgres an `OFFSET 0` keeps it a subplan run for each candidate
    /// the claim reaches, in claim order: as an anti-join, once the
    /// statistics show one type holding most of the table, the generic
    /// plan read and sorted that whole type on every claim (≈ 0.15 s per
    /// claim at 45,000 pending jobs).
    pub(in crate::store) fn no_live_children(&self, t: &str) -> String {
        let fence = match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => "",
            #[cfg(feature = "postgres")]
            Backend::Postgres => " OFFSET 0",
        };
        format!(
            "NOT EXISTS (SELECT 1 FROM {t} c WHERE c.parent_id = j.id AND c.{}{fence})",
            super::LIVE
        )
    }

    /// `col` compared byte by byte (the order of Rust's `str` sort).
    pub(super) fn byte_order(&self, col: &str) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => format!("{col} COLLATE BINARY"),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("{col} COLLATE \"C\""),
        }
    }

    /// The larger of `a` and `b`.
    pub(super) fn greatest(&self, a: &str, b: &str) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => format!("MAX({a}, {b})"),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("GREATEST({a}, {b})"),
        }
    }

    /// The instant `base` plus `ms` milliseconds (bind them with
    /// `crate::time::millis`), saturating at the far future.
    pub(in crate::store) fn plus_ms(&self, base: &str, ms: &str) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => format!("MIN({base} + {ms}, {})", crate::time::FAR_FUTURE_MS),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!(
                "LEAST({base} + {ms} * interval '1 millisecond', {})",
                crate::time::FAR_FUTURE_SQL
            ),
        }
    }

    /// The JSON array of objects bound at `$n` as rows `a`, one column per
    /// `(name, Postgres type)` field (absent keys and JSON nulls read NULL).
    pub(super) fn json_rows(&self, n: usize, fields: &[(&str, &str)]) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => {
                let cols = fields
                    .iter()
                    .map(|(name, _)| format!("json_extract(element, '$.{name}') AS {name}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!(
                    "(SELECT {cols} FROM {}) AS a",
                    sqlite_json_elements(&format!("${n}"))
                )
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                let cols = fields
                    .iter()
                    .map(|(name, ty)| format!("{name} {ty}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("jsonb_to_recordset(${n}::jsonb) AS a({cols})")
            }
        }
    }

    /// Joins each row `a` of a JSON batch ([`Dialect::json_rows`]) to its
    /// job `j` (the caller's `WHERE` still says `j.id = a.id`), with the
    /// batch as the outer loop and each job found by primary key: SQLite
    /// keeps a `CROSS JOIN`'s order; Postgres may reorder one, so there the
    /// job is a `LATERAL` subquery that `OFFSET 0` keeps from being pulled
    /// up into a plain join.
    pub(super) fn job_of_each_row(&self) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => format!("CROSS JOIN {} j", self.jobs),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!(
                "CROSS JOIN LATERAL (SELECT * FROM {} WHERE id = a.id OFFSET 0) j",
                self.jobs
            ),
        }
    }

    /// The instant `expr` milliseconds after the epoch.
    pub(super) fn time_from_ms(&self, expr: &str) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => expr.to_string(),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("to_timestamp({expr} / 1000.0)"),
        }
    }

    /// Parameter `$n`, typed as text where the database must be told.
    pub(super) fn text_param(&self, n: usize) -> String {
        self.typed_param(n, "text")
    }

    /// Parameter `$n`, typed as a 32-bit integer where the database must be told.
    pub(super) fn int_param(&self, n: usize) -> String {
        self.typed_param(n, "int4")
    }

    /// Parameter `$n`, typed as a 64-bit integer where the database must be told.
    pub(super) fn bigint_param(&self, n: usize) -> String {
        self.typed_param(n, "int8")
    }

    fn typed_param(&self, n: usize, ty: &str) -> String {
        match self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => {
                let _ = ty;
                format!("${n}")
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("${n}::{ty}"),
        }
    }
}
