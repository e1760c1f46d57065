-- boxcar schema for SQLite. Times are integer milliseconds since the Unix epoch (UTC).
CREATE TABLE IF NOT EXISTS boxcar_jobs (
    id               TEXT PRIMARY KEY NOT NULL,
    job_type         TEXT NOT NULL,
    payload          TEXT NOT NULL,
    scope_type       TEXT,
    scope_id         TEXT,
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    run_at           INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL CHECK (max_attempts > 0),
    last_error       TEXT,
    dedupe_key       TEXT,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    started_at       INTEGER,
    finished_at      INTEGER,
    result           TEXT,
    progress         TEXT,
    parent_id        TEXT,
    schedule_id      TEXT,
    expires_at       INTEGER,
    handler_version  TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);

-- At most one live job per dedupe key, enforced by the database.
CREATE UNIQUE INDEX IF NOT EXISTS boxcar_jobs_dedupe_live
    ON boxcar_jobs (dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS boxcar_jobs_claim
    ON boxcar_jobs (job_type, priority, run_at, id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS boxcar_jobs_lease
    ON boxcar_jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS boxcar_jobs_running_type
    ON boxcar_jobs (job_type) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS boxcar_jobs_scope
    ON boxcar_jobs (scope_type, scope_id, status);
CREATE INDEX IF NOT EXISTS boxcar_jobs_parent
    ON boxcar_jobs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS boxcar_jobs_finished
    ON boxcar_jobs (status, finished_at);
CREATE INDEX IF NOT EXISTS boxcar_jobs_created
    ON boxcar_jobs (created_at, id);

-- Serialization points for claim guards (SPEC §5).
CREATE TABLE IF NOT EXISTS boxcar_job_guards (
    key          TEXT PRIMARY KEY NOT NULL,
    seq          INTEGER NOT NULL DEFAULT 0,
    window_start INTEGER,
    spent        INTEGER NOT NULL DEFAULT 0
);

-- Recurring schedules (SPEC §8).
CREATE TABLE IF NOT EXISTS boxcar_schedules (
    id          TEXT PRIMARY KEY NOT NULL,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    every_ms    INTEGER,
    cron        TEXT,
    tz          TEXT,
    immediately INTEGER NOT NULL DEFAULT 0,
    start_at    INTEGER,
    end_at      INTEGER,
    next_run_at INTEGER,
    last_run_at INTEGER,
    owner       TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    CHECK ((every_ms IS NULL) <> (cron IS NULL))
);

-- Handler deploys, rejections and removals (SPEC §10).
CREATE TABLE IF NOT EXISTS boxcar_handler_events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       INTEGER NOT NULL,
    job_type TEXT,
    file     TEXT,
    digest   TEXT,
    kind     TEXT NOT NULL CHECK (kind IN ('deployed', 'rejected', 'removed')),
    reason   TEXT
);
