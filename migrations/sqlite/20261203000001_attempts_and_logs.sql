-- Every finished attempt of a job, written in the transaction of the
-- job's own transition, and the log lines its handler wrote. Times are
-- milliseconds since the epoch. Rows are deleted with their job (prune).
CREATE TABLE IF NOT EXISTS boxcar_job_attempts (
    id                INTEGER PRIMARY KEY,
    job_id            TEXT NOT NULL,
    attempt           INTEGER NOT NULL,
    worker            TEXT,
    digest            TEXT,
    started_at        INTEGER,
    finished_at       INTEGER NOT NULL,
    outcome           TEXT NOT NULL,
    error             TEXT,
    error_code        TEXT,
    error_details     TEXT,
    wall_ms           INTEGER,
    peak_memory_bytes INTEGER,
    fuel              INTEGER,
    log_bytes         INTEGER,
    result_bytes      INTEGER,
    http_requests     INTEGER,
    http_bytes        INTEGER,
    enqueues          INTEGER
);
CREATE INDEX IF NOT EXISTS boxcar_job_attempts_job ON boxcar_job_attempts (job_id, id);

CREATE TABLE IF NOT EXISTS boxcar_job_logs (
    id      INTEGER PRIMARY KEY,
    job_id  TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    level   TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS boxcar_job_logs_job ON boxcar_job_logs (job_id, id);
